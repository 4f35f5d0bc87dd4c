"""Lazy modules (``nn.LazyLinear`` & co.) reached by a jitted function, not only a jitted module: the
call that makes their parameters runs eagerly (their initial values drawn from the RNG as eager draws
them), adds no cache entry, and the next call is traced with the parameters made. Before, the pass ran
``UninitializedParameter.materialize`` on a proxy and raised ``TypeError: __class__ assignment``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import jitcore

pytestmark = pytest.mark.filterwarnings("ignore:Lazy modules are a new feature")


def _lazy_mlp() -> nn.Module:
    return nn.Sequential(nn.LazyLinear(6), nn.ReLU(), nn.LazyLinear(2))


def _lazy_cnn() -> nn.Module:
    return nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.Flatten(), nn.LazyLinear(3))


def _input(model: str, i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(i)
    return torch.randn(3, 5, generator=g) if model == "mlp" else torch.randn(2, 3, 6, 6, generator=g)


def _forward(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x).tanh()


def _backward_inside(m: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    loss = m(x).square().mean()
    loss.backward()
    return loss, [p.grad.clone() for p in m.parameters()]


def _run_both(model: str, program: Callable[..., Any], calls: int = 4, **options: Any) -> Any:
    make = _lazy_mlp if model == "mlp" else _lazy_cnn
    eager_model, jit_model = make(), make()  # a lazy batch norm cannot be deep-copied
    jitted = jitcore.jit(program, **options)
    for i in range(calls):
        torch.manual_seed(10 + i)
        expected = program(eager_model, _input(model, i))
        torch.manual_seed(10 + i)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no eager-entry warning: the next call traces
            warnings.filterwarnings("ignore", "Lazy modules are a new feature")
            actual = jitted(jit_model, _input(model, i))
        torch.testing.assert_close(actual, expected)
        assert [type(m) for m in jit_model.modules()] == [type(m) for m in eager_model.modules()]
        for (name, value), other in zip(eager_model.state_dict().items(), jit_model.state_dict().values()):
            torch.testing.assert_close(other, value, msg=name)
    return jitted


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("program", [_forward, _backward_inside], ids=["forward", "backward_inside"])
def test_a_lazy_module_argument_is_made_eagerly_then_traced(model: str, program: Callable[..., Any]) -> None:
    jitted = _run_both(model, program)
    assert jitcore.cache_misses(jitted) == 2  # the eager first call, then one traced entry
    assert jitcore.cache_hits(jitted) == 2
    assert jitted.fallback_reason is None  # no eager entry was made


def test_a_lazy_module_reached_through_a_closure_under_fullgraph() -> None:
    eager_model, jit_model = _lazy_mlp(), _lazy_mlp()
    jitted = jitcore.jit(lambda x: jit_model(x) * 2, fullgraph=True)
    for i in range(3):
        torch.manual_seed(i)
        expected = eager_model(_input("mlp", i)) * 2
        torch.manual_seed(i)
        torch.testing.assert_close(jitted(_input("mlp", i)), expected)
    assert jitcore.cache_misses(jitted) == 2 and jitcore.cache_hits(jitted) == 1
    assert "weight" in str(jitcore.last_traces(jitted)[0])
