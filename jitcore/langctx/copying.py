"""``copy.copy`` and ``copy.deepcopy`` of traced tensors, as eager's ``Tensor.__reduce_ex__`` and
``Tensor.__deepcopy__`` (torch/_tensor.py) give them, recorded as operations on proxies.

Eagerly, ``copy.deepcopy(t)`` copies ``t``'s storage into a new leaf tensor (``requires_grad`` as
``t``'s, its ``.grad`` and instance attributes deep-copied too) and refuses a tensor that is not a
graph leaf; ``copy.copy(t)`` pickles and rebuilds it: a new leaf tensor over the *same* storage.
While tracing there is no data to copy, so the copies are recorded: ``detach`` (+ ``clone`` for a
deep copy) and ``requires_grad_`` where the source requires grad. Invariants:
- the result has the source's class (``python_type``), values, dtype, device, shape and
  ``requires_grad``, and is a leaf; a deep copy shares nothing with its source, a shallow one shares
  its data (writes through one are seen through the other, as eagerly);
- the memo is honoured: the same tensor reached twice in one ``deepcopy`` gives one copy;
- tensors of one storage in one ``deepcopy`` share their copies' storage, as eagerly: a tensor
  covering the storage whole copied first, the others are views of its copy (``as_strided`` with
  their own sizes, strides and offset);
- what cannot be mirrored is refused with a clear error instead of copied differently: a view copied
  before (or without) the whole-storage tensor of its storage, a source whose ``.grad`` is set (the
  copy's ``.grad`` cannot be assigned while tracing);
- a class's own ``__deepcopy__`` (``nn.Parameter``'s, a subclass's) runs on the interpreter, as
  eagerly; eager's errors keep eager's messages.

A deep copy of a view alone copies the whole storage as eagerly (its strides, ``storage_offset()`` and
the storage's size are the source's): the storage is cloned through a traced tensor covering it. Known
difference: a view passed in is traced as covering its own storage, so its deep copy is compact (offset
0, the view's size) where eager's keeps the caller's storage layout; values, shape and dtype agree.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter.calls import call, call_function
from jitcore.interpreter.run import current_run
from jitcore.ir import current_context
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.proxies import TensorProxy
from jitcore.proxies.protocol import instance_attributes
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["copy_tensor", "deepcopy_tensor"]

# torch's message for a deepcopy of a tensor that is not a graph leaf (torch/_tensor.py).
NOT_A_LEAF = (
    "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the "
    "moment.  If you were attempting to deepcopy a module, this may be because of a "
    "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001"
)
# Memo key under which the storages deep-copied so far are kept (eager keeps its own under "torch").
_STORAGES = "jitcore.storages"


def deepcopy_tensor(self: Any, memo: dict | None = None) -> Any:
    """``self.__deepcopy__(memo)`` of a traced tensor, as ``torch.Tensor.__deepcopy__``.

    Raises:
        RuntimeError: eager's, for a tensor that is not a graph leaf.
        UnsupportedOperationError: a copy eager makes that a trace cannot mirror (module docstring).
    """
    memo = {} if memo is None else memo
    own = _own_deepcopy(_class_of(self))
    if own is not None:  # nn.Parameter.__deepcopy__, a subclass's: the class decides
        return _interpreted(own, self, memo)
    if not self.is_leaf:
        raise RuntimeError(NOT_A_LEAF)
    if id(self) in memo:
        return memo[id(self)]
    _check_new_empty_keeps_class(self)
    base = _copied_storage(self, memo)
    _check_no_grad(self, "copy.deepcopy")
    holder = _storage_holder(self) if base is None and not _covers_storage(self) else None
    if holder is not None:  # a view alone: eager copies its whole storage (offset and strides kept)
        base = _op(torch.Tensor.clone)(_op(torch.Tensor.detach)(holder), memory_format=torch.preserve_format)
        _note_storage(holder, base, memo)
    if base is None:
        new = _leaf_copy(self, deep=True)
        _note_storage(self, new, memo)
    else:
        new = _view_copy(self, base)
    for name, value in _instance_state(self).items():
        setattr(new, name, _interpreted(copy.deepcopy, value, memo))
    memo[id(self)] = new
    return new


def copy_tensor(x: Any) -> Any:
    """``copy.copy(x)``: for a traced tensor, eager's pickle-and-rebuild (a new leaf over the same
    data, ``requires_grad`` and instance attributes kept); anything else runs ``copy.copy`` on the
    interpreter."""
    if not isinstance(x, torch.Tensor):
        return _interpreted(copy.copy, x)
    new = _leaf_copy(x, deep=False)
    for name, value in _instance_state(x).items():
        setattr(new, name, value)
    return new


def _leaf_copy(x: Any, *, deep: bool) -> Any:
    # through the table's symbols, not methods: a real tensor the program reached (a module's buffer
    # inside ``deepcopy(module)``) is bound as an input of the trace like at any other torch call
    new = _op(torch.Tensor.detach)(x)
    if deep:
        new = _op(torch.Tensor.clone)(new, memory_format=torch.preserve_format)
    if x.requires_grad:
        new = _op(torch.Tensor.requires_grad_)(new, True)
    if _class_of(new) is not _class_of(x):  # eager's check (a subclass whose clone changes class)
        raise RuntimeError(
            "Type of deepcopy result does not match the type of the source tensor. "
            "If you encounter this, please open an issue on PyTorch's GitHub."
        )
    return new


# torch's message for a plain subclass whose ``new_empty`` gives another class (torch/_tensor.py).
NEW_EMPTY_CHANGES_CLASS = (
    "The default implementation of __deepcopy__() for non-wrapper subclasses only works for subclass "
    "types that implement new_empty() and for which that function returns another instance of the same "
    "subclass. You should either properly implement new_empty() for your subclass or override "
    "__deepcopy__() if it is intended behavior for new_empty() to return an instance of a different type."
)


_TORCH_DISPATCH = torch.Tensor.__torch_dispatch__


def _check_new_empty_keeps_class(x: Any) -> None:
    """Eager's check for a plain (non-wrapper) subclass: see Note [A plain subclass's deep copy].

    Raises:
        RuntimeError: eager's, where ``x.new_empty([])`` gives another class than ``x``'s.
    """
    cls = _class_of(x)
    if cls is torch.Tensor or isinstance(x, SubclassTensorProxy):
        return
    if not isinstance(x, TensorProxy) and (type(x).__torch_dispatch__ is not _TORCH_DISPATCH or x.is_sparse
                                           or x.device.type == "meta"):
        return  # eager copies a real wrapper subclass, sparse or meta tensor by its clone(), not new_empty
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - as under eager's default __torch_function__
        run = current_run()
        made = call(run, cls.new_empty, (x, []), None) if run is not None else cls.new_empty(x, [])
    if _class_of(made) is not cls:
        raise RuntimeError(NEW_EMPTY_CHANGES_CLASS)


# Note [A plain subclass's deep copy]
# Eagerly, ``Tensor.__deepcopy__`` of a plain subclass instance (``as_subclass``, ``_make_subclass``)
# goes through the class's ``__torch_function__``; torch's default one calls it again with subclass
# ``__torch_function__`` disabled, where the copy is made by ``self.new_empty([])`` (then ``set_`` to
# the copied storage) and refused unless that tensor has ``self``'s class. With torch's own
# ``new_empty`` it is a plain tensor, so most plain subclasses' deep copies raise eagerly. The lookaside
# runs the class's ``new_empty`` the same way (interpreted, subclass ``__torch_function__`` disabled),
# for a traced tensor and for a real one the program reached (a parameter inside ``deepcopy(module)``),
# raises eager's error where the class differs, and otherwise records the copy as for any tensor.


def _op(fn: Any) -> Any:
    return TORCH_TABLE.lookup(fn)


def _class_of(x: Any) -> type:
    """The class the program sees: a proxy's ``python_type``, a real tensor's own."""
    return getattr(x, "python_type", type(x))


def _own_deepcopy(cls: type) -> Any:
    """``cls.__deepcopy__`` where a class below ``torch.Tensor`` defines it, else None."""
    for klass in cls.__mro__:
        if klass is torch.Tensor:
            return None
        if "__deepcopy__" in vars(klass):
            return vars(klass)["__deepcopy__"]
    return None


def _instance_state(x: Any) -> dict[str, Any]:
    """The attributes eager's copies carry over: the instance's own, less a wrapper subclass's inner
    tensors (the recorded ``detach``/``clone`` made the new value's)."""
    state = dict(getattr(x, "__dict__", {}))
    if isinstance(x, SubclassTensorProxy):
        state = instance_attributes(x, x.python_type)  # its class's slots are real slots too
        inner = x.inner_flatten()[0]
    elif isinstance(x, TensorProxy) or not hasattr(type(x), "__tensor_flatten__"):
        inner = ()
    else:
        inner = x.__tensor_flatten__()[0]
    for name in (*inner, *_NOT_SERIALIZABLE):
        state.pop(name, None)
    return state


# What eager's ``Tensor._clear_non_serializable_cached_data`` drops before a copy carries the instance's
# ``__dict__`` over: a wrapper's sizes and strides cached as PyCapsules (a nested jagged tensor's), which
# ``deepcopy`` cannot copy; the copy caches its own.
_NOT_SERIALIZABLE = ("_sym_sizes_capsule", "_sym_sizes_capsule_len", "_sym_strides_capsule",
                     "_sym_strides_capsule_len")


def _storage_key(x: Any) -> int | None:
    try:
        return (x.shadow if isinstance(x, TensorProxy) else x).untyped_storage()._cdata
    except (NotImplementedError, RuntimeError):  # a wrapper subclass's outer tensor has no storage
        return None


def _copied_storage(x: Any, memo: dict) -> Any:
    """The copy, made earlier in this deepcopy, of a tensor covering ``x``'s whole storage (eager's
    copies share one new storage: ``x``'s copy is a view of it), or None where none was copied.

    Raises:
        UnsupportedOperationError: another tensor of the storage was copied first, but not one
            covering it whole (its copy is compact: the storage's layout is not there to view).
    """
    key = _storage_key(x)
    found = memo.get(_STORAGES, {}).get(key) if key is not None else None
    if found is None:
        return None
    first, first_copy = found
    if _covers_storage(first) and first.dtype == x.dtype:
        return first_copy
    raise UnsupportedOperationError(
        f"copy.deepcopy: {_named(x)} and {_named(first)} share one storage (one is a view of the other) "
        "and the first copied does not cover it whole; eager's deep copies would share their new "
        "storage, which jitcore records only as views of a whole-storage tensor copied first.",
        hints=("put the base tensor before its views in what is deep-copied",),
    )


def _note_storage(x: Any, new: Any, memo: dict) -> None:
    key = _storage_key(x)
    if key is not None:
        memo.setdefault(_STORAGES, {}).setdefault(key, (x, new))


def _covers_storage(t: Any) -> bool:
    """Whether ``t`` is its whole storage, contiguous from offset 0 (then so is its deep copy)."""
    shadow = t.shadow if isinstance(t, TensorProxy) else t
    return (
        shadow.storage_offset() == 0
        and shadow.is_contiguous()
        and shadow.numel() * shadow.element_size() == shadow.untyped_storage().nbytes()
    )


def _storage_holder(x: Any) -> TensorProxy | None:
    """A traced tensor covering ``x``'s whole storage, with ``x``'s dtype (an input ``x[:, ::2]`` was
    sliced from), or None."""
    key = _storage_key(x)
    if key is None or not isinstance(x, TensorProxy):
        return None
    for proxy in current_context().values.proxies():
        if proxy.dtype == x.dtype and _storage_key(proxy) == key and _covers_storage(proxy):
            return proxy
    return None


def _view_copy(x: Any, base: Any) -> Any:
    """``x``'s deep copy as a leaf over ``base``'s storage (eager: ``set_`` onto the copied storage)."""
    detached = _op(torch.Tensor.detach)(base)
    view = _op(torch.Tensor.as_strided)(detached, x.size(), x.stride(), x.storage_offset())
    new = _op(torch.Tensor.detach)(view)
    if x.requires_grad:
        new = _op(torch.Tensor.requires_grad_)(new, True)
    return new


def _named(x: Any) -> str:
    return x.name if isinstance(x, TensorProxy) else "a tensor"


def _check_no_grad(x: Any, what: str) -> None:
    if isinstance(x, TensorProxy):
        calls = _autograd_calls()
        if calls is None:
            return
        try:
            grad = calls.read_grad(x)
        except UnsupportedOperationError:  # computed by the program: it has no .grad
            return
    else:
        grad = x.grad
    if grad is not None:
        raise UnsupportedOperationError(
            f"{what}: {_named(x)} has a .grad; eager's copy would carry a copy of it, and a traced "
            "tensor's .grad cannot be assigned. Copy it outside the jitted function."
        )


def _autograd_calls() -> Any:
    from jitcore.ir.context import current_context

    context = current_context()
    return getattr(context, "autograd", None) if context is not None else None


def _interpreted(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` on the running interpreter (Python code of the program's libraries and classes
    is traced, not run natively), or natively where no run is active."""
    run = current_run()
    if run is None:
        return fn(*args)
    return call_function(run, fn, args, None)


def _register() -> None:
    # copy.copy of a tensor is eagerly ``Tensor.__reduce_ex__``, which a traced tensor refuses
    # (pickling): ``copy.copy`` itself is looked aside, and interpreted for anything but a tensor.
    TORCH_TABLE.bind(copy.copy, copy_tensor)
    TORCH_TABLE.bind(torch.Tensor.__deepcopy__, deepcopy_tensor)
    TensorProxy.__deepcopy__ = deepcopy_tensor  # type: ignore[method-assign]


_register()
