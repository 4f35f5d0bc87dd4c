"""Tensor subclasses written for the differential tests: each exercises a different part of
``__torch_dispatch__`` resolution. Every one records the aten ops its dispatch receives in
``DISPATCH_LOG`` so tests can compare eager dispatch with what jitcore resolved while tracing."""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.utils._python_dispatch import return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

aten = torch.ops.aten


# Each dispatch reports itself with ``sys.audit``: a C call that jitcore makes while tracing and that a
# cached call never makes, so DISPATCH_LOG shows what a call really dispatched (the program's own
# logging, by contrast, is replayed on every call as eagerly: jitcore/jit/log_records.py). The traced
# code never reads the list (a program reading mutable global state is guarded on it).
DISPATCH_EVENT = "jitcore.tests.subclass_zoo.dispatch"
DISPATCH_LOG: list[tuple[str, Any]] = []


def _on_audit(event: str, args: tuple) -> None:
    if event == DISPATCH_EVENT:
        DISPATCH_LOG.append(args)


sys.addaudithook(_on_audit)

_VIEW_OPS = {aten.t.default, aten.view.default, aten.transpose.int, aten.permute.default, aten.clone.default,
             aten.detach.default, aten.alias.default, aten._unsafe_view.default, aten.expand.default,
             aten.slice.Tensor, aten.select.int, aten.unsqueeze.default, aten.squeeze.dim}


def _wrapper(cls: type, like: torch.Tensor, dtype: torch.dtype | None = None) -> Any:
    return torch.Tensor._make_wrapper_subclass(
        cls,
        like.shape,
        strides=like.stride(),
        storage_offset=like.storage_offset(),
        dtype=dtype or like.dtype,
        device=like.device,
        requires_grad=False,
    )


class ScaledTensor(torch.Tensor):
    """float8-like: low-precision ``data`` times a Python-float ``scale`` kept in the ctx."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float, orig_dtype: torch.dtype = torch.float32) -> Any:
        return _wrapper(cls, data, orig_dtype)

    def __init__(self, data: torch.Tensor, scale: float, orig_dtype: torch.dtype = torch.float32) -> None:
        self.data_ = data
        self.scale = scale
        self.orig_dtype = orig_dtype

    @classmethod
    def quantize(cls, x: torch.Tensor) -> ScaledTensor:
        scale = 2.0
        return cls((x / scale).to(torch.bfloat16), scale, x.dtype)

    def dequantize(self) -> torch.Tensor:
        return self.data_.to(self.orig_dtype) * self.scale

    def __tensor_flatten__(self):
        return ["data_"], (self.scale, self.orig_dtype)

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return ScaledTensor(inner["data_"], ctx[0], ctx[1])

    def __repr__(self) -> str:
        return f"ScaledTensor(scale={self.scale}, {self.data_!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sys.audit(DISPATCH_EVENT, "ScaledTensor", func)
        if func in _VIEW_OPS:
            x = args[0]
            out = func(x.data_, *args[1:], **kwargs)
            return ScaledTensor(out, x.scale, x.orig_dtype)
        if (
            func is aten.mul.Tensor
            and isinstance(args[0], ScaledTensor)
            and isinstance(args[1], (int, float))
        ):
            return ScaledTensor(args[0].data_, args[0].scale * args[1], args[0].orig_dtype)
        plain_args, plain_kwargs = tree_map_only(ScaledTensor, lambda t: t.dequantize(), (args, kwargs))
        return func(*plain_args, **plain_kwargs)


class Int8RowwiseTensor(torch.Tensor):
    """int8 ``qdata`` with a per-row float ``scale`` tensor; ops dequantize, except row-preserving views."""

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor) -> Any:
        return _wrapper(cls, qdata, scale.dtype)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor) -> None:
        self.qdata = qdata
        self.scale = scale

    @classmethod
    def quantize(cls, x: torch.Tensor) -> Int8RowwiseTensor:
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6) / 127
        return cls(torch.round(x / scale).to(torch.int8), scale)

    def __tensor_flatten__(self):
        return ["qdata", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Int8RowwiseTensor(inner["qdata"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sys.audit(DISPATCH_EVENT, "Int8RowwiseTensor", func)
        if func is aten.clone.default or func is aten.detach.default:
            x = args[0]
            return Int8RowwiseTensor(func(x.qdata), func(x.scale))
        deq = tree_map_only(Int8RowwiseTensor, lambda t: t.qdata.to(t.scale.dtype) * t.scale, (args, kwargs))
        return func(*deq[0], **deq[1])


class TaggedTensor(torch.Tensor):
    """Carries non-tensor metadata (a string tag) through every op; mixing tags joins them."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, tag: str) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor, tag: str) -> None:
        self.elem = elem
        self.tag = tag

    def __tensor_flatten__(self):
        return ["elem"], self.tag

    @staticmethod
    def __tensor_unflatten__(inner, tag, outer_size, outer_stride):
        return TaggedTensor(inner["elem"], tag)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sys.audit(DISPATCH_EVENT, "TaggedTensor", func)
        tags = []
        tree_map_only(TaggedTensor, lambda t: tags.append(t.tag), (args, kwargs))
        tag = "+".join(dict.fromkeys(tags))
        unwrapped = tree_map_only(TaggedTensor, lambda t: t.elem, (args, kwargs))
        out = func(*unwrapped[0], **unwrapped[1])
        return tree_map_only(torch.Tensor, lambda o: TaggedTensor(o, tag), out)


