"""The flatten protocol of a tensor subclass: its own, or one derived from its attributes.

Tracing a subclass value needs its inner tensors (``__tensor_flatten__``) and a way to rebuild it
around new ones (``__tensor_unflatten__``). Subclasses written for torch.compile define both. Many
others (``torch.masked.MaskedTensor``, ``logging_tensor.LoggingTensor``, most subclasses written before
torch.compile) are wrapper subclasses (``_make_wrapper_subclass`` + ``__torch_dispatch__``) that keep
their inner tensors as ordinary attributes or slots. For those the protocol is derived:
- flatten: the attributes (instance dict and ``__slots__``) holding tensors, sorted by name; the ctx
  is the other attributes' values plus the outer dtype and device;
- unflatten: a wrapper of the class (``_make_wrapper_subclass``, the class's own ``__new__`` and
  ``__init__`` are not run) with those attributes set.
Invariants: every caller goes through ``tensor_flatten``/``tensor_unflatten``, so a class's own
protocol is used whenever it has one; a subclass whose values hold storage of their own (made with
``_make_subclass``) and define ``__torch_dispatch__`` has no protocol (``is_wrapper`` is False): it
runs eagerly (jitcore.errors.EagerOnlySubclass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from jitcore.proxies.dtensor_unflatten import dtensor_unflatten
from jitcore.proxies.tensor import TensorProxy

__all__ = [
    "DerivedContext", "WithConstants", "ctx_without_layout", "eager_only_reason", "has_nested_ints",
    "has_own_protocol", "instance_attributes", "is_wrapper", "replaced_at", "size_places", "tensor_flatten",
    "tensor_unflatten", "unflatten_around",
]

_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass  # noqa: SLF001
_TENSORS = (torch.Tensor, TensorProxy)
_TORCH_BASES = (torch.Tensor, torch._C.TensorBase, object)  # noqa: SLF001


# Subclasses jitcore runs eagerly (jitcore.errors.EagerOnlySubclass), by the class that defines them,
# and why. A subclass of one of them inherits its reason. None at present: DTensor and nested jagged
# tensors are traced; calls whose subclass code jitcore cannot trace become eager entries one by one.
_EAGER_ONLY: dict[str, str] = {}


def eager_only_reason(cls: type) -> str | None:
    """Why tensors of ``cls`` run eagerly instead of being traced (None: they are traced)."""
    for klass in getattr(cls, "__mro__", ()):
        reason = _EAGER_ONLY.get(f"{klass.__module__}.{klass.__qualname__}")
        if reason is not None:
            return reason
    return None


def has_nested_ints(tensor: torch.Tensor) -> bool:
    """Whether a size of ``tensor`` is a SymInt: a nested jagged tensor's ragged size (a nested int,
    ``j0``), which its class computes from the offsets tensor (Note [Nested ints],
    jitcore/langctx/shadows.py)."""
    return any(type(size) is torch.SymInt for size in tensor.shape)


def has_own_protocol(cls: type) -> bool:
    """Whether ``cls`` defines ``__tensor_flatten__`` and ``__tensor_unflatten__``."""
    return hasattr(cls, "__tensor_flatten__") and hasattr(cls, "__tensor_unflatten__")


def is_wrapper(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a wrapper subclass instance (metadata only, no storage of its own)."""
    try:
        tensor.untyped_storage().data_ptr()
    except RuntimeError:
        return True
    return False


class DerivedContext(tuple):
    """The ctx of a derived flatten: ``(non-tensor attributes as (name, value) pairs, dtype, device)``."""

    __slots__ = ()

    def __repr__(self) -> str:
        attrs, dtype, device = self
        shown = ", ".join(f"{name}={value!r}" for name, value in attrs)
        return f"attributes({shown}; {dtype}, {device})"


class WithConstants(tuple):
    """The ctx of a class whose ``__tensor_flatten__`` names attributes that are not tensors:
    ``(its own ctx, those attributes as (name, value) pairs)``; they go back to its
    ``__tensor_unflatten__`` among the inner tensors, as it expects them."""

    __slots__ = ()

    def __repr__(self) -> str:
        ctx, constants = self
        return f"{ctx!r} with {', '.join(f'{n}={v!r}' for n, v in constants)}"


