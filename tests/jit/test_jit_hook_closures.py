"""Module hooks whose state lives in their closure (Note [Functions a dict of state holds],
jit/provenance.py): ``Module._call_impl`` takes the hooks out of the hook dicts in C, so a hook had no
path, its cells counted as made while tracing, and every cached call lost what it wrote there
(``seen.append(...)`` once, on the first call only; a tensor stored there was the pass's proxy). A hook
replaced by another, the dict's length unchanged, was not noticed: cached calls ran the first one.
Each program here runs eagerly and jitted on equal inputs, and everything the hooks wrote is compared
after every call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import jitcore


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _values(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        assert type(state) is torch.Tensor, type(state)  # never one of jitcore's proxies
        return state.tolist()
    if isinstance(state, dict):
        return {k: _values(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_values(v) for v in state]
    return state


def _activations(m: nn.Module) -> dict:
    store: dict = {"n": 0, "sums": [], "last": {}}

    def hook(module: nn.Module, inputs: Any, output: torch.Tensor) -> None:
        store["n"] += 1
        store["sums"].append(round(output.sum().item(), 4))
        store["last"][type(module).__name__] = output.detach() * 1

    for child in m:
        child.register_forward_hook(hook)
    return store


def _closure_list(m: nn.Module) -> list:
    seen: list = []
    m[0].register_forward_hook(lambda mod, i, o: seen.append(o.sum().item()))
    return seen


def _pre_hook_counter(m: nn.Module) -> list:
    calls = [0]

    def pre(module: nn.Module, inputs: Any) -> None:
        calls[0] += 1

    m[2].register_forward_pre_hook(pre)
    return calls


def _output_rewrite(m: nn.Module) -> dict:
    scale = {"k": 1.0}

    def rescale(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
        scale["k"] += 0.5
        return output * scale["k"]

    m[0].register_forward_hook(rescale)
    return scale


PROGRAMS: dict[str, Callable[[nn.Module], Any]] = {
    "activations_by_module": _activations,
    "closure_list_of_items": _closure_list,
    "pre_hook_counter": _pre_hook_counter,
    "hook_rewrites_output_with_closure_state": _output_rewrite,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hook_closure_state_is_written_on_every_call(name: str) -> None:
    eager_model, jit_model = _model(), _model()
    eager_state, jit_state = PROGRAMS[name](eager_model), PROGRAMS[name](jit_model)
    jitted = jitcore.jit(lambda m, x: m(x).sum(1))
    for i in range(6):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(jit_model, x), eager_model(x).sum(1))
        assert _values(jit_state) == _values(eager_state), f"call {i}"
    assert jitcore.cache_misses(jitted) <= 2


@pytest.mark.parametrize("scope", ["module", "global"])
def test_a_hook_replaced_by_another_is_run(scope: str) -> None:
    """A fresh hook object per call (as FlopCounterMode registers one): the dict's length never changes."""
    eager_model, jit_model = _model(), _model()
    jitted = jitcore.jit(lambda m, x: m(x))

    def run(model: nn.Module, fn: Callable[..., Any], x: torch.Tensor) -> tuple[Any, list]:
        names: list = []
        hook = lambda mod, i, o: names.append(type(mod).__name__)  # noqa: E731
        handle = (nn.modules.module.register_module_forward_hook(hook) if scope == "global"
                  else model[0].register_forward_hook(hook))
        try:
            return fn(model, x), names
        finally:
            handle.remove()

    for i in range(4):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        expected, eager_names = run(eager_model, lambda m, x: m(x), x)
        actual, jit_names = run(jit_model, jitted, x)
        torch.testing.assert_close(actual, expected)
        assert jit_names == eager_names, f"call {i}"


def test_a_hook_removed_mid_loop_stops_writing() -> None:
    eager_model, jit_model = _model(), _model()
    logs: tuple[list, list] = ([], [])

    def logger(log: list) -> Callable[..., None]:
        return lambda mod, i, o: log.append(o.sum().item())

    handles = [m[0].register_forward_hook(logger(log)) for m, log in zip((eager_model, jit_model), logs)]
    jitted = jitcore.jit(lambda m, x: m(x))
    for i in range(6):
        if i == 3:
            for handle in handles:
                handle.remove()
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(jit_model, x), eager_model(x))
        assert logs[1] == logs[0], f"call {i}"
    assert jitcore.cache_misses(jitted) <= 2
