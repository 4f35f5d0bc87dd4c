"""Fused handlers for frequent instruction pairs (Note [Fused instructions] in registry.py).

Invariant: a fused handler behaves exactly as the two handlers in sequence: it sets ``frame.index`` past
the second instruction before executing it, so an exception raised by either half is located at that half.
"""

from __future__ import annotations

# Note [Builtins snapshot]: the interpreter's own code must not see a program's replacement of a builtin
# (``builtins.len = ...``), so this module's functions resolve builtins in a copy taken at import.
__builtins__ = dict(vars(__import__("builtins")))

from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes.calls import call_
from jitcore.interpreter.opcodes.control import pop_jump_if_false, pop_jump_if_true
from jitcore.interpreter.opcodes.load_store import load_attr_, load_global, load_method, store_attr_
from jitcore.interpreter.opcodes.operators import binary_op_, compare_op_
from jitcore.interpreter.registry import fuses

_UNBOUND_LOCAL = "cannot access local variable '{}' where it is not associated with a value"


@fuses("LOAD_FAST", "LOAD_FAST", since=(3, 11))
def load_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """Push two locals."""
    fast = frame.fast
    a = fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(inst.argval))
    second = inst.next
    frame.index += 1
    b = fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(second.argval))
    stack = frame.stack
    stack.append(a)
    stack.append(b)


@fuses("LOAD_FAST", "LOAD_CONST", since=(3, 11))
def load_fast_load_const(frame: Frame, inst: Instruction) -> None:
    """Push a local and a constant."""
    a = frame.fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    stack = frame.stack
    stack.append(a)
    stack.append(inst.next.argval)


@fuses("STORE_FAST", "LOAD_FAST", since=(3, 11))
def store_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """Pop into a local, then push a local."""
    fast = frame.fast
    stack = frame.stack
    fast[inst.arg] = stack.pop()
    second = inst.next
    frame.index += 1
    b = fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(second.argval))
    stack.append(b)


@fuses("STORE_FAST", "STORE_FAST", since=(3, 11))
def store_fast_store_fast(frame: Frame, inst: Instruction) -> None:
    """Pop into two locals."""
    fast = frame.fast
    stack = frame.stack
    fast[inst.arg] = stack.pop()
    frame.index += 1
    fast[inst.next.arg] = stack.pop()


@fuses("LOAD_CONST", "RETURN_VALUE", since=(3, 11))
def load_const_return_value(frame: Frame, inst: Instruction) -> bool:
    """Return a constant."""
    frame.index += 1
    frame.result = inst.argval
    return True


@fuses("LOAD_FAST", "RETURN_VALUE", since=(3, 11))
def load_fast_return_value(frame: Frame, inst: Instruction) -> bool:
    """Return a local."""
    a = frame.fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    frame.result = a
    return True


def _then(first, second):
    def fused(frame: Frame, inst: Instruction) -> object:
        first(frame, inst)
        frame.index += 1
        return second(frame, inst.next)

    fused.__name__ = f"{first.__name__}_{second.__name__}"
    fused.__doc__ = f"{first.__name__} then {second.__name__}."
    return fused


def _load_fast(frame: Frame, inst: Instruction) -> None:
    a = frame.fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(_UNBOUND_LOCAL.format(inst.argval))
    frame.stack.append(a)


def _load_const(frame: Frame, inst: Instruction) -> None:
    frame.stack.append(inst.argval)


def _store_fast(frame: Frame, inst: Instruction) -> None:
    frame.fast[inst.arg] = frame.stack.pop()


_COMPOSED = [
    ("LOAD_FAST", "LOAD_ATTR", _load_fast, load_attr_),
    ("LOAD_FAST", "LOAD_METHOD", _load_fast, load_method),
    ("LOAD_FAST", "BINARY_OP", _load_fast, binary_op_),
    ("LOAD_CONST", "BINARY_OP", _load_const, binary_op_),
    ("LOAD_FAST", "STORE_ATTR", _load_fast, store_attr_),
    ("LOAD_FAST", "CALL", _load_fast, call_),
    ("LOAD_CONST", "CALL", _load_const, call_),
    ("BINARY_OP", "STORE_FAST", binary_op_, _store_fast),
    ("COMPARE_OP", "POP_JUMP_FORWARD_IF_FALSE", compare_op_, pop_jump_if_false),
    ("COMPARE_OP", "POP_JUMP_FORWARD_IF_TRUE", compare_op_, pop_jump_if_true),
    ("LOAD_GLOBAL", "LOAD_FAST", load_global, _load_fast),
    ("LOAD_CONST", "LOAD_FAST", _load_const, _load_fast),
]
for _first, _second, _h1, _h2 in _COMPOSED:
    fuses(_first, _second, since=(3, 11))(_then(_h1, _h2))


@fuses("BINARY_OP", "RETURN_VALUE", since=(3, 11))
def binary_op_return_value(frame: Frame, inst: Instruction) -> bool:
    """Return the result of a binary operation."""
    binary_op_(frame, inst)
    frame.index += 1
    frame.result = frame.stack.pop()
    return True
