"""Lookasides that make tensor-subclass code see subclass proxies while it is interpreted.

- ``torch.Tensor._make_wrapper_subclass(cls, size, ...)``, called by a subclass's ``__new__``,
  returns a SubclassTensorProxy of ``cls`` (an instance of ``cls``: jitcore/proxies/subclass.py)
  with that outer metadata; the class's ``__init__`` then stores the inner tensors on it.
- ``type(x)`` and ``isinstance(x, cls)`` answer with the class a proxy stands for (``TwoTensor``,
  ``torch.Tensor``), never a proxy class.
- torch's default ``Tensor.__torch_function__`` (also reached through ``super()``), ``as_subclass``,
  ``_make_subclass`` and ``Tensor.__new__(cls, tensor)`` give proxies the user's class
  (jitcore/proxies/typed.py) instead of making real instances; a subclass with a
  ``__torch_dispatch__`` of its own that these would make is not traceable this way
  (EagerOnlySubclass).
- ``super()`` and a ``__slots__`` field's descriptor applied directly (``Cls.field.__get__(x)``,
  ``__set__``, ``__delete__``) on the proxy of a plain subclass (jitcore/proxies/typed.py, not an
  instance of the user's class): the attributes after the class, the field where the proxy holds it
  (its ``__dict__``).
Invariant: outside a trace all of them behave exactly as the originals.
"""

from __future__ import annotations

import abc
import builtins
import types
from typing import Any

import optree
import torch
from torch.nested._internal import nested_tensor

from jitcore.dispatch.aliasing import ALIASING_LOOKASIDES
from jitcore.dispatch.dtensor import DTENSOR_LOOKASIDES
from jitcore.dispatch.jagged_attention import JAGGED_LOOKASIDES
from jitcore.dispatch.modes import hidden_modes
from jitcore.dispatch.override_checks import OVERRIDE_CHECKS
from jitcore.errors import EagerOnlySubclass
from jitcore.interpreter import current_run
from jitcore.interpreter.callbacks import len_
from jitcore.interpreter.calls import call_function
from jitcore.interpreter.lookasides import isinstance_ as _interpreted_isinstance
from jitcore.interpreter.lookasides import super_arguments, type_
from jitcore.ir import Proxy, current_context, tracing
from jitcore.langctx.aten import aten_symbol
from jitcore.proxies.number import STAND_INS, SYMBOLIC_NUMBERS, symbolic_number_class
from jitcore.proxies.protocol import eager_only_reason
from jitcore.proxies.subclass import SubclassTensorProxy, missing_slot, subclass_proxy
from jitcore.proxies.tensor import TensorProxy, jagged_outer
from jitcore.proxies.text import TextProxy
from jitcore.proxies.typed import is_plain_subclass, retype

__all__ = [
    "DISPATCH_LOOKASIDES", "isinstance_of", "len_of", "make_wrapper_subclass", "python_type", "type_of",
]

_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass  # noqa: SLF001


def make_wrapper_subclass(cls: type, size: Any, strides: Any = None, storage_offset: Any = None,
                          memory_format: Any = None, dtype: Any = None, layout: Any = torch.strided,
                          device: Any = None, pin_memory: bool = False, requires_grad: bool = False,
                          *more: Any, **kwargs: Any) -> Any:
    """``_make_wrapper_subclass`` while tracing: a SubclassTensorProxy with this outer metadata."""
    context = current_context()
    if context is None or context.values is None:
        return _make_wrapper_subclass(  # positionally: ``more`` follows requires_grad, as it was passed
            cls, size, strides, storage_offset, memory_format, dtype, layout, device, pin_memory,
            requires_grad, *more, **kwargs,
        )
    reason = eager_only_reason(cls)
    if reason is not None:
        raise EagerOnlySubclass(f"a {cls.__qualname__} is made inside the function: {reason}")
    values = context.values
    size = tuple(size)
    if strides is None:
        strides = torch._prims_common.make_contiguous_strides_for(size) if size else ()  # noqa: SLF001
    if layout is torch.jagged:  # a nested jagged tensor's: its ragged sizes are nested ints
        outer = jagged_outer(size, tuple(strides), dtype, device, bool(requires_grad))
        return subclass_proxy(values.names.fresh("t"), cls, outer)
    with values.fake_mode:
        outer = torch.empty_strided(
            size, tuple(strides), dtype=dtype or torch.get_default_dtype(), device=device or "cpu",
            requires_grad=bool(requires_grad),
        )
    return subclass_proxy(values.names.fresh("t"), cls, outer, kwargs.get("dispatch_sizes_strides_policy"))


