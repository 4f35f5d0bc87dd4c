"""SubclassTensorProxy: a traceable tensor subclass instance while tracing.

A traceable wrapper subclass (made with ``torch.Tensor._make_wrapper_subclass``, defining
``__torch_dispatch__``, ``__tensor_flatten__`` and ``__tensor_unflatten__``) is represented by a
proxy that carries its class, its outer metadata, and — as ordinary attributes, exactly as the
subclass's ``__init__`` stores them — its inner tensors (proxies) and other fields. Invariants:
- a proxy is a real instance of the user's class: its class (``proxy_class(cls)``, made once per
  user class) derives from ``cls`` and from SubclassTensorProxy, in that order, so native code sees
  what it sees eagerly: ``isinstance`` against ``cls`` and its bases, ``super()``, the class's
  ``__slots__`` (real slots), class attributes through ``type(x)``, ``x.__class__``, the class's
  methods and properties before the torch operations a proxy offers (by the MRO);
- only jitcore's own machinery is the proxy class's own (``_OWN``: the ``name`` and the proxy's
  fields, ``shadow``, ``__torch_function__``/``__torch_dispatch__`` that record, ``__repr__``),
  so it wins over the user's class; ``type(x)`` under interpretation answers ``python_type``, the
  user's class (natively ``type(x)`` is the proxy class, named as the user's class);
- the *shadow* (a real instance of the subclass over the inner proxies' fake shadows, built with
  the class's own ``__tensor_unflatten__``) is what torch's dispatcher sees while a call is
  resolved; it is built on first use and belongs to this proxy only.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from jitcore.proxies.protocol import tensor_flatten, unflatten_around
from jitcore.proxies.tensor import JaggedOuter, TensorProxy, describe_tensor, wrapper_tensor

__all__ = [
    "SubclassTensorProxy", "is_traceable_subclass", "made_in_inference_mode", "missing_slot", "proxy_class",
    "inner_tensors_first", "register_torch_dispatch", "subclass_proxy",
]


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


def made_in_inference_mode(proxy: torch.Tensor) -> bool:
    """Whether the wrapper object itself (a proxy's) was made inside inference mode: torch's own flag,
    read without recording a call."""
    with torch._C.DisableTorchFunction():  # noqa: SLF001
        return torch._C.TensorBase.is_inference(proxy)  # noqa: SLF001


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


_set = object.__setattr__
_get = object.__getattribute__


class SubclassTensorProxy(TensorProxy):
    """A tensor-subclass value while tracing: the base of each user class's proxy class
    (``proxy_class``), never made itself. Its fields are slots of the proxy class."""

    __slots__ = ()
    subclass: type  # the user's class: a class attribute of each proxy class
    _jitcore_outer: torch.Tensor  # a fake tensor with the outer metadata
    _jitcore_shadow: torch.Tensor | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ``object.__init__`` as the user's class reaches it (``super().__init__()`` from its own):
        # extra arguments are refused where CPython refuses them, a class overriding __init__
        if (args or kwargs) and type(self).__init__ is not SubclassTensorProxy.__init__:
            raise TypeError("object.__init__() takes exactly one argument (the instance to initialize)")

    # --- identity ---------------------------------------------------------------------------------
    @property
    def python_type(self) -> type:
        return self.subclass

    def describe(self) -> str:
        return f"{self.subclass.__name__}[{describe_tensor(self._jitcore_outer)}]"

    def __repr__(self) -> str:
        return f'SubclassTensorProxy({self.name}, "{self.describe()}")'

    # --- the shadow: a real subclass instance over fake inner tensors --------------------------------
    @property
    def shadow(self) -> torch.Tensor:  # type: ignore[override]
        built = self._jitcore_shadow
        if built is None:
            names, ctx = self.inner_flatten()
            inner = {n: _inner_shadow(getattr(self, n)) for n in names}
            outer = self._jitcore_outer
            # made inside ``inference_mode()``, it is an inference tensor as eagerly, wherever it is built
            # (Note [A subclass output made in inference mode], dispatch/flatten.py)
            with torch.inference_mode() if made_in_inference_mode(self) else contextlib.nullcontext():
                built = unflatten_around(self.subclass, inner, ctx, outer.shape, outer.stride(),
                                         self._jitcore_policy)
            if outer.requires_grad and not built.requires_grad and built.is_leaf:
                # made with ``_make_wrapper_subclass(..., requires_grad=True)``: a leaf that requires
                # grad, as the eager value is (``__tensor_unflatten__`` rarely passes the flag on)
                built.requires_grad_(True)
            _set(self, "_jitcore_shadow", built)
        return built

    def set_shadow(self, shadow: torch.Tensor) -> None:
        """Adopt an existing subclass instance as this proxy's shadow."""
        _set(self, "_jitcore_shadow", shadow)

    @property
    def outer_metadata(self) -> torch.Tensor:
        """The fake tensor holding the outer metadata (not ``outer``: that is ``torch.Tensor.outer``,
        the outer product, on a proxy as on the eager value)."""
        return self._jitcore_outer

    def set_outer(self, outer: torch.Tensor) -> None:
        """Replace the tensor holding the outer metadata (after an in-place view op on the wrapper)."""
        _set(self, "_jitcore_outer", outer)

    def set_policy(self, policy: str | None) -> None:
        """The ``dispatch_sizes_strides_policy`` of the value this proxy stands for: its layout queries
        run the class's ``__torch_dispatch__`` (Note [A wrapper that answers its own layout, while
        tracing])."""
        _set(self, "_jitcore_policy", policy)

    def inner_flatten(self) -> tuple[list[str], Any]:
        """``(inner attribute names, ctx)`` as the class's ``__tensor_flatten__`` gives them (not
        ``flatten``: that is the torch operation, as on any tensor)."""
        return tensor_flatten(self, self.subclass)

    def inner_tensors(self) -> dict[str, TensorProxy]:
        names, _ = self.inner_flatten()
        return {n: getattr(self, n) for n in names}

    def carries_grad(self) -> bool:
        """Whether the value or one of its inner tensors (at any depth) requires grad: a graph the
        caller can reach through it (a subclass made under ``no_grad`` carries none). jitcore's own read:
        the class's ``__torch_function__`` is not handed it (Note [jitcore's reads of a shadow])."""
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            if self.requires_grad:
                return True
        return any(
            t.carries_grad() if isinstance(t, SubclassTensorProxy) else isinstance(t, TensorProxy)
            and t.requires_grad for t in self.inner_tensors().values())

    def hold(self, name: str, value: Any) -> None:
        """Set an attribute where the user's class holds it (a slot, else the instance dict), without
        running the class's ``__setattr__`` or a property setter: an adopted instance's state."""
        if name in _OWN or not isinstance(getattr(self.subclass, name, None), _SLOT):
            _get(self, "__dict__")[name] = value
        else:
            _set(self, name, value)

    # outer metadata
    @property
    def shape(self) -> torch.Size:
        return self._jitcore_outer.shape

    @property
    def dtype(self) -> torch.dtype:
        return self._jitcore_outer.dtype

    @property
    def device(self) -> torch.device:
        return self._jitcore_outer.device

    @property
    def requires_grad(self) -> bool:
        # the shadow where it exists: autograd flags a result after its outer tensor was made
        built = self._jitcore_shadow
        return self._jitcore_outer.requires_grad or (built is not None and built.requires_grad)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)  # ``x.requires_grad = True`` is ``requires_grad_``, recorded


