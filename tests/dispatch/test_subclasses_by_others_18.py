"""Tensor subclasses as others write them and use them, round 18 (issue 15, helper zoo40): each program
runs eagerly and under jitcore.jit on equal fresh arguments for several calls, comparing outputs, their
types and inner tensors, the caller's arguments afterwards, and which ``__torch_dispatch__`` /
``__torch_function__`` frames a cached call runs. Each test failed before its fix."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree
from subclass_checks import assert_same_flattened, frames_over_sizes
from torch.testing._internal.common_subclass import WrapperTensorWithCustomSizes
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

# --- a wrapper that answers its sizes from __torch_dispatch__ ---------------------------------------------
# torch's WrapperTensorWithCustomSizes (``dispatch_sizes_strides_policy="sizes"``) answers ``x.shape``,
# ``x.dim()`` and ``x.stride()`` through its ``__torch_dispatch__`` (``aten.sym_size``...). The prologue
# read ``v0.shape`` of it, so every cached call ran its ``__torch_dispatch__`` once; its sizes follow from
# its inner tensor, which the prologue guards, and are no longer read (TensorSpec.of_subclass).


def test_custom_sizes_wrapper_runs_no_dispatch_on_a_cached_call() -> None:
    def make(n: int) -> tuple:
        return WrapperTensorWithCustomSizes(torch.randn(n, 2)), torch.randn(2)

    for fn in (lambda x, y: x + y, lambda x, y: (x * y).sum(0), lambda x, y: x.transpose(0, 1) * 2):
        misses, frames = frames_over_sizes(fn, make, (3, 3, 4, 4, 3), (WrapperTensorWithCustomSizes,))
        assert misses == 2 and frames == []


# --- calls that run eagerly for a reason no size decides --------------------------------------------------
# ``torch.func.vmap``/``grad`` of a tensor subclass (JC-J002) and ``torch.save`` inside the function
# (JC-T001) run eagerly. A symbolic pass stopping on them was run again with static shapes, and nothing
# recorded the shapes an eager entry saw: one eager entry per batch size (5 of 6 calls missed). Now the
# symbolic pass's eager entry, its sizes unchecked, serves every size (Note [Eager whatever the sizes]).


def _saved_and_loaded(x: torch.Tensor) -> torch.Tensor:
    buffer = io.BytesIO()
    torch.save(x, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False) * 2


@pytest.mark.parametrize("fn", [
    lambda x: torch.vmap(lambda row: row * 2 + 1)(x),
    lambda x: torch.func.grad(lambda t: (t * t).sum())(x),
    _saved_and_loaded,
], ids=["vmap", "func_grad", "torch_save"])
def test_eager_calls_over_batch_sizes_share_one_entry(fn: Callable) -> None:
    def make(n: int) -> tuple:
        return (TwoTensor(torch.randn(n, 3), torch.randn(n, 3)),)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs eagerly for this call and calls like it"
        misses, _ = frames_over_sizes(fn, make, (3, 4, 5, 6, 7, 3), ())
    assert misses == 2


# --- a flatten ctx that holds the outer sizes --------------------------------------------------------------
# Classes keep their shape in their ``__tensor_flatten__`` ctx (as a torch.Size, a tuple in a dict, a row
# count), some building their outer shape from it in ``__tensor_unflatten__``. An output's torch.Size ctx
# came back a list from a symbolic entry (Note [A torch.Size in a flatten ctx], dispatch/flatten.py), and
# an input's ctx was pinned by its ``flatten`` guard: one entry per batch size (Note [A flatten ctx that
# holds the outer sizes], jit/subclass_inputs.py).


class ShapeInCtx(torch.Tensor):
    """A wrapper whose ctx is ``shape_of(elem)``, its outer shape built from the ctx; a ``mul`` scales the
    result by ``scale_of(ctx)`` (the ctx's number used as a value)."""

    shape_of: Callable[[torch.Tensor], Any]
    scale_of: Callable[[Any], int]
    outer_of: Callable[[Any], Any] | None = None

    @staticmethod
    def __new__(cls, elem: torch.Tensor, ctx: Any = None) -> ShapeInCtx:
        shape = elem.shape if ctx is None or cls.outer_of is None else cls.outer_of(ctx)
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=elem.dtype)

    def __init__(self, elem: torch.Tensor, ctx: Any = None) -> None:
        self.elem, self.ctx = elem, (type(self).shape_of(elem) if ctx is None else ctx)

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], self.ctx

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, outer_size: Any, outer_stride: Any) -> ShapeInCtx:
        return cls(inner["elem"], ctx)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        ctx = next(a.ctx for a in pytree.tree_leaves(args) if isinstance(a, ShapeInCtx))
        args, kwargs = pytree.tree_map_only(ShapeInCtx, lambda t: t.elem, (args, kwargs or {}))
        out = func(*args, **kwargs)
        if func is torch.ops.aten.mul.Tensor:
            out = out * cls.scale_of(ctx)
        return pytree.tree_map_only(torch.Tensor, cls, out)


