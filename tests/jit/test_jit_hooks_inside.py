"""Tensor hooks and ``retain_grad()`` the jitted function registers itself, on tensors it computes,
run by a backward inside it (jitcore/jit/inner_hooks.py, Note [Hooks registered inside the program]).

Differential: twin models run eagerly and jitted over several calls; results, gradients, the retained
gradients and what the hooks wrote (and in which order) are compared after every call. Cases that
cannot be traced (a hook that replaces the gradient, one a backward after the call would reach, one on a
caller's tensor) must still give eager's answer, as an eager entry.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


class _State:
    """What a training script holds: the model and a log its hooks write."""

    def __init__(self) -> None:
        self.model, self.log = _model(), []


def _state() -> _State:
    return _State()


def _compare(fn, calls: int = 3, setup=_state, traced: bool = True):
    eager, state = setup(), setup()
    jitted = jitcore.jit(fn)
    for i in range(calls):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(state, x), fn(eager, x))
        assert_same(state.log, eager.log)
        for p, q in zip(state.model.parameters(), eager.model.parameters()):
            assert_same(p.grad, q.grad)
    if traced:
        assert jitted.fallback_reason is None, jitted.fallback_reason
        assert jitcore.cache_misses(jitted) <= 2 and jitcore.cache_hits(jitted) == calls - 2
    return jitted


def test_a_hook_that_logs_an_activations_gradient():
    """Feature attribution: the hidden activation's gradient saved by a hook, the backward inside."""
    def step(s, x):
        h = s.model[0](x)
        h.register_hook(lambda g: s.log.append(g.abs().sum()))
        loss = s.model[2](s.model[1](h)).square().mean()
        loss.backward()
        return loss.detach()

    _compare(step)


def test_retain_grad_keeps_the_gradient_over_two_backwards():
    def step(s, x):
        h = s.model[0](x)
        h.retain_grad()
        out = s.model[2](s.model[1](h))
        out.square().sum().backward(retain_graph=True)
        first = h.grad.clone()
        out.sum().backward()  # accumulated out of place into the retained gradient, as eagerly
        return first, h.grad, h.retains_grad, s.model[0].weight.grad.clone()

    _compare(step)


def test_hooks_run_in_the_engines_order():
    """Hooks on two activations and a caller's hooks on parameters write one log: eager's order."""
    def setup():
        s = _state()
        for name, p in s.model.named_parameters():
            p.register_hook(lambda g, name=name: s.log.append(name))
        return s

    def step(s, x):
        h1 = s.model[0](x)
        h1.register_hook(lambda g: s.log.append("h1"))
        a = s.model[1](h1)
        a.register_hook(lambda g: s.log.append("a"))
        a.register_hook(lambda g: s.log.append("a again"))
        loss = s.model[2](a).square().sum() + h1.sum()
        loss.backward()
        return loss.detach()

    _compare(step, setup=setup)


def test_a_hook_removed_inside_does_not_run():
    def step(s, x):
        h = s.model[0](x)
        kept = h.register_hook(lambda g: s.log.append("kept"))
        removed = h.register_hook(lambda g: s.log.append("removed"))
        removed.remove()
        s.model[2](s.model[1](h)).sum().backward()
        kept.remove()
        return h.detach()

    _compare(step)


def test_a_hook_on_a_leaf_made_inside_may_replace_its_gradient():
    def step(s, x):
        scale = torch.ones(3, requires_grad=True)
        scale.register_hook(lambda g: g * 2)
        s.model(x * scale).sum().backward()
        return scale.grad

    _compare(step)


def test_a_hook_that_replaces_an_activations_gradient_runs_eagerly():
    def step(s, x):
        h = s.model[0](x)
        h.register_hook(lambda g: g.clamp(-0.01, 0.01))
        s.model[2](s.model[1](h)).sum().backward()
        return h.detach()

    with pytest.warns(UserWarning, match="runs eagerly"):
        jitted = _compare(step, traced=False)
    assert "returns a new gradient" in str(jitted.fallback_reason)


def test_a_hook_on_a_callers_parameter_runs_eagerly():
    """Registered inside, it stays on the caller's tensor: one more hook per call, as eagerly."""
    def step(s, x):
        s.model[0].bias.register_hook(lambda g: s.log.append(len(s.log)))
        s.model(x).sum().backward()
        return x

    with pytest.warns(UserWarning, match="runs eagerly"):
        jitted = _compare(step, traced=False)
    assert "outlives the call" in str(jitted.fallback_reason)


@pytest.mark.parametrize("escapes", ["returned", "behind the output"])
def test_a_hook_a_backward_after_the_call_reaches_runs_eagerly(escapes):
    def forward(s, x):
        h = s.model[0](x)
        h.register_hook(lambda g: s.log.append(g.sum()))
        out = s.model[2](s.model[1](h)).sum()
        return (out, h) if escapes == "returned" else out

    jitted = jitcore.jit(forward)
    eager, state = _state(), _state()
    for i in range(3):
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(i))
        with pytest.warns(UserWarning, match="runs eagerly") if i == 0 else contextlib.nullcontext():
            out_j = jitted(state, x)
        out_e = forward(eager, x)
        for out in (out_e, out_j):
            (out[0] if escapes == "returned" else out).backward()
        assert_same(state.log, eager.log)
        assert_same(state.model[0].weight.grad, eager.model[0].weight.grad)
    assert "a backward after the call" in str(jitted.fallback_reason)