# Note [A DTensor's ctx without its sizes]
# DTensor's flatten ctx holds its ``TensorMeta``: its global shape and stride, and its dtype. The shape
# and stride are the value's own outer sizes and strides (``__tensor_unflatten__`` rebuilds the meta
# from ``outer_size``/``outer_stride``), which the value's ``tensor`` guard checks already (or, with
# symbolic sizes, the condition that it follows its local tensor: Note [Subclass inputs that follow an
# inner tensor], jit/subclass_inputs.py). Compared in the ctx too, they pinned every DTensor input to
# its shape: a Replicate DTensor over 5 batch sizes traced 5 entries where plain tensors trace 2, and a
# symbolic pass could never be reused. So the ctx is compared with the meta's dtype in its place. (With
# symbolic sizes, an output's ctx is computed from the size inputs, jit/shapes.py: its meta through the
# ``WithConstants`` tuple that carries DTensor's mesh, which ``map_symbolic`` now rebuilds as a tuple.)
def ctx_without_layout(ctx: Any) -> Any:
    """``ctx`` as the prologue compares it: each DTensor ``TensorMeta`` item replaced by its dtype (the
    Note above; the prologue's ``flatten`` guard, prologue/guards.py)."""
    if type(ctx) is not tuple:
        return ctx
    return tuple(item.dtype if _is_dtensor_meta(item) else item for item in ctx)


def _is_dtensor_meta(item: Any) -> bool:
    cls = type(item)
    return cls.__name__ == "TensorMeta" and cls.__module__ == "torch.distributed.tensor._dtensor_spec"


def instance_attributes(value: Any, cls: type | None = None) -> dict[str, Any]:
    """The attributes an instance of ``cls`` (its type by default; a proxy's user class) holds: its
    slots (of classes below torch.Tensor), then its dict."""
    found: dict[str, Any] = {}
    for klass in (cls or type(value)).__mro__:
        if klass in _TORCH_BASES:
            break
        for slot in getattr(klass, "__slots__", ()):
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__"):
                try:
                    found[slot] = object.__getattribute__(value, slot)
                except AttributeError:
                    pass
    instance = getattr(value, "__dict__", None)
    if isinstance(instance, dict):
        found.update(instance)
    return found


def tensor_flatten(value: Any, cls: type | None = None) -> tuple[list[str], Any]:
    """``(inner tensor attribute names, ctx)`` of a subclass value (a real instance, or a proxy of
    ``cls`` whose attributes are the ones the class's code stored)."""
    cls = cls or type(value)
    if has_own_protocol(cls):
        names, ctx = cls.__tensor_flatten__(value)
        tensors = [n for n in names if isinstance(getattr(value, n), _TENSORS)]
        if len(tensors) < len(names):  # DTensor lists its device_mesh: passed back to unflatten as it is
            constants = tuple((n, getattr(value, n)) for n in names if n not in tensors)
            return tensors, WithConstants((ctx, constants))
        return list(names), ctx
    attributes = {n: v for n, v in instance_attributes(value, cls).items() if n not in _TORCH_CACHES}
    names = sorted(n for n, v in attributes.items() if isinstance(v, _TENSORS))
    others = tuple(sorted((n, v) for n, v in attributes.items() if not isinstance(v, _TENSORS)))
    return names, DerivedContext((others, value.dtype, value.device))


# What torch's C++ caches on a wrapper with ``dispatch_sizes_strides_policy`` the first time its sizes
# or strides are asked (the answers of its __torch_dispatch__, as capsules): not the value's state,
# and present or not depending on whether anything asked yet (a gradient built by autograd has none).
_TORCH_CACHES = frozenset(
    f"_{sym}{kind}_capsule{suffix}"
    for sym in ("", "sym_") for kind in ("sizes", "strides") for suffix in ("", "_len")
)


def is_torch_cache(name: str) -> bool:
    """Whether an instance attribute is one torch's C++ caches on a wrapper (not the class's own)."""
    return name in _TORCH_CACHES


