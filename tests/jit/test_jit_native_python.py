"""C code that runs a caller's Python dunders natively inside a jitted function: each call's answer is
eager's, cached calls included (Note [Python code a C call ran natively], jitcore/jit/native_python.py).

Found probing C functions over a caller's object whose dunders read state that changes between calls
(issue 14, /tmp/cpy40-probes/p_c_dunders.py: 61 of 108 programs gave the first call's answer, or raised,
on later calls): ``"%s" % obj``, ``hash((obj,))``, ``{obj: 1}``, ``struct.pack("i", obj)``, ``math.*``,
``array``, ``bisect``/``heapq``/``sorted``/``min`` over a Python ``__lt__``, ``functools.cmp_to_key``,
``pickle``, ``json``'s encoder, a list's repr and comparison. Each such call now runs eagerly (JC-T001)
where C ran the program's code natively; the rest trace as before.
"""

from __future__ import annotations

import array
import bisect
import collections
import dataclasses
import functools
import heapq
import io
import json
import math
import operator
import pickle
import struct
import sys
import typing
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore


class State:
    """Every dunder reads ``self.s``, the caller's state, which changes between calls."""

    def __init__(self, s: int) -> None:
        self.s = s

    def __str__(self) -> str:
        return f"S{self.s}"

    def __repr__(self) -> str:
        return f"R{self.s}"

    def __index__(self) -> int:
        return self.s

    def __float__(self) -> float:
        return self.s / 2

    def __hash__(self) -> int:
        return self.s % 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and other.s % 3 == self.s % 3 or other == self.s

    def __lt__(self, other: Any) -> bool:
        return self.s % 4 < (other.s % 4 if isinstance(other, State) else other)

    def __gt__(self, other: Any) -> bool:
        return self.s % 4 > (other.s % 4 if isinstance(other, State) else other)

    def __reduce__(self) -> tuple:
        return (State, (self.s + 300,))


def _sorted_states(items: list[State]) -> list[int]:
    return [x.s for x in items]


def _stored(d: dict, key: Any) -> dict:
    d[key] = 7
    return d


PROGRAMS: dict[str, Callable[[State], Any]] = {
    "percent_s": lambda v: "%s" % v,
    "percent_tuple": lambda v: "%s-%r-%d" % (v, v, v),
    "percent_dict": lambda v: "%(a)s" % {"a": v},
    "hash_tuple": lambda v: hash((v,)),
    "frozenset_hash": lambda v: hash(frozenset([v])),
    "dict_display": lambda v: list({v: 1, State(0): 2}.values()),
    "set_display": lambda v: len({v, State(0), State(1)}),
    "set_of_list": lambda v: len(set([v, State(0), State(1)])),
    "dict_get": lambda v: {0: "a", 1: "b", 2: "c"}.get(v),
    "store_subscr": lambda v: len(_stored({0: 0, 1: 1}, v)),
    "dict_comprehension": lambda v: len({k: 1 for k in [v, 0, 1]}),
    "set_comprehension": lambda v: len({k for k in [v, 0, 1]}),
    "tuple_eq": lambda v: (v,) == (0,),
    "list_lt": lambda v: [v] < [2],
    "struct_pack": lambda v: struct.pack("i", v),
    "math_isclose": lambda v: math.isclose(v, 1.0),
    "math_factorial": lambda v: math.factorial(v),
    "math_atan2": lambda v: math.atan2(v, 1),
    "array": lambda v: list(array.array("i", [v, v])),
    "bisect": lambda v: bisect.bisect([State(0), State(1), State(2), State(3)], v),
    "heappush": lambda v: [getattr(x, "s", x) for x in (lambda h: (heapq.heappush(h, v), h)[1])([0, 2, 3])],
    "sorted": lambda v: _sorted_states(sorted([State(1), v, State(2), State(3)])),
    "list_sort": lambda v: _sorted_states((lambda items: (items.sort(), items)[1])([State(1), v, State(2)])),
    "min": lambda v: min(State(1), v, State(2)).s,
    "max": lambda v: max([State(1), v, State(2)]).s,
    "pickle_reduce": lambda v: pickle.loads(pickle.dumps(v)).s,
    "json_default": lambda v: json.dumps({"a": v}, default=lambda o: o.s),
    "json_default_indent": lambda v: json.dumps([v], default=lambda o: o.s, indent=1),
    "repr_list": lambda v: repr([v]),
    "fstring_list": lambda v: f"{[v]}",
    "str_join_map": lambda v: ",".join(map(str, [v])),
    "list_insert": lambda v: (lambda items: (items.insert(v, 9), items)[1])([0, 1, 2]),
    "str_center": lambda v: "a".center(v),
    "lru_cache": lambda v: functools.lru_cache()(lambda x: x.s)(v),
    "max_of_generator": lambda v: max(x for x in [State(1), v, State(2)]).s,
}


