"""``hash()`` of the program's objects, and the containers built and changed with them as keys, traced:
their Python ``__hash__``/``__eq__`` run on the interpreter, what they read is guarded, and no call runs
eagerly (jitcore/interpreter/hashes.py).

Before, C's ``hash`` (and ``set``, ``dict``, ``d[k] = v``, ...) called those dunders natively, which made
every such call run eagerly (Note [Python code a C call ran natively], jitcore/jit/native_python.py): a
frozen dataclass's generated ``__hash__`` is the program's code.
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from tests.jit.jit_helpers import assert_same


@dataclasses.dataclass(frozen=True)
class Cfg:
    a: int = 1
    name: str = "x"


class Keyed:
    """A mutable key: its hash and equality read ``self.v``, which the caller changes between calls."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        return hash(self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyed) and self.v == other.v


def _traced_as_eagerly(fn: Callable[[torch.Tensor], Any], change: Callable[[], None] = lambda: None, *,
                       misses: int = 1, calls: int = 4) -> Any:
    """``calls`` calls of ``fn`` jitted and eagerly, ``change()`` before the third: every answer equal,
    no call run eagerly (no jitcore warning), ``misses`` traces."""
    jfn = jitcore.jit(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(calls):
            if step == 2:
                change()
            x = torch.ones(2)
            assert_same(jfn(x), fn(x))
    assert not [str(w.message) for w in caught if "jitcore" in str(w.message)]
    assert jfn.fallback_reason is None
    assert jitcore.cache_misses(jfn) == misses
    return jfn


_HASHES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dataclass": lambda x: x * (hash(Cfg(3)) == hash(Cfg(3))) + hash(Cfg(2)) % 5,
    "tuple of a dataclass": lambda x: x + hash((Cfg(1), 2)) % 7 + (hash((Cfg(1), 2)) == hash((Cfg(1), 2))),
    "nested tuple": lambda x: x + hash(((Cfg(1),), "k", (2, Cfg(4)))) % 11,
}


@pytest.mark.parametrize("name", sorted(_HASHES))
def test_hash_of_a_dataclass_is_traced(name: str) -> None:
    _traced_as_eagerly(_HASHES[name])


def test_hash_reads_the_state_it_hashes() -> None:
    """A cached call after the caller changed ``key.v`` returns what eager returns: the read of ``v`` in
    ``__hash__`` is guarded."""
    key = Keyed(5)
    _traced_as_eagerly(lambda x: x + hash(key) + hash((key, 1)) % 3, lambda: setattr(key, "v", 6), misses=2)


def test_hash_errors_as_eagerly() -> None:
    class NoInt:
        def __hash__(self) -> Any:
            return 1.5

    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            hash(NoInt())
        except TypeError as e:
            return x * len(str(e))
        return x

    _traced_as_eagerly(f)


_BUILDS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "set display": lambda x: x * len({Cfg(1), Cfg(1), Cfg(2)}),
    "set()": lambda x: x * len(set([Cfg(1), Cfg(1), Cfg(2, "y")])),
    "set() of a generator": lambda x: x * len(set(Cfg(i % 2) for i in range(4))),
    "frozenset()": lambda x: x * len(frozenset((Cfg(3), Cfg(3)))),
    "set comprehension": lambda x: x * len({Cfg(i % 3) for i in range(7)}),
    "dict display": lambda x: x * len({Cfg(1): 1, Cfg(1): 2}) + {Cfg(1): 1, Cfg(1): 2}[Cfg(1)],
    "dict()": lambda x: x * len(dict([(Cfg(1), 1), (Cfg(2), 2), (Cfg(1), 3)])),
    "dict comprehension": lambda x: x * sum({Cfg(i % 2): i for i in range(5)}.values()),
    "dict.fromkeys": lambda x: x * len(dict.fromkeys([Cfg(1), Cfg(2), Cfg(1)])),
    "mixed with ints": lambda x: x * len({Cfg(1), 1, 2, Cfg(1)}),
    "OrderedDict": lambda x: x * len((lambda d: (d.__setitem__(Cfg(1), 1), d.__setitem__(Cfg(1), 2), d)[2])(
        collections.OrderedDict())),
    "set.update": lambda x: x * len((lambda s: (s.update([Cfg(1), Cfg(2), Cfg(1)]), s)[1])({Cfg(2)})),
    "dict.update": lambda x: x * sum((lambda d: (d.update([(Cfg(1), 1), (Cfg(2), 2)]), d)[1])({Cfg(1): 5})
                                     .values()),
    "tuple keys": lambda x: x * len({(Cfg(1), 2), (Cfg(1), 2), (Cfg(1), 3), (Cfg(1),)}),
    "tuple keys of a dict": lambda x: x * {(Cfg(1), 2): 1.0, (Cfg(2 - 1), 2): 5.0}[(Cfg(1), 2)],
}


