"""A tiny wrapper tensor subclass for the debugging tests: ``__torch_dispatch__`` unwraps, runs the
aten op on the inner tensor and wraps the result; it raises on ``aten.sub`` to test error reports."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map


class Wrapped(torch.Tensor):
    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, device=inner.device, requires_grad=False
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Wrapped(inner["inner"])

    def __repr__(self) -> str:
        return f"Wrapped({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten.sub.Tensor:
            raise ValueError("Wrapped does not support subtraction")
        unwrapped_args = tree_map(lambda a: a.inner if isinstance(a, Wrapped) else a, args)
        unwrapped_kwargs = tree_map(lambda a: a.inner if isinstance(a, Wrapped) else a, kwargs)
        out = func(*unwrapped_args, **unwrapped_kwargs)
        return tree_map(lambda o: Wrapped(o) if isinstance(o, torch.Tensor) else o, out)