# Note [Symbolic sizes are ints to the program]
# In a pass with symbolic sizes (jitcore/jit/shapes.py) ``x.shape[0]`` is a ``torch.SymInt`` where eager
# has an int: ``type(n) is int`` and ``isinstance(n, int)`` were False, and a program branching on them
# took another path than eager's on every call. A symbolic number answers the class it stands for
# (``SymNode.pytype``: int, float or bool) to ``type()``, ``n.__class__`` (the interpreter's attribute
# path asks ``python_type``, jitcore/interpreter/attributes.py) and ``isinstance`` (which also
# still answers True for ``torch.SymInt``, so torch's own code keeps its symbolic path). A nested
# jagged tensor's ragged size is a SymInt eagerly too, and stays one.
def type_of(*args: Any, **kwargs: Any) -> Any:
    """``type(x)``: the class a proxy or a symbolic number stands for; otherwise the builtin ``type``
    (``type(name, bases, ns, **kwargs)`` too, the keywords going to ``__init_subclass__``)."""
    if len(args) == 1 and not kwargs:
        if issubclass(type(args[0]), (Proxy, TextProxy)):  # not isinstance: it would read ``__class__``,
            return args[0].python_type  # which some objects compute (torch.distributed.reduce_op warns)
        if (number := symbolic_number_class(args[0])) is not None:
            return number
        if type(args[0]) in STAND_INS:
            return STAND_INS[type(args[0])]
    return type_(*args, **kwargs)


def len_of(obj: Any) -> Any:
    """``len(x)``: a tensor's first size, symbolic where it is (``len(x[mask])`` compared with a number
    is then a condition on the size, not its value: Note [Symbolic sizes are ints to the program])."""
    if isinstance(obj, TensorProxy) and obj.ndim:
        first = obj.shape[0]
        if symbolic_number_class(first) is int:
            return first
    return len_(obj)  # a Python __len__ interpreted (Note [C builtins over a Python object's dunders])


def python_type(obj: Any) -> type:
    """The class ``obj`` stands for (the interpreter's ``type_of`` hook)."""
    t = builtins.type(obj)
    if issubclass(t, (Proxy, TextProxy)):  # not isinstance: it reads ``__class__``, which a class computes
        return obj.python_type
    if t in STAND_INS:
        return STAND_INS[t]
    return (symbolic_number_class(obj) or t) if t in SYMBOLIC_NUMBERS else t


def isinstance_of(obj: Any, cls: Any) -> bool:
    """``isinstance`` answering for proxies and symbolic numbers with the class they stand for."""
    if (number := symbolic_number_class(obj)) is not None:  # Note [Symbolic sizes are ints to the program]
        try:
            return issubclass(number, cls) or _interpreted_isinstance(obj, cls)
        except TypeError:  # not a class: isinstance's own error
            return _interpreted_isinstance(obj, cls)
    t = builtins.type(obj)  # (not isinstance: it reads ``__class__``, which a class may compute)
    if issubclass(t, TextProxy):
        return _interpreted_isinstance("", cls)
    if issubclass(t, Proxy):
        if builtins.type(cls) is tuple:
            return any(isinstance_of(obj, c) for c in cls)
        if issubclass(obj.python_type, cls):
            return True
        if issubclass(t, TensorProxy) and _checks_instances(builtins.type(cls)):  # nn.Parameter: _is_param
            return _interpreted_isinstance(obj, cls)
        return False
    return _interpreted_isinstance(obj, cls)


def _checks_instances(meta: type) -> bool:
    """Whether a metaclass decides instances in Python beyond the class hierarchy (torch's
    ``_ParameterMeta``: ``nn.Parameter(TwoTensor(...))`` is a TwoTensor that is a Parameter). Not
    ABCMeta, whose registry jitcore answers from the class a proxy stands for."""
    check = getattr(meta, "__instancecheck__", None)
    return isinstance(check, types.FunctionType) and not issubclass(meta, abc.ABCMeta)


