"""Keys and stores of state as eager has them: numbers as dict keys, dicts only stored into.

Issue 14. Note [A key of the computation's numbers] (jitcore/jit/effects.py): an int argument or a
counter used as a dict key or set element reaches the caller's objects as the number, never as jitcore's
NumberProxy. Note [A dict only stored into] (jitcore/jit/appends.py): ``d[k] = v`` guards the dict's type,
not its keys. Each case compares every call's result, the state's items, their order and the types of
keys with eager's, and the misses where they are exact.
"""

from __future__ import annotations

import collections
import itertools
import warnings

import pytest
import torch

import jitcore
from tests.jit.test_jit_side_effect_programs import same, snap
from tests.jit.test_jit_side_effect_programs_2 import x_of


def _types_in_key(key: object) -> list:
    """The types of a key and, for a tuple or frozenset key, of its items (depth first)."""
    inner = [t for v in key for t in _types_in_key(v)] if isinstance(key, (tuple, frozenset)) else []
    return [type(key), *inner]


def _types_of_keys(obj: object) -> list:
    """The types of every dict key and set element in ``obj`` (and of their items), depth first."""
    if isinstance(obj, dict):
        return [t for k, v in obj.items() for t in (*_types_in_key(k), *_types_of_keys(v))]
    if isinstance(obj, (set, frozenset)):
        return [t for v in obj for t in _types_in_key(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _types_of_keys(v)]
    return []


def test_numbers_the_program_uses_as_keys_are_stored_as_numbers() -> None:
    """Note [A key of the computation's numbers]: an int argument or a counter of state used as a key of a
    dict of the caller's, of a dict or set the program made and stored, or of one it returns, also inside a
    tuple or frozenset key, is the number there, never jitcore's NumberProxy (on main a Counter keyed by
    one then counted wrong)."""

    def run(jit: bool) -> list:
        state = {"step": 0, "counts": collections.Counter()}

        def f(x, k):
            state["step"] += 1
            state[state["step"]] = k
            state["made"] = {k: 1, "s": {k}}
            state["counts"][k % 2] += 1
            state[(k, "a")] = state["step"]  # inside a tuple key, at any depth
            state.setdefault("l", []).append({(k,): 1, frozenset({k}): 2})
            return {k: x * 2, "n": {k}, (k, (k,)): 3}

        fn = jitcore.jit(f) if jit else f
        outs = [fn(torch.ones(2), k) for k in (0, 1, 2, 1, 0, 3)]
        return [snap(outs), snap(state), _types_of_keys(outs), _types_of_keys(state)]

    expected, got = run(jit=False), run(jit=True)
    assert got[2] == expected[2] and got[3] == expected[3]
    assert same(got[:2], expected[:2])


def _store_programs() -> dict:
    """(f, args of call i, what the caller does to the dict between calls) per case."""
    def by_id():
        ids, outs = itertools.count(), {}

        def f(x):  # next() of a count runs the call eagerly: one eager entry serves every call
            y = x.sin()
            outs[next(ids)] = y.detach()
            return y
        return f, outs, lambda i: (x_of(i),), None

    def by_argument():
        hist = {"kept": 1}

        def f(x, k):
            hist[k] = x.detach() * 2
            return x + 1
        return f, hist, lambda i: (x_of(i), i % 3), lambda d, i: d.__setitem__(f"caller{i}", i)

    def reordered_by_caller():
        hist = {}

        def f(x, k):
            hist[k] = x.sum().item()
            return x * 2
        return f, hist, lambda i: (x_of(i), i % 2), lambda d, i: d.pop(i % 2, None) if i % 3 == 0 else None

    def measured_in_key():
        hist = {}

        def f(x):
            hist[len(hist) % 4] = x.detach()
            return x - 1
        return f, hist, lambda i: (x_of(i),), None

    def defaultdict_store():
        hist = collections.defaultdict(list)

        def f(x, k):
            hist[k] = [x.sum().item()]
            hist["all"].append(k)
            return x * 3
        return f, hist, lambda i: (x_of(i), "ab"[i % 2]), lambda d, i: d.__setitem__(i, [])

    cases = (by_id, by_argument, reordered_by_caller, measured_in_key, defaultdict_store)
    return {f.__name__: f for f in cases}


STORES = _store_programs()
# by_argument: the first call's k specialized, then every k one entry (Note [A key only stored],
# jit/pending_keys.py; 3 before it, one per k in 0, 1, 2 after the first)
STORE_MISSES = {"by_id": 1, "by_argument": 2, "reordered_by_caller": 2, "measured_in_key": None,
                "defaultdict_store": 3}  # "all" absent on the first call, then one per k


@pytest.mark.parametrize("name", list(STORES))
def test_a_dict_of_state_only_stored_into_is_guarded_by_type(name: str) -> None:
    """Note [A dict only stored into]: ``d[k] = v`` guards the dict's type, not its keys, so a dict that
    gains keys (the program's or the caller's) is no miss; the items and their order equal eager's (on
    main by_id had a miss per call, by_argument and defaultdict_store too)."""
    def run(jit: bool) -> tuple[list, object]:
        f, d, args_of, between = STORES[name]()
        fn = jitcore.jit(f) if jit else f
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(12):
                seen.append((snap(fn(*args_of(i))), snap(d), _types_of_keys(d)))
                if between is not None:
                    between(d, i)
        return seen, fn

    (expected, _), (got, jitted) = run(jit=False), run(jit=True)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert same(a, b), f"call {i}: {a!r} != {b!r}"
    bound = STORE_MISSES[name]
    if bound is not None:
        assert jitcore.cache_misses(jitted) == bound, jitcore.miss_reasons(jitted)[-1]
