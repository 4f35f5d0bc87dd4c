"""Strides of size-1 dimensions: pinned to the traced ones where a kernel decides from them.

Note [Strides of size-1 dimensions]
A size-1 dimension's stride addresses nothing (its only index is 0), so torch's kernels give it
whatever falls out of their stride computation, and torch's fake kernels often give it another value
than the real ones (torch 2.13, CPU: ``t / 1`` on a ``(1, 32, 4, 4)`` tensor of strides
``(32, 1, 128, 32)`` keeps ``32`` really and makes ``512`` on fakes; measured over 3074 calls of 30
ops, 500 differ, every one only in size-1 dimensions). The shadows a trace is recorded on therefore
hold the real values' strides everywhere except in size-1 dimensions. That is harmless for every
read of a layout but one: ``suggest_memory_format`` (channels-last or contiguous) looks at the
strides of size-1 dimensions too, and some kernels decide from it. ``F.group_norm`` computes the
format, copies its input to it (``contiguous(memory_format)``), and ``native_group_norm`` checks it
again: on the shadow the format was channels-last and the copy vanished from the trace; on the real
value the format was contiguous, and the computation raised "Expected X.is_contiguous(memory_format)"
(a tiny diffusers UNet2DModel, whose attention block ends in ``transpose(-1, -2).reshape(...)`` on
batch size 1). A kernel that picks its output's format the same way (convolution, pooling,
upsampling, batch norm) would lay its output out otherwise than the trace assumed.

A decision taken from the traced strides cannot be replayed at run time either: pinning the traced
strides (a free view) made ``native_group_norm_backward`` run on a channels-last batch-1 input with only
the weight's and bias's gradients asked for, which crashes torch 2.13 on CPU (eager too, on such an
input; eager never saw one because its size-1 stride said "contiguous"). So the accidental part is
removed on both sides: before each call of an operator in ``FORMAT_READERS``, a 4-d or 5-d tensor
argument with a size-1 dimension is recorded through ``canonical_layout(t)``, which gives each size-1
dimension the stride a contiguous tensor has there (the stride of the next dimension times its size)
and then, where the tensor is not contiguous in the format its strides now suggest, copies it to that
format, as ``F.group_norm`` itself does. The kernel runs on that result, on shadows while tracing and
on real values at run time, so both decide alike, from sizes and the strides of the other dimensions
only. Invariants: the record never changes values; its result is contiguous in the memory format it
suggests; it is a view of its argument unless it had to copy.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.ir import Symbol
from jitcore.proxies.tensor import PlainTensorProxy

__all__ = ["CANONICAL_LAYOUT", "FORMAT_READERS", "canonical_layout", "pin_unit_strides"]

_aten = torch.ops.aten

# Operators whose CPU or CUDA kernels read their input's ``suggest_memory_format`` (to check it or to
# pick their output's format), forward and backward.
FORMAT_READERS = frozenset(
    packet
    for name in (
        "native_group_norm", "native_group_norm_backward", "native_batch_norm", "native_batch_norm_backward",
        "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
        "_native_batch_norm_legit_functional",
        "convolution", "_convolution", "convolution_backward", "mkldnn_convolution",
        "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "max_pool3d_with_indices",
        "max_pool3d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward", "avg_pool3d",
        "avg_pool3d_backward",
        "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d",
        "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d", "adaptive_max_pool2d_backward",
        "adaptive_max_pool3d", "adaptive_max_pool3d_backward",
        "upsample_nearest2d", "upsample_nearest2d_backward", "_upsample_nearest_exact2d",
        "_upsample_nearest_exact2d_backward", "upsample_bilinear2d", "upsample_bilinear2d_backward",
        "_upsample_bilinear2d_aa", "upsample_bicubic2d", "upsample_bicubic2d_backward", "upsample_nearest3d",
        "upsample_nearest3d_backward", "upsample_trilinear3d", "upsample_trilinear3d_backward",
        "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle",
        "cudnn_convolution", "cudnn_batch_norm", "miopen_batch_norm",
    )
    if (packet := getattr(_aten, name, None)) is not None
)


def canonical_layout(value: torch.Tensor) -> torch.Tensor:
    """``value`` with canonical strides in its size-1 dimensions, copied to the memory format those
    suggest where it is not contiguous in it (Note [Strides of size-1 dimensions])."""
    return _canonical(value, always_view=False)


def _canonical(value: torch.Tensor, always_view: bool) -> torch.Tensor:
    shape, stride = tuple(value.shape), value.stride()
    canon = list(stride)
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            canon[d] = canon[d + 1] * shape[d + 1] if d + 1 < len(shape) else 1
    if always_view or tuple(canon) != stride:
        value = value.as_strided(shape, canon, value.storage_offset())
    fmt = _suggested_format(shape, tuple(canon))
    return value if value.is_contiguous(memory_format=fmt) else value.contiguous(memory_format=fmt)


def _suggested_format(shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.memory_format:
    """What ``Tensor.suggest_memory_format()`` answers for a dense tensor of these sizes and strides
    (c10's ``is_channels_last_strides_2d/3d``): channels-last where the channel dimension is the
    innermost and the rest follow from the last dimension outwards."""
    if len(shape) == 4:
        order, fmt = (1, 3, 2, 0), torch.channels_last
    else:
        order, fmt = (1, 4, 3, 2, 0), torch.channels_last_3d
    if stride[1] == 0:
        return torch.contiguous_format
    least = 0
    for d in order:
        if shape[d] == 0 or stride[d] < least or (d == 0 and least == stride[1]):
            return torch.contiguous_format
        least = stride[d] * shape[d] if shape[d] > 1 else stride[d]
    return fmt


def _on_shadows(value: torch.Tensor) -> torch.Tensor:
    return _canonical(value, always_view=True)


def _meta(value: PlainTensorProxy) -> Any:
    from jitcore.langctx.shadows import evaluate

    return evaluate(_on_shadows, (value,), {})


CANONICAL_LAYOUT = Symbol(
    id="canonical_layout",
    name="canonical_layout",
    langctx="aten",
    fn=canonical_layout,
    path="jitcore.langctx.unit_strides.canonical_layout",
    meta=_meta,
    tags=frozenset({"view"}),
)


def pin_unit_strides(func: Any, args: tuple) -> tuple:
    """``args`` of a call of ``func``, with each 4-d or 5-d tensor with a size-1 dimension recorded
    through ``canonical_layout`` when ``func`` reads memory formats (Note [Strides of size-1 dimensions])."""
    if getattr(func, "overloadpacket", None) not in FORMAT_READERS:
        return args
    return tuple(_pinned(v) for v in args)


def _pinned(value: Any) -> Any:
    if type(value) is not PlainTensorProxy:
        return value
    shape, stride = tuple(value.shape), tuple(value.stride())
    if len(shape) not in (4, 5) or 1 not in shape or not all(type(n) is int for n in shape + stride):
        return value
    return CANONICAL_LAYOUT(value)