class ProxySuper:
    """``super(cls, proxy)``: attributes after ``cls`` in the MRO of the class the proxy stands for,
    bound to the proxy (a builtin ``super`` refuses a proxy, which is not an instance of ``cls``).
    What torch's own classes define is the proxy's own (its methods record torch operations)."""

    __slots__ = ("_cls", "_proxy")

    def __init__(self, cls: type, proxy: Proxy) -> None:
        object.__setattr__(self, "_cls", cls)
        object.__setattr__(self, "_proxy", proxy)

    def __getattribute__(self, name: str) -> Any:
        cls, proxy = object.__getattribute__(self, "_cls"), object.__getattribute__(self, "_proxy")
        if name == "__thisclass__":
            return cls
        if name in ("__self__", "__self_class__"):
            return proxy if name == "__self__" else proxy.python_type
        mro = proxy.python_type.__mro__
        for klass in mro[mro.index(cls) + 1:]:
            if klass in _TORCH_BASES:
                if name == "__init__":
                    return _object_init(proxy.python_type)
                return _torch_level(proxy, name)
            if name in vars(klass):
                attr = vars(klass)[name]
                get = getattr(builtins.type(attr), "__get__", None)
                return get(attr, proxy, proxy.python_type) if get is not None else attr
        raise AttributeError(f"'super' object has no attribute '{name}'")


_TORCH_BASES = (torch.Tensor, torch._C.TensorBase, object)  # noqa: SLF001


def _torch_level(proxy: Proxy, name: str) -> Any:
    """``name`` as torch defines it, bound to ``proxy``: past the copies of the user's methods that a
    typed proxy class holds (jitcore/proxies/typed.py), so that ``super().clone()`` in a subclass
    overriding ``clone`` reaches torch's ``clone``, not the override again."""
    copies = [k for k in builtins.type(proxy).__mro__ if isinstance(vars(k).get("python_type"), type)]
    if not copies:
        return getattr(proxy, name)
    return getattr(super(copies[-1], proxy), name)


def _object_init(cls: type) -> Any:
    """``object.__init__`` bound to an instance of ``cls``: extra arguments are refused as CPython
    refuses them (a class that overrides ``__init__``)."""

    def init(*args: Any, **kwargs: Any) -> None:
        if (args or kwargs) and cls.__init__ is not object.__init__:
            raise TypeError("object.__init__() takes exactly one argument (the instance to initialize)")

    return init


def super_of(*args: Any, **kwargs: Any) -> Any:
    """``super()`` and ``super(cls, obj)`` for interpreted code, proxies included; other argument lists
    (``super(cls)``, too many) are the builtin's, with its errors."""
    if not args and not kwargs:
        args = super_arguments()
    if len(args) == 2 and not kwargs:
        cls, first = args
        if _plain_proxy(first) and isinstance(cls, type) and issubclass(first.python_type, cls):
            return ProxySuper(cls, first)  # a subclass proxy is an instance of its class: the builtin serves
    return super(*args, **kwargs)


def _plain_proxy(obj: Any) -> bool:
    """Whether ``obj`` is a proxy and not a subclass tensor's, by its type (``isinstance`` reads the
    ``__class__`` of the program's object, which its class may compute: inspect.getattr_static's
    test_class_as_property)."""
    t = builtins.type(obj)
    return issubclass(t, Proxy) and not issubclass(t, SubclassTensorProxy)


def _slot_field(descriptor: Any, obj: Any) -> str | None:
    """The field a member descriptor of the user's class names on a proxy of that class, or None."""
    if _plain_proxy(obj) and isinstance(descriptor, types.MemberDescriptorType) \
            and issubclass(obj.python_type, descriptor.__objclass__):
        return descriptor.__name__
    return None


