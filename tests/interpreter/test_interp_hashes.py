"""``hash()`` on the interpreter: a Python ``__hash__`` is called interpreted, and its result made into a
hash as CPython's ``slot_tp_hash`` makes it; a tuple holding such objects is hashed with CPython's
``tuplehash`` (jitcore/interpreter/hashes.py). Every answer and exception is the native ``hash()``'s.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitcore.interpreter import Hooks, interpret
from tests.interpreter.interp_helpers import check


class Returns:
    """``__hash__`` returns whatever it was given."""

    def __init__(self, result: object) -> None:
        self.result = result

    def __hash__(self) -> object:
        return self.result

    def __repr__(self) -> str:
        return f"Returns({self.result!r})"


class Big(int):
    """An int subclass whose own conversions lie: ``slot_tp_hash`` reads the int's value, not these."""

    def __int__(self) -> int:
        return 7

    def __index__(self) -> int:
        return 7


class Unhashable:
    __hash__ = None

    def __repr__(self) -> str:
        return "Unhashable()"


class Raises:
    def __hash__(self) -> int:
        raise ValueError("no hash")

    def __repr__(self) -> str:
        return "Raises()"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: str = "a"


def _hash(v: object) -> object:
    return hash(v)


@pytest.mark.parametrize("result", [
    0, 5, -1, -2, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64 + 12345, -(2**100), 10**40, True, False,
    Big(3), Big(2**70), Big(-1),
], ids=repr)
def test_a_python_hash_result_is_reduced_as_cpython_does(result: object) -> None:
    assert check(_hash, Returns(result)) == hash(Returns(result))


@pytest.mark.parametrize("result", [1.5, "1", None, (1,)], ids=repr)
def test_a_hash_that_is_not_an_int_raises_as_cpython(result: object) -> None:
    check(_hash, Returns(result))
    with pytest.raises(TypeError, match="__hash__ method should return an integer"):
        interpret(_hash)(Returns(result))


@pytest.mark.parametrize("value", [Unhashable(), Raises(), [1], (1, [2]), (Returns(1.0), 2)],
                         ids=["__hash__ None", "raises", "list", "tuple of list", "tuple of bad hash"])
def test_an_unhashable_value_raises_as_cpython(value: object) -> None:
    check(_hash, value)


def test_the_python_hash_runs_on_the_interpreter() -> None:
    """The ``self.result`` read inside ``__hash__`` is seen by the run's attribute hook: the method is
    interpreted, not run by C's ``hash``."""
    seen = []

    def on_load_attr(_frame: object, obj: object, name: str, value: object) -> object:
        seen.append(name)
        return value

    assert interpret(_hash, Hooks(on_load_attr=on_load_attr))(Returns(12)) == 12
    assert "result" in seen
    seen.clear()
    assert interpret(_hash, Hooks(on_load_attr=on_load_attr))((Returns(12), 1)) == hash((Returns(12), 1))
    assert "result" in seen


_ATOMS = st.one_of(st.integers(), st.text(max_size=4), st.none(), st.floats(allow_nan=False), st.booleans(),
                   st.integers().map(Returns), st.builds(Point, st.integers(), st.text(max_size=3)))
_TUPLES = st.recursive(_ATOMS, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


@pytest.mark.skipif(sys.hash_info.width != 64, reason="tuplehash is emulated on 64-bit hashes only")
@settings(max_examples=150, deadline=None)
@given(_TUPLES)
def test_a_tuple_hash_is_cpythons(value: object) -> None:
    assert interpret(_hash)(value) == hash(value)


_PROGRAMS_VALUES = {
    "dataclass": Point(1), "frozenset": frozenset({Point(2), 3}), "empty": (),
    "nested tuples": (Point(1), (Point(2), ("x", Point(3)))), "-1 in a tuple": (Returns(-1),),
    "2**64 in a tuple": (Returns(2**64),),
}


@pytest.mark.parametrize("name", list(_PROGRAMS_VALUES))
def test_hashes_of_the_programs_objects(name: str) -> None:
    value = _PROGRAMS_VALUES[name]
    assert check(_hash, value) == hash(value)


class Counting:
    """Counts its ``__hash__`` calls: a set built on the bare interpreter calls it once per key, as C does."""

    def __init__(self, v: int, log: list) -> None:
        self.v, self.log = v, log

    def __hash__(self) -> int:
        self.log.append(self.v)
        return hash(self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Counting) and self.v == other.v

    def __repr__(self) -> str:
        return f"Counting({self.v})"


def _build(log: list) -> object:
    s = {Counting(1, log), Counting(2, log)}
    s.add(Counting(1, log))
    d = dict.fromkeys([Counting(3, log)])
    d[Counting(3, log)] = 1
    return sorted(c.v for c in s), len(d), hash(Counting(4, log)), log


def test_containers_built_on_the_bare_interpreter_hash_as_cpython() -> None:
    assert check(_build, []) == ([1, 2], 1, 4, [1, 2, 1, 3, 3, 4])


def _look_up(log: list) -> object:
    d = {Counting(i, log): i for i in range(5)}
    s = set(d)
    del log[:]
    found = d[Counting(3, log)], Counting(4, log) in d, Counting(9, log) in s, d.get(Counting(1, log))
    s.discard(Counting(2, log))
    return found, sorted(c.v for c in s), list(log)


def test_lookups_ask_no_stored_key_for_its_hash() -> None:
    """CPython compares the hash it stored for each key: a lookup, ``in``, ``get`` or ``discard`` calls the
    new key's ``__hash__`` once and no stored key's (Note [A stored key's hash, asked again], hashes.py).
    Before, each stored key of the dict or set was asked too (26 calls here, CPython's 5)."""
    assert check(_look_up, []) == ((3, True, False, 1), [0, 1, 3, 4], [3, 4, 9, 1, 2])


class Logged:
    """Every instance hashes alike; ``__eq__`` logs the pair it compares."""

    def __init__(self, v: int, log: list) -> None:
        self.v, self.log = v, log

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        self.log.append((self.v, getattr(other, "v", other)))
        return isinstance(other, Logged) and self.v == other.v

    def __repr__(self) -> str:
        return f"Logged({self.v})"


def _tuple_lookups() -> tuple:
    log: list = []
    d = {(Logged(1, log), 1): "a", (Logged(2, log),): "b", (Logged(3, log), 2): "c"}
    found = d.get((Logged(3, log), 2)), d.get((Logged(1, log), 5)), (Logged(2, log),) in d
    return found, (Logged(9, log), 1) in d, sorted(set(log))


def test_tuple_keys_are_compared_item_by_item_as_cpython() -> None:
    """(Note [Tuple keys compared item by item], jitcore/interpreter/hashed_lookup.py): the same answers
    and the same pairs compared by ``__eq__`` as C's ``tuplerichcompare`` (C may compare a pair twice
    where its probe sequence visits a slot twice: a table detail not emulated)."""
    assert check(_tuple_lookups)[0] == ("c", None, True)
