"""In-place calls whose eager kernel resizes a written input where torch's fake kernel refuses it
(``addbmm_`` on a self that broadcasts to the result, Note [Fake kernels stricter than eager] in
jitcore/langctx/shadows.py): traced with eager's metadata, the caller's tensor resized as eagerly."""

from __future__ import annotations

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _batches() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 3, 4), torch.randn(2, 4, 5)


def test_addbmm_inplace_resizes_a_broadcastable_self_as_eagerly() -> None:
    def f(s, a, b):
        r = s.addbmm_(a, b, beta=0.5)
        return r, s.shape, s * 2, torch.nn.functional.linear(s, torch.ones(5, 5))

    jf = jitcore.jit(f)
    for _ in range(3):
        s, (a, b) = torch.randn(1), _batches()
        mine, theirs = s.clone(), s.clone()
        out = jf(mine, a, b)
        expected = f(theirs, a, b)
        assert_same(out[1:], expected[1:])
        assert out[0] is mine and mine.shape == (3, 5)
        assert_same(mine, theirs)
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 2
    # a self that does not broadcast to the result: eager's error, as before
    with pytest.raises(RuntimeError) as eager:
        f(torch.randn(3, 4), a, b)
    with pytest.raises(RuntimeError) as jitted:
        jf(torch.randn(3, 4), a, b)
    assert str(jitted.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_addbmm_inplace_resize_on_a_value_that_requires_grad() -> None:
    def f(x, a, b):
        s = x * 2
        s.addbmm_(a, b)
        return (s * s).sum()

    a, b = _batches()
    x = torch.randn(1, requires_grad=True)
    ex = x.detach().clone().requires_grad_()
    jf = jitcore.jit(f)
    out = jf(x, a, b)
    assert jitcore.last_traces(jf), "the call was traced, not run eagerly"
    expected = f(ex, a, b)
    assert_same(out.detach(), expected.detach())
    assert_same(torch.autograd.grad(out, x), torch.autograd.grad(expected, ex))
