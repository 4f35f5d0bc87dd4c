"""Binary, unary, comparison, identity and membership operators.

Invariant: native operands use the native operator; anything else follows CPython's dunder protocol in
``protocols`` (so user ``__add__``/``__radd__``/``__eq__``... are interpreted).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from jitcore.interpreter.frame import Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import (
    HASHED_CONTAINERS,
    NATIVE_BINARY,
    NATIVE_COMPARANDS,
    NATIVE_COMPARE,
    NATIVE_OPERANDS,
    NATIVE_TYPES,
    binary_op,
    compare_op,
    contains,
    truth,
    unary_op,
)
from jitcore.interpreter.registry import handles


@handles("BINARY_OP", since=(3, 11))
def binary_op_(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS1 <op> TOS, operator chosen by inst.arg (the full __op__/__rop__/__iop__ protocol)."""
    stack = frame.stack
    rhs = stack.pop()
    lhs = stack[-1]
    if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
        stack[-1] = NATIVE_BINARY[inst.arg](lhs, rhs)
    else:
        stack[-1] = binary_op(frame.run, inst.arg, lhs, rhs)


@handles("COMPARE_OP", since=(3, 11), until=(3, 12))
def compare_op_(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS1 <cmp> TOS (``inst.argval``: ``dis`` decodes it from 3.11's ``op``, 3.12's ``op << 4``)."""
    stack = frame.stack
    rhs = stack.pop()
    lhs = stack[-1]
    if type(lhs) in NATIVE_COMPARANDS and type(rhs) in NATIVE_TYPES:
        stack[-1] = NATIVE_COMPARE[inst.argval](lhs, rhs)
    else:
        stack[-1] = compare_op(frame.run, inst.argval, lhs, rhs)


@handles("COMPARE_OP", since=(3, 13))
def compare_op_313(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS1 <cmp> TOS (operator ``inst.argval``); with bit 16 of the argument, ``bool()`` of it (3.13
    folds
    the TO_BOOL of a comparison tested by a jump into the comparison)."""
    stack = frame.stack
    rhs = stack.pop()
    lhs = stack[-1]
    if type(lhs) in NATIVE_COMPARANDS and type(rhs) in NATIVE_TYPES:
        v = NATIVE_COMPARE[inst.argval](lhs, rhs)
    else:
        v = compare_op(frame.run, inst.argval, lhs, rhs)
    stack[-1] = (v if v is True or v is False else truth(frame.run, v)) if inst.arg & 16 else v


@handles("TO_BOOL", since=(3, 13))
def to_bool(frame: Frame, inst: Instruction) -> None:
    """TOS = bool(TOS) (a Python ``__bool__``/``__len__`` interpreted)."""
    v = frame.stack[-1]
    if v is not True and v is not False:
        frame.stack[-1] = truth(frame.run, v)


@handles("IS_OP", since=(3, 11))
def is_op(frame: Frame, inst: Instruction) -> None:
    """TOS = (TOS1 is TOS) (negated if inst.arg)."""
    stack = frame.stack
    rhs = stack.pop()
    stack[-1] = (stack[-1] is rhs) is not bool(inst.arg)


@handles("CONTAINS_OP", since=(3, 11))
def contains_op(frame: Frame, inst: Instruction) -> None:
    """TOS = (TOS1 in TOS) (negated if inst.arg)."""
    stack = frame.stack
    container = stack.pop()
    stack[-1] = contains(frame.run, container, stack[-1]) is not bool(inst.arg)


@handles("CONTAINS_OP", since=(3, 11), hook="on_contains")
def contains_op_hooked(frame: Frame, inst: Instruction) -> None:
    """CONTAINS_OP through ``hooks.on_contains``: the truth of its answer, as ``in`` takes it (the item a
    hashed container is tested for is ``hooks.item_key``'s)."""
    stack = frame.stack
    container = stack.pop()
    run = frame.run
    if run.hooks.item_key is not None and isinstance(container, HASHED_CONTAINERS):
        stack[-1] = run.hooks.item_key(frame, container, stack[-1])
    answer = run.hooks.on_contains(frame, container, stack[-1])
    found = contains(run, container, stack[-1]) if answer is NotImplemented else truth(run, answer)
    stack[-1] = found is not bool(inst.arg)


@handles("UNARY_NEGATIVE", since=(3, 11))
def unary_negative(frame: Frame, inst: Instruction) -> None:
    """TOS = -TOS."""
    frame.stack[-1] = unary_op(frame.run, "__neg__", frame.stack[-1])


@handles("UNARY_POSITIVE", since=(3, 11), until=(3, 11))
def unary_positive(frame: Frame, inst: Instruction) -> None:
    """TOS = +TOS."""
    frame.stack[-1] = unary_op(frame.run, "__pos__", frame.stack[-1])


@handles("UNARY_INVERT", since=(3, 11))
def unary_invert(frame: Frame, inst: Instruction) -> None:
    """TOS = ~TOS."""
    frame.stack[-1] = unary_op(frame.run, "__invert__", frame.stack[-1])


@handles("UNARY_NOT", since=(3, 11))
def unary_not(frame: Frame, inst: Instruction) -> None:
    """TOS = not TOS."""
    frame.stack[-1] = not truth(frame.run, frame.stack[-1])
