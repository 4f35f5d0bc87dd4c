"""Fused handlers for frequent instruction pairs (Note [Fused instructions] in registry.py).

Invariant: a fused handler behaves exactly as the two handlers in sequence: it sets ``frame.index`` past
the second instruction before executing it, so an exception raised by either half is located at that half.

The bodies repeat the fast paths of their instructions' handlers (native operands, native iterators, the
cached native-attribute check) on purpose: one Python call per pair instead of three is the point of
fusing. tests/interpreter/test_interp_fused.py checks them against CPython.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
from collections.abc import Callable

from jitcore.interpreter.attributes import NATIVE_NAMES, NATIVE_STORE_NAMES, load_attr, store_attr
from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes import generators as _generators  # noqa: F401 - registered before the pairs
from jitcore.interpreter.opcodes import operators as _operators  # noqa: F401 - registered before the pairs
from jitcore.interpreter.opcodes import stack as _stack  # noqa: F401 - registered before the pairs
from jitcore.interpreter.opcodes.calls import call_, call_313
from jitcore.interpreter.opcodes.control import for_iter
from jitcore.interpreter.opcodes.load_store import UNBOUND_LOCAL, global_value, store_attr_
from jitcore.interpreter.protocols import (
    EXHAUSTED,
    NATIVE_BINARY,
    NATIVE_COMPARANDS,
    NATIVE_COMPARE,
    NATIVE_ITERATORS,
    NATIVE_OPERANDS,
    NATIVE_TYPES,
    binary_op,
    compare_op,
    next_value,
    truth,
)
from jitcore.interpreter.registry import fuses, fuses_jump

Handler = Callable[[Frame, Instruction], object]

_MISSING = object()


@fuses("LOAD_FAST", "LOAD_FAST", since=(3, 11))
def load_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """Push two locals."""
    fast = frame.fast
    a = fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    second = inst.next
    frame.index = second.after
    b = fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
    stack = frame.stack
    stack.append(a)
    stack.append(b)


@fuses("LOAD_FAST", "LOAD_CONST", since=(3, 11))
def load_fast_load_const(frame: Frame, inst: Instruction) -> None:
    """Push a local and a constant."""
    a = frame.fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
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
    frame.index = second.after
    b = fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
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
    """Return (or, registered for YIELD_VALUE too, yield) a local."""
    a = frame.fast[inst.arg]
    if a is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    frame.result = a
    return True


def _after_load_fast(second: Handler) -> Handler:
    """LOAD_FAST, then ``second`` (one Python call fewer than dispatching both)."""

    def fused(frame: Frame, inst: Instruction) -> object:
        a = frame.fast[inst.arg]
        if a is NULL:
            raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
        frame.stack.append(a)
        frame.index += 1
        return second(frame, inst.next)

    fused.__name__ = f"load_fast_{second.__name__}"
    fused.__doc__ = f"LOAD_FAST then {second.__name__}."
    return fused


def _after_load_const(second: Handler) -> Handler:
    """LOAD_CONST, then ``second``."""

    def fused(frame: Frame, inst: Instruction) -> object:
        frame.stack.append(inst.argval)
        frame.index += 1
        return second(frame, inst.next)

    fused.__name__ = f"load_const_{second.__name__}"
    fused.__doc__ = f"LOAD_CONST then {second.__name__}."
    return fused


_NULL_FIRST = sys.version_info < (3, 13)  # LOAD_GLOBAL's NULL: before the value on 3.11/3.12, after on 3.13


def after_load_global(second: Handler) -> Handler:
    """LOAD_GLOBAL, then ``second`` (a superinstruction computing a call's first argument: ``f(self.x * k)``,
    ``fib(n - 1)``; registered in superinstructions.py)."""

    def fused(frame: Frame, inst: Instruction) -> object:
        value = frame.globals.get(inst.argval, _MISSING)
        if value is _MISSING:
            value = global_value(frame, inst.argval)  # a builtin, or NameError at this instruction
        stack = frame.stack
        if not inst.arg & 1:
            stack.append(value)
        elif _NULL_FIRST:
            stack.append(NULL)
            stack.append(value)
        else:
            stack.append(value)
            stack.append(NULL)
        frame.index += 1
        return second(frame, inst.next)

    fused.__name__ = f"load_global_{second.__name__}"
    fused.__doc__ = f"LOAD_GLOBAL then {second.__name__}."
    return fused


@fuses("LOAD_FAST", "LOAD_ATTR", since=(3, 11), until=(3, 11))
def load_fast_load_attr(frame: Frame, inst: Instruction) -> None:
    """Push local.name."""
    obj = frame.fast[inst.arg]
    if obj is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    name = inst.next.argval
    names = NATIVE_NAMES.get(id(type(obj)))
    frame.stack.append(
        getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
    )


@fuses("LOAD_FAST", "LOAD_ATTR", since=(3, 13))
def load_fast_load_attr_313(frame: Frame, inst: Instruction) -> None:
    """Push local.name (then NULL for a method call: the low bit of LOAD_ATTR's argument)."""
    obj = frame.fast[inst.arg]
    if obj is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    attr = inst.next
    name = attr.argval
    names = NATIVE_NAMES.get(id(type(obj)))
    stack = frame.stack
    stack.append(
        getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
    )
    if attr.arg & 1:
        stack.append(NULL)


@fuses("LOAD_FAST", "LOAD_ATTR", since=(3, 12), until=(3, 12))
def load_fast_load_attr_312(frame: Frame, inst: Instruction) -> None:
    """Push (NULL for a method call: the low bit of LOAD_ATTR's argument, then) local.name."""
    obj = frame.fast[inst.arg]
    if obj is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    attr = inst.next
    name = attr.argval
    names = NATIVE_NAMES.get(id(type(obj)))
    value = getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
    stack = frame.stack
    if attr.arg & 1:
        stack.append(NULL)
    stack.append(value)


if sys.version_info < (3, 12):
    from jitcore.interpreter.opcodes.load_store import load_method

    fuses("LOAD_FAST", "LOAD_METHOD", since=(3, 11), until=(3, 11))(_after_load_fast(load_method))
_CALL = call_ if sys.version_info < (3, 13) else call_313
for _second, _handler in (("STORE_ATTR", store_attr_), ("CALL", _CALL)):
    fuses("LOAD_FAST", _second, since=(3, 11))(_after_load_fast(_handler))
fuses("LOAD_CONST", "CALL", since=(3, 11))(_after_load_const(_CALL))


@fuses("CALL", "RETURN_VALUE", since=(3, 11))
def call_return_value(frame: Frame, inst: Instruction) -> bool:
    """``return f(...)``: call, then return what the call returned."""
    _CALL(frame, inst)
    frame.index += 1
    frame.result = frame.stack.pop()
    return True


@fuses("LOAD_FAST", "BINARY_OP", since=(3, 11))
def load_fast_binary_op(frame: Frame, inst: Instruction) -> None:
    """Push a local, then TOS = TOS1 <op> local."""
    rhs = frame.fast[inst.arg]
    if rhs is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.index += 1
    stack = frame.stack
    lhs = stack[-1]
    if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
        stack[-1] = NATIVE_BINARY[inst.next.arg](lhs, rhs)
    else:
        stack[-1] = binary_op(frame.run, inst.next.arg, lhs, rhs)


@fuses("LOAD_CONST", "BINARY_OP", since=(3, 11))
def load_const_binary_op(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS <op> constant."""
    rhs = inst.argval
    frame.index += 1
    stack = frame.stack
    lhs = stack[-1]
    if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
        stack[-1] = NATIVE_BINARY[inst.next.arg](lhs, rhs)
    else:
        stack[-1] = binary_op(frame.run, inst.next.arg, lhs, rhs)


@fuses("BINARY_OP", "STORE_FAST", since=(3, 11))
def binary_op_store_fast(frame: Frame, inst: Instruction) -> None:
    """Pop two operands; store their <op> into a local."""
    stack = frame.stack
    rhs = stack.pop()
    lhs = stack.pop()
    if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
        value = NATIVE_BINARY[inst.arg](lhs, rhs)
    else:
        value = binary_op(frame.run, inst.arg, lhs, rhs)
    frame.index += 1
    frame.fast[inst.next.arg] = value


def _operation_then_jump(compare: bool, jump_if: bool) -> Handler:
    """COMPARE_OP (``compare``) or BINARY_OP, then pop the result and jump if its truth is ``jump_if``."""

    def fused(frame: Frame, inst: Instruction) -> None:
        stack = frame.stack
        rhs = stack.pop()
        lhs = stack.pop()
        if compare:
            if type(lhs) in NATIVE_COMPARANDS and type(rhs) in NATIVE_TYPES:
                v = NATIVE_COMPARE[inst.argval](lhs, rhs)
            else:
                v = compare_op(frame.run, inst.argval, lhs, rhs)
        elif type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            v = NATIVE_BINARY[inst.arg](lhs, rhs)
        else:
            v = binary_op(frame.run, inst.arg, lhs, rhs)
        frame.index += 1
        if v is not True and v is not False:
            v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
        if v is jump_if:
            frame.index = inst.next.argval

    operation = "compare_op" if compare else "binary_op"
    fused.__name__ = f"{operation}_pop_jump_if_{str(jump_if).lower()}"
    fused.__doc__ = f"{operation.upper()}, then pop and jump if the result is {jump_if}."
    return fused


for _operation in ("BINARY_OP", "COMPARE_OP"):
    for _jump, _jump_if in (("POP_JUMP_FORWARD_IF_FALSE", False), ("POP_JUMP_FORWARD_IF_TRUE", True),
                            ("POP_JUMP_BACKWARD_IF_FALSE", False), ("POP_JUMP_BACKWARD_IF_TRUE", True)):
        fuses(_operation, _jump, since=(3, 11), until=(3, 11))(
            _operation_then_jump(_operation == "COMPARE_OP", _jump_if))
    for _jump, _jump_if in (("POP_JUMP_IF_FALSE", False), ("POP_JUMP_IF_TRUE", True)):  # 3.12: no TO_BOOL
        fuses(_operation, _jump, since=(3, 12), until=(3, 12))(
            _operation_then_jump(_operation == "COMPARE_OP", _jump_if))


def _binary_op_to_bool_then_jump(jump_if: bool) -> Handler:
    """3.13's ``BINARY_OP; TO_BOOL; POP_JUMP_IF_*`` (``if x % 3:``): each part located at its own
    instruction."""

    def fused(frame: Frame, inst: Instruction) -> None:
        stack = frame.stack
        rhs = stack.pop()
        lhs = stack.pop()
        if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            v = NATIVE_BINARY[inst.arg](lhs, rhs)
        else:
            v = binary_op(frame.run, inst.arg, lhs, rhs)
        frame.index += 1
        if v is not True and v is not False:
            v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
        frame.index += 1
        if v is jump_if:
            frame.index = inst.next.next.argval

    fused.__name__ = f"binary_op_to_bool_pop_jump_if_{str(jump_if).lower()}"
    fused.__doc__ = f"BINARY_OP, TO_BOOL, then pop and jump if the result is {jump_if}."
    return fused


def _to_bool_then_jump(jump_if: bool) -> Handler:
    """3.13's ``TO_BOOL; POP_JUMP_IF_*`` (``if x:``)."""

    def fused(frame: Frame, inst: Instruction) -> None:
        v = frame.stack.pop()
        if v is not True and v is not False:
            v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
        frame.index += 1
        if v is jump_if:
            frame.index = inst.next.argval

    fused.__name__ = f"to_bool_pop_jump_if_{str(jump_if).lower()}"
    fused.__doc__ = f"TO_BOOL, then pop and jump if the value is {jump_if}."
    return fused


for _jump, _jump_if in (("POP_JUMP_IF_FALSE", False), ("POP_JUMP_IF_TRUE", True)):
    fuses("COMPARE_OP", _jump, since=(3, 13))(_operation_then_jump(True, _jump_if))
    fuses("BINARY_OP", "TO_BOOL", _jump, since=(3, 13))(_binary_op_to_bool_then_jump(_jump_if))
    fuses("TO_BOOL", _jump, since=(3, 13))(_to_bool_then_jump(_jump_if))


@fuses("LOAD_GLOBAL", "LOAD_FAST", since=(3, 13))
def load_global_load_fast_313(frame: Frame, inst: Instruction) -> None:
    """Push a global (or builtin) (then NULL, 3.13's order), then a local."""
    stack = frame.stack
    value = frame.globals.get(inst.argval, _MISSING)
    if value is _MISSING:
        value = global_value(frame, inst.argval)  # a builtin, or NameError at this instruction
    second = inst.next
    frame.index = second.after
    b = frame.fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
    stack.append(value)
    if inst.arg & 1:
        stack.append(NULL)
    stack.append(b)


@fuses("LOAD_GLOBAL", "LOAD_FAST", since=(3, 11), until=(3, 12))
def load_global_load_fast(frame: Frame, inst: Instruction) -> None:
    """Push a global (or builtin), then a local."""
    stack = frame.stack
    if inst.arg & 1:
        stack.append(NULL)
    value = frame.globals.get(inst.argval, _MISSING)
    if value is _MISSING:
        value = global_value(frame, inst.argval)  # a builtin, or NameError at this instruction
    second = inst.next
    frame.index = second.after
    b = frame.fast[second.arg]
    if b is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
    stack.append(value)
    stack.append(b)


@fuses("LOAD_CONST", "LOAD_FAST", since=(3, 11))
def load_const_load_fast(frame: Frame, inst: Instruction) -> None:
    """Push a constant, then a local."""
    second = inst.next
    b = frame.fast[second.arg]
    frame.index += 1
    if b is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
    stack = frame.stack
    stack.append(inst.argval)
    stack.append(b)


@fuses("FOR_ITER", "STORE_FAST", since=(3, 11))
def for_iter_store_fast(frame: Frame, inst: Instruction) -> None:
    """Store next(TOS) into a local; when exhausted pop the iterator and jump past the loop."""
    stack = frame.stack
    it = stack[-1]
    v = next(it, EXHAUSTED) if type(it) in NATIVE_ITERATORS else next_value(frame.run, it)
    if v is EXHAUSTED:
        stack.pop()
        frame.index = inst.argval
    else:
        frame.index += 1
        frame.fast[inst.next.arg] = v


@fuses("BINARY_OP", "RETURN_VALUE", since=(3, 11))
def binary_op_return_value(frame: Frame, inst: Instruction) -> bool:
    """Return the result of a binary operation."""
    stack = frame.stack
    rhs = stack.pop()
    lhs = stack.pop()
    if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
        result = NATIVE_BINARY[inst.arg](lhs, rhs)
    else:
        result = binary_op(frame.run, inst.arg, lhs, rhs)
    frame.index += 1
    frame.result = result
    return True


@fuses_jump("JUMP_BACKWARD", "FOR_ITER", since=(3, 11))
def jump_backward_for_iter(frame: Frame, inst: Instruction) -> None:
    """The loop's back edge, then its FOR_ITER (Note [Fused jumps])."""
    target = inst.next
    frame.index = target.index + 1
    for_iter(frame, target)


@fuses_jump("JUMP_BACKWARD", "FOR_ITER+STORE_FAST", since=(3, 11))
def jump_backward_for_iter_store_fast(frame: Frame, inst: Instruction) -> None:
    """The loop's back edge, then its FOR_ITER and the STORE_FAST of the loop variable."""
    target = inst.next
    frame.index = target.index + 1
    stack = frame.stack
    it = stack[-1]
    v = next(it, EXHAUSTED) if type(it) in NATIVE_ITERATORS else next_value(frame.run, it)
    if v is EXHAUSTED:
        stack.pop()
        frame.index = target.argval
    else:
        frame.index += 1
        frame.fast[target.next.arg] = v


# --- 3.13 only: pairs around its own superinstructions (measured on bench_interpreter's workloads)


@fuses("LOAD_FAST_LOAD_FAST", "STORE_ATTR", since=(3, 13))
def load_fast_load_fast_store_attr(frame: Frame, inst: Instruction) -> None:
    """``self.x = x``: the local ``arg >> 4`` stored as an attribute of the local ``arg & 15``."""
    fast = frame.fast
    value = fast[inst.arg >> 4]
    obj = fast[inst.arg & 15]
    frame.index += 1
    name = inst.next.argval
    names = NATIVE_STORE_NAMES.get(id(type(obj)))  # store_attr's cached fast path, inlined
    if names is not None and name in names:
        setattr(obj, name, value)
    else:
        store_attr(frame.run, obj, name, value)


@fuses("LOAD_FAST_LOAD_FAST", "STORE_ATTR", "LOAD_FAST_LOAD_FAST", "STORE_ATTR", since=(3, 13))
def two_local_attribute_stores(frame: Frame, inst: Instruction) -> None:
    """``self.x = x; self.y = y`` (an ``__init__``): two locals stored as attributes of locals."""
    fast = frame.fast
    store = inst.next
    frame.index = store.after
    obj = fast[inst.arg & 15]
    name = store.argval
    names = NATIVE_STORE_NAMES.get(id(type(obj)))  # store_attr's cached fast path, inlined
    if names is not None and name in names:
        setattr(obj, name, fast[inst.arg >> 4])
    else:
        store_attr(frame.run, obj, name, fast[inst.arg >> 4])
    loads = store.next  # the second pair, written out (a loop over the two costs more than the lines)
    store = loads.next
    frame.index = store.after
    obj = fast[loads.arg & 15]
    name = store.argval
    names = NATIVE_STORE_NAMES.get(id(type(obj)))
    if names is not None and name in names:
        setattr(obj, name, fast[loads.arg >> 4])
    else:
        store_attr(frame.run, obj, name, fast[loads.arg >> 4])


@fuses("LOAD_FAST", "LOAD_FAST", "STORE_ATTR", since=(3, 11), until=(3, 12))
def local_attribute_store(frame: Frame, inst: Instruction) -> None:
    """3.11's and 3.12's ``self.x = x``: a local stored as an attribute of a local."""
    fast = frame.fast
    value = fast[inst.arg]
    if value is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    second = inst.next
    frame.index = second.after
    obj = fast[second.arg]
    if obj is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(second.argval))
    store = second.next
    frame.index = store.after
    name = store.argval
    names = NATIVE_STORE_NAMES.get(id(type(obj)))  # store_attr's cached fast path, inlined
    if names is not None and name in names:
        setattr(obj, name, value)
    else:
        store_attr(frame.run, obj, name, value)


@fuses("RESUME", "POP_TOP", since=(3, 11))
def resume_pop_top(frame: Frame, inst: Instruction) -> None:
    """A generator resumed after a ``yield`` statement: drop the value sent. (The generator driver skips this
    instruction itself when it resumes a plain run's frame: Note [Yield statements] in generators.py.)"""
    frame.index += 1
    frame.stack.pop()


def _for_iter_store_fast_load_fast(frame: Frame, target: Instruction) -> None:
    stack = frame.stack
    it = stack[-1]
    v = next(it, EXHAUSTED) if type(it) in NATIVE_ITERATORS else next_value(frame.run, it)
    if v is EXHAUSTED:
        stack.pop()
        frame.index = target.argval
    else:
        frame.index += 1
        arg = target.next.arg
        fast = frame.fast
        fast[arg >> 4] = v
        stack.append(fast[arg & 15])


@fuses("FOR_ITER", "STORE_FAST_LOAD_FAST", since=(3, 13))
def for_iter_store_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """``for i in ...: <use of i>``: store next(TOS) into a local and push a local; when exhausted pop the
    iterator and jump past the loop."""
    _for_iter_store_fast_load_fast(frame, inst)


@fuses_jump("JUMP_BACKWARD", "FOR_ITER+STORE_FAST_LOAD_FAST", since=(3, 13))
def jump_backward_for_iter_store_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """The loop's back edge, then its FOR_ITER and the STORE_FAST_LOAD_FAST after it."""
    target = inst.next
    frame.index = target.index + 1
    _for_iter_store_fast_load_fast(frame, target)


def _load_const_binary_op_to_bool_then_jump(jump_if: bool) -> Handler:
    """3.13's ``LOAD_CONST; BINARY_OP; TO_BOOL; POP_JUMP_IF_*`` (``if i % 2`` with ``i`` already pushed)."""

    def fused(frame: Frame, inst: Instruction) -> None:
        rhs = inst.argval
        frame.index += 1
        op = inst.next
        lhs = frame.stack.pop()
        if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            v = NATIVE_BINARY[op.arg](lhs, rhs)
        else:
            v = binary_op(frame.run, op.arg, lhs, rhs)
        frame.index += 1
        if v is not True and v is not False:
            v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
        frame.index += 1
        if v is jump_if:
            frame.index = op.next.next.argval

    fused.__name__ = f"load_const_binary_op_to_bool_pop_jump_if_{str(jump_if).lower()}"
    fused.__doc__ = f"LOAD_CONST, BINARY_OP, TO_BOOL, then pop and jump if the result is {jump_if}."
    return fused


for _jump, _jump_if in (("POP_JUMP_IF_FALSE", False), ("POP_JUMP_IF_TRUE", True)):
    fuses("LOAD_CONST", "BINARY_OP", "TO_BOOL", _jump, since=(3, 13))(
        _load_const_binary_op_to_bool_then_jump(_jump_if)
    )


# --- a value computed and yielded: ``yield x``, ``(i * i for i in ...)``


# ``yield x``: the same handler as ``return x`` (the generator code tells the two apart by the opcode at
# ``frame.index - 1``, which the handler has advanced to).
fuses("LOAD_FAST", "YIELD_VALUE", since=(3, 11))(load_fast_return_value)


def _binary_op_then_yield(operand: str | None) -> Handler:
    """[``operand``: the right operand (LOAD_FAST, LOAD_CONST) or both (3.13's LOAD_FAST_LOAD_FAST),]
    BINARY_OP, then yield the result."""

    def fused(frame: Frame, inst: Instruction) -> bool:
        stack = frame.stack
        if operand is None:
            op = inst
            rhs = stack.pop()
            lhs = stack.pop()
        else:
            op = inst.next
            if operand == "LOAD_FAST_LOAD_FAST":  # two locals the compiler knows are bound
                lhs, rhs = frame.fast[inst.arg >> 4], frame.fast[inst.arg & 15]
            else:
                rhs = frame.fast[inst.arg] if operand == "LOAD_FAST" else inst.argval
                if rhs is NULL:
                    raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
                lhs = stack.pop()
            frame.index += 1
        if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            value = NATIVE_BINARY[op.arg](lhs, rhs)
        else:
            value = binary_op(frame.run, op.arg, lhs, rhs)
        frame.index += 1
        frame.result = value
        return True

    parts = [operand] * bool(operand) + ["BINARY_OP", "YIELD_VALUE"]
    fused.__name__ = "_".join(part.lower() for part in parts)
    fused.__doc__ = f"{' + '.join(parts)}: suspend the frame, yielding the operation's result."
    return fused


for _operand in (None, "LOAD_FAST", "LOAD_CONST", "LOAD_FAST_LOAD_FAST"):
    _since = (3, 13) if _operand == "LOAD_FAST_LOAD_FAST" else (3, 11)
    _names = (*(_operand,) * bool(_operand), "BINARY_OP", "YIELD_VALUE")
    fuses(*_names, since=_since)(_binary_op_then_yield(_operand))
