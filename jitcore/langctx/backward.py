"""The symbol of a backward the traced program runs itself (``loss.backward()``,
``torch.autograd.grad``; the calls are handled by jitcore/jit/autograd_calls.py).

Invariant: ``autograd_grad`` keeps the graph (``retain_graph=True``): the grad transform differentiates
the same graph again for the trace's outputs, and its replay records the backward's aten ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from jitcore.langctx.torch import torch_symbol

__all__ = ["AUTOGRAD_GRAD", "autograd_grad"]


def autograd_grad(
    outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any]
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (None where unused); the graph is kept."""
    return torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), retain_graph=True,
                               allow_unused=True)


AUTOGRAD_GRAD = torch_symbol(autograd_grad, "jitcore.langctx.backward.autograd_grad",
                             tags=frozenset({"backward"}))
