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
  argument, ``arange``/``range`` (whose Scalars are the output's length) — is specialized by
  ``bind_numbers``;
- a number given to a call with a tensor subclass stays a name only where it reaches the
  subclass's ``__torch_dispatch__`` unchanged (``dispatched_parameter``, Note [Numbers through a
  subclass's dispatch]); anywhere else torch's dispatcher needs its value and it is specialized;
- the rule only ever keeps a number symbolic where an aten schema says value; a torch function
  without a same-name aten operation specializes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from jitcore.ir import Symbol
from jitcore.langctx.number_tensors import keeps_numbers_as_data
from jitcore.proxies.number import NumberProxy, replace_numbers, specialize_all

__all__ = ["aten_name", "bind_numbers", "dispatched_parameter", "fixes_a_float", "takes_value"]

_VALUE_TYPES = frozenset({"number", "float", "Optional[number]", "Optional[float]"})
# ``Scalar[]`` (a foreach op's ``scalars``): a list of values, kept as names in an aten overload's call
# and through a subclass's dispatch (not in a torch function's: a list argument is specialized there)
_LIST_TYPES = frozenset({"List[number]"})
# Operations whose Scalars are the length of the output.
_LENGTH_FROM_SCALARS = frozenset({"arange", "range"})
_REFLECTED = frozenset({
    "__radd__", "__rsub__", "__rmul__", "__rtruediv__", "__rdiv__", "__rfloordiv__", "__rmod__",
    "__rpow__", "__rand__", "__ror__", "__rxor__", "__rlshift__", "__rrshift__",
})


@functools.cache
def _value_parameters(aten_name: str) -> tuple[frozenset[int], frozenset[str]]:
    """Positions and names typed as values in the aten overloads of ``aten_name`` that return tensors
    (or nothing: in-place foreach ops)."""
    if aten_name.startswith("__") or aten_name in _LENGTH_FROM_SCALARS or "quantize" in aten_name:
        return frozenset(), frozenset()
    packet = getattr(torch.ops.aten, aten_name, None)
    if packet is None:
        return frozenset(), frozenset()
    positions: set[int] = set()
    names: set[str] = set()
    for overload in packet.overloads():
        schema = getattr(packet, overload)._schema
        if schema.returns and not any("Tensor" in str(r.type) for r in schema.returns):
            continue  # TorchScript's scalar arithmetic (aten::mul.int) shares the name; an in-place
            # foreach op (aten::_foreach_mul_.Scalar) returns nothing and takes values
        _collect(schema, positions, names)
    return frozenset(positions), frozenset(names)


def _collect(schema: Any, positions: set[int], names: set[str], types: frozenset[str] = _VALUE_TYPES) -> None:
    for i, argument in enumerate(schema.arguments):
        if str(argument.type) in types:
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
        _collect(op._schema, positions, names, _LIST_TYPES)  # noqa: SLF001
    return frozenset(positions), frozenset(names)


@functools.cache
def _list_parameters(aten_name: str) -> tuple[frozenset[int], frozenset[str]]:
    """Positions and names typed ``Scalar[]`` in the aten overloads of ``aten_name``."""
    positions: set[int] = set()
    names: set[str] = set()
    packet = getattr(torch.ops.aten, aten_name, None)
    if isinstance(packet, torch._ops.OpOverloadPacket):  # noqa: SLF001
        for overload in packet.overloads():
            _collect(getattr(packet, overload)._schema, positions, names, _LIST_TYPES)
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
VALUE_ARGUMENTS: dict[str, frozenset[int | str]] = {
    # ``x.new_tensor(scale)``: its data is a value as ``torch.tensor(scale)``'s is (aten::tensor.float's
    # ``t``); the method has no aten schema of its own, so a dynamic scale was specialized: an entry per value
    "torch.Tensor.new_tensor": frozenset({1, "data"}),
}
# torch functions whose aten operation has another name (their values read from that one's schema)
_ATEN_NAMES = {"cross_entropy": "cross_entropy_loss"}


def takes_value(symbol: Symbol, key: int | str) -> bool:
    """Whether argument ``key`` (a position or a keyword) of a call of ``symbol`` is taken as a value."""
    registered = VALUE_ARGUMENTS.get(symbol.id)
    if registered is not None:
        return key in registered
    if "autograd_function" in symbol.tags:  # Note [Numbers a Function takes]
        return key != 0
    if symbol.langctx == "aten":
        if isinstance(symbol.fn, torch._ops.OpOverload):  # noqa: SLF001
            positions, names = _overload_parameters(symbol.fn)
            if _wrapped_number(symbol.fn, key):
                return True
        else:  # a packet (torch.ops.aten.mul): any of its overloads
            positions, names = _value_parameters(symbol.fn._qualified_op_name.split("::", 1)[-1])  # noqa: SLF001
        return key in positions if isinstance(key, int) else key in names
    if symbol.langctx != "torch":
        return False
    if symbol.name in _REFLECTED:
        return key == 1
    positions, names = _value_parameters(_ATEN_NAMES.get(symbol.name, symbol.name))
    if isinstance(key, str):
        return key in names
    python_names = _python_parameter_names(symbol.fn)
    if python_names is not None:
        return key < len(python_names) and python_names[key] in names
    return key in positions


def _wrapped_number(op: Any, key: int | str) -> bool:
    """Whether argument ``key`` of the aten overload ``op`` is a ``Tensor`` parameter that another
    overload of the same name types as a value (``aten.div.Tensor(x, 2.0)``: what a subclass's
    ``__torch_dispatch__`` receives for ``x / 2.0``, the number as a wrapped scalar, whose value never
    changes the output's metadata)."""
    arguments = op._schema.arguments  # noqa: SLF001
    if isinstance(key, int):
        if key >= len(arguments) or arguments[key].kwarg_only:
            return False
        argument = arguments[key]
    else:
        argument = next((a for a in arguments if a.name == key), None)
        if argument is None:
            return False
    if str(argument.type) != "Tensor":
        return False
    _positions, names = _value_parameters(op._schema.name.split("::", 1)[-1])  # noqa: SLF001
    return argument.name in names


# Note [Numbers a Function takes]
# ``MyFn.apply(x, lam)`` is one record whose forward is interpreted: a number it takes stays a name,
# as for an op that takes a value, and whatever its forward or backward makes of it decides (``if lam
# > 1``, ``int(n)`` for a view's size, ``ctx.lam`` in the backward on pass 1's shadows specialize it,
# guarded). Plain tensors with a dynamic number run pass 1 under torch's autograd (Note [Dynamic numbers
# under autograd]), which calls ``apply`` with each call's number; with a tensor subclass the numbers are
# specialized as for any subclass call. Specialized up front, a gradient-reversal layer whose
# coefficient follows a schedule (``GradReverse.apply(x, lam)``, DANN) traced an entry per step.

# Note [Numbers through a subclass's dispatch]
# A call with a tensor subclass is replayed natively on shadows (jitcore/dispatch/resolver.py): torch's
# C++ takes the numbers as values, and hands the subclass's ``__torch_dispatch__`` an aten call. A
# number given where the torch function takes a value (``exp_avg_sq.sqrt() / bias_correction2_sqrt``
# in Adam's step on a TwoTensor parameter, ``p.addcdiv_(m, d, value=-step_size)``, a foreach op's
# ``Scalar[]`` list) reaches that aten call unchanged when the torch function is C code (not Python
# that may branch on the value), no C++ decomposition runs before the dispatch (no
# ``CompositeImplicitAutograd`` kernel of that name) and autograd records nothing (no input requires
# grad under grad mode). The resolver puts the name back into the aten call's parameter of that name
# or position, where it holds that very value (``ShadowDispatchMode``), so the subclass passes the
# name on to its inner tensors' ops and the trace is correct for every value. A number the aten call
# does not hold there was used by C++ some other way and is specialized.
def dispatched_parameter(symbol: Symbol, key: int | str) -> int | str | None:
    """The aten parameter (a name, or the position of a positional argument of a torch C function)
    as which argument ``key`` of a call of ``symbol`` with a tensor subclass reaches the subclass's
    ``__torch_dispatch__`` unchanged (a number, or a ``Scalar[]`` list of them); None where it may not
    (Note [Numbers through a subclass's dispatch])."""
    if symbol.langctx not in ("torch", "aten") or symbol.name in _REFLECTED or symbol.name.startswith("__"):
        return None
    if not takes_value(symbol, key) and not takes_list(symbol, key):  # (a Python function: None below)
        return None
    if symbol.langctx == "aten":
        if not isinstance(symbol.fn, torch._ops.OpOverload):  # noqa: SLF001
            return None
        name = symbol.fn._schema.name.split("::", 1)[-1]  # noqa: SLF001
        if _decomposed_before_dispatch(name):
            return None
        if isinstance(key, str):
            return key
        arguments = symbol.fn._schema.arguments  # noqa: SLF001
        return arguments[key].name if key < len(arguments) else None
    if _decomposed_before_dispatch(symbol.name):
        return None
    if _python_parameter_names(symbol.fn) is not None:
        return None  # Python code (``F.dropout``) may branch on the value before any dispatch
    return key  # a name, or a position: torch's C bindings take aten's parameters in aten's order


# Note [A list of numbers to a foreach op]
# A foreach op's ``Scalar[]`` (``torch._foreach_addcdiv_(params, m, v, step_sizes)``, Adam's step with
# ``foreach=True`` and every optimizer's default on CUDA) takes one value per tensor. Its length is the
# tensor list's, fixed by the trace; each value only scales elements, never the output's metadata. So a
# list of numbers given to a torch C function where an aten overload of its name types that parameter
# ``Scalar[]`` keeps its names, as it does given to the overload itself: Adam's bias corrections, read
# from the step count with ``item()`` every step, are a computation of the trace and not one entry per
# step. A Python torch function may branch on the values first, so there the list is specialized.
def takes_list(symbol: Symbol, key: int | str) -> bool:
    """Whether argument ``key`` of a call of the torch function ``symbol`` is a ``Scalar[]`` list of
    values (Note [A list of numbers to a foreach op])."""
    if symbol.langctx != "torch" or _python_parameter_names(symbol.fn) is not None:
        return False
    positions, names = _list_parameters(symbol.name)
    return key in names if isinstance(key, str) else key in positions


def aten_name(symbol: Symbol) -> str:
    """The name of the aten operation a call of ``symbol`` reaches a ``__torch_dispatch__`` as (a torch
    function's own name where ``dispatched_parameter`` keeps a number: ``div``, ``addcdiv_``)."""
    if isinstance(symbol.fn, torch._ops.OpOverload):  # noqa: SLF001
        return symbol.fn._schema.name.split("::", 1)[-1]  # noqa: SLF001
    return symbol.name


@functools.cache
def _decomposed_before_dispatch(aten_name: str) -> bool:
    """Whether an aten operation of this name is missing or has a ``CompositeImplicitAutograd``
    kernel in some overload (C++ decomposes it before any ``__torch_dispatch__`` sees it)."""
    packet = getattr(torch.ops.aten, aten_name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):  # noqa: SLF001
        return True
    for overload in packet.overloads():
        if not any("Tensor" in str(r.type) for r in getattr(packet, overload)._schema.returns):
            continue  # TorchScript's scalar arithmetic (aten::div.int), not in the dispatcher
        qualified = f"aten::{aten_name}" + ("" if overload == "default" else f".{overload}")
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeImplicitAutograd"):  # noqa: SLF001
                return True
        except RuntimeError:  # a TorchScript operator the dispatcher does not hold (aten::as_tensor.bool)
            continue
    return False


def bind_numbers(
    symbol: Symbol, args: tuple, kwargs: dict, *, subclass: bool = False,
    as_size: Callable[[NumberProxy], Any] | None = None,
) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of a symbol call with every NumberProxy that may not stay symbolic
    replaced by its specialized value (``subclass``: a call with a tensor subclass, whose numbers stay
    only where they reach its dispatch unchanged, Note [Numbers through a subclass's dispatch]), or by
    what ``as_size`` gives for it where that is not None (a symbolic size, jit/number_sizes.py)."""
    def bound(value: Any) -> Any:
        return specialize_all(value) if as_size is None else _sized(value, as_size)

    new_args = tuple(a if _keeps(symbol, i, a, subclass) else bound(a) for i, a in enumerate(args))
    new_kwargs = {k: v if _keeps(symbol, k, v, subclass) else bound(v) for k, v in kwargs.items()}
    return new_args, new_kwargs


def _keeps(symbol: Symbol, key: int | str, value: Any, subclass: bool) -> bool:
    """Whether argument ``key`` of a call of ``symbol`` keeps the numbers in ``value`` as names."""
    if not _names(value):
        return False
    if not subclass and keeps_numbers_as_data(symbol.fn, key, value):  # Note [A tensor made from named ...]
        return True
    if subclass:
        return dispatched_parameter(symbol, key) is not None
    if isinstance(value, NumberProxy) or isinstance(symbol.fn, torch._ops.OpOverload):  # noqa: SLF001
        return takes_value(symbol, key)
    return takes_list(symbol, key)


def _sized(tree: Any, as_size: Callable[[NumberProxy], Any]) -> Any:
    """``specialize_all`` with ``as_size``'s replacement for each number it gives one for."""

    def replace(number: NumberProxy) -> Any:
        size = as_size(number)
        return number.specialize() if size is None else size

    return replace_numbers(tree, replace)


def _names(value: Any) -> bool:
    """A number, or a list or tuple of numbers holding one (a ``Scalar[]`` argument)."""
    if isinstance(value, NumberProxy):
        return True
    return type(value) in (list, tuple) and any(isinstance(v, NumberProxy) for v in value) \
        and all(isinstance(v, (NumberProxy, int, float)) for v in value)


# Note [A float a torch function would fix]
# A torch function written in Python (``torch.nn.functional.gumbel_softmax``, ``normalize``,
# ``dropout2d``, ``cross_entropy``'s ``label_smoothing``) is recorded as one symbol. Where a float
# dynamic number reaches it in a parameter torch's schemas do not take as a value, recording it would
# specialize the number: an entry per value, so a temperature annealed every step (``tau`` of a
# Gumbel-softmax VAE) traced on every call. Such a call is interpreted instead, its body's torch calls
# recorded in its place (the pass's call handler splices them), where each op's own rule keeps the
# number a name (``(logits + g) / tau``) or specializes it (a size). Eager runs that same body, so the
# answer is unchanged; only the trace is finer. Ints are left to ``bind_numbers``: an int such a
# function takes is a size or a flag, specialized inside as well. With a tensor subclass the call is
# left to the subclass's ``__torch_function__``/dispatch rule (Note [Numbers through a subclass's
# dispatch]).
def fixes_a_float(symbol: Symbol, args: tuple, kwargs: dict) -> bool:
    """Whether ``bind_numbers`` (a call without a tensor subclass) would specialize a float dynamic
    number of this call: one given where torch's schemas take no value (``F.gumbel_softmax``'s ``tau``,
    ``F.normalize``'s ``p``: Python functions without a same-name aten operation). Asks without
    specializing anything."""
    return any(_holds_float(a) and not _keeps(symbol, i, a, False) for i, a in enumerate(args)) \
        or any(_holds_float(v) and not _keeps(symbol, k, v, False) for k, v in kwargs.items())


def _holds_float(value: Any) -> bool:
    if isinstance(value, NumberProxy):
        return value.python_type is float
    if type(value) in (list, tuple):
        return any(_holds_float(v) for v in value)
    if type(value) is dict:
        return any(_holds_float(v) for v in value.values())
    return False
