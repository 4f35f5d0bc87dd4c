"""Small programs mixing Python and torch, in the style of torch.compile's own tests (functions called
with a few random tensors; containers, model outputs, modules), run eagerly and jitted: values, types,
structure, side effects and the number of traces match. Each test failed before its fix (issue 13).
"""

from __future__ import annotations

import collections

import torch
from jit_helpers import assert_same, check

import jitcore


def _calls(fn, *shapes: tuple) -> None:
    """``fn(x, y)`` eagerly and jitted, on fresh equal inputs twice and then on another shape: equal
    results (no traced object reaches the caller), one trace per shape."""
    jfn = jitcore.jit(fn)
    for shape in (shapes[0], shapes[0], *shapes[1:]):
        torch.manual_seed(0)
        check(fn, torch.randn(shape), torch.randn(shape), jfn=jfn)
    assert jitcore.cache_misses(jfn) <= len(set(shapes)), jitcore.miss_reasons(jfn)


def test_returned_ordered_dicts_hold_tensors_in_their_own_order() -> None:
    """An OrderedDict the function makes and returns holds the call's tensors, in the order its own
    methods left (the trace returned the traced OrderedDict itself: its values were TensorProxy
    objects; optree's spec of it ignores ``move_to_end``)."""

    def made(a, b):
        return collections.OrderedDict([("a", a + 1), ("b", b)])

    def moved(a, b):
        d = collections.OrderedDict([("a", a), ("b", b * 2)])
        d.move_to_end("a")
        d["c"] = a - b
        return d, d.popitem(last=False)[0]

    def nested(a, b):
        return [collections.OrderedDict(k=(a, collections.OrderedDict(z=b.sin())))]

    for fn in (made, moved, nested):
        _calls(fn, (3,), (5,))
    a, b = torch.ones(2), torch.zeros(2)
    assert list(jitcore.jit(moved)(a, b)[0]) == list(moved(a, b)[0]) == ["a", "c"]


def test_returned_defaultdicts_and_deques_hold_tensors() -> None:
    """A defaultdict (with its factory) and a deque (with its maxlen) the function returns hold the
    call's tensors (they held TensorProxy objects)."""

    def fn(a, b):
        d = collections.defaultdict(list)
        d["x"].append(a * 2)
        q = collections.deque([a, b], maxlen=2)
        q.append(a + b)
        return d, q

    _calls(fn, (3,), (4,))
    d, q = jitcore.jit(fn)(torch.ones(2), torch.ones(2))
    assert d.default_factory is list and q.maxlen == 2

