"""A script in ``python -m jitcore`` form for the command-line tests: ``FUNCTION`` names, and
``example_inputs()`` returning ``(args, kwargs)``.

``sqrt_of_double`` is issue 18's first reproduction: a TwoTensor op whose ``aten.sqrt`` breakpoint
the debugger must be able to continue from.
"""

from __future__ import annotations

import torch
from torch.testing._internal.two_tensor import TwoTensor


def sqrt_of_double(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    return y.sqrt()


def mm_model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    hidden = x * 2
    return torch.matmul(hidden, w)


def example_inputs() -> tuple[tuple, dict]:
    torch.manual_seed(0)
    return (TwoTensor(torch.rand(3), torch.rand(3)),), {}


def mm_inputs() -> tuple[tuple, dict]:
    torch.manual_seed(0)
    return (torch.randn(2, 3), torch.randn(3, 4)), {}