def member_get(descriptor: Any, obj: Any, owner: Any = None) -> Any:
    """``Cls.field.__get__(x)``: a proxy holds its class's ``__slots__`` fields in its ``__dict__``."""
    name = _slot_field(descriptor, obj)
    if name is None:
        return _MEMBER_GET(descriptor, obj, owner)
    fields = object.__getattribute__(obj, "__dict__")
    if name not in fields:
        raise missing_slot(obj.python_type, name)
    return fields[name]


def member_set(descriptor: Any, obj: Any, value: Any) -> None:
    """``Cls.field.__set__(x, value)`` on a proxy: as ``x.field = value``."""
    name = _slot_field(descriptor, obj)
    if name is None:
        _MEMBER_SET(descriptor, obj, value)
    else:
        setattr(obj, name, value)


def member_delete(descriptor: Any, obj: Any) -> None:
    """``Cls.field.__delete__(x)`` on a proxy: as ``del x.field``."""
    name = _slot_field(descriptor, obj)
    if name is None:
        _MEMBER_DELETE(descriptor, obj)
        return
    fields = object.__getattribute__(obj, "__dict__")
    if name not in fields:
        raise missing_slot(obj.python_type, name)
    del fields[name]


_MEMBER_GET = types.MemberDescriptorType.__get__
_MEMBER_SET = types.MemberDescriptorType.__set__
_MEMBER_DELETE = types.MemberDescriptorType.__delete__
_DEFAULT_TORCH_FUNCTION = torch.Tensor.__torch_function__.__func__
_AS_SUBCLASS = torch._C.TensorBase.as_subclass  # noqa: SLF001
_MAKE_SUBCLASS = torch.Tensor._make_subclass  # noqa: SLF001
_TENSOR_NEW = torch._C.TensorBase.__new__  # noqa: SLF001


def default_torch_function(
    cls: type, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
) -> Any:
    """torch's ``Tensor.__torch_function__`` while tracing: ``func`` runs (interpreted, so it is
    recorded) with subclass ``__torch_function__`` disabled, then tensor results take ``cls``."""
    from torch.overrides import get_default_nowrap_functions

    if not builtins.all(issubclass(cls, t) for t in types):
        return NotImplemented
    run = current_run()
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        ret = run.call(func, *args, **(kwargs or {})) if run is not None else func(*args, **(kwargs or {}))
        if func in get_default_nowrap_functions():
            return ret
        arguments = {
            id(v) for v in optree.tree_leaves((args, kwargs), none_is_leaf=True) if isinstance(v, TensorProxy)
        }
        return _convert(ret, cls, arguments)