_SLOT = types.MemberDescriptorType
# The proxy class's own: its fields (slots), what identifies the proxy, and the protocols through
# which torch reaches jitcore. Everything else is looked up through the user's class first. To the
# interpreted program, a name of these that the user's class defines itself (a method ``describe``)
# is the user's (Note [Names a stand-in shares with the class it stands for],
# jitcore/interpreter/attributes.py); jitcore's own code, native, sees these.
_FIELDS = ("name", "_jitcore_outer", "_jitcore_shadow", "_jitcore_policy")
_OWN = frozenset({
    *_FIELDS, "subclass", "python_type", "shadow", "outer_metadata", "set_shadow", "set_outer",
    "inner_flatten", "inner_tensors", "hold", "describe", "__repr__", "__torch_function__",
    "__torch_dispatch__", "__hash__",
})


# Note [A real tensor among a subclass proxy's inner tensors]
# NJT's ``_get_min_seqlen()`` caches the minimum length as ``torch.zeros(n, 0)`` in the instance's
# metadata cache, an inner tensor of its flatten protocol from then on. Made while tracing from a number
# read (torch's SDPA backend checks read it), it is a real tensor, a constant of the trace
# (DispatchState.proxy_of). A later op on that NJT built its shadow around it: the real tensor has no
# shadow, and ``.shadow`` raised AttributeError ("'NestedTensor' object has no attribute 'shadow'"
# where eager raised SDPA's "No viable backend"). The shadow holds the constant itself, as eager's
# instance does.
def _inner_shadow(inner: torch.Tensor) -> torch.Tensor:
    """The shadow of an inner tensor: a proxy's, or a real constant itself (Note [A real tensor among a
    subclass proxy's inner tensors])."""
    return inner.shadow if isinstance(inner, TensorProxy) else inner