# Note [An inherited __tensor_unflatten__]
# A subclass of a subclass often inherits its base's ``__tensor_unflatten__``, which names the base
# (TwoTensor's builds ``TwoTensor(a, b)``) while its ``__torch_dispatch__`` builds ``cls(a, b)``:
# eagerly the values are of the derived class. Built through the protocol (an input's shadow, the
# outputs a computation rebuilds) the value takes the derived class back; the base's layout is its
# own (no fields of the derived class's own are missing: its ctx says nothing of them).


def tensor_unflatten(cls: type, inner: dict[str, Any], ctx: Any, outer_size: Any, outer_stride: Any,
                     policy: str | None = None) -> Any:
    """A value of ``cls`` around ``inner`` (the class's own ``__tensor_unflatten__`` when it has one;
    otherwise a wrapper made with ``dispatch_sizes_strides_policy=policy`` where one is given)."""
    if has_own_protocol(cls):
        if type(ctx) is WithConstants:
            ctx, constants = ctx
            inner = {**inner, **dict(constants)}
        out = dtensor_unflatten(cls, inner, ctx, outer_size, outer_stride)
        if type(out) is not cls and isinstance(out, torch.Tensor) and issubclass(cls, type(out)):
            with contextlib.suppress(TypeError):  # Note [An inherited __tensor_unflatten__]
                out.__class__ = cls  # (a derived class with slots of its own keeps the base's value)
        return out
    others, dtype, device = ctx
    layout = {} if policy is None else {"dispatch_sizes_strides_policy": policy}
    out = _make_wrapper_subclass(cls, outer_size, strides=outer_stride, dtype=dtype, device=device, **layout)
    for name, tensor in inner.items():
        object.__setattr__(out, name, tensor)
    for name, value in others:
        object.__setattr__(out, name, value)
    return out


# Note [A caller's value holds its own inner tensors]
# A subclass input is rebuilt, for tracing, around the shadows of its inner tensors. Its class's
# ``__tensor_unflatten__`` may store something else than what it was given: torch's ``ComplexTensor``
# keeps ``real.detach()`` (a new tensor object). The caller's value holds the tensors its flatten
# reported, which the computation receives as arguments; the rebuilt value must hold those very shadows,
# or what the program reads from it (``x._re``) is a tensor no argument names.


def unflatten_around(cls: type, inner: dict[str, Any], ctx: Any, outer_size: Any, outer_stride: Any,
                     policy: str | None = None) -> Any:
    """``tensor_unflatten`` for a value that holds ``inner`` themselves (Note [A caller's value holds its
    own inner tensors]); ValueError when the class will not hold them (a read-only property)."""
    out = tensor_unflatten(cls, inner, ctx, outer_size, outer_stride, policy)
    for name, tensor in inner.items():
        if getattr(out, name, None) is not tensor:
            with contextlib.suppress(AttributeError, TypeError):
                object.__setattr__(out, name, tensor)
            if getattr(out, name, None) is not tensor:
                raise ValueError(f"its __tensor_unflatten__ does not keep the inner tensor {name!r}")
    return out


def size_places(ctx: Any) -> tuple[tuple[Any, ...], ...]:
    """The places (paths of dict keys and sequence indices, through dicts, lists and tuples) of
    ``ctx`` that hold a torch.Size (Note [A torch.Size in a flatten ctx], jitcore/dispatch/flatten.py)."""
    places: list[tuple[Any, ...]] = []

    def walk(tree: Any, keys: tuple) -> None:
        if type(tree) is torch.Size:
            places.append(keys)
        elif type(tree) is dict:
            for k, v in tree.items():
                walk(v, (*keys, k))
        elif type(tree) in (list, tuple):
            for i, v in enumerate(tree):
                walk(v, (*keys, i))

    walk(ctx, ())
    return tuple(places)


def replaced_at(tree: Any, keys: tuple, make: Callable[[Any], Any]) -> Any:
    """``tree`` (dicts, lists and tuples) with the value at ``keys`` replaced by ``make(value)``."""
    if not keys:
        return make(tree)
    key, rest = keys[0], keys[1:]
    if type(tree) is dict:
        return {**tree, key: replaced_at(tree[key], rest, make)}
    items = list(tree)
    items[key] = replaced_at(items[key], rest, make)
    return items if type(tree) is list else type(tree)(items)
