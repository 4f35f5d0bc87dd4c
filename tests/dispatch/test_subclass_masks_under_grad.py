"""A boolean mask of a wrapper subclass input that requires grad (issue 15, helper zoo47): ``x[m]`` of a
TwoTensor, ``masked_select``, each run eagerly and under jitcore.jit over counts that change; values,
gradients (inner tensors too) and the number of entries are compared with a plain tensor's 2.
Note [A size values decided, read from the value that holds it] (jitcore/dispatch/flatten.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _two(n: int, count: int, *shape: int) -> tuple:
    a, b = torch.randn(n, *shape), torch.randn(n, *shape)
    return TwoTensor(a, b).requires_grad_(), torch.arange(n) < count


def _two_and_plain(n: int, count: int) -> tuple:
    x, mask = _two(n, count)
    return x, torch.randn(n, requires_grad=True), mask


def _nested(n: int, count: int) -> tuple:
    inner = [TwoTensor(torch.randn(n), torch.randn(n)) for _ in range(2)]
    return TwoTensor(*inner).requires_grad_(), torch.arange(n) < count


_MASKS: dict[str, tuple[Callable[..., Any], Callable[[int, int], tuple]]] = {
    "summed": (lambda x, m: x[m].sum(), _two),
    "returned": (lambda x, m: x[m], _two),
    "rows_summed": (lambda x, m: x[m].sum(0), lambda n, c: _two(n, c, 3)),
    "times_a_plain_tensor_by_the_same_mask": (lambda x, y, m: x[m] * y[m], _two_and_plain),
    "masked_select": (lambda x, m: torch.masked_select(x, m).sum(), _two),
    "of_a_wrapper_of_wrappers": (lambda x, m: x[m].sum(), _nested),
}


def _gradients(out: torch.Tensor, args: tuple) -> list[Any]:
    out.sum().backward()
    return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


@pytest.mark.parametrize("name", list(_MASKS))
def test_a_mask_of_a_wrapper_under_grad_takes_two_entries_for_every_count(name: str) -> None:
    """Before: one entry per count (7 in 7 calls): the grad transform's pass 1 under autograd could not
    read a count named on an inner tensor, so the function traced static shapes from then on."""
    fn, make = _MASKS[name]
    jitted = jitcore.jit(fn)
    for i, count in enumerate((1, 2, 3, 4, 6, 0, 5)):
        torch.manual_seed(i)
        eager_args = make(6, count)
        torch.manual_seed(i)
        jit_args = make(6, count)
        actual, expected = jitted(*jit_args), fn(*eager_args)
        assert_same_flattened(actual, expected, f"call {i} (count {count}) output")
        assert_same_flattened(_gradients(actual, jit_args), _gradients(expected, eager_args),
                              f"call {i} (count {count}) gradients")
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 5)
