"""The cache is bounded, dispatches correctly past a few entries, and keeps no user tensor alive.

- cache limit: past ``cache_limit`` entries the oldest is evicted with a warning naming the limit;
  evicted specializations retrace and still answer correctly;
- dispatch table (more than SCAN_LIMIT entries): calls whose dispatch keys collide (``1``/``True``,
  ``0.0``/``-0.0``) or differ only in what the key ignores (requires_grad) still get eager's answer;
- memory: input tensors are not kept alive by cache entries (while the jitted function lives, and
  after it is deleted); tensors captured without provenance are held weakly.
"""

from __future__ import annotations

import gc
import math
import warnings
import weakref

import pytest
import torch
from reliability_helpers import outcome, same_outcome
from torch import nn

import jitcore
from jitcore.prologue.cache import SCAN_LIMIT


def f(x, n):
    return x * n + x.shape[0]


def test_cache_limit_evicts_oldest_with_a_warning() -> None:
    jf = jitcore.jit(f, cache_limit=3, dynamic=False)  # an entry per shape
    shapes = [(1,), (2,), (3,), (4,), (5,)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for shape in shapes:
            x = torch.ones(shape)
            same_outcome(outcome(jf, x, 2), outcome(f, x, 2))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and all("cache limit of 3 entries" in m and "evicted" in m for m in messages)
    assert len(jf.entries) == 3
    misses = jitcore.cache_misses(jf)
    x = torch.ones(5)
    same_outcome(outcome(jf, x, 2), outcome(f, x, 2))  # newest: a hit
    assert jitcore.cache_misses(jf) == misses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.ones(1)
        same_outcome(outcome(jf, x, 2), outcome(f, x, 2))  # evicted: traced again
    assert jitcore.cache_misses(jf) == misses + 1 and len(jf.entries) == 3


@pytest.mark.parametrize("dynamic", [False, None])
def test_dispatch_table_with_colliding_keys(dynamic: bool | None) -> None:
    """Numbers whose keys collide (1, True, 1.0; 0.0, -0.0; nan) are never answered by another's entry:
    each specialized (``dynamic=False``), or once the number turned dynamic (the default)."""

    def g(x, n):
        return x * n, math.copysign(1.0, n) if type(n) is float else n

    jf = jitcore.jit(g, cache_limit=100, dynamic=dynamic)
    numbers = [1, True, 1.0, 0.0, -0.0, 2, False, 0, float("nan")]
    calls = [(torch.ones(s), n, rg) for s in (2, 3) for n in numbers for rg in (False, True)]
    for _ in range(2):  # the second round answers from the cache
        for shape, n, requires_grad in calls:
            x = shape.clone().requires_grad_(requires_grad)
            same_outcome(outcome(jf, x, n), outcome(g, x, n), f"{tuple(x.shape)} {n!r} {requires_grad}")
    if dynamic is False:
        assert len(jf.entries) == len(calls) > SCAN_LIMIT
        assert jitcore.cache_misses(jf) == len(calls)
    else:
        assert SCAN_LIMIT < len(jf.entries) < len(calls)  # changing numbers became dynamic numbers


def test_dispatch_table_with_keyword_and_unusual_arguments() -> None:
    def g(x, *rest, scale=1.0):
        return x * scale + len(rest)

    jf = jitcore.jit(g, cache_limit=100)
    calls = [((torch.ones(i),), {}) for i in range(1, 8)]
    calls += [
        ((torch.ones(2), [1], {2: 3}), {"scale": 2.0}),
        ((torch.ones(2),), {"scale": -0.0}),
        ((torch.ones(2),), {}),
    ]
    for _ in range(2):
        for args, kwargs in calls:
            same_outcome(outcome(jf, *args, **kwargs), outcome(g, *args, **kwargs))


def test_inputs_are_not_kept_alive() -> None:
    jf = jitcore.jit(f)
    x = torch.randn(3)
    jf(x, 2)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None, "a cache entry keeps an input tensor alive"
    y = torch.randn(4)
    jf(y, 2)
    ref = weakref.ref(y)
    del jf, y
    gc.collect()
    assert ref() is None, "the jitted function's remains keep an input tensor alive"


def test_module_parameters_freed_with_the_module() -> None:
    net = nn.Linear(3, 3)
    jnet = jitcore.jit(net)
    jnet(torch.randn(2, 3))
    ref = weakref.ref(net.weight)
    del net, jnet
    gc.collect()
    assert ref() is None


CAPTURED = {"tensor": torch.ones(3)}
HANDLE = weakref.ref(CAPTURED["tensor"])


def _through_weakref(x):
    return x + HANDLE()  # HANDLE() returns a tensor without provenance: bound weakly by identity


def test_captured_tensor_without_provenance_is_held_weakly() -> None:
    global HANDLE
    jf = jitcore.jit(_through_weakref)
    x = torch.ones(3)
    same_outcome(outcome(jf, x), outcome(_through_weakref, x))
    ref = weakref.ref(CAPTURED["tensor"])
    replacement = torch.full((3,), 5.0)
    try:
        del CAPTURED["tensor"]
        gc.collect()
        assert ref() is None, "the prologue keeps a captured tensor alive"
        same_outcome(outcome(jf, x), outcome(_through_weakref, x))  # eager and jit both fail alike
        HANDLE = weakref.ref(replacement)
        same_outcome(outcome(jf, x), outcome(_through_weakref, x))
    finally:
        CAPTURED["tensor"] = torch.ones(3)
        HANDLE = weakref.ref(CAPTURED["tensor"])


@pytest.mark.parametrize("limit", [1, 2])
def test_tiny_cache_limits(limit: int) -> None:
    jf = jitcore.jit(f, cache_limit=limit, dynamic=False)  # an entry per shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in [1, 2, 3, 1, 2, 3]:
            x = torch.ones(i)
            same_outcome(outcome(jf, x, 3), outcome(f, x, 3))
    assert len(jf.entries) == limit
