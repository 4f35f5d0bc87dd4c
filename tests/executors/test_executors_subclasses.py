"""Tensor subclasses through the inductor executor: fusion runs on the flattened trace, so the
inner tensors' arithmetic of TwoTensor and a quantized (int8 rowwise) tensor is fused, and the
subclass wrappers are rebuilt on torch at the end."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, assert_same, check, fused, lowered_trace
from subclass_zoo import Int8RowwiseTensor
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def test_a_two_tensor_chain_fuses_both_inner_tensors() -> None:
    def f(t, w):
        for _ in range(5):
            t = (t * 1.5 + 0.25).sin()
        return t @ w

    t = TwoTensor(torch.randn(4, 6), torch.randn(4, 6))
    w = TwoTensor(torch.randn(6, 3), torch.randn(6, 3))
    jfn = jitcore.jit(f, executors=INDUCTOR)
    check(f, t, w, jfn=jfn)
    check(f, t, w, jfn=jfn)
    text = lowered_trace(jfn)
    assert "pass 2 (tensor subclasses flattened)" in text
    assert len(fused(text)) == 1, text
    rebuilt = [line for line in text.splitlines()
               if "unflatten_tensor_subclass(TwoTensor" in line and not line.strip().startswith("#")]
    assert len(rebuilt) == 1, text  # the wrapper is rebuilt once, on torch, after the fused region


def test_a_quantized_linear_fuses_the_dequantization() -> None:
    def f(x, qw):
        return torch.nn.functional.relu(x @ qw.t()) * 2

    torch.manual_seed(0)
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    qw = Int8RowwiseTensor.quantize(w)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        assert_same(jfn(x, qw), f(x, qw))
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)


def test_two_tensor_gradients() -> None:
    def f(t):
        return (t.sin() * t.cos() + 1).sum()

    a, b = torch.randn(5), torch.randn(5)
    te = TwoTensor(a.clone().requires_grad_(), b.clone().requires_grad_())
    tj = TwoTensor(a.clone().requires_grad_(), b.clone().requires_grad_())
    jfn = jitcore.jit(f, executors=INDUCTOR)
    (ge,) = torch.autograd.grad(f(te), te)
    (gj,) = torch.autograd.grad(jfn(tj), tj)
    assert type(gj) is TwoTensor
    torch.testing.assert_close(gj.a, ge.a)
    torch.testing.assert_close(gj.b, ge.b)
