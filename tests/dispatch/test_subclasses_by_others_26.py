"""Tensor subclasses as others write them, round 26 (issue 15, helper njt50): a wrapper whose
``__torch_dispatch__`` answers its sizes (torch's WrapperTensorWithCustomSizes,
``dispatch_sizes_strides_policy="sizes"``, no flatten protocol) over changing sizes. Each program runs
eagerly and under jitcore.jit on equal fresh arguments, comparing outputs, their types and inner tensors,
the arguments afterwards, and the ``__torch_dispatch__`` frames of calls served from the cache."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from subclass_checks import assert_same_flattened, frames_over_sizes, protocol_calls
from torch.testing._internal.common_subclass import WrapperTensorWithCustomSizes as Sized

import jitcore


# Note [A wrapper that answers its sizes] (jitcore/jit/subclass_inputs.py): its inner tensor was bound with
# static sizes, one entry per size (4 entries over 4 sizes); now one symbolic entry from the second size on.
@pytest.mark.parametrize("fn", [
    lambda x: x.view(-1) + 1,
    lambda x: (x * 2).sum(0),
    lambda x: x.transpose(0, 1).reshape(-1) * x.shape[1],
    lambda x: torch.cat([x, x], 1).relu(),
], ids=["view", "sum", "transpose_shape", "cat"])
def test_a_wrapper_answering_its_sizes_is_one_symbolic_entry(fn: Callable) -> None:
    misses, frames = frames_over_sizes(fn, lambda n: (Sized(torch.randn(2, n)),), (3, 4, 5, 6, 9, 4),
                                       (Sized,))
    assert misses == 2 and frames == []


def test_a_wrapper_answering_its_sizes_with_another_plain_input() -> None:
    misses, frames = frames_over_sizes(
        lambda x, y: x + y, lambda n: (Sized(torch.randn(n, 2)), torch.randn(n, 2)), (3, 4, 5, 7), (Sized,))
    assert misses == 2 and frames == []


def test_a_wrapper_answering_its_sizes_made_inside_over_changing_sizes() -> None:
    misses, frames = frames_over_sizes(
        lambda x: Sized(x).view(-1) * 3, lambda n: (torch.randn(2, n),), (3, 4, 5, 7), (Sized,))
    assert misses == 2 and frames == []


def test_a_warm_call_under_grad_asks_its_sizes_no_more_than_eagerly() -> None:
    """``Sized(x) * w`` with ``w`` requiring grad: autograd reads the output's sizes, which this class
    answers in its dispatch. Eagerly each op's autograd node asks (3 ``aten.sym_size``); a call from the
    cache asks for the one output of the entry's autograd Function (2)."""
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (Sized(x) * w).sum()

    jitted = jitcore.jit(fn)
    for _ in range(3):
        x, w = torch.randn(3), torch.randn(3, requires_grad=True)
        with protocol_calls(Sized) as eager_frames:
            expected = fn(x, w)
        with protocol_calls(Sized) as frames:
            actual = jitted(x, w)
        assert_same_flattened(actual, expected, "output")
    assert jitcore.cache_misses(jitted) == 1
    sizes = [f for f in frames if "sym_size" in f]
    assert frames == sizes and len(sizes) <= len([f for f in eager_frames if "sym_size" in f])


class _DefaultStrides(torch.Tensor):
    """Answers its sizes from its inner tensor and leaves the strides to torch (``sym_stride``: None)."""

    @staticmethod
    def __new__(cls, t: torch.Tensor) -> _DefaultStrides:
        return torch.Tensor._make_wrapper_subclass(cls, t.size(), dtype=t.dtype, device=t.device,
                                                   dispatch_sizes_strides_policy="sizes")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN206
        if func is torch.ops.aten.sym_stride.default:
            return None
        unwrapped = [a.t if isinstance(a, cls) else a for a in args]
        out = func(*unwrapped, **(kwargs or {}))
        return cls(out) if isinstance(out, torch.Tensor) else out


def test_a_wrapper_answering_its_sizes_otherwise_keeps_static_sizes() -> None:
    """A class whose answer is not sizes and strides (torch's default strides: None) keeps static inner
    sizes (an entry per size), with eager's values."""
    jitted = jitcore.jit(lambda x: x * 2 + x.shape[1])
    for n in (3, 4, 5):
        x = _DefaultStrides(torch.randn(2, n))
        out, expected = jitted(x), (lambda x: x * 2 + x.shape[1])(x)
        assert type(out) is _DefaultStrides and torch.equal(out.t, expected.t)
    assert jitcore.cache_misses(jitted) == 3
