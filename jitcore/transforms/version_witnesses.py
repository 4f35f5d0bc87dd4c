"""Subclass outputs whose version the backward checks (Note [A saved subclass output written]).

The Function saves plain tensors (a subclass value's inner tensors); eagerly an op saves the outer
tensor. A caller's in-place write to a subclass output bumps only the outer tensor's version counter
(the class's ``__torch_dispatch__`` writes the inner tensors below autograd), so the Function also
keeps, for each such output, a weak reference to it and its version: a *witness* the backward checks.

Invariants:
- a witness is kept for a subclass output of the Function whose inner tensors share storage with a
  value the grad transform's forward saves (a plain output is itself saved: it needs none);
- keeping and checking a witness runs no ``__torch_dispatch__`` or ``__torch_function__`` (a cached
  call runs none) and saves no tensor (a saved-tensor hook sees the same values as without it);
- the backward raises eager's error when a witnessed output that is still alive was written after
  the call, before it computes anything.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch

from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["check_witnesses", "witnesses", "witnessed_outputs"]


# Note [A saved subclass output written]
# ``y, w = x.exp(), x * 2`` with ``x`` a TwoTensor requiring grad, then the caller's ``y.mul_(3)``:
# eagerly ``ExpBackward0`` saved the TwoTensor ``y``, whose version the write bumped, and the backward
# raises "one of the variables needed for gradient computation has been modified by an inplace
# operation". The Function saved ``y``'s inner tensors, which the write does not bump (the class writes
# them below autograd), and the backward computed with the written values (/tmp/grd58-probes/
# saved_written.py). So the Function keeps ``y``'s version and a weak reference to it, and its backward
# raises eager's error when the version moved. ``w``, whose inner tensors nothing saved, stays free to
# write, as eagerly. The outputs are chosen by the grad transform's saved values, not by what a fused
# forward saves (mincut.py may recompute ``y``): eager's graph saved ``y`` either way.
# Saving a plain alias of ``y`` sharing its version counter instead (``detach`` under
# ``torch._C._DisableTorchDispatch``) needs no Python check, but ``ctx.save_for_backward(y)`` runs the
# class's ``detach`` on every call, and the alias of an NJT crashed the interpreter
# (/tmp/grd59-probes/witness_njt.py). What the weak reference misses: a write, after ``y`` died,
# through a ``y.detach()`` sharing its counter (eager's backward raises; the jitted one computes).
def witnessed_outputs(outputs: Sequence[Any], saved: Sequence[Any]) -> tuple[int, ...]:
    """The indices among the forward's ``outputs`` (forward proxies) of the subclass outputs whose inner
    tensors share storage with a value ``saved`` for backward."""
    storages = {_storage_key(value) for value in saved if isinstance(value, TensorProxy)}
    if not storages:
        return ()
    return tuple(
        k for k, output in enumerate(outputs)
        if isinstance(output, SubclassTensorProxy)
        and any(_storage_key(inner) in storages for inner in _plain_inner(output))
    )


def _plain_inner(value: SubclassTensorProxy) -> list[TensorProxy]:
    """The plain tensors inside ``value``, nested wrappers flattened."""
    found: list[TensorProxy] = []
    for inner in value.inner_tensors().values():
        if isinstance(inner, SubclassTensorProxy):
            found += _plain_inner(inner)
        elif isinstance(inner, TensorProxy):
            found.append(inner)
    return found


def _storage_key(proxy: TensorProxy) -> int:
    """Which storage ``proxy``'s shadow uses (a ``detach`` of a value, as the forward saves it, shares it)."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadow = proxy.shadow
        try:
            return shadow.untyped_storage()._cdata  # noqa: SLF001
        except (RuntimeError, NotImplementedError):  # a layout without storage (sparse): itself only
            return id(shadow)


def witnesses(outputs: Sequence[torch.Tensor], indices: tuple[int, ...]) -> tuple[tuple[Any, int, int], ...]:
    """``(weak reference, version, index)`` of each of the forward's ``outputs`` at ``indices``."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - ``_version`` of an NJT: __torch_function__
        return tuple((weakref.ref(outputs[k]), outputs[k]._version, k) for k in indices)


def check_witnesses(witnessed: tuple[tuple[Any, int, int], ...]) -> None:
    """Raise eager's error when a witnessed output still alive was written since the call.

    Raises:
        RuntimeError: as ``SavedVariable::unpack`` raises for a saved value modified in place.
    """
    for ref, version, k in witnessed:
        output = ref()
        if output is None:
            continue
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - as in ``witnesses``
            written = output._version != version
        if written:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{type(output).__name__} {list(output.shape)}], which is output {k} of "
                f"JitcoreFunctionBackward, is at version {output._version}; expected version {version} "
                "instead. Hint: enable anomaly detection to find the operation that failed to compute "
                "its gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False)."
            )
