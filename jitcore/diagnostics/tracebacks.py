"""Traceback entries made to order: the user's frames of a bound symbol, as CPython would show them.

When a compiled trace fails, the Python frames that produced the failing op are long gone; their
``SourceFrame`` records remain. ``fake_traceback`` turns them into real traceback entries by
running a one-instruction raiser whose code object carries the user's file, function name and
span (the idea of jinja2's ``fake_traceback``, as jitcore/interpreter/tracebacks.py does for
interpreted frames).
Invariant: every entry made shows exactly the file, line, column span and function name given.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from types import CodeType, FunctionType, TracebackType

from jitcore.ir import SourceFrame

__all__ = ["entries", "fake_traceback", "link", "source_frame", "svarint", "varint"]


def _template() -> CodeType:
    namespace: dict = {}
    exec(compile("def raiser(exc):\n    raise exc\n", "<jitcore raiser>", "exec"), namespace)  # noqa: S102
    return namespace["raiser"].__code__


_TEMPLATE = _template()
_UNITS = len(_TEMPLATE.co_code) // 2


def entries(tb: TracebackType | None) -> list[TracebackType]:
    """The entries of a traceback, outermost first."""
    found = []
    while tb is not None:
        found.append(tb)
        tb = tb.tb_next
    return found


def link(*tbs: TracebackType | None) -> TracebackType | None:
    """Chain traceback entries (each keeping its own frame) in the given order; Nones are skipped.

    The last argument keeps its own ``tb_next``; the others are relinked.
    """
    present = [t for t in tbs if t is not None]
    for outer, inner in itertools.pairwise(present):
        outer.tb_next = inner
    return present[0] if present else None


def source_frame(code: CodeType, lasti: int, lineno: int) -> SourceFrame:
    """Where a traceback entry of ``code`` at instruction offset ``lasti`` and line ``lineno`` is: its span
    when the instruction's positions start on that line, as ``fake_traceback`` makes an entry again."""
    positions = list(code.co_positions())
    index = lasti // 2
    if 0 <= index < len(positions):
        start, end, col, end_col = positions[index]
        if start == lineno:
            return SourceFrame(code.co_filename, lineno, code.co_name, end, col, end_col)
    return SourceFrame(code.co_filename, lineno, code.co_name)


def fake_traceback(frames: Iterable[SourceFrame]) -> TracebackType | None:
    """Traceback entries for ``frames`` (outermost first), ending without a ``tb_next``."""
    made: list[TracebackType] = []
    for frame in frames:
        made.append(_entry(frame))
    return link(*made)


def _entry(frame: SourceFrame) -> TracebackType:
    raiser = FunctionType(_code(frame), {"__name__": frame.function, "__file__": frame.filename})
    marker = RuntimeError("jitcore traceback entry")
    try:
        raiser(marker)
    except RuntimeError as exc:
        entry = exc.__traceback__.tb_next  # the raiser's entry, below this function's
    entry.tb_next = None
    return entry


def _code(frame: SourceFrame) -> CodeType:
    table = _linetable(frame.lineno, frame.end_lineno, frame.col, frame.end_col)
    return _TEMPLATE.replace(
        co_filename=frame.filename,
        co_name=frame.function,
        co_qualname=frame.function,
        co_firstlineno=frame.lineno,
        co_linetable=table,
    )


def _linetable(lineno: int, end_lineno: int | None, col: int | None, end_col: int | None) -> bytes:
    """A 3.11 location table giving every instruction the span ``lineno:col-end_lineno:end_col``."""
    head = 0x80 | (_UNITS - 1)
    if col is None or end_col is None or end_lineno is None:
        return bytes([head | (13 << 3)]) + svarint(0)  # line only
    return (
        bytes([head | (14 << 3)])
        + svarint(0)
        + varint(end_lineno - lineno)
        + varint(col + 1)
        + varint(end_col + 1)
    )


def varint(value: int) -> bytes:
    """CPython's location-table varint: 6 bits a byte, the 7th set on all but the last."""
    out = bytearray()
    while value >= 64:
        out.append(64 | (value & 63))
        value >>= 6
    out.append(value)
    return bytes(out)


def svarint(value: int) -> bytes:
    """A signed location-table varint (the sign in the lowest bit)."""
    return varint((-value << 1) | 1 if value < 0 else value << 1)
