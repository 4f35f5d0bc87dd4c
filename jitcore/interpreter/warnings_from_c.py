"""Warnings that C code issues on behalf of interpreted code carry the interpreted frame's file and line.

Invariants:
- A warning shown or recorded (``warnings._showwarnmsg``: printing, ``showwarning`` replacements,
  ``catch_warnings(record=True)``, ``assertWarns``) while an interpreted frame runs on this thread, whose
  location C computed as one of the interpreter's own files (or the hooks' ``host_files``), is given the
  file and line of the interpreted frame its stacklevel reaches natively: the innermost one for a warning
  of C's own (Note [Warnings issued by C code]), further out for a ``stacklevel`` that went past Python
  code a C call ran natively (Note [A warning's stacklevel through Python code C ran natively]).
- Any other warning passes through unchanged; outside interpretation the hook costs one thread-local read.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
import warnings
from collections.abc import Callable
from types import FrameType

from jitcore.interpreter.run import ACTIVE, Run
from jitcore.interpreter.tracebacks import is_internal

__all__ = ["install"]


# Note [Warnings issued by C code]
# C code that warns (``PyErr_WarnEx``: ``bool(NotImplemented)``, an ``__index__``/``__int__``/``__float__``
# returning a strict subclass, ``array('u')``, 3.12+ ``datetime.utcnow()``, ``functools.partial`` as a method
# on 3.13, typing's module ``__getattr__`` called by C) blames the innermost Python frame, which under the
# interpreter is an opcode handler's or ``calls.opaque``'s: the warning named jitcore's file and line, so a
# printed warning pointed there and a test's ``assertWarns`` ``cm.filename`` was not the test's file.
# Calling every C function through a stand-in frame (Note [A caller stand-in] in tracebacks.py) would cost a
# Python call on the interpreter's hottest path; instead the hook every shown or recorded warning passes
# through (``warnings._showwarnmsg``, looked up by C's ``warn_explicit`` and by ``warnings.py`` at each call)
# puts the interpreted frame's location on the message. Decisions C takes before that hook still see
# jitcore's module and line: a ``filterwarnings(module=...)`` filter, ``__main__``'s DeprecationWarning
# filter, and the once-per-location registry of the "default" action (keyed by jitcore's line).
#
# Note [A warning's stacklevel through Python code C ran natively]
# Python code that a C call runs natively (a library's: ``re._compile_template`` run by C's
# ``Pattern.sub``, a deprecated module imported) warns with a ``stacklevel`` that, natively, counts its own
# frames, then the program's: ``re``'s DeprecationWarning names the line of the program that called
# ``re.sub``. Under the interpreter the frames past the natively run ones are the jit's and the
# interpreter's own, so the warning named one of them (jitcore/jit/interpretation.py). The hook counts
# how far past the natively run frames the warning went (the native frames from the innermost of jitcore's,
# which made the C call, to the one the warning names: ``n``) and names the ``n``-th interpreted frame
# from the innermost, as natively; past the outermost interpreted frame, the native frames that called into
# jitcore (the jitted function's caller). A warning C issues itself (stacklevel 1) names the innermost
# interpreted frame, as before.
def _relocating(show: Callable) -> Callable:
    def _showwarnmsg(msg: warnings.WarningMessage) -> None:
        runs = ACTIVE.stack
        if runs and runs[-1].frames and isinstance(msg.filename, str):
            run = runs[-1]
            host = run.hooks.host_files
            if is_internal(msg.filename) or (host and msg.filename.startswith(host)):
                msg.filename, msg.lineno = _blamed(run, msg.filename, msg.lineno, host)
        show(msg)

    _showwarnmsg.__wrapped__ = show
    return _showwarnmsg


def _blamed(run: Run, filename: str, lineno: int | None, host: tuple[str, ...]) -> tuple[str, int | None]:
    """The file and line a warning that named jitcore's ``filename:lineno`` names natively (Note [A
    warning's stacklevel through Python code C ran natively])."""

    def jitcores(name: str) -> bool:
        return is_internal(name) or bool(host) and name.startswith(host)

    frame: FrameType | None = sys._getframe(2)  # noqa: SLF001 - (past this hook and its caller's hook)
    while frame is not None and not jitcores(frame.f_code.co_filename):  # the natively run code, warnings'
        frame = frame.f_back
    past = 0  # the frames the warning went past the natively run ones
    while frame is not None:
        past += 1
        if frame.f_code.co_filename == filename and frame.f_lineno == lineno:
            break
        frame = frame.f_back
    frames = run.frames
    if frame is None or past <= len(frames):
        position = frames[-past if frame is not None else -1].position()
        return position.filename, position.lineno
    past -= len(frames)  # into the native frames that called jitcore
    while frame is not None and jitcores(frame.f_code.co_filename):
        frame = frame.f_back
    while frame is not None and past > 1:
        past -= 1
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else (filename, lineno)


def install() -> None:
    """Put the relocating hook in front of the ``_showwarnmsg`` of the ``warnings`` module C looks it up in
    (``sys.modules``'), unless it is there already. Called at import and as each outermost run starts
    (``interpret``'s wrapper): a program or library may have put another function there, or imported
    ``warnings`` afresh, after jitcore was imported, and the hook would be gone for good."""
    module = sys.modules.get("warnings", warnings)
    show = getattr(module, "_showwarnmsg", None)
    if show is not None and getattr(show, "__module__", None) != __name__:
        module._showwarnmsg = _relocating(show)