def _cmp_to_key(v: State) -> list[int]:
    return sorted([3, 1, 2], key=functools.cmp_to_key(lambda a, b: (a - b) * (1 if v.s % 2 else -1)))


PROGRAMS["cmp_to_key"] = _cmp_to_key
# 3.12+ watches only C calls whose arguments hold a program's object: cmp_to_key's cmp is not one
_UNWATCHED_ON_312 = pytest.mark.xfail(
    sys.version_info >= (3, 12), strict=True,
    reason="on 3.12+ the net is armed only for a call whose arguments hold an object of the program's class "
           "(setting a profile function re-instruments code there); cmp_to_key's cmp is reached through C's "
           "key object, so the first call's order is kept (docs/user-guide.md)")


# (``max`` over a generator of the program's objects is watched on 3.12+ too: the call runs eagerly)
_UNWATCHED_312 = ("cmp_to_key",)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=_UNWATCHED_ON_312) if name in _UNWATCHED_312 else name for name in PROGRAMS])
def test_c_code_running_a_callers_dunders_follows_each_call(name: str) -> None:
    fn = PROGRAMS[name]
    jfn = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the eager entry's warning)
        for s in (1, 2, 3, 2, 4, 0):
            assert_same(jfn(State(s)), fn(State(s)))


_GLOBAL_STATE = State(1)


def _hash_in_generator(x: torch.Tensor) -> torch.Tensor:
    return x + max(hash((_GLOBAL_STATE, i)) % 7 for i in [0, 1])


def _hash_in_mapped_lambda(x: torch.Tensor) -> torch.Tensor:
    return x + sum(map(lambda i: hash((_GLOBAL_STATE, i)) % 7, [0, 1]))


@pytest.mark.parametrize("fn", [_hash_in_generator, _hash_in_mapped_lambda])
def test_a_c_call_inside_code_that_c_called_back_follows_each_call(fn: Callable[..., Any]) -> None:
    # ``max`` resumes the interpreted generator, whose ``hash`` of a tuple runs the global object's
    # ``__hash__`` natively: under the outer call's net that inner C call went unwatched, and the cached
    # call returned the first call's hash (Note [A watch of C code is lifted while C calls back into the
    # interpreter], jitcore/interpreter/run.py)
    jfn = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the eager entry's warning)
        for s in (1, 2, 4, 2, 5):
            _GLOBAL_STATE.s = s
            assert_same(jfn(torch.zeros(2)), fn(torch.zeros(2)))


_Pair = collections.namedtuple("_Pair", "a b")


class _TypedPair(typing.NamedTuple):
    a: int
    b: str


@pytest.mark.parametrize("cls", [_Pair, _TypedPair])
def test_unpickling_a_named_tuple_traces(cls: type) -> None:
    # pickle.loads (C) calls the class's __new__, which namedtuple makes with eval: it counted as the
    # program's code run natively, and the call ran eagerly (Note [A named tuple's __new__ is the standard
    # library's], jitcore/jit/native_python.py)
    def fn(x: torch.Tensor) -> tuple:
        pair = pickle.loads(pickle.dumps(cls(3, "s"), 2))
        return x + pair.a, pair, type(pair) is cls

    jfn = jitcore.jit(fn)
    for n in (1, 2, 1):
        assert_same(jfn(torch.ones(n)), fn(torch.ones(n)))
    assert jfn.fallback_reason is None


class _TaggedPair(_Pair):
    """A named tuple's subclass without ``__slots__``: its instances have a ``__dict__``, pickled as state."""


def _tagged(a: object) -> _TaggedPair:
    pair = _TaggedPair(a, 2)
    pair.tag = "t"
    return pair


