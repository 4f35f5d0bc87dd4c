"""Note [Raising entries] (jitcore/jit/raising_entries.py) for a DTensor program eager rejects: its error
is the reason its call runs eagerly (Note [DTensor programs jitcore cannot trace]); where that eager run
raises an exception of the same type, the call keeps a raising entry and warns of nothing (before: an
eager entry and a jitcore warning per call pattern). World size 1 (tests/dispatch/conftest.py's mesh)."""

from __future__ import annotations

import warnings

import torch

import jitcore


def mixed(x, y):
    return x @ y


def outcome(fn, *args):
    try:
        return ("returned", fn(*args).full_tensor().tolist())
    except Exception as exc:  # noqa: BLE001 - compared with eager's
        return ("raised", type(exc), str(exc))


def test_a_call_eager_rejects_keeps_a_raising_entry_without_a_warning(mesh):
    from torch.distributed.tensor import Replicate, distribute_tensor

    x = distribute_tensor(torch.ones(2, 3), mesh, [Replicate()])
    y = torch.ones(3, 2)
    expected = outcome(mixed, x, y)
    assert expected[0] == "raised" and "mixed torch.Tensor and DTensor" in expected[2]
    jitted = jitcore.jit(mixed)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        assert [outcome(jitted, x, y) for _ in range(3)] == [expected] * 3
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert jitted.fallback_reason is None and len(jitted.entries) == 1
    # a call that does not raise, of other shapes, is traced as a DTensor program
    y2 = distribute_tensor(torch.ones(3, 4), mesh, [Replicate()])
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        assert outcome(jitted, x, y2) == outcome(mixed, x, y2)
    assert jitcore.cache_misses(jitted) == 2
