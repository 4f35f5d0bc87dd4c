"""Programs that raise, forward and backward, on plain tensors, a tensor subclass and an
``autograd.Function``: the error-report tests run each eagerly and under jitcore and compare the
printed tracebacks line by line. Kept in their own file so that tracebacks name known lines."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map


class NoCos(torch.Tensor):
    """A wrapper subclass whose ``__torch_dispatch__`` lacks ``aten.cos`` (sin's backward needs it)
    and refuses ``aten.sub`` (a forward error)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, dtype=inner.dtype, device=inner.device, requires_grad=inner.requires_grad
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self):
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return NoCos(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.cos.default:
            raise NotImplementedError(f"NoCos does not implement {func}")
        if func is torch.ops.aten.sub.Tensor:
            raise ValueError("NoCos does not support subtraction")
        out = func(*tree_map(lambda a: a.inner if isinstance(a, NoCos) else a, args), **(kwargs or {}))
        return tree_map(lambda o: NoCos(o) if isinstance(o, torch.Tensor) else o, out)


class BadBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("BadBackward has no backward")


class BadForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError("BadForward refuses")

    @staticmethod
    def backward(ctx, grad):
        return grad


def matmul_mismatch(x: torch.Tensor) -> torch.Tensor:
    return x @ torch.ones(5, 2)


def subclass_subtract(x: torch.Tensor) -> torch.Tensor:
    return (x - x).sum()


def function_forward_raises(x: torch.Tensor) -> torch.Tensor:
    return BadForward.apply(x).sum()


def no_derivative(x: torch.Tensor) -> torch.Tensor:
    return torch.igamma(x, torch.ones(3)).sum()


def sin_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sin().sum()


def function_backward_raises(x: torch.Tensor) -> torch.Tensor:
    return BadBackward.apply(x).sum()


class CodedError(RuntimeError):
    """An exception whose ``__init__`` takes more than its ``args``: ``copy.copy`` cannot rebuild it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code_number = code


class CodedBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise CodedError("no backward", 7)


def coded_backward_raises(x: torch.Tensor) -> torch.Tensor:
    return CodedBackward.apply(x).sum()
