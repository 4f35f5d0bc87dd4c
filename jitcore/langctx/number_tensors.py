"""``torch.tensor`` of numbers the trace names: a tensor made from symbolic sizes or dynamic numbers.

Note [A tensor made from named numbers]
``torch.tensor([a.shape[0], b.shape[0]])`` (NestedTensor's ``jagged_from_list`` computes an NJT's offsets
this way from its components' lengths: ``torch.nested.as_nested_tensor([a, b], layout=torch.jagged)``)
and ``torch.tensor([k, 2])`` of a dynamic number ``k`` make a tensor whose *values* are the numbers. Its
metadata depends only on how many there are and on their Python types (int -> int64, float -> the
default dtype, bool -> bool), never on their values. torch's factory turns each SymInt into an int
(a guard that pins it) and jitcore's number rule specialized a list argument: one cache entry per length
where torch.compile keeps one. So the data of ``torch.tensor``/``torch.as_tensor``, when it is a flat
list or tuple of numbers holding a SymInt or a dynamic number, keeps them as names: the call is recorded
with them (the computation gets each symbol or number as an input and calls the factory with this call's
values) and its shadow is an empty tensor of the shape and dtype torch infers from numbers of the same
types. The shadow is made without data on purpose: a fake tensor of a one-element ``torch.tensor`` keeps
its value as a constant that a later ``item()`` would read, a value that is not this call's.

Invariants:
- only a flat list or tuple of ints, floats, bools, SymInts, SymFloats and NumberProxies of int or float
  is kept; a nested list, a tensor element or other keyword arguments than ``dtype``, ``device`` and
  ``requires_grad`` go the usual way (specialized);
- a number's type is guarded by the number rule (langctx/scalars.py), so the dtype the shadow has is the
  one every call that passes the entry's checks gets.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.proxies.number import NumberProxy

__all__ = ["keeps_numbers_as_data", "tensor_of_numbers"]

_FACTORIES = (torch.tensor, torch.as_tensor)
_KWARGS = frozenset({"dtype", "device", "requires_grad"})
_SYMBOLIC = (torch.SymInt, torch.SymFloat)


def keeps_numbers_as_data(fn: Any, key: int | str, value: Any) -> bool:
    """Whether argument ``key`` of a call of ``fn`` is the data of a tensor made from named numbers
    (Note [A tensor made from named numbers])."""
    return fn in _FACTORIES and key in (0, "data") and _named_numbers(value)


def tensor_of_numbers(fn: Any, args: tuple, kwargs: dict, fake_mode: Any) -> torch.Tensor | None:
    """The shadow of ``fn(*args, **kwargs)`` where it makes a tensor from named numbers; None otherwise.

    Args:
        fn: the torch callable.
        args: its arguments as the program gave them (NumberProxies, SymInts).
        kwargs: its keyword arguments.
        fake_mode: the pass's FakeTensorMode.
    """
    if fn not in _FACTORIES or len(args) > 1 or not set(kwargs) <= _KWARGS | {"data"}:
        return None
    data = args[0] if args else kwargs.get("data")
    if not _named_numbers(data):
        return None
    dtype = torch.tensor([_representative(v) for v in data], dtype=kwargs.get("dtype")).dtype
    with fake_mode:
        return torch.empty((len(data),), dtype=dtype, device=kwargs.get("device"),
                           requires_grad=bool(kwargs.get("requires_grad", False)))


def _named_numbers(value: Any) -> bool:
    """A flat list or tuple of numbers holding a SymInt, a SymFloat or a NumberProxy."""
    return type(value) in (list, tuple) and any(isinstance(v, (NumberProxy, *_SYMBOLIC)) for v in value) \
        and all(type(v) in (int, float, bool) or isinstance(v, _SYMBOLIC)
                or (isinstance(v, NumberProxy) and v.python_type in (int, float)) for v in value)


def _representative(value: Any) -> Any:
    """A Python number of ``value``'s type (torch infers the dtype from the types alone)."""
    if isinstance(value, torch.SymInt):
        return 0
    if isinstance(value, torch.SymFloat):
        return 0.0
    return value.value if isinstance(value, NumberProxy) else value
