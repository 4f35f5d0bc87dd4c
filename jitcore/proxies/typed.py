"""Proxies of tensor subclasses without ``__torch_dispatch__``: plain data, the user's class on top.

A subclass that only adds Python behaviour (``class Tagged(torch.Tensor)`` with methods, a
``__torch_function__`` that logs or rewrites calls, ``nn.Parameter``) holds an ordinary tensor: the
dispatcher never sees the class. While tracing, such a value is a TensorProxy of a class made for
the user's class (``typed_proxy_class``). Invariants:
- ``python_type`` is the user's class, so ``type(x)``/``isinstance`` answer as eagerly; what the
  user's class defines below ``torch.Tensor`` (methods, properties, class attributes) is found on the
  proxy, and wins over the torch operations a proxy offers, as on the real class;
- the proxy class adds no instance layout (``__slots__ = ()``): a fresh proxy that a torch call
  returned can take the user's class in place, as torch's ``_convert`` gives it eagerly; the user's
  ``__slots__`` fields and instance attributes live in the proxy's ``__dict__`` (an input's are bound
  as state and written back to its tensor: jit/provenance.py, jit/effects.py);
- the recorded operations act on the data only: a computation runs on plain tensors
  (``disables_torch_function``), and outputs get the user's class back at the end.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch

from jitcore.ir.proxy import Proxy
from jitcore.proxies.tensor import PlainTensorProxy, TensorProxy

__all__ = [
    "has_torch_function", "is_plain_subclass", "is_tensor_like", "only_plain_subclass_values", "retype",
    "typed_proxy_class",
]

# The names a proxy class never takes from the user's class: type machinery and the protocols that
# jitcore itself answers (__torch_function__ runs through the resolver, in eager's order).
_NOT_COPIED = frozenset({
    "__dict__", "__weakref__", "__slots__", "__module__", "__qualname__", "__doc__", "__new__", "__init__",
    "__torch_function__", "__torch_dispatch__", "__init_subclass__", "__class_getitem__", "__annotations__",
    "__reduce_ex__", "__deepcopy__", "__repr__", "__getattribute__", "__getattr__", "__setattr__",
    "__delattr__", "__class__", "__hash__", "__eq__", "__firstlineno__", "__static_attributes__",
})
_TORCH_BASES = (torch.Tensor, torch._C.TensorBase, object)  # noqa: SLF001


def is_plain_subclass(cls: type) -> bool:
    """Whether ``cls`` is a tensor subclass the dispatcher never sees (no ``__torch_dispatch__`` of
    its own)."""
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)) or cls is torch.Tensor:
        return False
    impl = cls.__torch_dispatch__
    return getattr(impl, "__func__", impl) is torch._C._disabled_torch_dispatch_impl  # noqa: SLF001


def only_plain_subclass_values(values: tuple | list) -> bool:
    """Whether the tensors among ``values`` are proxies of plain subclasses' instances, at least one."""
    tensors = [v for v in values if isinstance(v, TensorProxy)]
    return bool(tensors) and all(is_plain_subclass(v.python_type) for v in tensors)


def has_torch_function(cls: type) -> bool:
    """Whether tensors of ``cls`` run a ``__torch_function__`` (torch's default one included)."""
    impl = getattr(cls, "__torch_function__", None)
    return impl is not None and getattr(impl, "__func__", impl) is not torch._C._disabled_torch_function_impl  # noqa: SLF001


_NEVER_TENSOR_LIKE = frozenset({int, float, bool, complex, str, type(None), torch.dtype, torch.device, slice})


def is_tensor_like(value: Any) -> bool:
    """No tensor, but its class has a ``__torch_function__`` (Note [Tensor-like values])."""
    cls = type(value)
    return cls not in _NEVER_TENSOR_LIKE and not isinstance(value, (torch.Tensor, Proxy, type)) \
        and has_torch_function(cls)


# Note [Tensor-like values]
# torch offers a call to the ``__torch_function__`` of any argument whose class defines one, tensor or not
# (torch's docs' "Tensor-like type": a class holding a tensor that answers ``torch.sin(obj)`` itself). Left
# to the symbol's meta, that ``__torch_function__`` ran natively and handed the tensor it holds (the
# caller's, real) to a torch function on fake tensors. Such a class overrides as a subclass does, in eager's
# order, interpreted, so what it reads from the value (``self.tensor``) is traced as the program's. A
# Tensor method called on one (``torch.Tensor.add(obj, 1)``) raises C's TypeError, before any override.


class _UserClassBound:
    """A classmethod of the user's class, bound to that class (not to the proxy class)."""

    __slots__ = ("method", "owner")

    def __init__(self, method: classmethod, owner: type) -> None:
        self.method = method
        self.owner = owner

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.method.__get__(None, self.owner)


@functools.cache
def typed_proxy_class(cls: type) -> type[TensorProxy]:
    """The TensorProxy class whose instances stand for tensors of ``cls`` (made once per class)."""
    namespace: dict[str, Any] = {"__slots__": (), "python_type": cls, "__module__": __name__}
    for klass in reversed(cls.__mro__):
        if klass in _TORCH_BASES or klass is torch.nn.Parameter:
            continue
        for name, value in vars(klass).items():
            if name in _NOT_COPIED or isinstance(value, types.MemberDescriptorType):
                continue  # a __slots__ field of the user's class: held in the proxy's __dict__
            namespace[name] = _UserClassBound(value, cls) if isinstance(value, classmethod) else value
    return type(f"{cls.__name__}Proxy", (PlainTensorProxy,), namespace)


def retype(proxy: TensorProxy, cls: type) -> None:
    """Give a proxy that a torch call just returned the user's class (torch's ``_convert``)."""
    proxy.__class__ = PlainTensorProxy if cls is torch.Tensor else typed_proxy_class(cls)
