"""Tensor subclasses written by others (issue 15, zoo42): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, strides, output types, inner tensors,
flatten contexts), for what the survey of this round found."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from subclass_checks import compare_over_sizes
from torch.testing._internal.common_subclass import (
    WrapperTensorWithCustomSizes,
    WrapperTensorWithCustomStrides,
)

# --- .contiguous() of a wrapper that answers its layout, made inside --------------------------------------
# Note [A wrapper that answers its own layout] (jitcore/dispatch/flatten.py): torch's C++
# ``Tensor.contiguous()`` asks ``is_contiguous()`` and clones only where it is False. The shadow of a
# WrapperTensorWithCustomSizes/Strides made inside was built without the class's policy, so it answered
# True from the contiguous metadata its ``__new__`` gave, and the transposed inner tensor was kept
# (strides (1, 2)) where eager copies it ((3, 1)).

_CONTIGUOUS_PROGRAMS: dict[str, Callable] = {
    "transposed": lambda x: (x.transpose(0, 1) * 2).contiguous(),
    "transposed, then an op": lambda x: (x.transpose(0, 1) * 2).contiguous() + 1,
    "already contiguous": lambda x: (x * 2).contiguous(),
    "read after": lambda x: (x.transpose(0, 1) + 1).contiguous().stride(),
}


@pytest.mark.parametrize("cls", [WrapperTensorWithCustomSizes, WrapperTensorWithCustomStrides])
@pytest.mark.parametrize("name", sorted(_CONTIGUOUS_PROGRAMS))
def test_contiguous_of_a_wrapper_answering_its_layout(cls: type, name: str) -> None:
    misses = compare_over_sizes(_CONTIGUOUS_PROGRAMS[name], lambda n: (cls(torch.randn(n, 2)),), (3, 3, 4, 5))
    assert misses <= 3
