"""Tensor subclasses as others write them and use them, round 15 (issues 14 and 15, helper zoo36): each
program runs eagerly and under jitcore.jit on equal fresh arguments for several calls, comparing values,
types and the Python state the program and its classes keep after every call, and the cache's hits.
Each test failed before its fix."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing._internal.common_subclass import WrapperTensorWithCustomStrides as _strides_wrapper
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

PER_OP: dict[str, int] = {}
BY_RANK: collections.defaultdict[str, int] = collections.defaultdict(int)


class PerOp(torch.Tensor):
    """A wrapper whose dispatch counts its ops in a global dict keyed by the op's name, as profiling
    wrappers do: ``PER_OP[str(func)] = PER_OP.get(str(func), 0) + 1``."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> PerOp:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> PerOp:
        return PerOp(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        PER_OP[str(func)] = PER_OP.get(str(func), 0) + 1
        BY_RANK[f"rank{args[0].dim()}"] += 1
        out = func(*[a.inner if isinstance(a, PerOp) else a for a in args], **(kwargs or {}))
        return PerOp(out) if isinstance(out, torch.Tensor) else out


def _in_dispatch(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (t * w).sin().sum()


def _outside_too(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    PER_OP["calls"] = PER_OP.get("calls", 0) + 1
    return (t * w).sin().sum()


@pytest.mark.parametrize("program", [_in_dispatch, _outside_too])
def test_a_per_op_counter_dict_whose_other_items_change_keeps_its_entry(program: Callable[..., Any]) -> None:
    """A dict read at a computed key (a dispatch's per-op counts) was guarded item by item, so the
    caller bumping another of its items between calls traced again on every call."""
    states = {}
    for name, fn in (("eager", program), ("jit", jitcore.jit(program))):
        PER_OP.clear()
        BY_RANK.clear()
        seen = []
        for i in range(5):
            out = fn(PerOp(torch.full((3,), float(i))), torch.ones(3))
            PER_OP["kept by the caller"] = i  # another item, changed between calls
            seen.append((type(out).__name__, out.inner.item(), dict(PER_OP), dict(BY_RANK)))
        states[name] = seen
        if name == "jit":
            # the first call traces; the second finds the caller's key new; every later call hits
            assert (jitcore.cache_misses(fn), jitcore.cache_hits(fn)) == (2, 3)
    assert states["jit"] == states["eager"]


STATS: dict[Any, int] = {}
KEY = object()


def _key(x: torch.Tensor) -> str:
    return f"rank{x.dim()}"


def _get_then_store(x: torch.Tensor) -> torch.Tensor:
    STATS[_key(x)] = STATS.get(_key(x), 0) + 1
    return x * STATS[_key(x)]


def _subscript_or_missing(x: torch.Tensor) -> torch.Tensor:
    try:
        found = STATS[_key(x)]
    except KeyError:
        found = -1
    return x + found


def _augmented(x: torch.Tensor) -> torch.Tensor:
    STATS[_key(x)] += 1
    return x * 2


def _key_of_an_object(x: torch.Tensor, key: Any) -> torch.Tensor:
    return x + STATS[key]


_BETWEEN: dict[str, Callable[[int], None]] = {
    "another item": lambda i: STATS.__setitem__("other", i),
    "the item read, present or absent":
        lambda i: STATS.__setitem__("rank1", i) if i % 2 else STATS.pop("rank1", 0),
}


# (program, what the caller changes between calls, the arguments of call i, the cache misses of 6 calls):
# an item read at a computed key is bound on its own, the dict by its keys; an item read at an object
# key (``STATS[key]``), which jitcore cannot name, binds the dict whole, item by item: a number item
# the caller changes is then a dynamic number bound in its place after the first change (Note [Counters
# bound where they are held])
@pytest.mark.parametrize(("program", "between", "args", "misses"), [
    (_get_then_store, "another item", lambda i: (torch.ones(2),), 1),
    (_get_then_store, "the item read, present or absent", lambda i: (torch.ones(2),), 2),
    (_subscript_or_missing, "the item read, present or absent", lambda i: (torch.ones(2),), 3),
    (_augmented, "another item", lambda i: (torch.ones(2),), 1),
    (_key_of_an_object, "another item", lambda i: (torch.ones(2), KEY if i % 2 else "other"), 3),
])
def test_a_dict_read_at_a_computed_key_answers_as_eagerly(program: Callable[..., Any], between: str,
                                                         args: Callable[[int], tuple], misses: int) -> None:
    """Keys computed by the program (present, absent, a KeyError caught, an object as key) read what
    eager reads on every call, whatever the caller changed in the dict between calls; a change to an
    item the program does not read traces nothing again."""
    states = {}
    for name, fn in (("eager", program), ("jit", jitcore.jit(program))):
        STATS.clear()
        STATS.update({KEY: 5, "rank1": 1, "other": 0})
        seen = []
        for i in range(6):
            _BETWEEN[between](i)
            try:
                out = fn(*args(i))
            except Exception as error:  # noqa: BLE001 - compared with eager's
                out = repr(error)
            seen.append((out.tolist() if isinstance(out, torch.Tensor) else out, dict(STATS)))
        states[name] = seen
    assert states["jit"] == states["eager"]
    assert jitcore.cache_misses(fn) == misses


def _calls_its_inner_tensor(a: torch.Tensor) -> torch.Tensor:
    return a.t() * 2  # torch's WrapperTensorWithCustomStrides keeps its inner tensor as ``self.t``


@pytest.mark.parametrize(("program", "make"), [
    (_calls_its_inner_tensor, lambda: _strides_wrapper(torch.randn(3, 2))),
    (lambda a: a(), lambda: torch.ones(2)),
    (lambda a: a.a(), lambda: TwoTensor(torch.ones(2), torch.ones(2))),
])
def test_calling_a_tensor_raises_eagers_error(program: Callable[..., Any], make: Callable[[], Any]) -> None:
    """Calling a tensor raised "'PlainTensorProxy' object is not callable": the name of jitcore's
    stand-in, where eager names the tensor's class."""
    errors = []
    for fn in (program, jitcore.jit(program)):
        with pytest.raises(TypeError) as raised:
            fn(make())
        errors.append(str(raised.value).splitlines()[0])
    assert errors[1] == errors[0]