def _machinery(name: str) -> Any:
    return next(vars(k)[name] for k in SubclassTensorProxy.__mro__ if name in vars(k))


@functools.cache
def proxy_class(cls: type) -> type[SubclassTensorProxy]:
    """The class of proxies standing for values of ``cls``: ``cls`` first, then SubclassTensorProxy
    (made once per class; named and placed as ``cls``, so messages read as eagerly)."""
    namespace = {name: _machinery(name) for name in _OWN - {*_FIELDS, "subclass", "python_type"}}
    namespace.update({
        "__slots__": _FIELDS, "subclass": cls, "python_type": cls, "__module__": cls.__module__,
        "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
        "__class__": property(lambda self: cls, doc="The user's class, as on the eager value."),
    })
    meta, bases = type(cls), (cls, SubclassTensorProxy)
    with _init_subclass_skipped(cls):
        try:
            return meta(cls.__name__, bases, namespace)
        except TypeError:  # a metaclass of the user's needing more (``class C(T, metaclass=M, tag=1)``):
            klass = type.__new__(meta, cls.__name__, bases, namespace)  # its __new__ and __init__ not run,
            _TENSOR_META.__init__(klass, cls.__name__, bases, namespace)  # torch's (instances' dealloc) is
            return klass


_TENSOR_META = type(torch.Tensor)  # torch._C._TensorMeta


@contextlib.contextmanager
def _init_subclass_skipped(cls: type) -> Iterator[None]:
    """The user's ``__init_subclass__`` (a registry of subclasses) does not see jitcore's class."""
    own = vars(cls).get("__init_subclass__", _MISSING)
    type.__setattr__(cls, "__init_subclass__", classmethod(_ignore))
    try:
        yield
    finally:
        if own is _MISSING:
            type.__delattr__(cls, "__init_subclass__")
        else:
            type.__setattr__(cls, "__init_subclass__", own)


def _ignore(cls: type, **kwargs: Any) -> None:
    pass


_MISSING = object()


def subclass_proxy(name: str, cls: type, outer: torch.Tensor,
                   policy: str | None = None) -> SubclassTensorProxy:
    """A proxy named ``name`` for a value of ``cls`` whose outer metadata is ``outer``'s (its
    attributes are set by the class's own code, or by ``hold``); ``policy``: the
    ``dispatch_sizes_strides_policy`` it was made with (Note [A wrapper that answers its own layout],
    jitcore/dispatch/flatten.py)."""
    proxy = wrapper_tensor(proxy_class(cls), outer)
    _set(proxy, "name", name)
    _set(proxy, "_jitcore_outer", outer)
    _set(proxy, "_jitcore_shadow", None)
    _set(proxy, "_jitcore_policy", policy)
    return proxy


_STORED = frozenset({"size", "stride", "storage_offset", "dim", "ndimension", "get_device", "element_size"})


# Note [A wrapper that answers its own layout, while tracing]
# A wrapper made with ``dispatch_sizes_strides_policy`` answers its strides and ``is_contiguous()``
# ("strides"), and its sizes, ``dim()``, ``numel()`` and storage offset too ("sizes"), through its
# ``__torch_dispatch__`` eagerly; torch uses its own default where the handler returns None. A proxy
# of one made inside answered from the metadata its ``__new__`` gave (contiguous):
# ``(x.transpose(0, 1) * 2).is_contiguous()`` of torch's WrapperTensorWithCustomSizes was True where
# eager says False. The query runs the class's ``__torch_dispatch__`` on the interpreter with the op
# torch would ask (``aten.sym_stride``...), as eagerly; the handler's own call of that op on its inner
# tensor is answered by the inner proxy (jitcore/langctx/torch.py). An input's proxy gets the policy
# its value answers by (``TensorSpec.layout_from_inner``/``outer_from_inner``, jit/tensor_binding.py):
# with none, its sizes and strides were the caller's as read when it was bound, but ``is_contiguous()``
# was computed from those strides where eager asks the handler: a class answering False for contiguous
# strides (``aten.is_contiguous`` in its table) made ``if x.is_contiguous()`` take the other branch
# than eager (a wrong answer). The handler's answer is computed from the inner tensors and flatten ctx,
# which the prologue guards. The shadow of one
# made inside is built with the policy too: torch's C++ asks the shadow (``Tensor.contiguous()`` asks
# ``is_contiguous()`` and clones only where it is False), and a shadow without the policy answered from
# the contiguous metadata, so ``(x.transpose(0, 1) * 2).contiguous()`` kept the transposed inner tensor
# (strides (1, 2)) where eager copies it ((3, 1)). With the policy, those questions reach the class's
# ``__torch_dispatch__`` on the shadow's fake inner tensors, as a class with its own
# ``__tensor_unflatten__`` (which calls its ``__new__``, policy included) always did.
_ANSWERED: dict[str | None, frozenset[str]] = {
    "strides": frozenset({"stride", "is_contiguous"}),
    "sizes": frozenset({"stride", "is_contiguous", "size", "dim", "ndimension", "numel", "nelement",
                        "storage_offset"}),
}


