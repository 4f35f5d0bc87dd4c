"""Lookasides that make tensor-subclass code see subclass proxies while it is interpreted.

- ``torch.Tensor._make_wrapper_subclass(cls, size, ...)``, called by a subclass's ``__new__``,
  returns a SubclassTensorProxy of ``cls`` with that outer metadata; the class's ``__init__`` then
  stores the inner tensors on it as on a real instance.
- ``type(x)`` and ``isinstance(x, cls)`` answer with the class a proxy stands for (``TwoTensor``,
  ``torch.Tensor``), never a proxy class.
Invariant: outside a trace both behave exactly as the originals.
"""

from __future__ import annotations

import builtins
from typing import Any

import torch

from jitcore.ir import Proxy, current_context
from jitcore.interpreter.lookasides import isinstance_ as _interpreted_isinstance
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["DISPATCH_LOOKASIDES", "isinstance_of", "make_wrapper_subclass", "python_type", "type_of"]

_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass  # noqa: SLF001


def make_wrapper_subclass(cls: type, size: Any, strides: Any = None, storage_offset: Any = None,
                          memory_format: Any = None, dtype: Any = None, layout: Any = torch.strided,
                          device: Any = None, pin_memory: bool = False, requires_grad: bool = False,
                          **kwargs: Any) -> Any:
    """``_make_wrapper_subclass`` while tracing: a SubclassTensorProxy with this outer metadata."""
    context = current_context()
    if context is None or context.values is None:
        return _make_wrapper_subclass(
            cls, size, strides=strides, storage_offset=storage_offset, memory_format=memory_format,
            dtype=dtype, layout=layout, device=device, pin_memory=pin_memory, requires_grad=requires_grad, **kwargs,
        )
    values = context.values
    size = tuple(size)
    if strides is None:
        strides = torch._prims_common.make_contiguous_strides_for(size) if size else ()  # noqa: SLF001
    with values.fake_mode:
        outer = torch.empty_strided(
            size, tuple(strides), dtype=dtype or torch.get_default_dtype(), device=device or "cpu",
            requires_grad=bool(requires_grad),
        )
    return SubclassTensorProxy(values.names.fresh("t"), cls, outer)


def type_of(*args: Any) -> Any:
    """``type(x)``: the class a proxy stands for; otherwise the builtin ``type``."""
    if len(args) == 1 and isinstance(args[0], Proxy):
        return args[0].python_type
    return builtins.type(*args)


def python_type(obj: Any) -> type:
    """The class ``obj`` stands for (the interpreter's ``type_of`` hook)."""
    return obj.python_type if isinstance(obj, Proxy) else builtins.type(obj)


def isinstance_of(obj: Any, cls: Any) -> bool:
    """``isinstance`` answering for proxies with the class they stand for."""
    if isinstance(obj, Proxy):
        if builtins.type(cls) is tuple:
            return any(isinstance_of(obj, c) for c in cls)
        return issubclass(obj.python_type, cls)
    return _interpreted_isinstance(obj, cls)


DISPATCH_LOOKASIDES: dict[Any, Any] = {
    builtins.isinstance: isinstance_of,
    _make_wrapper_subclass: make_wrapper_subclass,
    builtins.type: type_of,
}
