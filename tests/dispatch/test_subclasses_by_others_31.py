"""Tensor subclasses written by others (issue 15, zoo53), eager against ``jitcore.jit`` over three calls
(outputs and arguments by ``assert_same_flattened``: types, strides, inner tensors, flatten ctx with its
containers' types; one entry; no ``__torch_dispatch__``/``__torch_function__`` frame on a warm call):
the patterns of public subclass code that these programs follow, each passing when written: a
``__torch_function__``-only subclass re-tagging through ``super().__torch_function__``; one unwrapping in
``DisableTorchFunctionSubclass`` and rewrapping with its constructor; a torchao-style ``implements`` table
answering ``F.linear`` in ``__torch_function__`` (``aten.t`` never reaches its dispatch); a quantized
tensor whose ctx holds an enum, a string, a dtype and a tuple; a packed int4 tensor whose outer sizes differ
from its inner ones; a dispatch reading ``.tolist()`` of an inner tensor; a zero point present or absent
among the inner tensors; a transposed outer stride; a ``register_torch_dispatch`` rule for a custom op.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from subclass_checks import frames_over_sizes
from torch.testing._internal.two_tensor import TwoTensor

aten = torch.ops.aten


class _Tagged(torch.Tensor):
    """``__torch_function__`` only: results get the first argument's tag."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, tag: str = "none") -> _Tagged:
        t = torch.Tensor._make_subclass(cls, data, data.requires_grad)
        t.tag = tag
        return t

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        tags = [
            a.tag for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, _Tagged) and hasattr(a, "tag")
        ]
        out = super().__torch_function__(func, types, args, kwargs)

        def retag(o: Any) -> Any:
            if isinstance(o, _Tagged):
                o.tag = tags[0] if tags else "none"
            return o

        return pytree.tree_map(retag, out)


class _Meta(torch.Tensor):
    """``__torch_function__`` unwrapping in ``DisableTorchFunctionSubclass``, merging the arguments' dicts."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, meta: dict | None = None) -> _Meta:
        t = data.as_subclass(cls)
        t.meta = dict(meta or {})
        return t

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        metas: dict = {}
        for a in pytree.tree_leaves((args, kwargs)):
            if isinstance(a, _Meta):
                metas.update(a.meta)
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        return pytree.tree_map_only(
            torch.Tensor, lambda t: _Meta(t, metas) if type(t) is torch.Tensor else t, out
        )


class _Wrapper(torch.Tensor):
    """A wrapper over inner tensors named by ``INNER``; its ctx by ``ctx()``; ``__torch_function__`` off."""

    INNER: tuple[str, ...] = ()

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return [n for n in self.INNER if getattr(self, n) is not None], self.ctx()

    def ctx(self) -> Any:
        return None

    __torch_function__ = torch._C._disabled_torch_function_impl


class _Layout(enum.Enum):
    ROW = "row"
    COL = "col"


class _QTensor(_Wrapper):
    """int8 rows with scales; ctx: (layout enum, mode string, dtype, block tuple); ``t`` flips the layout."""

    INNER = ("qdata", "scale")

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, *ctx: Any) -> _QTensor:
        shape = qdata.shape if ctx[0] is _Layout.ROW else qdata.shape[::-1]
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=ctx[2])

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, *ctx: Any) -> None:
        self.qdata, self.scale = qdata, scale
        self.qlayout, self.mode, self.orig_dtype, self.block = ctx

    def ctx(self) -> Any:
        return (self.qlayout, self.mode, self.orig_dtype, self.block)

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> _QTensor:
        return cls(inner["qdata"], inner["scale"], *ctx)

    @classmethod
    def of(cls, w: torch.Tensor) -> _QTensor:
        scale = w.abs().amax(1, keepdim=True) / 127
        return cls(
            torch.round(w / scale).to(torch.int8), scale, _Layout.ROW, "symmetric", w.dtype, (1, w.shape[1])
        )

    def dequantize(self) -> torch.Tensor:
        d = self.qdata.to(self.orig_dtype) * self.scale
        return d if self.qlayout is _Layout.ROW else d.t()

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            (s,) = args
            flipped = _Layout.COL if s.qlayout is _Layout.ROW else _Layout.ROW
            return cls(s.qdata, s.scale, flipped, s.mode, s.orig_dtype, s.block[::-1])
        if func in (aten.detach.default, aten.clone.default):
            s = args[0]
            return cls(func(s.qdata), func(s.scale), *s.ctx())
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.dequantize(), (args, kwargs or {}))
        return func(*args, **kwargs)


class _Int4Packed(_Wrapper):
    """Two int4 values a byte: inner ``(n, k // 2)``, outer ``(n, k)``, given to unflatten as its size."""

    INNER = ("packed", "scale")

    @staticmethod
    def __new__(cls, packed: torch.Tensor, scale: torch.Tensor, shape: Any) -> _Int4Packed:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=scale.dtype)

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor, shape: Any) -> None:
        self.packed, self.scale = packed, scale

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, outer_size: Any, stride: Any) -> _Int4Packed:
        return cls(inner["packed"], inner["scale"], outer_size)

    @classmethod
    def pack(cls, w: torch.Tensor) -> _Int4Packed:
        scale = w.abs().amax(1, keepdim=True) / 7
        q = (torch.round(w / scale).clamp(-8, 7) + 8).to(torch.uint8)
        return cls(q[:, ::2] | (q[:, 1::2] << 4), scale, w.shape)

    def unpack(self) -> torch.Tensor:
        low = (self.packed & 0xF).to(torch.int16) - 8
        high = (self.packed >> 4).to(torch.int16) - 8
        return torch.stack([low, high], -1).reshape(self.shape).to(self.scale.dtype) * self.scale

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.detach.default:
            return cls(args[0].packed, args[0].scale, args[0].shape)
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.unpack(), (args, kwargs or {}))
        return func(*args, **kwargs)


