"""Tensor subclasses written by others (issue 15, zoo42): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, strides, output types, inner tensors,
flatten contexts), for what the survey of this round found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import Scaled as _Scaled
from subclass_checks import compare_over_sizes, protocol_calls
from torch.testing._internal.common_subclass import (
    WrapperTensorWithCustomSizes,
    WrapperTensorWithCustomStrides,
)
from torch.utils._python_dispatch import return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

import jitcore

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


# --- programs in the style of others' code that the survey found right (regressions) ------------------------
# A wrapper whose ``__torch_dispatch__`` returns views and in-place results through torch's
# ``return_and_correct_aliasing`` (torchao's and torch's test subclasses do so): the outputs alias the
# arguments as eagerly, in-place writes through a view reach the caller's value, and a cached call runs
# no dispatch of the class.


class _Aliasing(torch.Tensor):
    """A wrapper over ``a`` that runs each op on it and corrects the aliasing of the result."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> _Aliasing:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(),
                                                   storage_offset=a.storage_offset(), dtype=a.dtype)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Aliasing:
        return _Aliasing(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        inner = tree_map_only(_Aliasing, lambda t: t.a, (args, kwargs))
        out = func(*inner[0], **inner[1])
        return return_and_correct_aliasing(func, args, kwargs, tree_map_only(torch.Tensor, _Aliasing, out))


_ALIASING_PROGRAMS: dict[str, tuple[Callable, Callable[[int], tuple]]] = {
    "view": (lambda x: x.view(-1, 2) * 1, lambda n: (_Aliasing(torch.randn(n, 4)),)),
    "t": (lambda x: x.t(), lambda n: (_Aliasing(torch.randn(n, 4)),)),
    "slice": (lambda x: x[1:, ::2], lambda n: (_Aliasing(torch.randn(n, 4)),)),
    "alias": (lambda x: torch.ops.aten.alias.default(x), lambda n: (_Aliasing(torch.randn(n, 4)),)),
    "add_": (lambda x, y: x.add_(y), lambda n: (_Aliasing(torch.randn(n, 4)), _Aliasing(torch.randn(n, 4)))),
    "copy_ through t": (lambda x, y: (x.t().copy_(y), x),
                        lambda n: (_Aliasing(torch.randn(n, 4)), torch.randn(4, n))),
    "mul_ through a slice": (lambda x: (x[:, 1:].mul_(3), x), lambda n: (_Aliasing(torch.randn(n, 4)),)),
}


@pytest.mark.parametrize("name", sorted(_ALIASING_PROGRAMS))
def test_a_dispatch_correcting_aliasing(name: str) -> None:
    fn, make = _ALIASING_PROGRAMS[name]
    assert compare_over_sizes(fn, make, (3, 4, 5, 5)) <= 2
    jitted = jitcore.jit(fn)
    jitted(*make(3))
    with protocol_calls(_Aliasing) as seen:
        jitted(*make(3))
    assert seen == []


# An fp8 (e4m3) scaled tensor written by hand, as float8 training code does it: amax scaling in an
# ``autograd.Function``, a matmul that dequantizes, the Function's own backward.
_E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


class _Float8(torch.Tensor):
    """e4m3 data and its scale; ``mm`` dequantizes, ``t`` transposes the data."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor) -> _Float8:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(),
                                                   dtype=torch.float32)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        self.data_, self.scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["data_", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Float8:
        return _Float8(inner["data_"], inner["scale"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.ops.aten.t.default:
            return _Float8(args[0].data_.t(), args[0].scale)
        if func is torch.ops.aten.mm.default:
            return func(*(a.data_.float() / a.scale if isinstance(a, _Float8) else a for a in args))
        raise NotImplementedError(func)


class _ToFloat8(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> _Float8:
        scale = _E4M3_MAX / x.abs().max().clamp(min=1e-12)
        return _Float8((x * scale).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn), scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _Float8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        return torch.mm(_ToFloat8.apply(x), _ToFloat8.apply(w).t())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return grad @ w, grad.t() @ x


def _float8_step(x: torch.Tensor, w: torch.Tensor) -> tuple:
    y = _Float8Linear.apply(x, w)
    y.relu().sum().backward()
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("fn", [
    lambda x, w: torch.mm(_ToFloat8.apply(x), _ToFloat8.apply(w).t()) * 2,
    _float8_step,
], ids=["forward", "forward_and_backward"])
def test_a_hand_written_float8_scaled_tensor(fn: Callable) -> None:
    def make(n: int) -> tuple:
        return torch.randn(n, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)

    assert compare_over_sizes(fn, make, (3, 4, 5, 5)) <= 2


# --- an attribute the flatten protocol does not report ------------------------------------------------------
# Note [An attribute the flatten protocol does not report] (jitcore/jit/tensor_binding.py): the input is
# rebuilt for tracing by ``__tensor_unflatten__``, which passes ``__init__``'s default ``k=1.0`` where the
# caller's value holds ``k=3.0``; the class's dispatch and the program read the default.


@pytest.mark.parametrize("fn", [
    lambda x: (x + 1).a,
    lambda x: x.k * 2,
    lambda x: ((x * 2).k, (x * 2).a),
], ids=["read_by_the_dispatch", "read_by_the_program", "kept_on_outputs"])
def test_an_attribute_the_flatten_protocol_does_not_report(fn: Callable) -> None:
    assert compare_over_sizes(fn, lambda n: (_Scaled(torch.randn(2, n), float(n)),), (3, 3, 4, 5)) <= 3
