"""TensorProxy: the stand-in for a torch.Tensor while a program is traced.

A TensorProxy has a name (how the trace refers to it) and a *shadow*: a FakeTensor of the trace's
FakeTensorMode that carries the tensor's metadata (shape, strides, storage offset, dtype, device,
requires_grad) and its aliasing relations to other shadows, but no data. Invariants:
- every metadata query answers from the shadow, so it is exactly what torch computes;
- a shadow belongs to at most one proxy (the trace keeps the reverse map), so an op that returns one
  of its inputs (in-place ops, ``out=``) returns that input's proxy;
- a proxy is a ``torch.Tensor`` to C code too: a storage-less wrapper tensor with the shadow's sizes,
  strides, dtype and device that never requires grad (jitcore differentiates the trace itself). A
  call that reaches torch's dispatcher with it arrives at ``__torch_dispatch__`` and is recorded as
  its operator's symbol; a C function that needs data fails as on a meta tensor;
- ``type(proxy)`` is the proxy's own class; the class the traced program sees (``python_type``:
  ``torch.Tensor``, or the user's subclass) is answered by the jit's ``type``/``isinstance``
  lookasides and the interpreter's ``type_of`` hook;
- ``TensorProxy`` adds no instance layout: a plain tensor's proxy is a ``PlainTensorProxy`` (its
  ``name`` and ``shadow`` in slots), so a subclass value's proxy can also be an instance of a user's
  class that has ``__slots__`` of its own (jitcore/proxies/subclass.py). ``isinstance(x,
  TensorProxy)`` holds for every tensor proxy; ``type(x) is PlainTensorProxy`` for plain ones.

The torch operations on a proxy (methods, operators, ``torch.*`` functions through
``__torch_function__``) are installed by the torch language context (``jitcore.langctx.torch``),
which owns the one table of torch callables.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir.context import current_context
from jitcore.ir.proxy import Proxy

__all__ = ["DTYPE_ABBREVIATIONS", "PlainTensorProxy", "TensorProxy", "describe_tensor", "torch_owns_name",
           "wrapper_tensor"]

DTYPE_ABBREVIATIONS: dict[torch.dtype, str] = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.complex32: "c32",
    torch.complex64: "c64",
    torch.complex128: "c128",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.uint16: "u16",
    torch.uint32: "u32",
    torch.uint64: "u64",
    torch.bool: "b8",
    torch.float8_e4m3fn: "f8e4m3fn",
    torch.float8_e5m2: "f8e5m2",
    torch.float8_e4m3fnuz: "f8e4m3fnuz",
    torch.float8_e5m2fnuz: "f8e5m2fnuz",
}


def describe_tensor(t: Any) -> str:
    """``cpu f32[4, 4]``: device, dtype and shape, as traces print them."""
    dtype = DTYPE_ABBREVIATIONS.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return f"{t.device} {dtype}[{', '.join(str(s) for s in t.shape)}]"


_TENSOR_NAME = vars(torch._C.TensorBase)["name"]  # noqa: SLF001


def torch_owns_name(proxy: TensorProxy) -> bool:
    """Whether ``x.name`` of the tensor ``proxy`` stands for is torch's ``Tensor.name`` (None for any
    tensor that is not a torch.fx graph input), not an attribute of the user's subclass. The proxy's
    own ``name`` (its name in the trace) is jitcore's: the interpreter answers torch's to the program."""
    klass = proxy.python_type
    return next((vars(k)["name"] for k in klass.__mro__ if "name" in vars(k)), None) is _TENSOR_NAME


_PROTOCOLS = frozenset({"__torch_function__", "__torch_dispatch__"})


def protocol_method(proxy: TensorProxy, name: str) -> Any:
    """``x.__torch_function__`` / ``x.__torch_dispatch__`` read by the program: the method of the class
    the proxy stands for, bound as eagerly (a classmethod to the class, a plain method to the value),
    never the proxy class's own, which serves torch's C code (Note [A value's protocol methods]).
    None for any other name."""
    if name not in _PROTOCOLS:
        return None
    method = getattr(proxy.python_type, name)
    return types.MethodType(method, proxy) if isinstance(method, types.FunctionType) else method


# Note [A value's protocol methods]
# torch's Python ``handle_torch_function`` (reached by a library function that checks
# ``has_torch_function`` itself) calls ``overloaded_arg.__torch_function__(...)`` on the value. A proxy's
# own ``__torch_function__`` is jitcore's entry for torch's C code, which would record the library
# function as a torch operation (and refuse it: JC-T001); the program reads the user's class's.


def _note_layout_query() -> None:
    """The traced program asked for strides: the prologue must then guard the inputs' strides."""
    context = current_context()
    if context is not None and context.values is not None:
        context.values.strides_queried = True


class TensorProxy(Proxy, torch.Tensor):
    """A tensor while tracing: a name plus a FakeTensor shadow holding its metadata.

    A proxy is itself a ``torch.Tensor`` (a wrapper subclass with the shadow's sizes, strides,
    dtype and device, and no storage), so C functions, descriptors and operators of any namespace
    accept it. What jitcore intercepts at the torch level arrives through ``__torch_function__``;
    what reaches torch's dispatcher (a C function called with torch functions disabled, a custom op)
    arrives through ``__torch_dispatch__`` and is recorded as that operator's symbol.
    """

    __slots__ = ()  # no layout: PlainTensorProxy holds name and shadow, a subclass proxy's class its own
    name: str
    shadow: torch.Tensor

    # Set by the torch language context: (func, args, kwargs) -> result, for __torch_function__.
    torch_function_handler: ClassVar[Callable[[Any, tuple, dict], Any] | None] = None
    # Set by the aten language context: (op, args, kwargs) -> result, for __torch_dispatch__.
    torch_dispatch_handler: ClassVar[Callable[[Any, tuple, dict], Any] | None] = None

    @staticmethod
    def __new__(cls, name: str, shadow: torch.Tensor) -> TensorProxy:
        return wrapper_tensor(PlainTensorProxy if cls is TensorProxy else cls, shadow)

    def __init__(self, name: str, shadow: torch.Tensor) -> None:
        self.name = name
        self.shadow = shadow

    # --- identity -------------------------------------------------------------------------------
    @property
    def python_type(self) -> type:
        """The class the traced program sees for this value."""
        return torch.Tensor

    def describe(self) -> str:
        return describe_tensor(self.shadow)

    def __repr__(self) -> str:
        return f'TensorProxy({self.name}, "{describe_tensor(self.shadow)}")'

    def __hash__(self) -> int:
        return id(self)

    def __getattr__(self, name: str) -> Any:
        # only for names the class does not have, or an unset slot: eager's error names the program's
        # class, not the proxy's (an unset slot's by its qualified name since 3.13, as CPython does)
        klass = self.python_type
        shown = klass.__name__
        if sys.version_info >= (3, 13) and klass.__module__ != "builtins" and any(
                type(vars(k).get(name)) is types.MemberDescriptorType for k in klass.__mro__):
            shown = f"{klass.__module__}.{klass.__qualname__}"
        raise AttributeError(f"'{shown}' object has no attribute '{name}'", name=name)

    # --- metadata, answered from the shadow ------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self.shadow.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.shadow.dtype

    @property
    def device(self) -> torch.device:
        return self.shadow.device

    @property
    def requires_grad(self) -> bool:
        return self.shadow.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)  # ``t.requires_grad = True`` is ``t.requires_grad_(True)``, recorded

    @property
    def ndim(self) -> int:
        return self.shadow.ndim

    @property
    def layout(self) -> torch.layout:
        return self.shadow.layout

    @property
    def is_leaf(self) -> bool:
        return self.shadow.is_leaf

    @property
    def grad(self) -> Any:
        """An input's ``.grad``, read through its path by the tracing pass (an optimizer, gradient
        clipping), or one a backward of the pass set."""
        return _autograd_calls("torch.Tensor.grad").read_grad(self)

    @grad.setter
    def grad(self, value: Any) -> None:
        """``w.grad = None`` (or a tensor of the program's): an input's gradient set as an effect."""
        _autograd_calls("torch.Tensor.grad").write_grad(self, value)

    def backward(self, gradient: Any = None, retain_graph: Any = None, create_graph: bool = False,
                 inputs: Any = None) -> None:
        """``loss.backward()`` inside the traced program (jitcore/jit/autograd_calls.py)."""
        _autograd_calls("torch.Tensor.backward").tensor_backward(self, gradient, retain_graph, create_graph,
                                                                 inputs)

    def register_hook(self, hook: Callable[..., Any]) -> Any:
        """``h.register_hook(fn)`` on a tensor the program computes, run by a backward inside it
        (jitcore/jit/inner_hooks.py)."""
        return _autograd_calls("torch.Tensor.register_hook").hooks.register(self, hook)

    def retain_grad(self) -> None:
        """``h.retain_grad()`` on a tensor the program computes (jitcore/jit/inner_hooks.py)."""
        _autograd_calls("torch.Tensor.retain_grad").hooks.retain(self)

    @property
    def retains_grad(self) -> bool:
        return _autograd_calls("torch.Tensor.retains_grad").hooks.retains(self)

    @property
    def grad_fn(self) -> None:
        """None where eager's is None whatever the values (no grad required: ``zero_grad`` tests
        ``p.grad.grad_fn``); the autograd graph object itself does not exist while tracing."""
        if not self.shadow.requires_grad:
            return None
        if self.shadow.grad_fn is None and self._is_parameter():
            # a parameter is a leaf (nn.Parameter detaches its data; ops on it return plain tensors):
            # register_parameter's check of a module made inside the function (nn.Linear(...))
            return None
        raise UnsupportedOperationError(
            "torch.Tensor.grad_fn: autograd graph objects are not available while tracing")

    def _is_parameter(self) -> bool:
        """An ``nn.Parameter``, or a subclass value ``nn.Parameter(...)`` marked (``_is_param``)."""
        if issubclass(self.python_type, torch.nn.Parameter):
            return True
        fields = getattr(self, "__dict__", None)
        return isinstance(fields, dict) and fields.get("_is_param") is True

    @property
    def is_cuda(self) -> bool:
        return self.shadow.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.shadow.device.type == "cpu"

    @property
    def is_meta(self) -> bool:
        return self.shadow.device.type == "meta"  # a FakeTensor's device is the one it stands for

    @property
    def is_sparse(self) -> bool:
        return self.shadow.layout is torch.sparse_coo  # an op's result (a sparse gradient) can be

    @property
    def is_quantized(self) -> bool:
        return self.shadow.is_quantized

    @property
    def is_nested(self) -> bool:
        # a nested jagged tensor's proxy (its shadow has the jagged layout); strided nested tensors
        # are not traced (langctx/shadows.py untraced_kind)
        return self.shadow.layout is torch.jagged

    @property
    def itemsize(self) -> int:
        return self.shadow.itemsize

    @property
    def nbytes(self) -> int:
        return self.shadow.nbytes

    def size(self, dim: int | None = None) -> Any:
        return self.shadow.size() if dim is None else self.shadow.size(dim)

    def stride(self, dim: int | None = None) -> Any:
        _note_layout_query()
        return self.shadow.stride() if dim is None else self.shadow.stride(dim)

    def storage_offset(self) -> int:
        _note_layout_query()
        return self.shadow.storage_offset()

    def dim(self) -> int:
        return self.shadow.dim()

    ndimension = dim

    def numel(self) -> int:
        return self.shadow.numel()

    nelement = numel

    def element_size(self) -> int:
        return self.shadow.element_size()

    def is_contiguous(self, memory_format: torch.memory_format = torch.contiguous_format) -> bool:
        _note_layout_query()
        return self.shadow.is_contiguous(memory_format=memory_format)

    def is_floating_point(self) -> bool:
        return self.shadow.is_floating_point()

    def is_complex(self) -> bool:
        return self.shadow.is_complex()

    def is_signed(self) -> bool:
        return self.shadow.is_signed()

    def get_device(self) -> int:
        return self.shadow.get_device()

    def __len__(self) -> int:
        if self.shadow.dim() == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shadow.shape[0]

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        handler = TensorProxy.torch_function_handler
        if handler is None:
            return NotImplemented
        return handler(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        handler = TensorProxy.torch_dispatch_handler
        if handler is None:
            return NotImplemented
        return handler(func, args, kwargs or {})


class PlainTensorProxy(TensorProxy):
    """A plain tensor's proxy (what ``TensorProxy(name, shadow)`` makes): the layout of its fields."""

    __slots__ = ("name", "shadow")


class JaggedOuter(torch.Tensor):
    """The outer metadata of a nested jagged tensor made while tracing (before its inner tensors
    are stored): sizes, strides, dtype, device. Its ragged sizes are nested ints; no op runs on it."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        raise NotImplementedError(f"{func} on the outer metadata of a nested jagged tensor")


def jagged_outer(size: Any, strides: Any, dtype: torch.dtype | None, device: Any, requires_grad: bool,
                 cls: type = JaggedOuter) -> Any:
    """A storage-less tensor (of class ``cls``) with a nested jagged tensor's outer metadata: its
    ragged sizes are nested ints, on which no size arithmetic (contiguous strides, storage size) is
    done."""
    return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
        cls, size, strides=strides, dtype=dtype or torch.get_default_dtype(), layout=torch.jagged,
        device=device or "cpu", requires_grad=requires_grad, storage_size=0)


def wrapper_tensor(cls: type, meta: torch.Tensor) -> Any:
    """A storage-less tensor of class ``cls`` with ``meta``'s metadata. It never requires grad:
    jitcore differentiates the trace itself, so an op reaching the dispatcher skips autograd."""
    if meta.layout is torch.jagged or type(meta) is JaggedOuter:
        return jagged_outer(meta.size(), meta.stride(), meta.dtype, meta.device, False, cls)
    if meta.layout is torch.strided:
        return torch.Tensor._make_wrapper_subclass(
            cls, meta.size(), strides=meta.stride(), storage_offset=meta.storage_offset(), dtype=meta.dtype,
            device=meta.device, requires_grad=False)
    return torch.Tensor._make_wrapper_subclass(cls, meta.size(), dtype=meta.dtype, layout=meta.layout,
                                               device=meta.device, requires_grad=False)


def _autograd_calls(what: str) -> Any:
    context = current_context()
    calls = context.autograd if context is not None else None
    if calls is None:
        raise UnsupportedOperationError(f"{what} is not supported here")
    return calls