class MirrorTensor(torch.Tensor):
    """Wraps one tensor; supports in-place ops and views with correct aliasing of the wrapper."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return MirrorTensor(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sys.audit(DISPATCH_EVENT, "MirrorTensor", func)
        unwrapped = tree_map_only(MirrorTensor, lambda t: t.elem, (args, kwargs))
        out = func(*unwrapped[0], **unwrapped[1])
        wrapped = tree_map_only(torch.Tensor, MirrorTensor, out)
        return return_and_correct_aliasing(func, args, kwargs, wrapped)


class ClampedTensor(torch.Tensor):
    """Dispatch with real control flow: branches on the op, the rank and the dtype of its inputs."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, limit: float) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor, limit: float) -> None:
        self.elem = elem
        self.limit = limit

    def __tensor_flatten__(self):
        return ["elem"], self.limit

    @staticmethod
    def __tensor_unflatten__(inner, limit, outer_size, outer_stride):
        return ClampedTensor(inner["elem"], limit)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sys.audit(DISPATCH_EVENT, "ClampedTensor", func)
        limit = max(t.limit for t in args if isinstance(t, ClampedTensor))
        unwrapped = tree_map_only(ClampedTensor, lambda t: t.elem, (args, kwargs))
        out = func(*unwrapped[0], **unwrapped[1])
        if not isinstance(out, torch.Tensor):
            return out
        if func in (aten.add.Tensor, aten.mul.Tensor, aten.sub.Tensor):
            out = out.clamp(-limit, limit)
        elif out.dim() > 1 and out.is_floating_point():
            out = out * 1.0
        elif out.dtype == torch.bool:
            return out
        for _ in range(out.dim()):
            pass
        return ClampedTensor(out, limit)


class NotImplementedTensor(torch.Tensor):
    """Declines every op (NotImplemented) unless another subclass in the call handles it."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return NotImplementedTensor(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        sys.audit(DISPATCH_EVENT, "NotImplementedTensor", func)
        if func in (aten.add.Tensor,) and all(t is cls for t in types):
            unwrapped = tree_map_only(NotImplementedTensor, lambda t: t.elem, (args, kwargs or {}))
            return NotImplementedTensor(func(*unwrapped[0], **unwrapped[1]))
        return NotImplemented


class UnsupportedOpTensor(MirrorTensor):
    """Raises NotImplementedError for aten.mm, like many real subclasses do for unsupported ops."""

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return UnsupportedOpTensor(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is aten.mm.default:
            raise NotImplementedError(f"UnsupportedOpTensor does not support {func}")
        unwrapped = tree_map_only(UnsupportedOpTensor, lambda t: t.elem, (args, kwargs or {}))
        out = func(*unwrapped[0], **unwrapped[1])
        return tree_map_only(torch.Tensor, UnsupportedOpTensor, out)


def dispatched_ops(log: list[tuple[str, Any]]) -> list[str]:
    return [f"{name}:{func}" for name, func in log]





class LinearOverrideTensor(torch.Tensor):
    """Like quantized-weight libraries: handles F.linear in ``__torch_function__`` (dequantizing the
    weight itself) and everything else in ``__torch_dispatch__``."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return _wrapper(cls, elem)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return LinearOverrideTensor(inner["elem"])

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.linear:
            sys.audit(DISPATCH_EVENT, "LinearOverrideTensor.__torch_function__", func.__name__)
            x, w = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            out = torch.matmul(x, w.elem.t() * 2)
            return out if bias is None else out + bias
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        sys.audit(DISPATCH_EVENT, "LinearOverrideTensor", func)
        unwrapped = tree_map_only(LinearOverrideTensor, lambda t: t.elem, (args, kwargs or {}))
        out = func(*unwrapped[0], **unwrapped[1])
        return tree_map_only(torch.Tensor, LinearOverrideTensor, out)


class ToleranceTensor(TaggedTensor):
    """A ctx compared by the class's own ``__metadata_guard__``: tags equal up to case match."""

    @staticmethod
    def __tensor_unflatten__(inner, tag, outer_size, outer_stride):
        return ToleranceTensor(inner["elem"], tag)

    @classmethod
    def __metadata_guard__(cls, orig: str, other: str) -> bool:
        return orig.lower() == other.lower()