_NAMED_TUPLES_OF_NUMBERS: dict[str, Callable[[Any], Any]] = {
    "pickle": lambda a: pickle.dumps(_Pair(a, 2)),
    "pickle_protocol_2": lambda a: pickle.dumps(_Pair(a, 2), 2),
    "pickle_typed_in_list": lambda a: pickle.dumps([_TypedPair(a, "s"), _TypedPair(2, "t")]),
    "pickle_with_dict": lambda a: pickle.dumps(_tagged(a)),
    "round_trip_with_dict": lambda a: (lambda p: (p, p.tag))(pickle.loads(pickle.dumps(_tagged(a)))),
    "json": lambda a: json.dumps({"p": _Pair(a, 2)}),
}


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", sorted(_NAMED_TUPLES_OF_NUMBERS))
def test_a_named_tuple_of_a_dynamic_number_handed_to_c(name: str, dynamic: bool) -> None:
    # pickle.dumps(Point(a, 2)) with ``a`` a dynamic number (declared, or an int argument that changed
    # between calls) handed C the named tuple with the proxy in it: pickle raised "Can't pickle local
    # object 'Provenance.bind_dynamic_number.<locals>.pin'", json "Object of type NumberProxy is not JSON
    # serializable" (Note [A named tuple handed to C holds values], jitcore/proxies/number.py)
    fn = _NAMED_TUPLES_OF_NUMBERS[name]
    jfn = jitcore.jit(fn, dynamic_numbers=("a",) if dynamic else ())
    for a in (1, 2, 3, 2):
        assert_same(jfn(a), fn(a))
    assert jfn.fallback_reason is None


def test_a_c_call_over_plain_values_still_traces() -> None:
    # the net makes a call eager only where C ran the program's code: sorting numbers, a dict display of
    # strings and a list's repr of numbers are traced and cached as before
    def fn(xs: list[int]) -> tuple:
        return sorted(xs), {"a": xs[0]}, repr(xs), operator.index(xs[1]), [xs[0]] == [1]

    jfn = jitcore.jit(fn)
    for xs in ([3, 1], [1, 2], [3, 1]):
        assert_same(jfn(xs), fn(xs))
    assert jfn.fallback_reason is None


def test_a_c_call_that_ran_a_callers_dunder_runs_eagerly_and_says_why() -> None:
    jfn = jitcore.jit(lambda v: "%d" % v)
    with pytest.warns(UserWarning, match="runs eagerly"):
        assert jfn(State(1)) == "1"
    assert jfn(State(2)) == "2"
    assert "natively" in str(jfn.fallback_reason) and "__index__" in str(jfn.fallback_reason)


def test_a_c_call_that_ran_a_callers_dunder_raises_under_fullgraph() -> None:
    # (``hash((v,))`` was this test's call: its ``__hash__`` is interpreted now, interpreter/hashes.py)
    jfn = jitcore.jit(lambda v: struct.pack("i", v), fullgraph=True)
    with pytest.raises(jitcore.JitcoreError, match="natively"):
        jfn(State(1))


@dataclasses.dataclass
class _Config:
    scale: float = 1.0


@functools.total_ordering
class _Ranked:
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Ranked) and self.rank == other.rank

    def __lt__(self, other: _Ranked) -> bool:
        return self.rank < other.rank


@pytest.mark.parametrize("case", ["dataclass_repr_in_list", "total_ordering_max"])
def test_a_standard_library_wrapper_of_a_callers_dunder_follows_each_call(case: str) -> None:
    """``repr([cfg])`` runs dataclasses.py's ``__repr__`` wrapper, and ``max(objs)`` functools' ``__gt__``
    from ``__lt__``: C started the standard library's frame, the program's dunder ran below it unseen, and
    a cached call gave the first call's answer after the caller changed the object (Note [The standard
    library's wrappers of a program's dunders], jitcore/jit/native_python.py)."""
    configs, ranked = [_Config()], [_Ranked(1), _Ranked(2)]

    def f(x: torch.Tensor) -> torch.Tensor:
        if case == "dataclass_repr_in_list":
            return x * len(repr(configs))
        return x * max(ranked).rank

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the eager entry's warning)
        for step in range(4):
            if step == 2:
                configs[0].scale, ranked[0].rank = 12345.5, 7
            x = torch.ones(2)
            assert_same(jf(x), f(x))


@pytest.mark.parametrize("saved", ["tensor", "built_in_values"])
def test_torch_save_to_a_callers_buffer_writes_eagers_bytes(saved: str) -> None:
    """Note [torch.save refused before it writes]: before, the traced call wrote the zip writer's records
    into the caller's buffer before the refusal (then the eager rerun wrote the file after them: 2251
    bytes for eager's 1577), and ``torch.save`` of built-in values raised TypeError."""
    def f(x, buffer):
        torch.save(x * 2 if saved == "tensor" else {"a": 1, "b": [2, 3]}, buffer)
        return x + 1

    jf = jitcore.jit(f)
    for i in range(3):
        x = torch.arange(3.0) + i
        eager_buffer, jit_buffer = io.BytesIO(), io.BytesIO()
        expected = f(x, eager_buffer)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the "runs eagerly" warning
            got = jf(x.clone(), jit_buffer)
        assert torch.equal(got, expected)
        assert jit_buffer.getvalue() == eager_buffer.getvalue(), i
    assert "torch.save" in str(jf.fallback_reason)