# the op torch asks the handler for each query but ``is_contiguous`` (whose op depends on its format)
_LAYOUT_OPS = {
    "stride": torch.ops.aten.sym_stride.default, "size": torch.ops.aten.sym_size.default,
    "dim": torch.ops.aten.dim.default, "ndimension": torch.ops.aten.dim.default,
    "numel": torch.ops.aten.sym_numel.default, "nelement": torch.ops.aten.sym_numel.default,
    "storage_offset": torch.ops.aten.sym_storage_offset.default,
}


# the dispatch layer's ``call_torch_dispatch`` (jitcore/dispatch/resolver.py, a layer above this one)
_TORCH_DISPATCH: list[Callable[..., Any]] = []


def inner_tensors_first(values: list[Any]) -> list[Any]:
    """``values``, each subclass value after its inner tensors (at any depth): a size is read from the
    plain tensor that pass 2 computes, not from a wrapper it never builds (Note [A mask in a symbolic
    pass], jitcore/jit/value_reads.py)."""
    found: list[Any] = []
    for value in values:
        if isinstance(value, SubclassTensorProxy):
            found.extend(inner_tensors_first(list(value.inner_tensors().values())))
        found.append(value)
    return found


def register_torch_dispatch(call: Callable[..., Any]) -> None:
    """Let a wrapper's metadata queries run its class's ``__torch_dispatch__`` on the interpreter with
    ``call(types, func, args, kwargs)``: registered by the dispatch layer where it defines it."""
    _TORCH_DISPATCH[:] = [call]


def _answered_by_dispatch(proxy: SubclassTensorProxy, name: str, args: tuple, kwargs: dict) -> Any:
    """What the class's ``__torch_dispatch__`` answers for the query ``name`` (None: torch's default)."""
    call_torch_dispatch = _TORCH_DISPATCH[0]
    aten = torch.ops.aten
    if name == "is_contiguous":
        fmt = args[0] if args else kwargs.get("memory_format", torch.contiguous_format)
        if fmt is torch.contiguous_format:
            func, call_args = aten.is_contiguous.default, (proxy,)
        else:
            func, call_args = aten.is_contiguous.memory_format, (proxy, fmt)
        return call_torch_dispatch((proxy.subclass,), func, call_args, {})
    answer = call_torch_dispatch((proxy.subclass,), _LAYOUT_OPS[name], (proxy,), {})
    if answer is None or name not in ("stride", "size"):
        return answer
    answer = torch.Size(answer) if name == "size" else tuple(answer)
    index = args[0] if args else kwargs.get("dim")
    return answer if index is None else answer[index]


def _outer_query(name: str) -> Callable[..., Any]:
    base = getattr(TensorProxy, name)

    def query(self: SubclassTensorProxy, *args: Any, **kwargs: Any) -> Any:
        if name in _ANSWERED.get(self._jitcore_policy, ()):
            answer = _answered_by_dispatch(self, name, args, kwargs)
            if answer is not None:
                return answer
        # Outer metadata is known from _make_wrapper_subclass, before __init__ stores the inner tensors.
        outer = self._jitcore_outer
        if type(outer) is JaggedOuter and name not in _STORED:
            # computed from nested ints (``is_contiguous``, ``numel``): the nested jagged tensor's own
            # answer, once its inner tensors are stored
            with contextlib.suppress(AttributeError):
                outer = self.shadow
        return getattr(outer, name)(*args, **kwargs)

    query.__name__ = name
    query.__doc__ = base.__doc__
    return query


for _name in ("size", "stride", "storage_offset", "dim", "ndimension", "numel", "nelement", "element_size",
              "is_contiguous", "is_floating_point", "is_complex", "is_signed", "get_device"):
    setattr(SubclassTensorProxy, _name, _outer_query(_name))
for _name in ("ndim", "layout", "is_cuda", "is_cpu", "itemsize", "nbytes"):
    setattr(SubclassTensorProxy, _name, property(lambda self, _n=_name: getattr(self._jitcore_outer, _n)))
