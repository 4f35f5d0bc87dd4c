"""Where torch takes a number as a *value*: the rule that lets a dynamic number stay symbolic.

A dynamic number (``jitcore.proxies.number``) may stay a name in a recorded torch call only where
its value cannot change the call's output metadata (shape, dtype, device, aliasing) — then the
trace is correct for every value of the number's type. The rule is read from torch's own operator
schemas, not from a hand-written list: a parameter takes a value when, in an aten overload of the
operation's name that returns tensors, it is typed ``Scalar`` or ``float`` (or optional ones). Such a
number's *type* still matters (an int operand keeps an int tensor int) and is guarded.

- aten symbols (``torch.ops.aten.mul.Scalar``): that overload's own schema;
- torch symbols (``torch.mul``, ``Tensor.mul_``, ``x * n``, ``F.leaky_relu``): the aten overloads of
  the same name; a positional argument is mapped to its parameter name through the Python signature
  where torch has one (``F.elu(x, 1.0, inplace)`` has ``inplace`` third, aten ``scale``), otherwise
  by position (torch's C bindings take aten's parameters in aten's order);
- reflected operators (``n / x`` is ``x.__rtruediv__(n)``) take their operand as a value.

Invariants:
- anything else a dynamic number reaches — an int parameter (sizes, dims, indices), a list or tuple
  argument, ``arange``/``range`` (whose Scalars are the output's length), a call with a tensor
  subclass (torch's dispatcher needs the value) — is specialized by ``bind_numbers``;
- the rule only ever keeps a number symbolic where an aten schema says value; a torch function
  without a same-name aten operation specializes.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from jitcore.ir import Symbol
from jitcore.proxies.number import NumberProxy, specialize_all

__all__ = ["bind_numbers", "takes_value"]

_VALUE_TYPES = frozenset({"number", "float", "Optional[number]", "Optional[float]"})
# Operations whose Scalars are the length of the output.
_LENGTH_FROM_SCALARS = frozenset({"arange", "range"})
_REFLECTED = frozenset({
    "__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rdiv__", "__rfloordiv__", "__rmod__",
    "__rpow__", "__rand__", "__ror__", "__rxor__", "__rlshift__", "__rrshift__",
})


@functools.cache
def _value_parameters(aten_name: str) -> tuple[frozenset[int], frozenset[str]]:
    """Positions and names typed as values in the tensor-returning aten overloads of ``aten_name``."""
    if aten_name.startswith("__") or aten_name in _LENGTH_FROM_SCALARS or "quantize" in aten_name:
        return frozenset(), frozenset()
    packet = getattr(torch.ops.aten, aten_name, None)
    if packet is None:
        return frozenset(), frozenset()
    positions: set[int] = set()
    names: set[str] = set()
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        if not any("Tensor" in str(r.type) for r in schema.returns):
            continue  # TorchScript's scalar arithmetic (aten::mul.int) shares the name
        _collect(schema, positions, names)
    return frozenset(positions), frozenset(names)


def _collect(schema: Any, positions: set[int], names: set[str]) -> None:
    for i, argument in enumerate(schema.arguments):
        if str(argument.type) in _VALUE_TYPES:
            names.add(argument.name)
            if not argument.kwarg_only:
                positions.add(i)


@functools.cache
def _overload_parameters(op: Any) -> tuple[frozenset[int], frozenset[str]]:
    positions: set[int] = set()
    names: set[str] = set()
    name = op._schema.name.split("::", 1)[-1]  # noqa: SLF001
    if name not in _LENGTH_FROM_SCALARS and "quantize" not in name:
        _collect(op._schema, positions, names)  # noqa: SLF001
    return frozenset(positions), frozenset(names)


@functools.cache
def _python_parameter_names(fn: Any) -> tuple[str, ...] | None:
    """The positional parameter names of a Python function (None for C functions)."""
    if not inspect.isfunction(fn):
        return None
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return tuple(p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


# Symbols with no aten schema whose arguments are values, by symbol id (a generator's seed:
# jitcore/langctx/generators.py registers it).
VALUE_ARGUMENTS: dict[str, frozenset[int | str]] = {}


def takes_value(symbol: Symbol, key: int | str) -> bool:
    """Whether argument ``key`` (a position or a keyword) of a call of ``symbol`` is taken as a value."""
    registered = VALUE_ARGUMENTS.get(symbol.id)
    if registered is not None:
        return key in registered
    if symbol.langctx == "aten":
        if isinstance(symbol.fn, torch._ops.OpOverload):  # noqa: SLF001
            positions, names = _overload_parameters(symbol.fn)
        else:  # a packet (torch.ops.aten.mul): any of its overloads
            positions, names = _value_parameters(symbol.fn._qualified_op_name.split("::", 1)[-1])  # noqa: SLF001
        return key in positions if isinstance(key, int) else key in names
    if symbol.langctx != "torch":
        return False
    if symbol.name in _REFLECTED:
        return key == 1
    positions, names = _value_parameters(symbol.name)
    if isinstance(key, str):
        return key in names
    python_names = _python_parameter_names(symbol.fn)
    if python_names is not None:
        return key < len(python_names) and python_names[key] in names
    return key in positions


def bind_numbers(
    symbol: Symbol, args: tuple, kwargs: dict, *, specialize_every: bool = False
) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of a symbol call with every NumberProxy that may not stay symbolic
    replaced by its specialized value (``specialize_every``: all of them, e.g. for a subclass call)."""
    if specialize_every:
        return specialize_all(args), specialize_all(kwargs)
    new_args = tuple(
        a if isinstance(a, NumberProxy) and takes_value(symbol, i) else specialize_all(a)
        for i, a in enumerate(args)
    )
    new_kwargs = {
        k: v if isinstance(v, NumberProxy) and takes_value(symbol, k) else specialize_all(v)
        for k, v in kwargs.items()
    }
    return new_args, new_kwargs
