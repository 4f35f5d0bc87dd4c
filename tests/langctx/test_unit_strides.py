"""Note [Strides of size-1 dimensions] (jitcore/langctx/unit_strides.py): torch's fake kernels give
size-1 dimensions other strides than the real kernels, and kernels that read memory formats decide
from them. Each program below ends a batch-1 block as a diffusers attention block does
(``transpose(-1, -2).reshape(...)`` then a residual add and a scalar division): the real value then has
strides ``(32, 1, 128, 32)``, its shadow ``(512, 1, 128, 32)``. Differential: eager against jitcore,
outputs and gradients, first and cached calls, with and without grad, on both executors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import jitcore
from jitcore.langctx.unit_strides import canonical_layout


def block(a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return (a.view(1, 16, 32).transpose(-1, -2).reshape(1, 32, 4, 4) + r) / 1


def group_norm(a, r, w, b):
    return F.group_norm(block(a, r), 8, w, b)


def conv(a, r, w, b):
    return F.conv2d(block(a, r), w[:32].view(32, 1, 1, 1).expand(32, 32, 1, 1).contiguous(), b).relu()


def batch_norm(a, r, w, b):
    return F.batch_norm(block(a, r), torch.zeros(32), torch.ones(32), w, b, training=True)


def pool_and_upsample(a, r, w, b):
    h = F.max_pool2d(block(a, r) * w.view(1, 32, 1, 1), 2)
    return F.interpolate(F.adaptive_avg_pool2d(h + b.view(1, 32, 1, 1), 2), scale_factor=2) \
        .reshape(1, -1)


PROGRAMS = [group_norm, conv, batch_norm, pool_and_upsample]


@pytest.mark.parametrize("executors", [("torch",), ("inductor", "torch")], ids=["torch", "inductor"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_kernels_reading_memory_formats_match_eager(program, grad, executors):
    jitted = jitcore.jit(program, executors=executors)
    for call in range(3):
        torch.manual_seed(call)
        a, r = torch.randn(16, 32), torch.randn(1, 32, 4, 4)
        w, b = torch.randn(32), torch.randn(32)
        leaves = [t.clone().requires_grad_(grad) for t in (w, b)]
        mine = [t.clone().requires_grad_(grad) for t in (w, b)]
        expected = program(a, r, *leaves)
        got = jitted(a, r, *mine)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        if grad:
            expected.square().sum().backward()
            got.square().sum().backward()
            for e, g in zip(leaves, mine):
                torch.testing.assert_close(g.grad, e.grad, rtol=1e-4, atol=1e-5)
    assert jitcore.cache_misses(jitted) == 1


def test_the_record_is_in_the_trace():
    jitted = jitcore.jit(group_norm)
    w, b = torch.randn(32, requires_grad=True), torch.randn(32, requires_grad=True)
    jitted(torch.randn(16, 32), torch.randn(1, 32, 4, 4), w, b)
    assert "jitcore.langctx.unit_strides.canonical_layout(" in str(jitcore.last_traces(jitted)[-1])
    assert "jitcore.langctx.unit_strides.canonical_layout(" in str(jitcore.last_backward_traces(jitted)[-1])


@pytest.mark.parametrize("strides", [(32, 1, 128, 32), (512, 1, 128, 32), (16, 16, 4, 1), (512, 16, 4, 1),
                                     (1, 1, 128, 32), (7, 1, 128, 32)])
def test_canonical_layout_keeps_values_and_decides_from_other_dimensions(strides):
    base = torch.arange(2 * 512, dtype=torch.float32)
    value = base.as_strided((1, 32, 4, 4), strides, 3)
    out = canonical_layout(value)
    assert torch.equal(out, value)
    # the result depends on the strides of the size>1 dimensions only
    same_elsewhere = base.as_strided((1, 32, 4, 4), (999,) + strides[1:], 3)
    assert canonical_layout(same_elsewhere).stride() == out.stride()
    fmt = torch.channels_last if out.stride()[1] == 1 and strides[1] == 1 else torch.contiguous_format
    assert out.is_contiguous(memory_format=fmt)
