"""Training with tensor-subclass parameters (issue 15): a whole jitted training step, or a jitted
``opt.step()``, on ``TwoTensor`` parameters, compared with eager at every step (loss, parameters,
optimizer state), and the cache hits from the third step on. Every test here failed before its fix:
- every step missed the cache: the optimizer's ``step_t.item()`` (Adam's ``_single_tensor_adam``; the
  foreach step's list of step sizes) was made a checked constant, because a number given to a call
  with a tensor subclass was always specialized, and the grad transform (which a subclass program
  goes through, the parameters requiring grad) made every number read with ``item()`` a constant of
  its forward (Note [Numbers through a subclass's dispatch], jitcore/langctx/scalars.py;
  jitcore/transforms/replayed_numbers.py);
- a warm call with a ``MaskedTensor`` argument ran its ``__torch_dispatch__`` (the prologue read its
  strides, which its class answers: ``TensorSpec.of_subclass``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

warnings.filterwarnings("ignore", message="The PyTorch API of MaskedTensors")

STEPS = 8


def _assert_equal(actual: Any, expected: Any) -> None:
    """Same type and, for a TwoTensor, the same inner tensors bit for bit (the jit runs eager's ops)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, TwoTensor):
        assert torch.equal(actual.a, expected.a) and torch.equal(actual.b, expected.b)
    elif isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    else:
        assert actual == expected


def _assert_same_state(opt: torch.optim.Optimizer, eager: torch.optim.Optimizer) -> None:
    for state, eager_state in zip(opt.state.values(), eager.state.values(), strict=True):
        assert state.keys() == eager_state.keys()
        for key, value in eager_state.items():  # exp_avg, exp_avg_sq, step, momentum_buffer, ...
            _assert_equal(state[key], value)


def _train_step(w: nn.Parameter, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = (x @ w).sum()
    loss.backward()
    opt.step()
    return loss.detach()


def _parameter_and_optimizer(name: str, options: dict) -> tuple[nn.Parameter, torch.optim.Optimizer]:
    torch.manual_seed(0)
    w = nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))
    return w, getattr(torch.optim, name)([w], lr=0.01, **options)


# (SGD with momentum and RMSprop read no step count: they hit on the third step before this fix too)
OPTIMIZERS = [
    ("Adam", {"foreach": False}), ("AdamW", {"foreach": False}), ("Adam", {"foreach": True}),
    ("AdamW", {"foreach": True}), ("Adam", {"amsgrad": True, "foreach": False}),
    ("Adagrad", {"foreach": False}),
]
IDS = ["Adam", "AdamW", "Adam-foreach", "AdamW-foreach", "Adam-amsgrad", "Adagrad"]


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS, ids=IDS)
def test_a_training_step_hits_the_cache(name: str, options: dict) -> None:
    """The first step makes the optimizer's state and the second has a gradient to zero: two traces;
    every later step (a new step count read with ``item()``) hits, with eager's values at every step."""
    (eager_w, eager_opt), (w, opt) = (_parameter_and_optimizer(name, options) for _ in range(2))
    step = jitcore.jit(_train_step)
    for i in range(STEPS):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        _assert_equal(step(w, opt, x), _train_step(eager_w, eager_opt, x))
        _assert_equal(w.detach(), eager_w.detach())
        _assert_same_state(opt, eager_opt)
    assert jitcore.cache_misses(step) == 2, jitcore.miss_reasons(step)
    assert jitcore.cache_hits(step) == STEPS - 2
    assert step.fallback_reason is None


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS[:3], ids=IDS[:3])
def test_a_jitted_optimizer_step_hits_the_cache(name: str, options: dict) -> None:
    """``opt.step()`` alone jitted, the backward eager: one trace for the step that makes the state,
    one for all later ones."""
    (eager_w, eager_opt), (w, opt) = (_parameter_and_optimizer(name, options) for _ in range(2))
    step = jitcore.jit(lambda optimizer: optimizer.step())
    for i in range(STEPS):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        for param, optimizer, run in ((eager_w, eager_opt, eager_opt.step), (w, opt, lambda: step(opt))):
            optimizer.zero_grad()
            (x @ param).sum().backward()
            run()
        _assert_equal(w.detach(), eager_w.detach())
        _assert_same_state(opt, eager_opt)
    assert jitcore.cache_misses(step) == 2, jitcore.miss_reasons(step)


def _scaled(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return x / s.item() + x.mul(s.item() + 1)


def _clamp_lerp(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return torch.lerp(x, x.clamp(min=-s.item()), s.item())


@pytest.mark.parametrize("fn", [_scaled, _clamp_lerp], ids=["div-mul", "clamp-lerp"])
def test_a_read_number_through_a_subclass_call(fn: Any) -> None:
    """A number read with ``item()`` stays a name through a TwoTensor's dispatch where the aten call
    takes it unchanged: one trace for every value. (One a decomposition before the dispatch computes
    with, ``x.var(correction=s.item())``, or given to a Python function, ``F.celu``, stays checked: a
    trace per value, as before this fix.)"""
    jitted = jitcore.jit(fn)
    x = TwoTensor(torch.randn(3, 4), torch.randn(3, 4))
    for value in (2.0, 3.0, 0.5, -1.5):
        s = torch.tensor(value)
        _assert_equal(jitted(x, s), fn(x, s))
    assert jitcore.cache_misses(jitted) == 1


def test_a_warm_masked_tensor_call_runs_no_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """MaskedTensor answers its strides in ``__torch_dispatch__``; a cached call reads none of them."""
    from torch.masked import MaskedTensor, masked_tensor

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2 + 1).sum(dim=1)

    torch.manual_seed(0)
    data = torch.randn(4, 5)
    mt = masked_tensor(data, data > 0)
    jitted = jitcore.jit(f)
    jitted(mt)
    calls: list[str] = []
    dispatch, function = MaskedTensor.__torch_dispatch__.__func__, MaskedTensor.__torch_function__.__func__

    def spy_dispatch(cls: type, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        calls.append(str(func))
        return dispatch(cls, func, types, args, kwargs)

    def spy_function(cls: type, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        calls.append(getattr(func, "__name__", str(func)))
        return function(cls, func, types, args, kwargs)

    monkeypatch.setattr(MaskedTensor, "__torch_dispatch__", classmethod(spy_dispatch))
    monkeypatch.setattr(MaskedTensor, "__torch_function__", classmethod(spy_function))
    out = jitted(mt)
    assert calls == []
    monkeypatch.undo()
    expected = f(mt)
    assert type(out) is type(expected)
    assert torch.equal(out.get_data(), expected.get_data())
    assert torch.equal(out.get_mask(), expected.get_mask())
    assert jitcore.cache_hits(jitted) == 1
    other = masked_tensor(torch.randn(5, 4).t(), torch.ones(4, 5, dtype=torch.bool))  # other strides
    assert torch.equal(jitted(other).get_data(), f(other).get_data())
