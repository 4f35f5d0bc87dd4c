"""A dict's or set's lookup of the program's object is made with its Python ``__hash__``/``__eq__``
interpreted: what they read is guarded, so a cached call answers as eagerly after the caller changes it.

Before, ``k in d``, ``d[k]``, ``d.get(k)``, ``k in s`` and ``k in d.keys()`` ran those dunders in C,
unseen, and a cached call returned the first call's answer after the caller changed ``k.v`` or a stored
key's ``v`` (Note [A hashed lookup, interpreted], jitcore/interpreter/hashed_lookup.py; Note [The stored
keys of a container of state], jitcore/jit/stored_keys.py). Frozen dataclass and Enum keys (hashes of
constant fields) stay traced, one entry for every call.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from tests.jit.jit_helpers import assert_same


class Collides:
    """Every instance hashes alike; equality reads the state."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collides) and self.v == other.v


class ByName:
    """The hash reads the state too."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByName) and self.n == other.n


def _differ(fn: Callable[[torch.Tensor], Any], change: Callable[[], None], *, misses: int) -> None:
    """Call ``fn`` jitted, change the state, call again: every answer as eagerly, ``misses`` traces."""
    jfn = jitcore.jit(fn)
    x = torch.ones(2)
    assert_same(jfn(x), fn(x))
    change()
    for _ in range(2):
        assert_same(jfn(x), fn(x))
    assert jitcore.cache_misses(jfn) == misses
    assert jfn.fallback_reason is None


_LOOKUPS: dict[str, Callable[[Any, Any], float]] = {
    "get": lambda table, k: table.get(k, 1.0),
    "in": lambda table, k: 4.0 if k in table else 1.0,
    "not in": lambda table, k: 1.0 if k not in table else 4.0,
    "subscript": lambda table, k: table[k] if k in table.keys() else 1.0,
    "set in": lambda table, k: 4.0 if k in set(table) else 1.0,
}


@pytest.mark.parametrize("lookup", sorted(_LOOKUPS))
@pytest.mark.parametrize("changed", ["key", "stored key"])
def test_a_lookup_reads_the_state_of_its_keys(lookup: str, changed: str) -> None:
    stored, key = Collides(1), Collides(2)
    table = {stored: 4.0}
    op = _LOOKUPS[lookup]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * op(table, key)

    _differ(f, lambda: setattr(key, "v", 1) if changed == "key" else setattr(stored, "v", 2), misses=2)


def test_a_set_of_state_reads_the_state_of_its_keys() -> None:
    stored, key = Collides(1), Collides(2)
    members = {stored}
    _differ(lambda x: x * (4.0 if key in members else 1.0), lambda: setattr(key, "v", 1), misses=2)


def test_a_hash_that_reads_the_state() -> None:
    key = ByName(1)
    table = {ByName(1): 3.0, ByName(2): 5.0}
    _differ(lambda x: x * table[key], lambda: setattr(key, "n", 2), misses=2)
    _differ(lambda x: x * table.get(key, 0.0), lambda: setattr(key, "n", 3), misses=2)


def test_a_lookup_that_changes_the_dict_is_traced_not_stale() -> None:
    """``pop`` and ``setdefault`` hash the key in C to change the dict: the key's ``__hash__``/``__eq__``
    run interpreted first (Note [A keyed C call, interpreted first], interpreter/hashed_inserts.py), so
    the call is traced and what they read guarded (before, the call ran eagerly)."""
    key = ByName(1)
    table = {ByName(1): 3.0, ByName(2): 5.0}

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * table.copy().pop(key) * table.setdefault(key, 9.0)

    _differ(f, lambda: setattr(key, "n", 2), misses=2)


def test_a_tuple_key_holding_the_programs_object_is_traced_not_stale() -> None:
    """Two tuples compared item by item, interpreted (Note [Tuple keys compared item by item],
    interpreter/hashed_lookup.py); before, C's tuple ``==`` ran ``ByName.__eq__`` natively: eager."""
    key = ByName(1)
    table = {(ByName(1), 1): 3.0, (ByName(2), 1): 5.0}
    _differ(lambda x: x * table[(key, 1)] + table.get((key, 2), 0.5), lambda: setattr(key, "n", 2), misses=2)


def test_a_lookup_missing_raises_key_error_as_eagerly() -> None:
    key = Collides(3)
    table = {Collides(1): 4.0}

    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            return x * table[key]
        except KeyError as e:
            return x * (2.0 if e.args[0] is key else 7.0)

    _differ(f, lambda: setattr(key, "v", 1), misses=2)


@dataclasses.dataclass(frozen=True)
class Cell:
    row: int
    name: str


class Mode(enum.Enum):
    A = 1
    B = 2


_CELLS = {Cell(1, "x"): 2.0, Cell(2, "y"): 3.0}
_MODES = {Mode.A: 2.0, Mode.B: 3.0}


def _frozen(x: torch.Tensor) -> torch.Tensor:
    return x * _CELLS[Cell(1, "x")] + _CELLS.get(Cell(2, "y"), 0.0) + (1.0 if Cell(3, "z") in _CELLS else 0.0)


def _modes(x: torch.Tensor) -> torch.Tensor:
    return x * _MODES[Mode.A] + _MODES.get(Mode.B) + (1.0 if Mode.B in set(_MODES) else 0.0)


@pytest.mark.parametrize("fn", [_frozen, _modes], ids=["frozen dataclass", "enum"])
def test_constant_keys_stay_traced_and_cached(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Measured before and after the change: one entry, traced (``fullgraph`` raises on an eager one),
    every later call a hit."""
    jfn = jitcore.jit(fn, fullgraph=True)
    x = torch.ones(2)
    for _ in range(5):
        assert_same(jfn(x), fn(x))
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 4)


@pytest.mark.parametrize("make", [collections.OrderedDict, lambda d: collections.defaultdict(float, d)],
                         ids=["OrderedDict", "defaultdict"])
@pytest.mark.parametrize("lookup", ["in", "subscript"])
def test_a_lookup_in_a_dict_subclass_whose_lookup_is_dicts(make: Callable[[dict], dict], lookup: str) -> None:
    """An OrderedDict's and a defaultdict's ``in`` (and an OrderedDict's ``[]``) are dict's: emulated too."""
    stored, key = Collides(1), Collides(2)
    table = make({stored: 4.0})

    def f(x: torch.Tensor) -> torch.Tensor:
        if lookup == "in":
            return x * (4.0 if key in table else 1.0)
        return x * (table[key] if key in table else 1.0)

    _differ(f, lambda: setattr(key, "v", 1), misses=2)
