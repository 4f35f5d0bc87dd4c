"""DTensor's ``__tensor_unflatten__``, where torch's own does not give back the spec it flattened.

``DTensor.__tensor_flatten__`` reports ``(placements, tensor_meta, shard_order, requires_grad)``, not its
spec's ``use_strided_shard_as_shard_order``. A spec with a ``_StridedShard`` placement and that flag False
(what DTensor's view propagation makes: ``kron`` of ``Shard(0)`` inputs at world size 2 gives
``_StridedShard(dim=0, sf=5)`` with ``shard_order`` set) cannot be rebuilt by torch's unflatten, which
leaves the flag to be inferred (True where a ``_StridedShard`` is present) and then refuses the given
shard order. Here such a ctx is rebuilt with the flag False, the spec eager's value holds.

Invariant: every other DTensor ctx goes through the class's own ``__tensor_unflatten__`` unchanged; the
flag is recovered exactly (a True flag flattens with ``shard_order`` None, a False one with it set).
"""

from __future__ import annotations

import sys
from typing import Any

import torch

__all__ = ["dtensor_unflatten"]


def dtensor_unflatten(cls: type, inner: dict[str, Any], ctx: Any, outer_size: Any, outer_stride: Any) -> Any:
    """``cls.__tensor_unflatten__(inner, ctx, outer_size, outer_stride)``, or, for a DTensor ctx whose
    strided shards are not its shard order, a DTensor with that spec (Note [A strided shard's order])."""
    if _is_dtensor(cls) and type(outer_size) is not torch.Size \
            and all(type(n) is int for n in outer_size):  # Note [A DTensor spec's shape]
        outer_size = torch.Size(outer_size)
    spec = _strided_spec(cls, inner, ctx, outer_size, outer_stride)
    if spec is None:
        return cls.__tensor_unflatten__(inner, ctx, outer_size, outer_stride)
    return cls(inner["_local_tensor"], spec, requires_grad=ctx[3])


# Note [A DTensor spec's shape]
# A DTensor output rebuilt from its local tensor got its outer size as a tuple, and torch's unflatten
# stores it in the spec: ``out._spec.tensor_meta.shape`` (its flatten ctx) was ``(4,)`` where eager's
# sharding propagation gives ``torch.Size([4])`` (equal by ``==``, another type). The size is a
# torch.Size, as a tensor's ``size()`` is.
def _is_dtensor(cls: type) -> bool:
    """Whether ``cls`` unflattens with DTensor's own ``__tensor_unflatten__``."""
    api = sys.modules.get("torch.distributed.tensor._api")
    return api is not None and getattr(cls, "__tensor_unflatten__", None) is api.DTensor.__tensor_unflatten__


# Note [A strided shard's order]
# torch's DTensorSpec reads ``_StridedShard`` placements as the shard order unless told otherwise
# (``use_strided_shard_as_shard_order=False``), and then refuses an explicit ``shard_order``. A DTensor
# op's output may hold the other kind (a reshape after a shard: ``kron``), whose flatten ctx has both a
# ``_StridedShard`` and a ``shard_order``; torch's ``__tensor_unflatten__`` raised on it ("DTensorSpec
# doesn't allow specify shard_order ..."), so every program returning such a DTensor ran eagerly.
def _strided_spec(cls: type, inner: dict[str, Any], ctx: Any, outer_size: Any, outer_stride: Any) -> Any:
    if not _is_dtensor(cls):
        return None
    placements, meta, shard_order, _ = ctx
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor.placement_types import _StridedShard

    if shard_order is None or not any(isinstance(p, _StridedShard) for p in placements):
        return None
    meta = TensorMeta(outer_size, outer_stride, meta.dtype)
    return DTensorSpec(inner["device_mesh"], placements, tensor_meta=meta, shard_order=shard_order,
                       use_strided_shard_as_shard_order=False)