@pytest.mark.parametrize("name", sorted(_BUILDS))
def test_building_a_container_of_dataclasses_is_traced(name: str) -> None:
    jfn = _traced_as_eagerly(_BUILDS[name])
    assert jitcore.cache_hits(jfn) == 3


def test_building_reads_the_state_of_the_keys() -> None:
    """Two keys equal after the caller changed one: the set a cached call builds has eager's size."""
    a, b = Keyed(1), Keyed(2)
    _traced_as_eagerly(lambda x: x * len({a, b}) + len(set([a, b, Keyed(2)])), lambda: setattr(b, "v", 1),
                       misses=2)


def _mutating_as_eagerly(make: Callable[[Any], Callable[[torch.Tensor], Any]], state: Callable[[], Any], *,
                         change: Callable[[Any], None] = lambda _state: None, calls: int = 5) -> Any:
    """``make(state)`` called eagerly and jitted on two copies of the caller's state, ``change(state)``
    before the third call: every answer and the state after each call as eagerly, no call run eagerly."""
    eager_state, jit_state = state(), state()
    eager, jfn = make(eager_state), jitcore.jit(make(jit_state))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(calls):
            if step == 2:
                change(eager_state)
                change(jit_state)
            x = torch.full((2,), float(step))
            assert_same(jfn(x), eager(x))
            assert_same(jit_state, eager_state)
    assert not [str(w.message) for w in caught if "jitcore" in str(w.message)]
    assert jfn.fallback_reason is None
    return jfn


def _store(d: dict) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        d[Cfg(len(d) % 3)] = x.sum()
        d.setdefault(Cfg(7), 1.0)
        return x * len(d)
    return f


def _add_and_remove(s: set) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        s.add(Cfg(len(s) % 4))
        if len(s) > 2:
            s.discard(Cfg(0))
            s.discard(Cfg(9))
        return x * len(s)
    return f


def _pop_and_delete(d: dict) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        out = x * d.pop(Cfg(len(d)), 0.5)
        if Cfg(1) in d:
            del d[Cfg(1)]
        d[Cfg(5, "z")] = 2.0
        return out
    return f


def _update(st: dict) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        st["s"].update([Cfg(len(st["s"]) % 3), Cfg(1)])
        st["d"].update([(Cfg(len(st["d"]) % 2), 1.0), (Cfg(4), 2.0)])
        return x * (len(st["s"]) + len(st["d"]))
    return f


@pytest.mark.parametrize("make, state", [
    (_store, dict), (_add_and_remove, set),
    (_pop_and_delete, lambda: {Cfg(i): float(i) for i in range(5)}),
    (_update, lambda: {"s": set(), "d": {}}),
], ids=["d[k] = v, setdefault", "add, discard", "pop, del", "update"])
def test_a_cached_call_changes_the_callers_container_as_eagerly(make: Callable, state: Callable) -> None:
    _mutating_as_eagerly(make, state)


def test_an_insertion_reads_the_state_of_the_keys() -> None:
    """A caller's set holding ``Keyed(1)``: adding the caller's ``probe`` inserts it only once the caller
    changed ``probe.v`` (its ``__eq__`` with the stored key is false then)."""

    def state() -> dict:
        return {"s": {Keyed(1)}, "probe": Keyed(1)}

    def make(st: dict) -> Callable[[torch.Tensor], torch.Tensor]:
        def f(x: torch.Tensor) -> torch.Tensor:
            st["s"].add(st["probe"])
            return x * len(st["s"])
        return f

    def change(st: dict) -> None:
        st["probe"].v = 2

    jfn = _mutating_as_eagerly(make, state, change=change)
    assert jitcore.cache_hits(jfn) >= 2


class Counting:
    """A ``__hash__`` that writes state: C may not rerun it (Note [Only a dunder that writes nothing is
    rerun], interpreter/hashed_inserts.py)."""

    calls = [0]

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        Counting.calls[0] += 1
        return hash(self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counting) and self.v == other.v


def test_a_hash_that_writes_state_runs_eagerly_and_counts_as_eagerly() -> None:
    """Interpreted, then rerun by C, it counted twice per key on every call, cached ones too."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * len({Counting(1), Counting(2)})

    jfn = jitcore.jit(f)
    counts = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in (f, jfn, jfn, jfn):
            before = Counting.calls[0]
            assert_same(call(torch.ones(2)), torch.full((2,), 2.0))
            counts.append(Counting.calls[0] - before)
    assert counts == [2, 2, 2, 2]