class _Blocked(_Wrapper):
    """Values in blocks of the sizes an inner tensor holds: ``sum`` reads them with ``tolist()``."""

    INNER = ("values", "sizes")

    @staticmethod
    def __new__(cls, values: torch.Tensor, sizes: torch.Tensor) -> _Blocked:
        return torch.Tensor._make_wrapper_subclass(cls, values.shape, dtype=values.dtype)

    def __init__(self, values: torch.Tensor, sizes: torch.Tensor) -> None:
        self.values, self.sizes = values, sizes

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> _Blocked:
        return cls(inner["values"], inner["sizes"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.sum.default:
            s = args[0]
            return torch.stack([p.sum() for p in torch.split(s.values, s.sizes.tolist())])
        sizes = next(a.sizes for a in args if isinstance(a, cls))
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.values, (args, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, lambda t: cls(t, sizes), func(*args, **kwargs))


class _Affine(_Wrapper):
    """An affine-quantized weight whose zero point is an inner tensor only where there is one."""

    INNER = ("q", "scale", "zero_point")

    @staticmethod
    def __new__(
        cls, q: torch.Tensor, scale: torch.Tensor, zero_point: Any, shape: Any, dtype: Any
    ) -> _Affine:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, zero_point: Any, shape: Any, dtype: Any) -> None:
        self.q, self.scale, self.zero_point = q, scale, zero_point

    def ctx(self) -> Any:
        return (self.shape, self.dtype)

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> _Affine:
        return cls(inner["q"], inner["scale"], inner.get("zero_point"), *ctx)

    def dequantize(self) -> torch.Tensor:
        q = self.q.to(self.dtype)
        return (q if self.zero_point is None else q - self.zero_point) * self.scale

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.detach.default:
            s = args[0]
            return cls(s.q, s.scale, s.zero_point, s.shape, s.dtype)
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.dequantize(), (args, kwargs or {}))
        return func(*args, **kwargs)

    @classmethod
    def of(cls, w: torch.Tensor, with_zero_point: bool) -> _Affine:
        scale = w.abs().amax(1, keepdim=True) / 100
        zero_point = torch.randint(-3, 3, (w.shape[0], 1)).float() if with_zero_point else None
        return cls(torch.round(w / scale).to(torch.int8), scale, zero_point, w.shape, w.dtype)