def skip_one_hop_torch_function(func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
    """``torch.overrides.redispatch_function`` (``torch._C._skip_one_hop_torch_function``) in a
    subclass's ``__torch_function__``, or ``torch._C._disabled_torch_function_impl`` called directly,
    while tracing: ``func`` runs (interpreted, so it is recorded) with the subclasses'
    ``__torch_function__`` off; results stay as ``func`` returns them (no conversion, as eagerly).
    Run natively on shadows instead, the ops would be computed but never recorded."""
    run = current_run()
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
        return run.call(func, *args, **(kwargs or {})) if run is not None else func(*args, **(kwargs or {}))


def _convert(ret: Any, cls: type, arguments: set[int]) -> Any:
    """torch's ``_convert``: tensors take ``cls``; a fresh proxy takes it in place (no record)."""
    if cls is torch.Tensor:
        return ret
    if isinstance(ret, TensorProxy):
        if issubclass(ret.python_type, cls):
            return ret
        if isinstance(ret, SubclassTensorProxy):  # eager's ``ret.as_subclass(cls)``: aliased by its dispatch
            return _as_subclass_of_subclass(ret, cls)
        if id(ret) in arguments or (ret.shadow.requires_grad and ret.shadow.grad_fn is None):
            # an argument, or a fresh leaf requiring grad (``x.new_tensor(v, requires_grad=True)``):
            # eager's ``as_subclass`` makes an alias, not a leaf
            return as_subclass(ret, cls)
        retype(ret, cls)
        return ret
    if isinstance(ret, torch.Tensor) and not isinstance(ret, cls):
        return ret.as_subclass(cls)
    if builtins.type(ret) in (tuple, list):
        return builtins.type(ret)(_convert(r, cls, arguments) for r in ret)
    return ret


def _as_subclass_of_subclass(tensor: SubclassTensorProxy, cls: type) -> Any:
    """``t.as_subclass(cls)`` of a subclass value: ``aten.alias`` goes through its
    ``__torch_dispatch__``; an alias that is itself a subclass object cannot take another class
    (torch's error, as eagerly: ``TwoTensor + P`` for a plain subclass ``P``)."""
    with torch._C.DisableTorchFunctionSubclass(), hidden_modes():  # noqa: SLF001 - Note [Ignored by __torch_function__]
        out = aten_symbol(torch.ops.aten.alias.default)(tensor)
    if isinstance(out, SubclassTensorProxy):
        raise RuntimeError(
            f"Creating a new Tensor subclass {cls.__name__} but the raw Tensor object is already associated "
            f"to a python object of type {out.python_type.__name__} which is not a subclass of the requested "
            "type"
        )
    retype(out, cls)
    return out


def as_subclass(tensor: Any, cls: type) -> Any:
    """``t.as_subclass(cls)``: on a proxy, an alias of it whose class is ``cls``."""
    if not isinstance(tensor, TensorProxy) or isinstance(tensor, SubclassTensorProxy):
        return _AS_SUBCLASS(tensor, cls)
    _check_plain(cls, "as_subclass")
    with torch._C.DisableTorchFunctionSubclass(), hidden_modes():  # noqa: SLF001 - Note [Ignored by __torch_function__]
        out = aten_symbol(torch.ops.aten.alias.default)(tensor)
    retype(out, cls)
    return out


def tensor_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``torch.Tensor.__new__(cls, t)`` (a subclass's ``super().__new__(cls, data)``): on a proxy, as
    eagerly, an alias of ``t`` whose class is ``cls`` (differentiable, as ``as_subclass``)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], TensorProxy) \
            and not isinstance(args[0], SubclassTensorProxy):
        return as_subclass(args[0], cls)
    return _TENSOR_NEW(cls, *args, **kwargs)


def make_subclass(cls: type, data: Any, require_grad: bool = False, *args: Any, **kwargs: Any) -> Any:
    """``torch.Tensor._make_subclass(cls, data)``: on a proxy, a detached alias whose class is ``cls``."""
    if not isinstance(data, TensorProxy) or isinstance(data, SubclassTensorProxy) or args or kwargs:
        return _MAKE_SUBCLASS(cls, data, require_grad, *args, **kwargs)
    _check_plain(cls, "_make_subclass")
    with torch._C.DisableTorchFunctionSubclass(), hidden_modes():  # noqa: SLF001 - Note [Ignored by __torch_function__]
        out = aten_symbol(torch.ops.aten.detach.default)(data)
        if require_grad:
            out = out.requires_grad_(True)
    retype(out, cls)
    return out


# Note [Ignored by __torch_function__]
# ``as_subclass`` and ``_make_subclass`` are among torch's ignored functions: eagerly they never
# reach a ``__torch_function__`` (nor a mode of the program's: ``hidden_modes``). The alias (detach) that
# stands for them in the trace is recorded
# with subclass ``__torch_function__`` off, or a ``__torch_function__`` that unwraps its arguments
# with ``x.as_subclass(torch.Tensor)`` would be handed that alias, unwrap again, and never end.
def _check_plain(cls: type, how: str) -> None:
    if cls is not torch.Tensor and not is_plain_subclass(cls):
        raise EagerOnlySubclass(
            f"a {cls.__qualname__} is made with torch.Tensor.{how}: a subclass whose values share a plain "
            "tensor's storage and define __torch_dispatch__ is run eagerly, not traced"
        )


_GET_TENSOR_SYMINT = nested_tensor.get_tensor_symint


def get_tensor_symint(tensor: Any, *, coeff: Any = 1) -> Any:
    """A nested jagged tensor's ragged size from its offsets (or lengths): for a traced tensor, its
    shadow's nested int (one symbol per shadow, in the trace's ShapeEnv), so that values built in the
    function from the same offsets share it, as eagerly (Note [Nested ints], jitcore/langctx/shadows.py)."""
    context = current_context()
    if not isinstance(tensor, TensorProxy) or context is None or context.values is None:
        return _GET_TENSOR_SYMINT(tensor, coeff=coeff)
    values = context.values
    values.allow_nested_ints()
    with values.fake_mode:
        return _GET_TENSOR_SYMINT(tensor.shadow, coeff=coeff)


