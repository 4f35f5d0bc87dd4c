"""Tensor subclasses as others write them and use them, round 17 (issue 15, helper zoo39): subclass inputs
whose outer tensor follows one of its inner tensors (torch's TwoTensor, a scaled int8 tensor) over
changing batch sizes, run eagerly and under jitcore.jit, comparing outputs, their types and inner
tensors, gradients and the entries traced. Each test failed before its fix (one entry per shape, or a
function traced with static shapes only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from hypothesis import given, settings
from hypothesis import strategies as st
from subclass_checks import assert_same_flattened
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


class Int8Scaled(torch.Tensor):
    """A scaled int8 tensor as quantization libraries write it: int8 ``qdata`` with the outer shape and
    one float ``scale`` per row (``(n, 1)``); ops it does not know run on its dequantized value."""

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, outer_size: Any = None,
                outer_stride: Any = None) -> Int8Scaled:
        size = qdata.shape if outer_size is None else outer_size
        stride = qdata.stride() if outer_stride is None else outer_stride
        return torch.Tensor._make_wrapper_subclass(cls, size, strides=stride, dtype=scale.dtype,
                                                   device=qdata.device)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, outer_size: Any = None,
                 outer_stride: Any = None) -> None:
        self.qdata, self.scale = qdata, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["qdata", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, outer_size: Any, outer_stride: Any) -> Int8Scaled:
        return Int8Scaled(inner["qdata"], inner["scale"], outer_size, outer_stride)

    def dequantize(self) -> torch.Tensor:
        return self.qdata.to(self.scale.dtype) * self.scale

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten.t.default:
            return Int8Scaled(args[0].qdata.t(), args[0].scale.t())
        if func is torch.ops.aten.mul.Tensor and isinstance(args[1], (int, float)):
            return Int8Scaled(args[0].qdata, args[0].scale * args[1])
        if func is torch.ops.aten.detach.default:
            return Int8Scaled(args[0].qdata, args[0].scale)
        args, kwargs = pytree.tree_map_only(Int8Scaled, lambda t: t.dequantize(), (args, kwargs))
        return func(*args, **kwargs)


def _quantized(x: torch.Tensor) -> Int8Scaled:
    scale = x.abs().amax(1, keepdim=True) / 127
    return Int8Scaled((x / scale).round().to(torch.int8), scale)


def _two(n: int, width: int = 4, requires_grad: bool = False) -> TwoTensor:
    return TwoTensor(torch.randn(n, width), torch.randn(n, width)).requires_grad_(requires_grad)


def _run(fn: Callable[..., Any], make: Callable[[int], tuple], sizes: list[int],
         grad: bool = False) -> int:
    """Calls ``fn`` eagerly and jitted on equal fresh arguments for each size; returns the misses."""
    jitted = jitcore.jit(fn)
    for n in sizes:
        torch.manual_seed(n)
        eager_args = make(n)
        torch.manual_seed(n)
        jit_args = make(n)
        expected, actual = fn(*eager_args), jitted(*jit_args)
        assert_same_flattened(actual, expected, f"output at size {n}")
        assert_same_flattened(list(jit_args), list(eager_args), f"arguments at size {n}")
        if grad:
            wrt_e = [a for a in eager_args if isinstance(a, torch.Tensor) and a.requires_grad]
            wrt_j = [a for a in jit_args if isinstance(a, torch.Tensor) and a.requires_grad]
            loss_e, loss_j = (expected * expected).sum(), (actual * actual).sum()
            grads_e = torch.autograd.grad(loss_e, wrt_e, torch.ones_like(loss_e))
            grads_j = torch.autograd.grad(loss_j, wrt_j, torch.ones_like(loss_j))
            assert_same_flattened(list(grads_j), list(grads_e), f"gradients at size {n}")
    return jitcore.cache_misses(jitted)


# --- subclass inputs that follow an inner tensor keep symbolic sizes -----------------------------------
# Note [Subclass inputs that follow an inner tensor] (jitcore/jit/subclass_inputs.py): a subclass input's
# inner tensors were bound with static shapes, so each batch size traced one more entry (10 entries over
# 10 sizes) where the same program over plain tensors traces one symbolic entry from the second size on.

_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[int], tuple]]] = {
    "pointwise with a plain tensor": (lambda x, y: (x * y + 1).sin(), lambda n: (_two(n), torch.randn(n, 4))),
    "matmul": (lambda x, w: x @ w, lambda n: (_two(n), torch.randn(4, 3))),
    "in-place write, returned": (lambda x: (x.add_(1), x.sum()), lambda n: (_two(n),)),
    "views and a reshape": (lambda x: x.view(-1)[1:].reshape(-1, 1), lambda n: (_two(n),)),
    "a size read in Python": (lambda x: x.new_zeros(x.shape[0] * 2) + x.shape[0], lambda n: (_two(n, 2),)),
    "scaled int8 linear": (lambda x, w: F.linear(w, x),
                           lambda n: (_quantized(torch.randn(n, 4)), torch.randn(2, 4))),
    "scaled int8 output": (lambda x: (x * 3).t(), lambda n: (_quantized(torch.randn(n, 4)),)),
}


@settings(max_examples=6, deadline=None)
@given(name=st.sampled_from(sorted(_PROGRAMS)),
       sizes=st.lists(st.integers(2, 40), min_size=10, max_size=10))
def test_subclass_inputs_over_changing_sizes_keep_one_symbolic_entry(name: str, sizes: list[int]) -> None:
    fn, make = _PROGRAMS[name]
    misses = _run(fn, make, sizes)
    assert misses <= 2, f"{name}: {misses} entries over sizes {sizes}"


def test_a_subclass_made_inside_from_plain_inputs_keeps_them_symbolic() -> None:
    # before: 'a tensor-subclass value has a symbolic size' made the whole function static
    misses = _run(lambda a, b: TwoTensor(a, b) * 2, lambda n: (torch.randn(n, 3), torch.randn(n, 3)),
                  list(range(2, 12)))
    assert misses <= 2


def test_gradients_of_subclass_inputs_over_changing_sizes() -> None:
    # the forward's rebuilt TwoTensor output kept the traced size (a wrong answer) until the grad
    # transform rewrote the sizes after rebuilding its subclass outputs
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu() * x.shape[0]

    misses = _run(fn, lambda n: (_two(n, requires_grad=True), torch.randn(4, 3, requires_grad=True)),
                  [2, 3, 5, 4, 7, 6, 9, 8, 3, 10], grad=True)
    assert misses <= 2


def test_a_subclass_input_that_stops_following_its_inner_tensor_misses() -> None:
    # the outer sizes are not inputs: a value whose outer layout is no longer its first inner tensor's
    # (a transposed TwoTensor: both halves transposed, so it follows neither the first check nor the
    # entry's strides) goes to another entry, and its answer is eager's
    def make(n: int) -> tuple:
        return (_two(n),) if n < 5 else (_two(4, n).t(),)

    misses = _run(lambda x: x * 2 + x.shape[0], make, [2, 3, 4, 5, 6, 7])
    assert misses <= 4
