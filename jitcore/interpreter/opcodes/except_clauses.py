"""Fused handlers for the head and the end of an ``except`` clause (Note [Fused instructions] in registry.py).

``except E:`` / ``except E as e:`` compile, on 3.11 and 3.13 alike, to ``PUSH_EXC_INFO; LOAD_GLOBAL E;
CHECK_EXC_MATCH; POP_JUMP_(FORWARD_)IF_FALSE`` and then ``POP_TOP`` or ``STORE_FAST e``; the clause ends with
``POP_EXCEPT`` and a jump (after ``e = None; del e`` for a named exception). Each of these runs is one
dispatch here instead of four to six, which is most of what a caught exception costs besides the raise.

Invariants (as for every fused handler):
- it behaves exactly as its instructions in sequence; ``frame.index`` is set past LOAD_GLOBAL or
  CHECK_EXC_MATCH before either raises, so a NameError for ``E`` or the TypeError for a class that is not
  an exception is located (and chained to the exception being handled) at its own instruction, and the
  handler ends with it past the run or at the next clause;
- the bodies repeat those of PUSH_EXC_INFO, LOAD_GLOBAL, CHECK_EXC_MATCH and POP_EXCEPT on purpose (one
  Python call instead of several); tests/interpreter/test_interp_fused.py checks them against CPython.
- ``LOAD_GLOBAL`` before ``CHECK_EXC_MATCH`` never has its "push NULL" bit (the compiler sets it only for a
  call), so the class loaded is the value matched.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
from collections.abc import Callable

from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes import control as _control  # noqa: F401 - registered before the runs
from jitcore.interpreter.opcodes import exceptions as _exceptions  # noqa: F401 - registered before the runs
from jitcore.interpreter.opcodes import stack as _stack  # noqa: F401 - registered before the runs
from jitcore.interpreter.opcodes.exceptions import (
    check_catchable,
    exception_matches,
    hidden_from_program,
    leave_clauses,
)
from jitcore.interpreter.opcodes.load_store import global_value
from jitcore.interpreter.registry import fuses

Handler = Callable[[Frame, Instruction], object]

_MISSING = object()
_JUMP_IF_FALSE = "POP_JUMP_FORWARD_IF_FALSE" if sys.version_info < (3, 12) else "POP_JUMP_IF_FALSE"
_JUMPS = ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")


def _except_head(push: bool, tail: str | None) -> Handler:
    """``[PUSH_EXC_INFO;] LOAD_GLOBAL E; CHECK_EXC_MATCH; POP_JUMP_IF_FALSE`` then, when the exception
    matches, ``tail`` (``POP_TOP``: ``except E:``; ``STORE_FAST``: ``except E as e:``; None: not in the run).
    Only the first clause of a ``try`` starts with PUSH_EXC_INFO; a miss jumps to the next clause's
    LOAD_GLOBAL."""
    store = tail == "STORE_FAST"

    def handler(frame: Frame, inst: Instruction) -> None:
        stack = frame.stack
        exc = stack[-1]
        if push:  # PUSH_EXC_INFO: the previously handled exception goes under the one handled now
            stack[-1] = frame.exc_value
            stack.append(exc)
            frame.exc_value = exc
            load = inst.next
        else:
            load = inst
        name = load.argval
        match_type = frame.globals.get(name, _MISSING)
        if match_type is _MISSING:
            match_type = frame.builtins.get(name, _MISSING)  # ``except ValueError``: a builtin
            if match_type is _MISSING:
                frame.index = load.after
                match_type = global_value(frame, name)  # NameError at this instruction
        check = load.next
        jump = check.next
        if hidden_from_program(exc):  # Note [Refusals pass bare excepts]
            frame.index = check.after
            leave_clauses(frame, exc)
        if type(match_type) is type and BaseException in match_type.__mro__:  # one class: check_catchable's
            matches = match_type in type(exc).__mro__ and not hidden_from_program(exc)  # exception_matches
        else:
            frame.index = check.after
            check_catchable(match_type)  # TypeError at CHECK_EXC_MATCH
            matches = exception_matches(exc, match_type)
        if not matches:
            frame.index = jump.argval
        elif tail is not None:
            last = jump.next
            frame.index = last.after
            value = stack.pop()
            if store:
                frame.fast[last.arg] = value
        else:
            frame.index = jump.after

    parts = ["PUSH_EXC_INFO"] * push + ["LOAD_GLOBAL", "CHECK_EXC_MATCH", _JUMP_IF_FALSE]
    parts += [tail] * bool(tail)
    handler.__name__ = "_".join(part.lower() for part in parts)
    handler.__doc__ = f"{' + '.join(parts)} as one instruction."
    return handler


def _except_end(named: bool) -> Handler:
    """``POP_EXCEPT`` (then ``e = None; del e`` when ``named``), then the jump out of the clause."""

    def handler(frame: Frame, inst: Instruction) -> None:
        frame.exc_value = frame.stack.pop()
        jump = inst.next
        if named:  # LOAD_CONST None; STORE_FAST e; DELETE_FAST e: the local ends unbound (none can raise)
            frame.fast[jump.next.arg] = NULL
            jump = jump.next.next.next
        frame.index = jump.argval

    handler.__name__ = "except_end" + ("_named" if named else "")
    handler.__doc__ = f"POP_EXCEPT{' + LOAD_CONST + STORE_FAST + DELETE_FAST' if named else ''} + a jump."
    return handler


def _register() -> None:
    for push in (True, False):
        head = ("PUSH_EXC_INFO",) * push + ("LOAD_GLOBAL", "CHECK_EXC_MATCH", _JUMP_IF_FALSE)
        for tail in (None, "POP_TOP", "STORE_FAST"):
            fuses(*head, *(tail,) * bool(tail), since=(3, 11))(_except_head(push, tail))
    for jump in _JUMPS:
        fuses("POP_EXCEPT", jump, since=(3, 11))(_except_end(False))
        fuses("POP_EXCEPT", "LOAD_CONST", "STORE_FAST", "DELETE_FAST", jump, since=(3, 11))(_except_end(True))


_register()
