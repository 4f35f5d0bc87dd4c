"""A tensor subclass under jitcore's explain and debugger (docs/debugging.md).

python -m jitcore explain examples/debug_subclass.py:scale_shift   # the dispatch map
python -m jitcore debug examples/debug_subclass.py:scale_shift     # 's' steps into the aten ops
"""

from typing import Any

import torch
from torch.utils._pytree import tree_map


class Logged(torch.Tensor):
    """A wrapper subclass whose ``__torch_dispatch__`` runs each aten op on the inner tensor."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Logged(inner["inner"])

    def __repr__(self) -> str:
        return f"Logged({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.inner if isinstance(t, Logged) else t
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda t: Logged(t) if isinstance(t, torch.Tensor) else t, out)


def scale_shift(a: torch.Tensor) -> torch.Tensor:
    return a * 2 + 1


def example_inputs() -> tuple[tuple, dict]:
    torch.manual_seed(0)
    return (Logged(torch.randn(3)),), {}
