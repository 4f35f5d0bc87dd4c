"""A caller's object read by C code or by the standard library's code inside a jitted function: each call's
answer and the caller's state after it are eager's, cached calls included.

Found probing test_weakset's WeakSet over calls that hit the cache (issue 14): ``len(box)`` with a Python
``__len__``, ``sum(box)``, ``set(box)``, ``[*box]``, ``int(box)`` ran the dunder natively, past the jit's
hooks, so what it read of the caller's object was a constant of the trace (Note [C builtins over a Python
object's dunders], jitcore/interpreter/callbacks.py); ``UserDict``/``UserList``/``WeakSet`` methods, the
standard library's code, read and wrote ``self.data`` unbound, so a cached call returned the first call's
length and replayed none of the writes (Note [A caller's object in the standard library's code],
jitcore/jit/code_kinds.py).
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from jit_helpers import assert_same

import jitcore


class Box:
    """A user's container whose protocols read its own state."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __int__(self) -> int:
        return self.n

    def __float__(self) -> float:
        return self.n / 2


class Flags(Box):
    """Its items are all true while it holds fewer than three."""

    def __iter__(self) -> Any:
        return iter([i != 2 for i in range(self.n)])


READS: dict[str, Callable[[Box], Any]] = {
    "len": lambda b: len(b),
    "sum": lambda b: sum(b),
    "sum_start": lambda b: sum(b, 10),
    "set": lambda b: sorted(set(b)),
    "frozenset": lambda b: sorted(frozenset(b)),
    "any": lambda b: any(b),
    "all": lambda b: all(Flags(len(b))),
    "max": lambda b: max(b, default=-1),
    "min": lambda b: min(b, key=lambda x: -x),
    "unpack_list": lambda b: [*b],
    "unpack_set": lambda b: sorted({*b}),
    "int": lambda b: int(b),
    "float": lambda b: float(b),
    "map": lambda b: list(map(str, b)),
    "filter": lambda b: list(filter(None, b)),
    "join": lambda b: ",".join(map(str, b)),
}


class Dunders(Box):
    """More protocols that C builtins call on it."""

    def __abs__(self) -> int:
        return self.n

    def __format__(self, spec: str) -> str:
        return f"F{self.n}{spec}"

    def __index__(self) -> int:
        return self.n

    def __reversed__(self) -> Any:
        return iter(range(self.n, 0, -1))

    def __bool__(self) -> bool:
        return self.n > 1


# found after f6830db (cpy38's p_native_dunders.py): ``abs`` went to the NumPy bridge's lookaside, which ran
# it natively; the others had no lookaside; ``any``/``all`` took their items' truth natively
MORE_READS: dict[str, Callable[[Box], Any]] = {
    "abs": lambda b: abs(b),
    "format": lambda b: format(b, "x"),
    "format_no_spec": lambda b: format(b),
    "hex": lambda b: hex(b),
    "oct": lambda b: oct(b),
    "bin": lambda b: bin(b),
    "range": lambda b: list(range(b)),
    "range_from": lambda b: list(range(1, b, 1)),
    "reversed": lambda b: list(reversed(b)),
    "any_truth": lambda b: any([0, b]),
    "all_truth": lambda b: all((1, b)),
}


@pytest.mark.parametrize("name", MORE_READS)
def test_more_builtins_over_a_callers_dunder_follow_each_call(name: str) -> None:
    fn = MORE_READS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(Dunders(n)), fn(Dunders(n)))


@pytest.mark.parametrize("name", READS)
def test_a_builtin_over_a_callers_dunder_follows_each_call(name: str) -> None:
    fn = READS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(Box(n)), fn(Box(n)))


def _userdict_store(d: collections.UserDict) -> int:
    d["k"] = len(d)
    return len(d)


def _userlist_append(items: collections.UserList) -> int:
    items.append(len(items))
    return len(items)


_KEEP = [collections.UserString(c) for c in "abcdefgh"]  # referents of the weak sets, alive throughout


def _weakset_add(s: weakref.WeakSet) -> int:
    s.add(_KEEP[7])
    return len(s)


def _weakset_discard(s: weakref.WeakSet) -> int:
    s.discard(_KEEP[0])
    return len(s)


def _state(obj: Any) -> Any:
    if isinstance(obj, weakref.WeakSet):
        return sorted(str(x) for x in obj)
    return obj.data


CASES = {
    "userdict_store": (_userdict_store, lambda n: collections.UserDict({i: i for i in range(n)})),
    "userlist_append": (_userlist_append, lambda n: collections.UserList(range(n))),
    "weakset_add": (_weakset_add, lambda n: weakref.WeakSet(_KEEP[:n])),
    "weakset_discard": (_weakset_discard, lambda n: weakref.WeakSet(_KEEP[:n])),
}


@pytest.mark.parametrize("name", CASES)
def test_a_callers_stdlib_container_is_read_and_written_as_eager(name: str) -> None:
    fn, make = CASES[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        eager, jitted = make(n), make(n)
        assert_same(jfn(jitted), fn(eager))
        assert _state(jitted) == _state(eager)


COUNTS = collections.UserDict()


def _bump() -> int:
    COUNTS["n"] = COUNTS.get("n", 0) + 1
    return COUNTS["n"]


def test_a_global_userdict_counts_like_eager() -> None:
    jbump = jitcore.jit(_bump)
    assert [jbump() for _ in range(4)] == [1, 2, 3, 4]
    assert dict(COUNTS) == {"n": 4}
