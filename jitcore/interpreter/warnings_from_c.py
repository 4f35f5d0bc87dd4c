"""Warnings that C code issues on behalf of interpreted code carry the interpreted frame's file and line.

Invariants:
- A warning shown or recorded (``warnings._showwarnmsg``: printing, ``showwarning`` replacements,
  ``catch_warnings(record=True)``, ``assertWarns``) while an interpreted frame runs on this thread, whose
  location C computed as one of the interpreter's own files, is given the file and line of the innermost
  interpreted frame's current instruction, as natively (Note [Warnings issued by C code]).
- Any other warning passes through unchanged; outside interpretation the hook costs one thread-local read.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import warnings
from collections.abc import Callable

from jitcore.interpreter.run import ACTIVE
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
def _relocating(show: Callable) -> Callable:
    def _showwarnmsg(msg: warnings.WarningMessage) -> None:
        runs = ACTIVE.stack
        if runs and runs[-1].frames and isinstance(msg.filename, str) and is_internal(msg.filename):
            frame = runs[-1].frames[-1]
            position = frame.position()
            msg.filename, msg.lineno = position.filename, position.lineno
        show(msg)

    _showwarnmsg.__wrapped__ = show
    return _showwarnmsg


def install() -> None:
    """Put the relocating hook in front of ``warnings._showwarnmsg`` (once)."""
    show = warnings._showwarnmsg
    if getattr(show, "__module__", None) != __name__:
        warnings._showwarnmsg = _relocating(show)
