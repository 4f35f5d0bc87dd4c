"""A number read from a wrapper subclass's values under grad (issue 15, helper zoo47): ``x.sum().item()``
of a TwoTensor that requires grad, the number then used by an op autograd records. Each program runs
eagerly and under jitcore.jit on equal fresh arguments with values that change; outputs and gradients
(inner tensors too) are compared. Note [A read's check names the replay's tensor]
(jitcore/transforms/grad.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

_READS: dict[str, Callable[..., Any]] = {
    "sum_item_times_a_plain_tensor": lambda x, y: y * x.sum().item(),
    "mean_item_plus_a_plain_tensor": lambda x, y: (y + x.mean().item()).exp(),
    "sum_item_times_the_wrapper": lambda x, y: x * x.sum().item() + y.sum(),
}


def _arguments(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a, b, y = (torch.randn(3, generator=generator) for _ in range(3))
    return TwoTensor(a, b).requires_grad_(), y.requires_grad_()


def _gradients(out: torch.Tensor, args: tuple) -> list[Any]:
    out.sum().backward()
    return [a.grad for a in args]


@pytest.mark.parametrize("name", list(_READS))
def test_a_number_read_of_a_wrapper_under_grad_is_eagers(name: str) -> None:
    """Before: the check of the read named pass 1's inner tensor, which the grad transform's forward
    never defines: UnboundLocalError on every call, where eager computes."""
    fn = _READS[name]
    jitted = jitcore.jit(fn)
    for call, seed in enumerate((0, 0, 1)):
        jit_args, eager_args = _arguments(seed), _arguments(seed)
        actual, expected = jitted(*jit_args), fn(*eager_args)
        assert_same_flattened(actual, expected, f"call {call} output")
        assert_same_flattened(_gradients(actual, jit_args), _gradients(expected, eager_args),
                              f"call {call} gradients")
    assert jitted.fallback_reason is None
    assert jitcore.cache_hits(jitted) >= 1
