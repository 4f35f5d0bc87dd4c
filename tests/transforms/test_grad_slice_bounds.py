"""A slice whose bound is computed from a symbolic size, in an entry the grad transform differentiates
(Note [Slice bounds replayed], jitcore/transforms/grad.py): ``z[: x.shape[0] // 2]`` of a TwoTensor that
requires grad, over changing sizes. Before, the bound inside the slice was replayed as pass 1's number:
the entry traced at 6 rows gave 3 rows for 8 (eager: 4), and the gradient of the wrong rows."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _head(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin()[: x.shape[0] // 2] * 1


def _tail_by_step(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin()[x.shape[0] // 4 :: x.shape[0] // 2].exp()


def _base_and_head(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = (x * 2).sin()
    return z, z[: x.shape[0] // 2]  # a view output (Note [Views an autograd call returns], view_outputs.py)


@pytest.mark.parametrize("fn", [_head, _tail_by_step, _base_and_head])
def test_slice_bounds_from_sizes_follow_each_call(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    jfn = jitcore.jit(fn)
    for n in (4, 6, 8):
        results = []
        for f in (fn, jfn):
            g = torch.Generator().manual_seed(n)
            x = TwoTensor(torch.randn(n, 3, generator=g), torch.randn(n, 3, generator=g)).requires_grad_()
            outs = f(x)
            outs = outs if isinstance(outs, tuple) else (outs,)
            seen = [(type(o), o.shape, o.a, o.b) for o in outs]
            sum(o.sum() for o in outs).backward(TwoTensor(torch.ones(()), torch.ones(())))
            results.append(([s[:2] for s in seen], [s[2:] for s in seen], x.grad.a, x.grad.b))
        assert results[1][0] == results[0][0], n
        torch.testing.assert_close(results[1][1:], results[0][1:])
    assert jitcore.cache_misses(jfn) <= 2  # one static entry, then one of symbolic sizes
