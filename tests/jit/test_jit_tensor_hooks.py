"""Hooks the caller registered on its tensors, reached by a backward inside the jitted function
(jitcore/jit/autograd_calls.py, Note [A caller's tensor hooks]; jitcore/langctx/backward.py, Note
[Tensor hooks run by the trace]).

Differential: twin modules with the same hooks run eagerly and jitted over several calls; gradients,
parameters and what the hooks wrote are compared after every call, and hooks registered or removed
between calls are seen by the next call.
"""

from __future__ import annotations

import torch
from jit_helpers import assert_same

import jitcore


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(3, 2)


def _step(m, x):
    m(x).square().sum().backward()
    return m.weight.grad.clone(), m.bias.grad.clone()


def _compare(setup, fn, calls: int = 3, between=None) -> None:
    eager, jitted_state = setup(), setup()
    jitted = jitcore.jit(fn)
    for i in range(calls):
        if between is not None:
            between(i, eager)
            between(i, jitted_state)
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(jitted_state[0], x), fn(eager[0], x))
        assert_same(jitted_state[1], eager[1])
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def test_a_hook_that_scales_and_one_that_logs_a_value():
    def setup():
        m, seen = _linear(), []
        m.weight.register_hook(lambda g: g * 0.5)
        m.bias.register_hook(lambda g: seen.append(g.sum().item()))
        return m, seen

    _compare(setup, _step)


def test_an_optimizer_step_in_a_post_accumulate_grad_hook():
    """The optimizer-in-backward pattern: each parameter's own optimizer steps in its hook."""
    def setup():
        m = _linear()
        opts = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in m.parameters()}

        def hook(p):
            opts[p].step()
            opts[p].zero_grad()

        for p in m.parameters():
            p.register_post_accumulate_grad_hook(hook)
        return m, [m.weight, m.bias]

    def f(m, x):
        m(x).square().sum().backward()
        return m.weight.detach().clone()

    _compare(setup, f, calls=4)


def test_hooks_registered_and_removed_between_calls():
    """A hook added after the first calls, then removed: the cached entries do not ignore it."""
    handles = {}

    def setup():
        return _linear(), []

    def between(i, state):
        m, seen = state
        if i == 2:
            handles[id(m)] = m.weight.register_hook(lambda g: seen.append(1) or g * 3)
        if i == 4:
            handles.pop(id(m)).remove()

    _compare(setup, _step, calls=6, between=between)


def test_a_hook_on_an_input_of_autograd_grad():
    def setup():
        w = torch.ones(3, requires_grad=True)
        w.register_hook(lambda g: g + 1)
        return w, []

    def f(w, x):
        (g,) = torch.autograd.grad((w * x).sum(), w)
        return g

    eager, state = setup(), setup()
    jitted = jitcore.jit(f)
    for i in range(3):
        x = torch.arange(3.0) + i
        assert_same(jitted(state[0], x), f(eager[0], x))
    assert jitted.fallback_reason is None
