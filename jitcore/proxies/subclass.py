"""SubclassTensorProxy: a traceable tensor subclass instance while tracing.

A traceable wrapper subclass (made with ``torch.Tensor._make_wrapper_subclass``, defining
``__torch_dispatch__``, ``__tensor_flatten__`` and ``__tensor_unflatten__``) is represented by a
proxy that carries its class, its outer metadata, and — as ordinary attributes, exactly as the
subclass's ``__init__`` stores them — its inner tensors (proxies) and other fields. Invariants:
- ``python_type`` is the user's class: ``type(x)`` and ``isinstance`` answer it in interpreted code;
- the *shadow* (a real instance of the subclass over the inner proxies' fake shadows, built with
  the class's own ``__tensor_unflatten__``) is what torch's dispatcher sees while a call is
  resolved; it is built on first use and belongs to this proxy only;
- methods and properties of the user's class not shadowed by torch operations are found through the
  class and bound to the proxy.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from jitcore.proxies.protocol import tensor_flatten, tensor_unflatten
from jitcore.proxies.tensor import TensorProxy, describe_tensor, wrapper_tensor

__all__ = ["SubclassTensorProxy", "is_traceable_subclass", "missing_slot"]


def is_traceable_subclass(cls: type) -> bool:
    """Whether tensors of ``cls`` can be traced through their ``__torch_dispatch__`` (wrapper values
    of a class without the flatten protocol get a derived one: jitcore/proxies/protocol.py)."""
    return (
        isinstance(cls, type)
        and issubclass(cls, torch.Tensor)
        and cls is not torch.Tensor
        and not issubclass(cls, torch.nn.Parameter)
        and "__torch_dispatch__" in _class_dict_chain(cls)
    )


def _class_dict_chain(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (torch.Tensor, torch._C.TensorBase, object):
            break
        names.update(vars(klass))
    return names


def missing_slot(cls: type, name: str) -> AttributeError:
    """CPython's error for an unset ``__slots__`` field: the class by name, by its fully qualified
    name since 3.13."""
    shown = cls.__name__
    if sys.version_info >= (3, 13) and cls.__module__ != "builtins":
        shown = f"{cls.__module__}.{cls.__qualname__}"
    return AttributeError(f"'{shown}' object has no attribute '{name}'")


_MISSING = object()
_SLOT = types.MemberDescriptorType
# The proxy's own machinery, never taken from the user's class.
_PROXY_NAMES = frozenset({
    "subclass", "outer", "_shadow", "shadow", "set_shadow", "flatten", "inner_tensors", "python_type",
    "describe", "name", "__dict__", "__class__", "__setattr__", "__getattribute__", "__getattr__",
})
_USER_ATTRIBUTES: dict[tuple[type, str], Any] = {}


def _user_attribute(cls: type, name: str) -> Any:
    """``name`` as the user's class (below torch.Tensor) defines it, or _MISSING."""
    key = (cls, name)
    found = _USER_ATTRIBUTES.get(key, None)
    if found is None:
        found = _MISSING
        for klass in cls.__mro__:
            if klass in (torch.Tensor, torch._C.TensorBase, object):
                break
            if name in vars(klass):
                found = vars(klass)[name]
                break
        _USER_ATTRIBUTES[key] = found
    return found


