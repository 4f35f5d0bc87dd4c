"""Modes the caller enters around a call of a jitted function (Note [Modes around the call],
jitcore/jit/api.py): eagerly such a mode is offered every op of every call, so the call runs eagerly
while one is active, and a cache entry made outside it is neither used under it nor changed by it.
Each program runs eagerly and jitted on equal inputs; values and what the mode saw are compared."""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import jitcore


class DoubleLinear(TorchFunctionMode):
    """Rewrites ``F.linear``'s result, as a quantization or debugging mode does."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is F.linear else out


class CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def test_an_entry_traced_outside_a_mode_is_not_used_under_it() -> None:
    """Before: the cached entry answered under the mode, without its rewrite."""
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with DoubleLinear():
                expected, got = model(x), jitted(x)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert sum("the mode DoubleLinear entered around the call" in str(w.message) for w in caught) == 1
    torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def test_a_call_under_a_mode_leaves_no_entry_for_calls_outside_it() -> None:
    """Before: the first call, traced under the mode, kept its rewrite for every later call."""
    weight = torch.nn.Parameter(torch.randn(5, 3))  # under grad: traced by the grad transform

    def f(x):
        return F.linear(x, weight)

    jitted = jitcore.jit(f)
    x = torch.randn(2, 3)
    with DoubleLinear():
        for _ in range(2):
            torch.testing.assert_close(jitted(x), f(x), rtol=0, atol=0)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), f(x), rtol=0, atol=0)
    assert jitcore.cache_misses(jitted) == 1


def test_a_dispatch_mode_around_the_call_sees_every_calls_ops() -> None:
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    jitted(x)
    for _ in range(2):
        eager_mode, jit_mode = CountOps(), CountOps()
        with eager_mode:
            expected = model(x)
        with jit_mode:
            got = jitted(x)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert jit_mode.ops == eager_mode.ops and jit_mode.ops


def test_flop_counting_around_a_jitted_model_counts_as_eagerly() -> None:
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    jitted(x)
    eager_counter, jit_counter = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with eager_counter:
        model(x).sum().backward()
    with jit_counter:
        jitted(x).sum().backward()
    assert jit_counter.get_total_flops() == eager_counter.get_total_flops() > 0


def test_a_default_device_context_is_not_a_mode_that_stops_caching() -> None:
    def f(x):
        return x + torch.ones(3)

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs eagerly" warning
        with torch.device("cpu"):
            for _ in range(3):
                torch.testing.assert_close(jitted(torch.zeros(3)), f(torch.zeros(3)))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
