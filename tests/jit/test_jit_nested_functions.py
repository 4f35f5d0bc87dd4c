"""A jitted function called by a program jitcore is tracing is part of that trace (Note [A jitted
function inside a traced program], jitcore/jit/api.py): a jitted helper inside a jitted step, a
jitted function that calls itself. Each differential: eager results, Python effects and gradients;
no call runs eagerly (warnings are errors) and the inner function's own cache serves the calls made
outside a trace."""

from __future__ import annotations

import warnings

import torch
from jit_helpers import assert_same
from torch import nn

import jitcore


def test_a_jitted_helper_inside_a_jitted_function_is_traced_with_it():
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    inner = jitcore.jit(helper)

    def outer(x: torch.Tensor) -> torch.Tensor:
        return inner(x) + inner(x * 2)

    def eager(x: torch.Tensor) -> torch.Tensor:
        return helper(x) + helper(x * 2)

    jitted = jitcore.jit(outer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "runs eagerly" before: the inner cache was asked with proxies
        for _ in range(3):
            x = torch.randn(4)
            assert_same(jitted(x), eager(x))
    assert jitcore.cache_misses(jitted) == 1
    assert jitcore.cache_hits(jitted) == 2
    assert jitcore.cache_misses(inner) == 0  # never asked: its calls are in the outer trace
    text = str(jitcore.last_traces(jitted)[-1])
    assert text.count("torch.sin(") == 2, text
    x = torch.randn(4)
    assert_same(inner(x), helper(x))  # outside a trace, its own cache
    assert jitcore.cache_misses(inner) == 1


def test_a_jitted_training_step_calling_a_jitted_loss():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    copy = nn.Linear(3, 2)
    copy.load_state_dict(model.state_dict())
    calls: list[int] = []

    def loss_fn(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls.append(1)  # a Python effect of the inner function, once per call as eagerly
        return nn.functional.mse_loss(out, y)

    jitted_loss = jitcore.jit(loss_fn)

    def step(m: nn.Module, loss: object, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = loss(m(x), y)
        value.backward()
        return value

    jitted_step = jitcore.jit(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            x, y = torch.randn(4, 3), torch.randn(4, 2)
            expected = step(model, loss_fn, x, y)
            got = jitted_step(copy, jitted_loss, x, y)
            assert_same(got, expected)
            assert_same(copy.weight.grad, model.weight.grad)
    assert len(calls) == 6
    assert jitcore.cache_misses(jitted_step) == 2  # the first call, then .grad no longer None


def test_a_jitted_function_that_calls_itself():
    @jitcore.jit
    def power(x: torch.Tensor, n: int) -> torch.Tensor:
        return x if n == 0 else power(x, n - 1) * x + 1

    def eager(x: torch.Tensor, n: int) -> torch.Tensor:
        return x if n == 0 else eager(x, n - 1) * x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (0, 3, 3, 5):
            x = torch.randn(3)
            assert_same(power(x, n), eager(x, n))
    text = str(jitcore.last_traces(power)[-1])
    assert text.count("torch.mul(") == 5, text  # the recursion inlined in one trace