_REGISTRY = nested_tensor._tensor_symint_registry  # noqa: SLF001
_REGISTRY_GET = type(_REGISTRY).__getitem__
_REGISTRY_SET = type(_REGISTRY).__setitem__


def registry_getitem(registry: Any, key: Any) -> Any:
    """``_tensor_symint_registry[offsets]`` (NestedTensor's ops read it directly: ``to``/``_to_copy``):
    for a traced tensor, its shadow's nested int (Note [The nested int registry])."""
    if registry is not _REGISTRY:
        return call_function(current_run(), _REGISTRY_GET, (registry, key), None)
    if issubclass(type(key), TensorProxy):
        return get_tensor_symint(key)
    return _REGISTRY_GET(registry, key)


def registry_setitem(registry: Any, key: Any, value: Any) -> None:
    """``_tensor_symint_registry[offsets] = j``: for a traced tensor, its shadow takes the nested int,
    as torch does for a fake tensor (``nested_int_memo``)."""
    if registry is not _REGISTRY:
        call_function(current_run(), _REGISTRY_SET, (registry, key, value), None)
    elif issubclass(type(key), TensorProxy):
        key.shadow.nested_int_memo = value
    else:
        _REGISTRY_SET(registry, key, value)


# Note [The nested int registry]
# NestedTensor's ``_to_copy`` (``nt.to(torch.float64)``, ``nt.double()``) gives the new offsets the
# nested int of the old ones by writing torch's registry of them directly, except for fake tensors,
# whose ``nested_int_memo`` it sets. A traced offsets tensor is neither: the read raised a KeyError
# (the proxy is not a key; eager computes). Such reads and writes go through the proxy's shadow. The
# lookasides are the methods of torch's WeakIdKeyDictionary class, which programs use too (a cache of
# theirs keyed by tensors): on any other dictionary they interpret the method, as without them (called
# natively, its weak reference would refer to the proxy, not to the caller's tensor: Note [The id of a
# caller's tensor], jit/tensor_keys.py).


_NT_VIEW_DUMMY = nested_tensor._nt_view_dummy


def nt_view_dummy() -> torch.Tensor:
    """The nested jagged tensor (of meta tensors) that torch passes to ``_nested_view_from_jagged``
    only to reach NestedTensor's dispatch: made natively, so that the module global caching it is a
    real tensor (made while tracing, it was the trace's value, left in torch's module)."""
    with tracing(None):
        return _NT_VIEW_DUMMY()


TensorProxy.as_subclass = (
    as_subclass  # a method of proxies, as of tensors (the lookaside below is for real ones)
)

DISPATCH_LOOKASIDES: dict[Any, Any] = {
    builtins.isinstance: isinstance_of,
    _make_wrapper_subclass: make_wrapper_subclass,
    builtins.type: type_of,
    builtins.len: len_of,
    builtins.super: super_of,
    _DEFAULT_TORCH_FUNCTION: default_torch_function,
    _AS_SUBCLASS: as_subclass,
    _MAKE_SUBCLASS: make_subclass,
    _TENSOR_NEW: tensor_new,
    **({torch._C._skip_one_hop_torch_function: skip_one_hop_torch_function}  # noqa: SLF001
       if hasattr(torch._C, "_skip_one_hop_torch_function") else {}),  # torch >= 2.12
    torch._C._disabled_torch_function_impl: skip_one_hop_torch_function,  # noqa: SLF001
    _MEMBER_GET: member_get,
    _MEMBER_SET: member_set,
    _MEMBER_DELETE: member_delete,
    **DTENSOR_LOOKASIDES,
    _GET_TENSOR_SYMINT: get_tensor_symint,
    _NT_VIEW_DUMMY: nt_view_dummy,
    _REGISTRY_GET: registry_getitem,
    _REGISTRY_SET: registry_setitem,
    **JAGGED_LOOKASIDES,
    **OVERRIDE_CHECKS,
    **ALIASING_LOOKASIDES,
}
