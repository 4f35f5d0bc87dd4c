"""Tracebacks that show the user's interpreted frames, not the interpreter's.

Invariants:
- An exception passing through an interpreted frame gets exactly one traceback entry for that frame (file,
  line, columns and function name of the instruction that raised), as CPython would add; a bare re-raise
  within the same frame does not add another.
- The entry is a real traceback object (``TracebackType(tb_next, frame object, lasti, lineno)``) over a real
  frame object whose code carries the user's file name, function name, ``co_firstlineno`` and the
  instruction's line/column span in every code unit, and whose globals are the frame's (Note [Traceback
  frame objects]).
- Leading interpreter-internal entries are removed before an entry is added, and at every boundary where
  an exception leaves the interpreter, so the user never sees ``jitcore/interpreter`` frames.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import os
import sys
from types import CodeType, FrameType, FunctionType, TracebackType
from typing import TYPE_CHECKING

from jitcore.diagnostics.tracebacks import svarint, varint

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame

__all__ = ["add_frame", "is_internal", "strip_internal"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INTERNAL_NAMES = ("<jitcore binder>",)


def _raiser_template() -> CodeType:
    namespace: dict = {}
    exec(compile("def raiser(getframe):\n    return getframe()\n", "<jitcore raiser>", "exec"), namespace)  # noqa: S102
    return namespace["raiser"].__code__


_TEMPLATE = _raiser_template()
_TracebackType = TracebackType
_getframe = sys._getframe
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
    entry = _entry(frame, tb)
    # only the id: holding the entry would keep the exception's frames alive after the user dropped it
    frame.tb_entry = id(entry)
    exc.__traceback__ = entry


# Note [Traceback frame objects]
# A traceback entry needs a real frame object (``tb_frame``: printing reads its code and globals and, with
# ``tb_lasti``, the code's positions). One is made per instruction that raises, cached per code object
# (``CodeInfo.tb_frames``), by calling a function whose code carries the user's file, name and position in
# every code unit (the jinja2 ``fake_traceback`` idea) and returns its own frame; an entry is then one
# ``TracebackType(...)`` call (raising and catching through such a function per entry cost ~5,000 more machine
# instructions per raise). A finished frame's ``f_back`` is the frame that called it, for ever (``clear()``
# keeps it): the function is called inside ``_MAKER``, a generator suspended for the life of the process, so
# that the cached frames keep alive only that generator's frame (whose ``f_back`` is None while suspended),
# not the frames of the program that raised first. ``clear()`` drops the frame's argument: its locals are
# empty, its ``f_lineno`` the instruction's line. The frame object is shared by all entries of that
# instruction, which the program cannot tell apart from separate ones.


def _entry(frame: Frame, tb_next: TracebackType | None) -> TracebackType:
    index = frame.index - 1 if frame.index else 0
    tb_frames = frame.info.tb_frames
    made = tb_frames.get(index)
    if made is None or made[0].f_globals is not frame.globals:
        made = _tb_frame(frame)
        if made[2]:
            tb_frames[index] = made
    return _TracebackType(tb_next, made[0], 0, made[1])


def _frame_maker():
    raiser = yield
    while True:
        raiser = yield raiser(_getframe)


def _new_maker():
    maker = _frame_maker()
    next(maker)
    return maker


_MAKER = _new_maker()


def _tb_frame(frame: Frame) -> tuple[FrameType, int, bool]:
    """A frame object for the current instruction of ``frame`` (Note [Traceback frame objects]), the
    ``tb_lineno`` of its entries (-1: no line) and whether it may be cached."""
    global _MAKER
    raiser = FunctionType(_raiser_code(frame), frame.globals)
    try:
        made, cached = _MAKER.send(raiser), True
    except ValueError:  # the maker is running (in another thread, or below a signal handler): not cached
        made, cached = raiser(_getframe), False
    except StopIteration:  # an asynchronous exception (KeyboardInterrupt) ended the maker while it ran
        _MAKER = _new_maker()
        made, cached = _MAKER.send(raiser), True
    made.clear()
    lineno = made.f_lineno
    return made, -1 if lineno is None else lineno, cached


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
