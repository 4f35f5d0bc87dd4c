"""Jumps, loops and returns.

Invariant: a jump sets ``frame.index`` to the target index decoded in ``inst.argval``; truth tests on
non-native values go through ``protocols.truth`` (so ``__bool__``/``__len__`` are interpreted).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from jitcore.interpreter.frame import Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import (
    EXHAUSTED,
    NATIVE_ITERATORS,
    NATIVE_TYPES,
    get_iter,
    next_value,
    truth,
)
from jitcore.interpreter.registry import handles


@handles("RETURN_VALUE", since=(3, 11))
def return_value(frame: Frame, inst: Instruction) -> bool:
    """Return TOS to the caller."""
    frame.result = frame.stack.pop()
    return True


@handles("RETURN_CONST", since=(3, 12))
def return_const(frame: Frame, inst: Instruction) -> bool:
    """Return a constant."""
    frame.result = inst.argval
    return True


@handles("JUMP_FORWARD", since=(3, 11))
@handles("JUMP_BACKWARD", since=(3, 11))
@handles("JUMP_BACKWARD_NO_INTERRUPT", since=(3, 11))
def jump(frame: Frame, inst: Instruction) -> None:
    """Unconditional jump."""
    frame.index = inst.argval


@handles("POP_JUMP_FORWARD_IF_FALSE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_BACKWARD_IF_FALSE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_IF_FALSE", since=(3, 12))
def pop_jump_if_false(frame: Frame, inst: Instruction) -> None:
    """Pop TOS; jump if it is false."""
    v = frame.stack.pop()
    if v is True:
        return
    if v is False or v is None or not (v if type(v) in NATIVE_TYPES else truth(frame.run, v)):
        frame.index = inst.argval


@handles("POP_JUMP_FORWARD_IF_TRUE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_BACKWARD_IF_TRUE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_IF_TRUE", since=(3, 12))
def pop_jump_if_true(frame: Frame, inst: Instruction) -> None:
    """Pop TOS; jump if it is true."""
    v = frame.stack.pop()
    if v is False or v is None:
        return
    if v is True or (v if type(v) in NATIVE_TYPES else truth(frame.run, v)):
        frame.index = inst.argval


@handles("POP_JUMP_FORWARD_IF_NONE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_BACKWARD_IF_NONE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_IF_NONE", since=(3, 12))
def pop_jump_if_none(frame: Frame, inst: Instruction) -> None:
    """Pop TOS; jump if it is None."""
    if frame.stack.pop() is None:
        frame.index = inst.argval


@handles("POP_JUMP_FORWARD_IF_NOT_NONE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_BACKWARD_IF_NOT_NONE", since=(3, 11), until=(3, 11))
@handles("POP_JUMP_IF_NOT_NONE", since=(3, 12))
def pop_jump_if_not_none(frame: Frame, inst: Instruction) -> None:
    """Pop TOS; jump if it is not None."""
    if frame.stack.pop() is not None:
        frame.index = inst.argval


@handles("JUMP_IF_FALSE_OR_POP", since=(3, 11), until=(3, 11))
def jump_if_false_or_pop(frame: Frame, inst: Instruction) -> None:
    """If TOS is false jump (keeping it), else pop it."""
    v = frame.stack[-1]
    if v is False or (v is not True and not truth(frame.run, v)):
        frame.index = inst.argval
    else:
        frame.stack.pop()


@handles("JUMP_IF_TRUE_OR_POP", since=(3, 11), until=(3, 11))
def jump_if_true_or_pop(frame: Frame, inst: Instruction) -> None:
    """If TOS is true jump (keeping it), else pop it."""
    v = frame.stack[-1]
    if v is True or (v is not False and truth(frame.run, v)):
        frame.index = inst.argval
    else:
        frame.stack.pop()


@handles("GET_ITER", since=(3, 11))
def get_iter_(frame: Frame, inst: Instruction) -> None:
    """TOS = iter(TOS)."""
    stack = frame.stack
    stack[-1] = get_iter(frame.run, stack[-1])


@handles("FOR_ITER", since=(3, 11))
def for_iter(frame: Frame, inst: Instruction) -> None:
    """Push next(TOS); when exhausted pop the iterator and jump past the loop (on 3.13, past the loop's
    ``END_FOR; POP_TOP``: decoding points the jump there, Note [FOR_ITER targets] in instructions.py)."""
    stack = frame.stack
    it = stack[-1]
    v = next(it, EXHAUSTED) if type(it) in NATIVE_ITERATORS else next_value(frame.run, it)
    if v is EXHAUSTED:
        stack.pop()
        frame.index = inst.argval
    else:
        stack.append(v)


@handles("END_FOR", since=(3, 13))
def end_for(frame: Frame, inst: Instruction) -> None:
    """Pop the value of a finished iteration (only reached by jumps, e.g. from a generator expression)."""
    frame.stack.pop()


@handles("END_FOR", since=(3, 12), until=(3, 12))
def end_for_312(frame: Frame, inst: Instruction) -> None:
    """3.12's END_FOR is ``POP_TOP; POP_TOP`` (the value and the iterator; only reached by jumps)."""
    del frame.stack[-2:]
