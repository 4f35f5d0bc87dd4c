"""``requires_grad_()`` on the caller's tensors inside a jitted function: the flag the caller sees after
the call, the graph of the outputs, and the program's own reads of the flag are eager's.

Before: where the call went through the grad transform, the forward dropped the record, so the
caller's tensor kept its old flag (a frozen parameter still required grad; an input given
``requires_grad_()`` gave an output without a graph, so a backward outside computed nothing), and a
parameter ``module.parameters()`` yields read its old flag after being frozen inside."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import jitcore


def _flags(module: nn.Module) -> list[bool]:
    return [p.requires_grad for p in module.parameters()]


def test_an_input_given_requires_grad_connects_the_output_as_eagerly():
    def f(w, x):
        w.requires_grad_()
        return (w * x).sum()

    jf = jitcore.jit(f)
    for _ in range(3):
        w, x = torch.randn(3), torch.randn(3)
        we, wj = w.clone(), w.clone()
        out_e, out_j = f(we, x), jf(wj, x)
        assert wj.requires_grad and out_j.requires_grad and out_j.grad_fn is not None
        out_e.backward()
        out_j.backward()
        torch.testing.assert_close(wj.grad, we.grad)


def test_fgsm_input_gradient_with_the_backward_inside():
    """The adversarial-example step: the input is given ``requires_grad_`` and differentiated."""
    torch.manual_seed(0)
    model = nn.Linear(4, 3)

    def fgsm(model, x, y):
        x.requires_grad_(True)
        F.cross_entropy(model(x), y).backward()
        return x + 0.1 * x.grad.sign()

    jf = jitcore.jit(fgsm)
    for _ in range(3):
        x, y = torch.randn(2, 4), torch.tensor([0, 2])
        xe, xj = x.clone(), x.clone()
        model.zero_grad()
        want = fgsm(model, xe, y)
        model.zero_grad()
        got = jf(model, xj, y)
        torch.testing.assert_close(got, want)
        assert xj.requires_grad and got.requires_grad == want.requires_grad
        torch.testing.assert_close(xj.grad, xe.grad)
    assert jitcore.cache_hits(jf) >= 1


def test_freezing_parameters_inside_the_step():
    """``requires_grad_(False)`` on the parameters a loop over ``m[0].parameters()`` yields: the flags
    the program reads back, the caller's flags after the call and the gradients are eager's."""

    def step(m, x):
        for p in m[0].parameters():
            p.requires_grad_(False)
        out = m(x).sum()
        out.backward()
        g = m[1].weight.grad.clone()
        m.zero_grad()
        return out.detach(), g, _flags(m)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    eager_model, jit_model = copy.deepcopy(model), copy.deepcopy(model)
    jf = jitcore.jit(step)
    for _ in range(3):
        x = torch.randn(2, 3)
        want, got = step(eager_model, x), jf(jit_model, x)
        torch.testing.assert_close(got[:2], want[:2])
        assert got[2] == want[2] == [False, False, True, True]
        assert _flags(jit_model) == _flags(eager_model)
        assert all(p.grad is None for p in jit_model[0].parameters())


def test_a_parameter_frozen_by_attribute_path():
    def f(m, x):
        m.weight.requires_grad_(False)
        return m(x), m.weight.requires_grad

    torch.manual_seed(0)
    eager_model = nn.Linear(3, 1)
    jit_model = copy.deepcopy(eager_model)
    x = torch.randn(2, 3)
    want, got = f(eager_model, x), jitcore.jit(f)(jit_model, x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] is want[1] is False
    assert _flags(jit_model) == _flags(eager_model) == [False, True]
    got[0].sum().backward()
    assert jit_model.weight.grad is None and jit_model.bias.grad is not None


def test_a_flag_toggled_by_attribute_on_the_parameters_a_loop_yields():
    """``p.requires_grad = not p.requires_grad`` each call: the store on a parameter the loop yields
    changed the caller's flag while tracing only, so cached calls no longer toggled it."""

    def f(m, x):
        for p in m.parameters():
            p.requires_grad = not p.requires_grad
        return m(x), _flags(m)

    torch.manual_seed(0)
    eager_model = nn.Linear(3, 2)
    jit_model = copy.deepcopy(eager_model)
    jf = jitcore.jit(f)
    for _ in range(4):
        x = torch.randn(2, 3)
        want, got = f(eager_model, x), jf(jit_model, x)
        torch.testing.assert_close(got[0], want[0])
        assert got[0].requires_grad == want[0].requires_grad and got[1] == want[1]
        assert _flags(jit_model) == _flags(eager_model)
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (2, 2)


# Note [requires_grad_ on an input] (jitcore/transforms/jit_hook.py): a change after a use of the input.
def _sin_then_flagged(x):
    y = x.sin()
    x.requires_grad_()
    return (y + x.cos()).sum(), y


def _used_then_flagged_with_a_weight(x, w):
    y = x * w
    x.requires_grad = True
    return y, x * 3


def _used_then_unflagged(x, w):
    y = x * 2
    x.requires_grad_(False)
    return y, x * w


def _leaf():
    return torch.randn(3, requires_grad=True)


CHANGED_AFTER_A_USE = {
    "sin_then_flagged": (_sin_then_flagged, lambda: (torch.randn(3),)),
    "used_then_flagged_with_a_weight": (
        _used_then_flagged_with_a_weight, lambda: (torch.randn(3), torch.randn(3, requires_grad=True))),
    "used_then_unflagged": (_used_then_unflagged, lambda: (_leaf(), _leaf())),
}


@pytest.mark.parametrize("name", list(CHANGED_AFTER_A_USE))
def test_values_computed_before_a_flag_change_keep_the_old_flag(name):
    """The outputs' ``requires_grad``, the gradients of a backward outside and the caller's flags are
    eager's: the grad transform gave the values computed before the change the later flag (``y``
    required grad where eager's does not, ``x.grad`` took ``cos(x)`` from ``x.sin()`` too)."""
    program, make = CHANGED_AFTER_A_USE[name]
    jf = jitcore.jit(program)
    for seed in range(3):
        torch.manual_seed(seed)
        eager_args = make()
        torch.manual_seed(seed)
        jit_args = make()
        want, got = program(*eager_args), jf(*jit_args)
        assert [o.requires_grad for o in got] == [o.requires_grad for o in want]
        torch.testing.assert_close(got, want)
        for outputs in (got, want):
            sum(o.sum() for o in outputs if o.requires_grad).backward()
        assert [a.requires_grad for a in jit_args] == [a.requires_grad for a in eager_args]
        for a, e in zip(jit_args, eager_args):
            assert (a.grad is None) == (e.grad is None)
            if e.grad is not None:
                torch.testing.assert_close(a.grad, e.grad)
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)
