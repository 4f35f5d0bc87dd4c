"""Which calls may write their tensor arguments, and the metadata of a shadow before and after a call.

jitcore/langctx/shadows.py asks these of every call it runs on shadows: a call that may write an
argument skips torch's fake-dispatch cache, and a call that changed an argument's shadow is replayed on
eager's kernel. Invariants:
- ``may_write_inputs`` depends only on the callable and the call's ``out``/``inplace`` keywords; the
  answer for an OpOverload (its schema's write annotations) is computed once per overload;
- ``tensor_metadata`` is ``(shape, strides, storage offset)`` as tuples; ``resized`` never guards a size that
  values decide and never compares symbolic sizes with ``==`` alone.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

__all__ = [
    "WRITES_NO_DATA", "input_metadata", "may_write_inputs", "resized", "tensor_metadata", "writes_self_only",
]

# In-place methods by name that change a tensor's autograd or sharing flags, never its data: a copy
# of the tensor taken to undo writes (a failed value check) must not be made or restored for them
# (restoring bumps the caller's version counter, which breaks eager graphs that saved the tensor).
WRITES_NO_DATA = frozenset({"requires_grad_", "share_memory_"})
# Whether an OpOverload's schema marks an argument as written, by overload (asked for every aten call).
_SCHEMA_WRITES: dict[torch._ops.OpOverload, bool] = {}


# Note [Fake kernels that resize instead of raising]
# Some fake/meta kernels (decompositions of in-place ops such as ``x.pow_(y)`` with ``y`` broadcasting
# to a larger shape) resize an input's shadow where eager raises "output with shape ... doesn't
# match the broadcast shape". So when a call changes the shape, strides or offset of an input shadow,
# the call is replayed on small real tensors with the inputs' metadata from *before* the call; when
# eager raises, its exception is the user's. Calls that legitimately change metadata (``resize_``,
# ``t_``, ``out=`` with an empty tensor) pass the replay and keep the fake result.
#
# Note [FakeTensor cache and in-place resizes]
# torch's fake-dispatch cache is shared by all FakeTensorModes of the process, and a cache hit of an
# in-place call returns the (aliased) input without replaying the kernel's metadata change: the second
# ``a.lt_(b)`` with ``a`` [5, 1] and ``b`` [5, 5] leaves ``a`` at [5, 1], so the resize above goes
# unnoticed and eager's error is lost (measured in torch 2.13). Calls that may write their inputs skip
# the cache; the others keep it (it halves first-call time).
# Note [FakeTensor cache and torchbind]
# An op taking a torchbind object (``c10d::broadcast_``/``scatter_`` and their process group, which
# DTensor's ``distribute_tensor`` reaches) is cached by fake dispatch under a key holding that object,
# and the cache compares keys with ``==``, which a torchbind object does not implement: the second
# fake call of the same op with the same group raised NotImplementedError ('__eq__' is not implemented
# for ...ProcessGroup). The grad transform replays pass 1, so ``distribute_tensor`` of a tensor
# requiring grad made the call run eagerly. Such ops skip the cache.
def may_write_inputs(fn: Any, kwargs: dict) -> bool:
    """Whether a call of ``fn`` may write a tensor argument (in-place, ``out=``, ``__setitem__``)."""
    if "out" in kwargs or kwargs.get("inplace") is True:
        return True
    if isinstance(fn, torch._ops.OpOverload):
        writes = _SCHEMA_WRITES.get(fn)
        if writes is None:
            writes = _SCHEMA_WRITES[fn] = any(
                a.alias_info is not None and a.alias_info.is_write for a in fn._schema.arguments
            )
        return writes
    name = getattr(fn, "__name__", "") or ""
    if name.startswith("__") and name.endswith("__"):
        return name.startswith("__i") or name == "__setitem__"
    return name.endswith("_") and name not in WRITES_NO_DATA


# Note [In-place methods write only self]
# ``new.index_add_(0, a, x)`` writes ``new``, not ``x``; taking every tensor argument of an in-place call as
# written made a failed value check's undo copy ``x`` on every call of a k-means step (and count ``x`` as
# written wherever that decides, jit/read_rollback.py). A method of ``torch.Tensor`` whose every aten
# overload of its name marks ``self`` and nothing else as written (``Tensor(a!) self``) writes only its
# first argument; any other call keeps the answer "all of them".
def writes_self_only(fn: Any, kwargs: dict) -> bool:
    """Whether a call of ``fn`` writes its first argument and no other (Note [In-place methods write only
    self]); False where that is not known."""
    if "out" in kwargs or kwargs.get("inplace") is True:
        return False
    try:
        return _writes_self_only(fn)
    except TypeError:  # an unhashable callable
        return False


@functools.cache
def _writes_self_only(fn: Any) -> bool:
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name.endswith("_") or getattr(torch.Tensor, name, None) is not fn:
        return False
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    return bool(overloads) and all(
        [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
        == [0] for op in overloads)


def tensor_metadata(f: torch.Tensor) -> tuple:
    """``(shape, strides, storage offset)`` of ``f``."""
    return (tuple(f.shape), tuple(f.stride()), f.storage_offset())


def resized(f: torch.Tensor, before: tuple) -> bool:
    """Whether a call changed the metadata of a shadow that had elements (``out=`` tensors with no
    elements are resized by design). A size that values decide (an unbacked symbol, Note [Sizes that
    values decide] in jitcore/jit/shapes.py) is never guarded here: the same symbol is the same size,
    and a shadow of unknown size may have elements."""
    after = tensor_metadata(f)
    if all(type(n) is int for n in (*after[0], *after[1], after[2], *before[0], *before[1], before[2])):
        same = after == before  # static metadata: the comparison below without a call per size
        return not same and math.prod(before[0]) > 0
    same = all(len(a) == len(b) and all(map(_same_size, a, b)) for a, b in zip(after[:2], before[:2]))
    if same and _same_size(after[2], before[2]):
        return False
    return guard_or_true(math.prod(before[0]) > 0)


def _same_size(a: Any, b: Any) -> bool:
    if type(a) is torch.SymInt or type(b) is torch.SymInt:
        if type(a) is type(b) and a.node.expr == b.node.expr:
            return True
        return guard_or_false(a == b)
    return a == b


def input_metadata(leaves: list[Any]) -> dict[int, tuple]:
    """The ``metadata`` of each FakeTensor among ``leaves``, by id."""
    return {id(v): tensor_metadata(v) for v in leaves if isinstance(v, FakeTensor)}
