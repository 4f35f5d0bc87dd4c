"""The outputs' metadata of the aten ops that have no meta (fake) kernel and that subclasses call.

Invariant: each rule, called in the fake mode with the call's shadows, gives outputs with eager's
sizes, strides, dtype and device (symbolic sizes included); it computes no values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["KERNELS_WITHOUT_META"]


# Note [Kernels without a meta kernel]
# A few aten ops have no meta (fake) kernel: ``aten._masked_softmax`` and its backward, which
# MaskedTensor's softmax calls. Eager's kernel on zero-filled tensors gives their outputs' metadata
# where the sizes are static (jitcore/langctx/shadows.py, ``_outputs_of_eager_kernel``), but not where
# they are symbolic, so the call was read on the values (a value-shaped op): a MaskedTensor softmax over
# a second size then traced an unbacked size that the next pass could not tie to the input's
# (``Eq(u0, s1)``), and every size was one more entry. Their outputs' metadata is the inputs' (as the
# CPU kernels allocate them: ``empty_like(input)`` forward, a contiguous tensor of the gradient's sizes
# backward), made here in the fake mode, static sizes or not.
KERNELS_WITHOUT_META: dict[Any, Callable[..., Any]] = {
    torch.ops.aten._masked_softmax.default:
        lambda input, mask, dim=None, mask_type=None: torch.empty_like(input),
    torch.ops.aten._masked_softmax_backward.default:
        lambda grad_output, output, mask, dim=None: torch.empty(
            grad_output.shape, dtype=grad_output.dtype, device=grad_output.device),
}
