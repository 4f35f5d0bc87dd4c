"""Superinstructions: two operand loads and a binary operation or comparison, with the store, the
conditional jump (either direction) or, on 3.11, the ``yield`` that consumes the result (Note [Fused
instructions] in registry.py); and a binary operation whose operands are attributes of locals
(``self.x * k``, ``self.x + other.x``).

``x % 3`` then ``if``, ``total += x``, ``i < n`` then ``if``, ``a + b``: CPython 3.11 compiles them to
``LOAD_FAST``/``LOAD_CONST`` twice, ``BINARY_OP``/``COMPARE_OP`` and often ``STORE_FAST`` or
``POP_JUMP_FORWARD_IF_*``; 3.13 loads two locals with one ``LOAD_FAST_LOAD_FAST`` and tests a binary
operation's result with ``TO_BOOL`` + ``POP_JUMP_IF_*`` (each version has its own table below). One handler
runs the whole run of three or four instructions: the
instruction that dominates loops of pure-Python code costs one trip through the run loop instead of
two or three.

Invariants (as for every fused handler):
- it behaves exactly as its instructions in sequence; before an instruction of the run that can raise
  executes, ``frame.index`` is set past it (its ``after``), so an unbound local, an operator's exception
  or a failing ``__bool__`` is located at its own instruction (and line); loads and stores that cannot
  raise leave ``frame.index`` alone, and the handler ends with it past the run (or at the jump's target);
- the operator and truth fast paths repeat those of operators.py and fused.py on purpose (see
  fused.py); tests/interpreter/test_interp_fused.py checks them against CPython.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
from collections.abc import Callable

from jitcore.interpreter.attributes import NATIVE_NAMES, load_attr
from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes import fused as _fused  # noqa: F401 - the pairs are registered first
from jitcore.interpreter.opcodes.fused import after_load_global
from jitcore.interpreter.opcodes.load_store import UNBOUND_LOCAL
from jitcore.interpreter.protocols import (
    NATIVE_BINARY,
    NATIVE_COMPARANDS,
    NATIVE_COMPARE,
    NATIVE_OPERANDS,
    NATIVE_TYPES,
    binary_op,
    compare_op,
    truth,
)
from jitcore.interpreter.registry import fuses

Handler = Callable[[Frame, Instruction], object]

_LOADS = ("LOAD_FAST", "LOAD_CONST")
# 3.11's conditional jumps, forward (``if``) and backward (a comprehension's or generator expression's filter,
# ``while`` conditions at the loop's end): one handler each way, as in control.py
_JUMPS = {"POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_FORWARD_IF_TRUE": True,
          "POP_JUMP_BACKWARD_IF_FALSE": False, "POP_JUMP_BACKWARD_IF_TRUE": True}
_JUMPS_313 = {"POP_JUMP_IF_FALSE": False, "POP_JUMP_IF_TRUE": True}
# 3.12 has 3.11's instructions here (no TO_BOOL, no LOAD_FAST_LOAD_FAST) with 3.13's conditional jumps
_JUMPS_311_312 = _JUMPS if sys.version_info < (3, 12) else _JUMPS_313


def _superinstruction(first: str, second: str, operation: str, tail: str | None) -> Handler:
    """The handler of ``first second operation [tail]``; ``first``/``second`` load the operands."""
    lhs_local = first == "LOAD_FAST"
    rhs_local = second == "LOAD_FAST"
    compare = operation == "COMPARE_OP"
    store = tail == "STORE_FAST"
    yields = tail == "YIELD_VALUE"
    jump = tail is not None and not store and not yields
    jump_if = _JUMPS_311_312.get(tail or "", False)

    def handler(frame: Frame, inst: Instruction) -> bool | None:
        nxt = inst.next
        op = nxt.next
        if lhs_local:
            lhs = frame.fast[inst.arg]
            if lhs is NULL:
                raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
        else:
            lhs = inst.argval
        if rhs_local:
            rhs = frame.fast[nxt.arg]
            if rhs is NULL:
                frame.index = nxt.after
                raise UnboundLocalError(UNBOUND_LOCAL.format(nxt.argval))
        else:
            rhs = nxt.argval
        frame.index = op.after
        if compare:
            if type(lhs) in NATIVE_COMPARANDS and type(rhs) in NATIVE_TYPES:
                v = NATIVE_COMPARE[op.argval](lhs, rhs)
            else:
                v = compare_op(frame.run, op.argval, lhs, rhs)
        elif type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            v = NATIVE_BINARY[op.arg](lhs, rhs)
        else:
            v = binary_op(frame.run, op.arg, lhs, rhs)
        if store:
            last = op.next
            frame.index = last.after
            frame.fast[last.arg] = v
        elif jump:
            last = op.next
            if v is not True and v is not False:
                frame.index = last.after
                v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
            frame.index = last.argval if v is jump_if else last.after
        elif yields:  # ``yield a * b`` (fused.py's yields, with both operands loaded here)
            frame.index = op.next.after
            frame.result = v
            return True
        else:
            frame.stack.append(v)
        return None

    parts = [first, second, operation] + ([tail] if tail else [])
    handler.__name__ = "_".join(p.lower() for p in parts)
    handler.__doc__ = f"{' + '.join(parts)} as one instruction."
    return handler


def _register() -> None:
    for first in _LOADS:
        for second in _LOADS:
            if first == second == "LOAD_CONST":
                continue  # the compiler folds constant operands
            for operation in ("BINARY_OP", "COMPARE_OP"):
                for tail in (None, "STORE_FAST", "YIELD_VALUE", *_JUMPS_311_312):
                    if operation == "COMPARE_OP" and tail in ("STORE_FAST", "YIELD_VALUE"):
                        continue  # rare: a comparison stored to a local or yielded
                    names = (first, second, operation) + ((tail,) if tail else ())
                    handler = _superinstruction(first, second, operation, tail)
                    fuses(*names, since=(3, 11), until=(3, 12))(handler)
                    if operation == "BINARY_OP" and tail is None:  # ``f(n - 1)``: a call's first argument
                        fuses("LOAD_GLOBAL", *names, since=(3, 11), until=(3, 12))(after_load_global(handler))


_register()


# 3.13: ``i < n`` compiles to LOAD_FAST_LOAD_FAST (both operands in one instruction) + COMPARE_OP (with the
# bool() bit) + POP_JUMP_IF_*; ``x % 3`` then ``if`` to LOAD_FAST + LOAD_CONST + BINARY_OP + TO_BOOL +
# POP_JUMP_IF_*; ``total += x`` to LOAD_FAST_LOAD_FAST + BINARY_OP + STORE_FAST.
def _superinstruction_313(loads: tuple[str, ...], operation: str, tail: tuple[str, ...]) -> Handler:
    """The handler of ``*loads operation *tail`` on 3.13 (``loads``: one LOAD_FAST_LOAD_FAST or two loads)."""
    paired = loads == ("LOAD_FAST_LOAD_FAST",)
    lhs_local = loads[0] == "LOAD_FAST"
    rhs_local = not paired and loads[1] == "LOAD_FAST"
    compare = operation == "COMPARE_OP"
    store = tail == ("STORE_FAST",)
    to_bool = bool(tail) and tail[0] == "TO_BOOL"
    jump = bool(tail) and not store
    jump_if = _JUMPS_313.get(tail[-1] if tail else "", False)

    def handler(frame: Frame, inst: Instruction) -> None:
        if paired:
            op = inst.next
            fast = frame.fast
            lhs = fast[inst.arg >> 4]
            rhs = fast[inst.arg & 15]
        else:
            nxt = inst.next
            op = nxt.next
            if lhs_local:
                lhs = frame.fast[inst.arg]
                if lhs is NULL:
                    raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
            else:
                lhs = inst.argval
            if rhs_local:
                rhs = frame.fast[nxt.arg]
                if rhs is NULL:
                    frame.index = nxt.after
                    raise UnboundLocalError(UNBOUND_LOCAL.format(nxt.argval))
            else:
                rhs = nxt.argval
        frame.index = op.after
        if compare:
            if type(lhs) in NATIVE_COMPARANDS and type(rhs) in NATIVE_TYPES:
                v = NATIVE_COMPARE[op.argval](lhs, rhs)
            else:
                v = compare_op(frame.run, op.argval, lhs, rhs)
            if op.arg & 16 and v is not True and v is not False:
                v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
        elif type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            v = NATIVE_BINARY[op.arg](lhs, rhs)
        else:
            v = binary_op(frame.run, op.arg, lhs, rhs)
        if store:
            last = op.next
            frame.index = last.after
            frame.fast[last.arg] = v
        elif jump:
            last = op.next
            if to_bool:
                if v is not True and v is not False:
                    frame.index = last.after  # a failing __bool__ is located at TO_BOOL
                    v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
                last = last.next
            if v is not True and v is not False:
                frame.index = last.after
                v = bool(v) if type(v) in NATIVE_TYPES else truth(frame.run, v)
            frame.index = last.argval if v is jump_if else last.after
        else:
            frame.stack.append(v)

    parts = [*loads, operation, *tail]
    handler.__name__ = "_".join(p.lower() for p in parts)
    handler.__doc__ = f"{' + '.join(parts)} as one instruction."
    return handler


def _register_313() -> None:
    operand_loads = [("LOAD_FAST_LOAD_FAST",), ("LOAD_FAST", "LOAD_FAST"), ("LOAD_FAST", "LOAD_CONST"),
                     ("LOAD_CONST", "LOAD_FAST")]
    for loads in operand_loads:
        for operation in ("BINARY_OP", "COMPARE_OP"):
            tails: list[tuple[str, ...]] = [()]
            if operation == "BINARY_OP":
                tails += [("STORE_FAST",), *(("TO_BOOL", jump) for jump in _JUMPS_313)]
            else:  # the comparison carries its own bool() (bit 16 of its argument)
                tails += [(jump,) for jump in _JUMPS_313]
            for tail in tails:
                handler = _superinstruction_313(loads, operation, tail)
                fuses(*loads, operation, *tail, since=(3, 13))(handler)
                if operation == "BINARY_OP" and not tail:  # ``f(n - 1)``: a call's first argument
                    fuses("LOAD_GLOBAL", *loads, operation, since=(3, 13))(after_load_global(handler))


_register_313()


# Attribute operands (3.11 and 3.13): ``self.x * k`` compiles to LOAD_FAST + LOAD_ATTR + LOAD_FAST +
# BINARY_OP, ``self.x + other.x`` to LOAD_FAST + LOAD_ATTR + LOAD_FAST + LOAD_ATTR + BINARY_OP on both
# versions (the method form of 3.13's LOAD_ATTR, bit 0, precedes a CALL's arguments, never a binary
# operation's operand).
def _attribute_operation(rhs_attribute: bool) -> Handler:
    """The handler of ``LOAD_FAST LOAD_ATTR LOAD_FAST [LOAD_ATTR] BINARY_OP``: the left operand an attribute
    of a local, the right one a local or (``rhs_attribute``) a local's attribute."""

    def handler(frame: Frame, inst: Instruction) -> None:
        fast = frame.fast
        obj = fast[inst.arg]
        if obj is NULL:
            raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
        attr = inst.next
        frame.index = attr.after
        name = attr.argval
        names = NATIVE_NAMES.get(id(type(obj)))  # load_attr's cached fast path, inlined as in LOAD_ATTR
        lhs = getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
        nxt = attr.next
        rhs = fast[nxt.arg]
        if rhs is NULL:
            frame.index = nxt.after
            raise UnboundLocalError(UNBOUND_LOCAL.format(nxt.argval))
        if rhs_attribute:
            attr = nxt.next
            frame.index = attr.after
            name = attr.argval
            names = NATIVE_NAMES.get(id(type(rhs)))
            if names is not None and name in names:
                rhs = getattr(rhs, name)
            else:
                rhs = load_attr(frame.run, rhs, name)
            op = attr.next
        else:
            op = nxt.next
        frame.index = op.after
        if type(lhs) in NATIVE_OPERANDS and type(rhs) in NATIVE_TYPES:
            frame.stack.append(NATIVE_BINARY[op.arg](lhs, rhs))
        else:
            frame.stack.append(binary_op(frame.run, op.arg, lhs, rhs))

    parts = ["LOAD_FAST", "LOAD_ATTR", "LOAD_FAST", *["LOAD_ATTR"] * rhs_attribute, "BINARY_OP"]
    handler.__name__ = "_".join(p.lower() for p in parts)
    handler.__doc__ = f"{' + '.join(parts)} as one instruction."
    return handler


for _rhs_attribute in (False, True):
    _names = ("LOAD_FAST", "LOAD_ATTR", "LOAD_FAST", *("LOAD_ATTR",) * _rhs_attribute, "BINARY_OP")
    _handler = _attribute_operation(_rhs_attribute)
    fuses(*_names, since=(3, 11))(_handler)
    fuses("LOAD_GLOBAL", *_names, since=(3, 11))(after_load_global(_handler))  # ``f(self.x * k)``