class SizeCtx(ShapeInCtx):
    shape_of, scale_of, outer_of = staticmethod(lambda e: e.shape), staticmethod(lambda c: c[0]), \
        staticmethod(lambda c: c)


class DictShapeCtx(ShapeInCtx):
    shape_of = staticmethod(lambda e: {"shape": tuple(e.shape), "tag": "q"})
    scale_of, outer_of = staticmethod(lambda c: c["shape"][0]), staticmethod(lambda c: c["shape"])


class RowsCtx(ShapeInCtx):
    shape_of, scale_of = staticmethod(lambda e: ("rows", [e.shape[0]])), staticmethod(lambda c: c[1][0])


class BlockCtx(ShapeInCtx):
    """A number in the ctx that only equals the batch size on some calls."""

    shape_of, scale_of = staticmethod(lambda e: {"block": 4}), staticmethod(lambda c: c["block"])


def test_torch_size_ctx_of_an_output_made_inside() -> None:
    misses, _ = frames_over_sizes(lambda x: SizeCtx(x * 2), lambda n: (torch.randn(n, 2),), (3, 4, 5), ())
    assert misses == 2


def _ctx_of(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [_ctx_of(v) for v in value]
    return (type(value.ctx), value.ctx) if isinstance(value, ShapeInCtx) else None


@pytest.mark.parametrize("cls", [SizeCtx, DictShapeCtx, RowsCtx, BlockCtx])
@pytest.mark.parametrize("fn", [
    lambda x: x * 2,
    lambda x: (x * x).sum(0),
    lambda x: x.reshape(-1),
    lambda x: (x.new_zeros(x.shape[0]) + x.shape[0], x + 1),
], ids=["mul", "mul_sum", "reshape", "shape_read"])
def test_ctx_holding_the_outer_sizes_over_batch_sizes(cls: type, fn: Callable) -> None:
    jitted = jitcore.jit(fn)
    for n in (4, 5, 6, 4, 7, 3):
        torch.manual_seed(n)
        x = cls(torch.randn(n, 3))
        expected, actual = fn(x), jitted(cls(x.elem.clone()))
        assert_same_flattened(actual, expected, f"n={n}")
        assert _ctx_of(actual) == _ctx_of(expected), n
    assert jitcore.cache_misses(jitted) == 2


# --- a subclass output that carries no graph --------------------------------------------------------------
# A TwoTensor computed under ``torch.no_grad()`` from an input that requires grad counted as an output
# that may reach a graph (any subclass output did), so the entry went through the grad transform, which
# keeps no symbolic sizes for an output it assembles: from the second batch size on, the entry ran pass 1
# under torch's autograd, the class's ``__torch_dispatch__`` on every cached call. A subclass output
# whose outer tensor and inner tensors require no grad now reaches no graph (``carries_grad``).


def _under_no_grad(x: torch.Tensor) -> tuple:
    with torch.no_grad():
        y = x * 2 + 1
    return y, (x * 3).requires_grad


def test_subclass_output_made_under_no_grad_runs_no_dispatch_when_cached() -> None:
    def make(n: int) -> tuple:
        return (TwoTensor(torch.randn(n), torch.randn(n)).requires_grad_(),)

    misses, frames = frames_over_sizes(_under_no_grad, make, (3, 4, 5, 5), (TwoTensor,))
    assert misses == 2 and frames == []


@pytest.mark.parametrize("build", [
    lambda w: TwoTensor(w * 2, w * 3),
    lambda w: WrapperTensorWithCustomSizes(w * 2),  # its outer tensor does not require grad, its inner does
], ids=["TwoTensor", "outer_without_grad"])
def test_subclass_output_whose_inner_tensors_require_grad_keeps_its_graph(build: Callable) -> None:
    jitted = jitcore.jit(build)
    for n in (3, 4, 5, 5):
        w = torch.randn(n, requires_grad=True)
        expected, actual = build(w), jitted(w)
        assert_same_flattened(actual, expected, f"n={n}")
        name = expected.__tensor_flatten__()[0][0] if hasattr(expected, "__tensor_flatten__") else "t"
        grads = [torch.autograd.grad(getattr(v, name).sum(), w)[0] for v in (expected, actual)]
        torch.testing.assert_close(grads[1], grads[0])