class SubclassTensorProxy(TensorProxy):
    """A tensor-subclass value while tracing: class, outer metadata and inner attributes."""

    __slots__ = ("_shadow", "outer", "subclass")

    @staticmethod
    def __new__(cls, name: str, subclass: type, outer: torch.Tensor) -> SubclassTensorProxy:
        return wrapper_tensor(cls, outer)

    def __init__(self, name: str, subclass: type, outer: torch.Tensor) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "subclass", subclass)
        object.__setattr__(self, "outer", outer)
        object.__setattr__(self, "_shadow", None)

    # --- identity ---------------------------------------------------------------------------------
    @property
    def python_type(self) -> type:
        return self.subclass

    def describe(self) -> str:
        return f"{self.subclass.__name__}[{describe_tensor(self.outer)}]"

    def __repr__(self) -> str:
        return f'SubclassTensorProxy({self.name}, "{self.describe()}")'

    # --- the shadow: a real subclass instance over fake inner tensors --------------------------------
    @property
    def shadow(self) -> torch.Tensor:  # type: ignore[override]
        built = object.__getattribute__(self, "_shadow")
        if built is None:
            names, ctx = self.flatten()
            inner = {n: getattr(self, n).shadow for n in names}
            built = tensor_unflatten(self.subclass, inner, ctx, self.outer.shape, self.outer.stride())
            object.__setattr__(self, "_shadow", built)
        return built

    def set_shadow(self, shadow: torch.Tensor) -> None:
        """Adopt an existing subclass instance as this proxy's shadow."""
        object.__setattr__(self, "_shadow", shadow)

    def set_outer(self, outer: torch.Tensor) -> None:
        """Replace the tensor holding the outer metadata (after an in-place view op on the wrapper)."""
        object.__setattr__(self, "outer", outer)

    def flatten(self) -> tuple[list[str], Any]:
        """``(inner attribute names, ctx)`` as the class's ``__tensor_flatten__`` gives them."""
        return tensor_flatten(self, self.subclass)

    def inner_tensors(self) -> dict[str, TensorProxy]:
        names, _ = self.flatten()
        return {n: getattr(self, n) for n in names}

    # --- attributes: the instance's own, then the user's class ---------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("name",):
            object.__setattr__(self, name, value)
        elif name == "requires_grad":
            self.requires_grad_(value)  # as on a tensor: ``x.requires_grad = True`` is ``requires_grad_``
        else:
            self.__dict__[name] = value

    def __getattribute__(self, name: str) -> Any:
        # What the user's class defines (up to torch.Tensor) wins over the torch operations a proxy
        # offers: ``x.dequantize()`` on a quantized subclass is the class's method, not the aten op.
        if name not in _PROXY_NAMES:
            subclass = object.__getattribute__(self, "subclass")
            found = _user_attribute(subclass, name)
            if found is not _MISSING:
                instance = object.__getattribute__(self, "__dict__")
                if isinstance(found, _SLOT):  # a __slots__ field: stored in the proxy's dict
                    if name in instance:
                        return instance[name]
                    raise missing_slot(subclass, name)
                if name in instance and not hasattr(type(found), "__set__"):
                    return instance[name]
                get = getattr(type(found), "__get__", None)
                return get(found, self, subclass) if get is not None else found
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"'{self.subclass.__name__}' object has no attribute '{name}'")

    # outer metadata
    @property
    def shape(self) -> torch.Size:
        return self.outer.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.outer.dtype

    @property
    def device(self) -> torch.device:
        return self.outer.device

    @property
    def requires_grad(self) -> bool:
        # the shadow where it exists: autograd flags a result after its outer tensor was made
        built = object.__getattribute__(self, "_shadow")
        return self.outer.requires_grad or (built is not None and built.requires_grad)





def _outer_query(name: str) -> Callable[..., Any]:
    base = getattr(TensorProxy, name)

    def query(self: SubclassTensorProxy, *args: Any, **kwargs: Any) -> Any:
        # Outer metadata is known from _make_wrapper_subclass, before __init__ stores the inner tensors.
        return getattr(self.outer, name)(*args, **kwargs)

    query.__name__ = name
    query.__doc__ = base.__doc__
    return query


for _name in ("size", "stride", "storage_offset", "dim", "ndimension", "numel", "nelement", "element_size",
              "is_contiguous", "is_floating_point", "is_complex", "is_signed", "get_device"):
    setattr(SubclassTensorProxy, _name, _outer_query(_name))
for _name in ("ndim", "layout", "is_cuda", "is_cpu", "itemsize", "nbytes"):
    setattr(SubclassTensorProxy, _name, property(lambda self, _n=_name: getattr(self.outer, _n)))
