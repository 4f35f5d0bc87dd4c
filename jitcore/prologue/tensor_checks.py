"""A tensor guard's metadata checks in one C call on a prologue's fast path, where torch offers one.

Invariant: the fast path accepts exactly the tensors the printed prologue's checks accept. The C
check is only a shortcut: when it passes, the Python checks would pass too (it checks the same
properties or stricter ones); when it fails, the Python checks decide, as before.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

from jitcore.prologue.guards import TensorSpec

__all__ = ["applies", "render_tensor_failure_fast", "render_tensor_run_failure_fast"]

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


def _c_arguments(spec: TensorSpec) -> tuple[torch.Tensor, list[int], list[int | None]] | None:
    """``TensorGuards``'s arguments for one tensor of ``spec`` (an example tensor, its sizes and
    strides), or None where the C check does not apply."""
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
    return example, list(spec.shape), strides


def _c_check(specs: list[TensorSpec]) -> Callable[..., bool] | None:
    """``TensorGuards(...).check`` for tensors of ``specs``, in order, or None where it does not apply
    to one of them."""
    arguments = [_c_arguments(spec) for spec in specs]
    if any(a is None for a in arguments):
        return None
    guards = _TensorGuards(*[a[0] for a in arguments], dynamic_dims_sizes=[a[1] for a in arguments],
                           dynamic_dims_strides=[a[2] for a in arguments])
    return guards.check


def applies(spec: TensorSpec) -> bool:
    """Whether the C check applies to a tensor guard of ``spec``."""
    return _c_arguments(spec) is not None


def render_tensor_failure_fast(v: str, spec: TensorSpec, bind: Callable[[Any], str],
                               render: Callable[[TensorSpec], str]) -> str | None:
    """The fast path's failure expression of a tensor guard (Note [Tensor checks in one C call]), or
    None where the C check does not apply. ``render``: the guard's own failure expression of a spec."""
    check = _c_check([spec])
    if check is None:
        return None
    return f"{_checked(v, spec, bind(check), render)}{_offset(v, spec)}"


def _checked(v: str, spec: TensorSpec, check: str, render: Callable[[TensorSpec], str]) -> str:
    return f"(not {check}({v}) and ({render(dataclasses.replace(spec, storage_offset=None))}))"


def _offset(v: str, spec: TensorSpec) -> str:
    return f" or {v}.storage_offset() != {spec.storage_offset!r}" if spec.storage_offset is not None else ""


# Note [A run of tensor checks in one C call]
# A module's parameters are guarded one after another at the end of its prologue (the tiny Llama's 22):
# one ``TensorGuards.check`` call per tensor cost about 0.16 us each, one call for all of them about
# 0.09 us a tensor (/tmp/spd56-probes/tg.py: 3.77 vs 2.05 us for 23). A run of consecutive tensor guards
# the C check applies to, none of whose paths reads through another tensor of the run, is rendered as
# the run's reads, then ``(not check_all(v1, ..., vn) and (F1 or ... or Fn)) or O1 or ... or On``, with
# Fi the tensor's own failure expression (Note [Tensor checks in one C call]: its own C check, then the
# guard's Python checks) and Oi its storage-offset check. ``check_all`` passes exactly when each
# tensor's own check passes (TensorGuards checks each argument against its own spec), so the line
# misses exactly where the run's lines missed one by one. The reads move before the checks of the
# tensors read before them: a read is guarded by the checks of its own path's prefixes, which were
# rendered before the run (no path of the run goes through a tensor of the run), and a read that
# raises misses, as a failed check before it did.
def render_tensor_run_failure_fast(tensors: list[tuple[str, TensorSpec]], bind: Callable[[Any], str],
                                   render: Callable[[str, TensorSpec], str]) -> str | None:
    """The fast path's failure expression of a run of tensor guards ``tensors`` (variable, spec),
    checked in one C call (Note [A run of tensor checks in one C call]), or None where the C check does
    not apply to one of them. ``render``: a guard's own failure expression of a variable and a spec."""
    specs = [spec for _, spec in tensors]
    check_all = _c_check(specs)
    if check_all is None:
        return None
    own = []
    for v, spec in tensors:
        check = bind(_c_check([spec]))
        own.append(_checked(v, spec, check, functools.partial(render, v)))
    variables = ", ".join(v for v, _ in tensors)
    offsets = "".join(_offset(v, spec) for v, spec in tensors)
    return f"(not {bind(check_all)}({variables}) and ({' or '.join(own)})){offsets}"