class _Transposed(_Wrapper):
    """The transpose of a contiguous inner tensor: its outer strides are the inner ones reversed."""

    INNER = ("inner",)

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> _Transposed:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape[::-1], strides=inner.stride()[::-1], dtype=inner.dtype
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, outer_size: Any, stride: Any) -> _Transposed:
        assert tuple(outer_size) == tuple(inner["inner"].shape[::-1])
        return cls(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            return args[0].inner
        if func is aten.detach.default:
            return cls(args[0].inner.detach())
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.inner.t(), (args, kwargs or {}))
        return func(*args, **kwargs)


class _TableTensor(_Wrapper):
    """torchao's style: ``implements`` fills a table both protocols look up; ``F.linear`` is answered in
    ``__torch_function__``, so ``aten.t`` reaches no dispatch (it raises there)."""

    INNER = ("qdata", "scale")
    TABLE: dict = {}

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor) -> _TableTensor:
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=scale.dtype)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor) -> None:
        self.qdata, self.scale = qdata, scale

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> _TableTensor:
        return cls(inner["qdata"], inner["scale"])

    @classmethod
    def implements(cls, *ops: Any) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            for op in ops:
                cls.TABLE[op] = functools.wraps(fn)(functools.partial(fn))
            return fn

        return register

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls.TABLE:
            return cls.TABLE[func](func, args, kwargs or {})
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls.TABLE:
            return cls.TABLE[func](func, args, kwargs or {})
        raise NotImplementedError(f"{cls.__name__} dispatch: unimplemented {func}")


