"""A tensor guard's metadata checks in one C call on a prologue's fast path, where torch offers one.

Invariant: the fast path accepts exactly the tensors the printed prologue's checks accept. The C
check is only a shortcut: when it passes, the Python checks would pass too (it checks the same
properties or stricter ones); when it fails, the Python checks decide, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from jitcore.prologue.guards import TensorSpec

__all__ = ["render_tensor_failure_fast"]

# Note [Tensor checks in one C call]
# A cached call checks each tensor input's type, sizes, dtype, device, grad flag, strides and storage
# offset: seven reads from Python, about 1.1 us a tensor (6 us of a small MLP's 55 us call, its five
# tensors). Dynamo's ``TensorGuards.check`` (torch/csrc/dynamo/guards.cpp) makes the same reads in C
# in about 0.35 us: the exact Python type, the dispatch key set (the backend, so the device type, and
# every other key: a conjugate or negative view, an inference tensor, a functorch wrapper), dtype,
# device index, ``requires_grad``, the number of dimensions and each static size and stride. It is
# stricter than the guard (the dispatch keys, computed under the calling thread's dispatch TLS), so
# the fast path renders ``(not check(v) and (<the guard's checks>)) or <the offset check>``: a tensor
# the C check refuses (an inference tensor, a call under ``inference_mode``) is judged by the
# guard's own checks, and the fast path accepts the same calls as the printed prologue. The storage
# offset, which ``TensorGuards`` does not read, is checked after it. Used for plain ``Tensor`` and
# ``Parameter`` guards on CPU and CUDA tensors; anything else keeps the Python checks.
try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards  # noqa: SLF001
except ImportError:  # a torch without Dynamo's guards: the Python checks only
    _TensorGuards = None

_TYPES = (torch.Tensor, torch.nn.Parameter)


def _c_check(spec: TensorSpec) -> Callable[[Any], bool] | None:
    """``TensorGuards(...).check`` for one tensor of ``spec``, or None where it does not apply."""
    device = spec.device
    if _TensorGuards is None or spec.type not in _TYPES or spec.outer_from_inner or spec.layout_from_inner \
            or device.type not in ("cpu", "cuda") or (device.type == "cuda" and device.index is None) \
            or spec.conj or spec.neg:
        return None
    example = torch.empty((0,), dtype=spec.dtype, device=device)  # only its keys, dtype and device are read
    if spec.type is torch.nn.Parameter:
        example = torch.nn.Parameter(example, requires_grad=spec.requires_grad)
    else:
        example.requires_grad_(spec.requires_grad)
    strides = list(spec.strides) if spec.strides is not None else [None] * len(spec.shape)
    guards = _TensorGuards(example, dynamic_dims_sizes=[list(spec.shape)], dynamic_dims_strides=[strides])
    return guards.check


def render_tensor_failure_fast(v: str, spec: TensorSpec, bind: Callable[[Any], str],
                               render: Callable[[TensorSpec], str]) -> str | None:
    """The fast path's failure expression of a tensor guard (Note [Tensor checks in one C call]), or
    None where the C check does not apply. ``render``: the guard's own failure expression of a spec."""
    check = _c_check(spec)
    if check is None:
        return None
    python = render(dataclasses.replace(spec, storage_offset=None))
    offset = f" or {v}.storage_offset() != {spec.storage_offset!r}" if spec.storage_offset is not None else ""
    return f"(not {bind(check)}({v}) and ({python})){offset}"
