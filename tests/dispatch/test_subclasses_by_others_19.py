"""Tensor subclasses written by others (issue 15, zoo41): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, strides, output types, inner tensors,
flatten contexts), for what the survey of this round found."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from subclass_checks import assert_same_flattened
from torch.testing._internal.common_subclass import (
    WrapperTensorWithCustomSizes,
    WrapperTensorWithCustomStrides,
)

import jitcore


def _compare(fn: Callable, make: Callable[[int], tuple], sizes: tuple[int, ...]) -> int:
    """Eager and jitted calls on equal fresh arguments of each size, compared; the entries traced."""
    jitted = jitcore.jit(fn)
    for i, n in enumerate(sizes):
        torch.manual_seed(i)
        eager_args = make(n)
        torch.manual_seed(i)
        jit_args = make(n)
        assert_same_flattened(jitted(*jit_args), fn(*eager_args), f"call {i} (size {n}) output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} (size {n}) arguments")
    return jitcore.cache_misses(jitted)


# --- a wrapper that answers its layout from __torch_dispatch__, made inside ------------------------------
# Note [A wrapper that answers its own layout] (jitcore/dispatch/flatten.py) and Note [A wrapper that
# answers its own layout, while tracing] (jitcore/proxies/subclass.py): torch's
# WrapperTensorWithCustomSizes/Strides (``dispatch_sizes_strides_policy``) answer ``stride()`` and
# ``is_contiguous()`` from their inner tensor. An output made inside came back answering the contiguous
# strides its ``__new__`` gave (``(3, 1)`` where eager says ``(1, 2)``), and a read inside the function
# answered them too (``is_contiguous()`` True where eager says False).

_LAYOUT_PROGRAMS: dict[str, Callable] = {
    "transposed then scaled": lambda x: x.transpose(0, 1) * 2,
    "transposed": lambda x: x.transpose(0, 1),
    "strides read": lambda x: (x.transpose(0, 1) * 2).stride(),
    "is_contiguous read": lambda x: ((x.transpose(0, 1) + 1).is_contiguous(), x.is_contiguous()),
    "expanded": lambda x: x[:, :1].expand(-1, 3) + 0,
}


@pytest.mark.parametrize("cls", [WrapperTensorWithCustomSizes, WrapperTensorWithCustomStrides])
@pytest.mark.parametrize("name", sorted(_LAYOUT_PROGRAMS))
def test_a_wrapper_answering_its_layout_made_inside(cls: type, name: str) -> None:
    misses = _compare(_LAYOUT_PROGRAMS[name], lambda n: (cls(torch.randn(n, 2)),), (3, 3, 4, 5))
    assert misses <= 3