@_TableTensor.implements(F.linear)
def _table_linear(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    x_scale = x.abs().amax(-1, keepdim=True) / 127
    xq = torch.round(x / x_scale)
    out = (xq @ w.qdata.float().t()) * x_scale * w.scale.t()
    return out if bias is None else out + bias


@_TableTensor.implements(aten.detach.default)
def _table_detach(func: Any, args: tuple, kwargs: dict) -> _TableTensor:
    return _TableTensor(args[0].qdata, args[0].scale)


def _table_weight(w: torch.Tensor) -> _TableTensor:
    scale = w.abs().amax(1, keepdim=True) / 127
    return _TableTensor(torch.round(w / scale).to(torch.int8), scale)


@torch.library.custom_op("zoo53::scale_add", mutates_args=())
def _scale_add(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + y


@_scale_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    return torch.empty_like(x)


def _two_tensor_scale_add(cls: type, func: Any, types: tuple, args: tuple, kwargs: dict) -> TwoTensor:
    x, y, s = args
    ya, yb = (y.a, y.b) if isinstance(y, TwoTensor) else (y, y)
    return TwoTensor(_scale_add(x.a, ya, s), _scale_add(x.b, yb, s * 2))


torch.library.register_torch_dispatch("zoo53::scale_add", TwoTensor, _two_tensor_scale_add)


def _tagged_program(x: torch.Tensor, w: torch.Tensor) -> tuple:
    y = (x @ w).relu() + 1
    return y, y.tag, y.sum(0)


def _meta_program(x: torch.Tensor, y: torch.Tensor) -> tuple:
    z = torch.cat([x, y], 0).softmax(-1)
    return z, z.meta, z.mean()


def _two(*shape: int) -> TwoTensor:
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


# name: (program, make(n), the classes whose protocol frames a warm call must not run)
_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[int], tuple], tuple[type, ...]]] = {
    "tagged": (_tagged_program, lambda n: (_Tagged(torch.randn(3, 4), "act"), torch.randn(4, n)), (_Tagged,)),
    "meta_rewrap": (
        _meta_program,
        lambda n: (_Meta(torch.randn(2, n), {"unit": "m"}), _Meta(torch.randn(2, n), {"s": 1})),
        (_Meta,),
    ),
    "qtensor_linear": (
        lambda x, w: F.linear(x, w) + 1,
        lambda n: (torch.randn(4, 8), _QTensor.of(torch.randn(n, 8))),
        (_QTensor,),
    ),
    "qtensor_t_out": (
        lambda x, w: (x @ w.t(), w.t(), w.detach()),
        lambda n: (torch.randn(4, 8), _QTensor.of(torch.randn(n, 8))),
        (_QTensor,),
    ),
    "qtensor_made": (
        lambda w, x: F.linear(x, _QTensor.of(w)),
        lambda n: (torch.randn(n, 8), torch.randn(3, 8)),
        (_QTensor,),
    ),
    "int4_linear": (
        lambda x, w: F.linear(x, w).relu(),
        lambda n: (torch.randn(3, 8), _Int4Packed.pack(torch.randn(n, 8))),
        (_Int4Packed,),
    ),
    "int4_out": (
        lambda w: (w.detach(), w.packed.shape),
        lambda n: (_Int4Packed.pack(torch.randn(n, 8)),),
        (_Int4Packed,),
    ),
    "int4_made": (
        lambda w, x: x @ _Int4Packed.pack(w).t(),
        lambda n: (torch.randn(n, 8), torch.randn(3, 8)),
        (_Int4Packed,),
    ),
    "blocked_tolist": (
        lambda x: (x * 2).sum(),
        lambda n: (_Blocked(torch.randn(10), torch.tensor([3, 3, 4])),),
        (_Blocked,),
    ),
    "affine_zero_point": (
        lambda x, w: F.linear(x, w),
        lambda n: (torch.randn(2, 6), _Affine.of(torch.randn(n, 6), True)),
        (_Affine,),
    ),
    "affine_no_zero_point": (
        lambda x, w: (F.linear(x, w), w.detach()),
        lambda n: (torch.randn(2, 6), _Affine.of(torch.randn(n, 6), False)),
        (_Affine,),
    ),
    "transposed_stride": (
        lambda x, y: (x @ y, x.t() * 2, x.detach(), x.stride()),
        lambda n: (_Transposed(torch.randn(5, n)), torch.randn(5, 2)),
        (_Transposed,),
    ),
    "table_linear": (
        lambda x, w, b: F.linear(x, w, b).relu(),
        lambda n: (torch.randn(2, 3, 8), _table_weight(torch.randn(n, 8)), torch.randn(n)),
        (_TableTensor,),
    ),
    "table_detach": (lambda w: w.detach(), lambda n: (_table_weight(torch.randn(n, 8)),), (_TableTensor,)),
    "custom_op_rule": (
        lambda x, y: _scale_add(x, y, 3.0).sin(),
        lambda n: (_two(n), torch.randn(n)),
        (TwoTensor,),
    ),
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_a_subclass_written_by_others_runs_as_eagerly(name: str) -> None:
    program, make, classes = _PROGRAMS[name]
    entries, warm_frames = frames_over_sizes(program, make, (4, 4, 4), classes)
    assert entries == 1
    assert warm_frames == []


def test_a_zero_point_present_or_not_is_an_entry_each() -> None:
    """The flatten protocol's inner names differ: two entries over four calls, each eager's values."""

    def make(n: int) -> tuple:
        return torch.randn(2, 6), _Affine.of(torch.randn(4, 6), n % 2 == 0)

    entries, warm_frames = frames_over_sizes(lambda x, w: F.linear(x, w), make, (0, 1, 2, 3), (_Affine,))
    assert entries == 2
    assert warm_frames == []
