"""``id()``, ``hash()`` and weak references of a caller's tensor inside a jitted function (Note [The id
of a caller's tensor] in jitcore/jit/tensor_keys.py).

Each program runs eagerly and jitted with the same tensor objects (so ids agree) on fresh copies of its
state; results, exceptions and the state after the calls match, and a repeated call is a cache hit.

Before: ``id(x)`` was the id of jitcore's stand-in for ``x``, and a cached call kept answering the traced
one: a memo of the caller's keyed by ``id(x)`` never found what an earlier call stored (the stored key
was the stand-in's id), a ``WeakIdKeyDictionary`` of the caller's never found its key, a returned or
stored ``id(x)`` was the same number for every later tensor, and a comparison with an id the caller
kept was always False.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.weak import WeakIdKeyDictionary

import jitcore

STATE: dict[str, Any] = {}


class Holder:
    """An object of the caller's that the programs store into."""

    last: Any = None


def _fresh_state(first: torch.Tensor) -> None:
    STATE.clear()
    STATE.update(memo={}, weak=WeakIdKeyDictionary(), kept=id(first), holder=Holder())


def _memo_by_id(x: torch.Tensor) -> Any:
    memo = STATE["memo"]
    if id(x) in memo:
        return memo[id(x)] * 2
    memo[id(x)] = x + 1
    return x + 1


def _weak_id_dictionary(x: torch.Tensor) -> Any:
    weak = STATE["weak"]
    if x in weak:
        return weak[x] + 10
    weak[x] = x * 3
    return x * 3


def _returned_id(x: torch.Tensor) -> Any:
    return x + 1, id(x), {id(x): 1}, [hash(x)]


def _stored_id(x: torch.Tensor) -> Any:
    STATE["holder"].last = [id(x)]
    return x + 1


def _compared_with_a_kept_id(x: torch.Tensor) -> Any:
    return x + 1 if id(x) == STATE["kept"] else x - 1


def _formatted_id(x: torch.Tensor) -> Any:
    return x * 2, hex(id(x)), f"{id(x)}"


def _weak_reference(x: torch.Tensor) -> Any:
    ref = weakref.ref(x)
    return x * (ref() is x), type(id(x)) is int


PROGRAMS = (_memo_by_id, _weak_id_dictionary, _returned_id, _stored_id, _compared_with_a_kept_id,
            _formatted_id, _weak_reference)


def _outcome(fn: Callable[..., Any], x: torch.Tensor) -> Any:
    try:
        out = fn(x)
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return type(error)
    return out, copy.copy(STATE["holder"].last), sorted(STATE["memo"]), len(STATE["weak"])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return type(a) is type(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_the_id_of_a_callers_tensor_behaves_as_eagerly(program: Callable[..., Any]) -> None:
    a, b = torch.arange(2.0), torch.arange(2.0) + 5
    calls = (a, a, b, a, b, b)
    _fresh_state(a)
    expected = [_outcome(program, x) for x in calls]
    _fresh_state(a)
    jitted = jitcore.jit(program)
    got = [_outcome(jitted, x) for x in calls]
    for call, (want, have) in enumerate(zip(expected, got)):
        assert _same(want, have), f"call {call}: eager {want!r}, jitted {have!r}"
    assert jitcore.cache_hits(jitted) >= 1  # the last call repeats the one before: no retrace


def test_ids_the_program_only_hashes_or_compares_with_each_other_are_not_guarded() -> None:
    """Library code keying its own containers by id (``copy.deepcopy``'s memo) and a program comparing
    its arguments' ids answer the same for every tensor: a fresh tensor per call is a cache hit."""

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen: set = set()
        repeats = 0
        for t in (x, y, x):
            repeats += id(t) in seen
            seen.add(id(t))
        by_id = {id(x): 1.0, id(y): 2.0}
        order = []
        order.append(id(y))
        order.insert(0, id(x))
        found = order.index(id(y)) + order.count(id(x))
        return copy.deepcopy(x) * repeats + by_id[id(y)] + (hash(x) == hash(y)) + found

    jitted = jitcore.jit(f)
    for _ in range(3):
        x, y = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(jitted(x, y), f(x, y))
        torch.testing.assert_close(jitted(x, x), f(x, x))
    assert jitcore.cache_misses(jitted) == 2  # one per aliasing pattern, none per tensor
