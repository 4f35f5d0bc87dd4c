"""Instances with ``__slots__`` holding tensors the program computes, returned or stored (Note [An instance
with slots holding traced values], jitcore/jit/outputs.py): each cached call makes a new instance holding
that call's tensors, as eager does, instead of running the function eagerly.

Differential: each program runs four calls eagerly and jitted; everything the caller can see (the
instances' classes, slots, values, which objects are one object, which are new) is compared.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import jitcore

STORE: list = []


class Pair:
    __slots__ = ("a", "b")

    def __init__(self, a: Any, b: Any) -> None:
        self.a, self.b = a, b


class Triple(Pair):
    __slots__ = ("c",)


class Private:
    __slots__ = ("__t", "n")

    def __init__(self, t: Any) -> None:
        self.__t, self.n = t, 3

    def t(self) -> Any:
        return self.__t


class Holder:
    out: Any = None


def _a_dataclass_with_slots(x: torch.Tensor, holder: Holder) -> Any:
    @dataclasses.dataclass(slots=True)
    class Out:
        t: torch.Tensor
        n: int = 2

    return Out(x * 2), x + 1


def _a_frozen_one_holding_a_list(x: torch.Tensor, holder: Holder) -> Any:
    @dataclasses.dataclass(slots=True, frozen=True)
    class Out:
        t: torch.Tensor
        items: list

    return Out(x * 2, [x.sum(), 1]), x + 1


def _a_slotted_instance(x: torch.Tensor, holder: Holder) -> Any:
    return Pair(x * 2, "s"), x + 1


def _stored_on_an_argument(x: torch.Tensor, holder: Holder) -> Any:
    holder.out = Pair(x * 3, x - 1)
    return holder.out, x + 1


def _a_slot_left_unset(x: torch.Tensor, holder: Holder) -> Any:
    made = Triple.__new__(Triple)
    made.a, made.c = x * 2, [x + 1]
    return made, x.sum()


def _returned_and_stored(x: torch.Tensor, holder: Holder) -> Any:
    made = Pair(x * 2, [x])
    STORE.append(made)
    return made, x + 1


def _a_private_slot(x: torch.Tensor, holder: Holder) -> Any:
    return Private(x * 2), x + 1


def _seen(value: Any) -> Any:
    """What the caller sees of ``value``: tensors' values, each slot (or ``UNSET``), the class's name."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_seen(v) for v in value]
    if value is None or isinstance(value, (int, float, str)):
        return value
    slots = [f"_{klass.__name__}{s}" if s.startswith("__") else s for klass in type(value).__mro__
             for s in getattr(klass, "__slots__", ())]  # (a private slot by its mangled name)
    return (type(value).__qualname__, hasattr(value, "__dict__"),
            {s: _seen(getattr(value, s, "UNSET")) for s in slots if s != "__weakref__"})


def _calls(runner: Any) -> list:
    STORE.clear()
    got, made, classes = [], [], []
    for k in range(4):
        holder = Holder()
        out, y = runner(torch.full((2,), float(k)), holder)
        out_is = [out is holder.out, any(out is s for s in STORE), any(out is m for m in made)]
        got.append((_seen(out), _seen(y), out_is, type(out) in classes, dataclasses.is_dataclass(out)))
        made.append(out)
        classes.append(type(out))
    return got


@pytest.mark.parametrize("program", [_a_dataclass_with_slots, _a_frozen_one_holding_a_list,
                                     _a_slotted_instance, _stored_on_an_argument, _a_slot_left_unset,
                                     _returned_and_stored, _a_private_slot],
                         ids=lambda p: p.__name__.strip("_"))
def test_an_instance_with_slots_holding_computed_tensors_is_made_per_cached_call(program: Any) -> None:
    """Before, each was an eager entry on every call ("a Pair over traced tensors, which jitcore cannot make
    again for each call"): the tensors were held outside the instance's ``__dict__``; a private slot
    (``__t``) was not seen by the walk for traced values (read unmangled), and its copy's deepcopy raised
    a RecursionError."""
    jitted = jitcore.jit(program)
    assert _calls(jitted) == _calls(program)
    assert jitted.fallback_reason is None, jitted.fallback_reason
    assert jitcore.cache_misses(jitted) == 1
