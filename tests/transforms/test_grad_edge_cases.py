"""Outputs and inputs that are easy to get wrong when connecting a trace to autograd: inputs returned
as they are, views, the same tensor returned twice, integer outputs, unused inputs, in-place ops on
intermediates, detach, buffers mutated in place (BatchNorm running statistics)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import jitcore


def _run(fn, args):
    args = [t.detach().clone().requires_grad_(t.requires_grad) for t in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float().sum() * (i + 1) for i, o in enumerate(outs) if o.requires_grad), torch.zeros(()))
    loss.backward()
    return list(outs), [t.grad for t in args]


CASES = {
    "identity": lambda x, w: x,
    "view": lambda x, w: x.view(-1),
    "an input among the outputs": lambda x, w: (x * w, w),
    "integer output": lambda x, w: (x.sin(), x.argmax()),
    "same output twice": lambda x, w: (x.sin(),) * 2,
    "unused input": lambda x, w: x.cos(),
    "in-place on intermediates": lambda x, w: x.mul(2).add_(w).relu_(),
    "constant output": lambda x, w: (x * w, torch.zeros(3)),
    "detach": lambda x, w: x.detach() * x + w,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(name: str) -> None:
    fn = CASES[name]
    args = (torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True))
    expected, got = _run(fn, args), _run(jitcore.jit(fn), args)
    torch.testing.assert_close(got, expected)


def test_batch_norm_training_updates_buffers_and_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    jitted_model = copy.deepcopy(model)
    jmodel = jitcore.jit(jitted_model)
    img = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        model(img).sum().backward()
        jmodel(img).sum().backward()
    torch.testing.assert_close(
        [p.grad for p in jitted_model.parameters()], [p.grad for p in model.parameters()]
    )
    torch.testing.assert_close(jitted_model[1].running_mean, model[1].running_mean)
    torch.testing.assert_close(jitted_model[1].running_var, model[1].running_var)
    assert jitcore.cache_misses(jmodel) == 1


def test_a_missing_derivative_raises_in_backward_as_in_eager() -> None:
    def f(x, y):
        return torch.special.zeta(x, y).sum()

    x, y = (torch.rand(3) + 2).requires_grad_(), torch.rand(3) + 1
    jf = jitcore.jit(f)
    out = jf(x, y)  # the forward works, as eagerly
    torch.testing.assert_close(out, f(x, y))
    with pytest.raises(NotImplementedError, match="derivative for 'zeta' is not implemented"):
        out.backward()
