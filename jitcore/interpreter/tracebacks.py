"""Tracebacks that show the user's interpreted frames, not the interpreter's.

Invariants:
- An exception passing through an interpreted frame gets exactly one traceback entry for that frame (file,
  line, columns and function name of the instruction that raised), as CPython would add; a bare re-raise
  within the same frame does not add another.
- The entry is a real traceback object: it is produced by running a one-instruction "raiser" whose code
  object carries the user's file name, function name and position (the jinja2 ``fake_traceback`` idea).
- Leading interpreter-internal entries are removed before an entry is added, and at every boundary where
  an exception leaves the interpreter, so the user never sees ``jitcore/interpreter`` frames.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import os
from types import CodeType, FunctionType, TracebackType
from typing import TYPE_CHECKING

from jitcore.diagnostics.tracebacks import svarint, varint

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame

__all__ = ["add_frame", "is_internal", "strip_internal"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INTERNAL_NAMES = ("<jitcore binder>",)


def _raiser_template() -> CodeType:
    namespace: dict = {}
    # the exception travels in a list emptied by the raise, so the fake frame keeps no reference to it
    exec(compile("def raiser(box):\n    raise box.pop()\n", "<jitcore raiser>", "exec"), namespace)  # noqa: S102
    return namespace["raiser"].__code__


_TEMPLATE = _raiser_template()
_TEMPLATE_UNITS = len(_TEMPLATE.co_code) // 2


def is_internal(filename: str) -> bool:
    """Whether a code object's file belongs to the interpreter itself."""
    return filename.startswith(_PACKAGE_DIR) or filename in _INTERNAL_NAMES


def strip_internal(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading interpreter-internal entries."""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_DIR) and filename not in _INTERNAL_NAMES:  # is_internal, inlined
            break
        tb = tb.tb_next
    return tb


def add_frame(frame: Frame, exc: BaseException, always: bool) -> None:
    """Give ``exc`` a traceback entry for ``frame`` on top of its (stripped) traceback.

    Args:
        frame: the interpreted frame the exception is passing through.
        exc: the exception.
        always: add an entry even if the traceback already starts with this frame's last entry (an explicit
            ``raise exc`` in the same frame adds one in CPython; a bare re-raise does not).
    """
    tb = strip_internal(exc.__traceback__)
    if not always and tb is not None and id(tb) == frame.tb_entry:
        exc.__traceback__ = tb
        return
    entry = _entry(frame, exc, tb)
    # only the id: holding the entry would keep the exception's frames alive after the user dropped it
    frame.tb_entry = id(entry)
    exc.__traceback__ = entry


def _entry(frame: Frame, exc: BaseException, tb_next: TracebackType | None) -> TracebackType | None:
    index = max(frame.index - 1, 0)
    raisers = frame.info.raisers
    raiser = raisers.get(index)
    if raiser is None or raiser.__globals__ is not frame.globals:
        raiser = raisers[index] = FunctionType(_raiser_code(frame), frame.globals)
    context, suppress = exc.__context__, exc.__suppress_context__
    exc.__traceback__ = tb_next
    try:
        raiser([exc])
    except BaseException as e:  # noqa: BLE001 - the raiser raises exactly exc
        entry = e.__traceback__.tb_next
        del e
    exc.__context__, exc.__suppress_context__ = context, suppress
    return entry


def _raiser_code(frame: Frame) -> CodeType:
    code = frame.code
    inst = frame.instructions[max(frame.index - 1, 0)]
    if inst.lineno is None:
        # an artificial instruction: report the nearest line, as CPython's tracebacks do; only a code object
        # without any line information gets "no location" (f_lineno None)
        table = _linetable(code.co_firstlineno, frame.position().lineno if _has_lines(frame) else None,
                           None, None, None)
    else:
        table = _linetable(code.co_firstlineno, inst.lineno, inst.end_lineno, inst.col, inst.end_col)
    return _TEMPLATE.replace(co_filename=code.co_filename, co_name=code.co_name, co_qualname=code.co_qualname,
                             co_firstlineno=code.co_firstlineno, co_linetable=table)


def _has_lines(frame: Frame) -> bool:
    return any(inst.lineno is not None for inst in frame.instructions)


def _linetable(first: int, lineno: int | None, end_lineno: int | None, col: int | None,
               end_col: int | None) -> bytes:
    """A 3.11 location table giving every instruction of the raiser the span ``lineno:col-end_lineno:end_col``
    (relative to the user's ``co_firstlineno``, so ``f_lineno`` and ``f_code.co_firstlineno`` both match)."""
    out = b""
    remaining = _TEMPLATE_UNITS
    delta = 0 if lineno is None else lineno - first
    while remaining:
        units = min(remaining, 8)  # an entry covers at most 8 code units
        remaining -= units
        head = 0x80 | (units - 1)
        if lineno is None:
            out += bytes([head | (15 << 3)])  # no location: CPython reports f_lineno None
        elif col is None or end_col is None or end_lineno is None:
            out += bytes([head | (13 << 3)]) + svarint(delta)  # line only, no columns
        else:
            out += (bytes([head | (14 << 3)]) + svarint(delta) + varint(end_lineno - lineno)
                    + varint(col + 1) + varint(end_col + 1))
        delta = 0
    return out
