"""Value-stack shuffling and instructions that do nothing here.

Invariant: these handlers never call user code.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.registry import handles, unsupported

unsupported("CACHE", "inline-cache filler: never decoded as an instruction", since=(3, 11))
unsupported("RESERVED", "a placeholder number the compiler never emits", since=(3, 12))
unsupported(
    "INTERPRETER_EXIT",
    "ends CPython's own C-level evaluation loop; never in a code object's co_code",
    since=(3, 12),
)
unsupported(
    "ENTER_EXECUTOR",
    "tier-2 optimizer entry; co_code (what is decoded) shows the original instruction",
    since=(3, 13),
)
unsupported("EXIT_INIT_CHECK", "only follows a specialized class call (CALL_ALLOC_AND_ENTER_INIT), never in "
            "co_code", since=(3, 13))


@handles("POP_TOP", since=(3, 11))
def pop_top(frame: Frame, inst: Instruction) -> None:
    """Discard TOS."""
    frame.stack.pop()


@handles("PUSH_NULL", since=(3, 11))
def push_null(frame: Frame, inst: Instruction) -> None:
    """Push the NULL that marks "no self" for the following CALL."""
    frame.stack.append(NULL)


@handles("COPY", since=(3, 11))
def copy(frame: Frame, inst: Instruction) -> None:
    """Push a copy of the i-th item (1 = TOS)."""
    frame.stack.append(frame.stack[-inst.arg])


@handles("SWAP", since=(3, 11))
def swap(frame: Frame, inst: Instruction) -> None:
    """Swap TOS with the i-th item."""
    stack = frame.stack
    stack[-1], stack[-inst.arg] = stack[-inst.arg], stack[-1]


@handles("NOP", since=(3, 11))
@handles("RESUME", since=(3, 11))
@handles("PRECALL", since=(3, 11), until=(3, 11))
@handles("EXTENDED_ARG", since=(3, 11))
def nop(frame: Frame, inst: Instruction) -> None:
    """No effect here (PRECALL/EXTENDED_ARG/NOP are not even decoded: Note [Dropped instructions])."""
