"""A caller's tensor where its identity decides: a key of the caller's dicts and sets, searched for in a list.

A tensor hashes by its identity, so ``D[key]`` with a tensor the call passes (or one the program reads
from state) finds the item the caller stored under that very object. While tracing the program holds
a proxy in its place, a different object: native lookups would miss (``D[k]`` a KeyError,
``D.get(k, 0)`` and ``k in D`` silently the default and False), and stores would put the proxy into the
caller's dict, where it would outlive the pass.

Note [A caller's tensor as a key]
Where a dict, set or frozenset (or a dict's keys view) is indexed, tested, written or deleted with the
proxy of a caller's tensor (``Hooks.item_key``), or handed it in a key method (``get``, ``pop``,
``setdefault``, ``add``, ``discard``, ...) or a list's search (``index``, ``count``, ``remove``), the
caller's tensor stands in for the proxy where the container holds that tensor, and where the container is
the caller's (reached from the call's arguments or state) and does not hold the proxy; the tensor's
identity is then guarded: a call with another tensor object is another cache entry, as eagerly it is
another key. A container the program builds while tracing (a memo: ``seen = {}; seen[x] = ...``) keeps
the proxy, so a fresh tensor per call is not a new entry per call.

Note [The id of a caller's tensor]
``id(t)`` and ``hash(t)`` (a tensor hashes by its id) of a caller's tensor are its own id, as a
``TensorId``: an ``int`` that is pinned, i.e. the tensor's identity guarded, the first time its value
could tell one call from another: compared with any number but another ``TensorId``, used as a key of
a container of the caller's, handed to C code, formatted, computed with, returned or stored into the
caller's objects. Hashing it and comparing it with another tensor's id do not pin it: the answers
depend only on which tensors the call passes, which the prologue already guards (two arguments are
the same object, or not). So library code keying its own containers by ``id()`` (``copy.deepcopy``'s
memo) sees the caller's ids and is one cache entry for every tensor, while a memo of the caller's keyed
by ``id(x)`` finds what an earlier call stored, as eagerly, and a call with another tensor is another
entry.

Note [A caller's tensor reached as itself as a key]
A tensor the program takes out of the caller's containers without a torch op on it (iterating an
optimizer's ``param_groups[0]["params"]``) is the caller's object itself, not a proxy, until an op binds
it. Used as a key of a caller's dict (``self.state[p]``, ``state.setdefault(p, {})``), the store was
replayed on later calls with the traced call's tensor as the key: a call with a fresh optimizer and
parameter found the first call's parameter in its state and its own missing (a wrong answer). Its
identity is guarded at the path it was reached through, as a proxy key's is.

Invariants: only proxies of tensors the call passes or the program reads from state are replaced (the
program's own tensors have no other identity); every replacement adds the identity guard of the
tensor's path; a caller's container holds the caller's tensor, never a proxy, after a store keyed by one;
a ``TensorId`` whose value reached anything but hashing or another ``TensorId`` is pinned.
"""

from __future__ import annotations

import collections
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from jitcore.interpreter import current_run
from jitcore.jit.provenance import Provenance
from jitcore.jit.state_kinds import identity_arguments
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import STAND_INS

__all__ = ["CallerKeys", "TensorId", "calls_weakref", "pin_tensor_ids"]

_SEARCHING = (list, tuple, collections.deque)  # ``l.index(t)``: found by identity before ``==``
_CONTAINERS = (dict, set, frozenset, *_SEARCHING)
_KEYS_VIEW = type({}.keys())


class CallerKeys:
    """The caller's tensors in place of their proxies where identity decides (Note [A caller's tensor as a
    key])."""

    def __init__(self, provenance: Provenance, callers: Callable[[Any], bool]) -> None:
        """``callers(obj)``: whether ``obj`` is the caller's or state's (not made while tracing)."""
        self.provenance = provenance
        self.callers = callers

    def item_key(self, _frame: Any, container: Any, key: Any) -> Any:
        """``Hooks.item_key``: the key a hashed container is used with."""
        if isinstance(key, (TensorId, weakref.ref)):
            if self.callers(container):  # the caller's memo keyed by ``id(x)``: its value decides
                self._pin_key(key)
            return key
        if isinstance(key, TensorProxy):
            return self._key(container, key)
        if issubclass(type(key), torch.Tensor) and self.callers(container):
            self._guard_reached(key)
        return key

    def _reached_key(self, fn: Callable[..., Any], args: tuple) -> None:
        keyed = identity_arguments(fn, args)
        container = args[0] if isinstance(fn, types.MethodDescriptorType) else getattr(fn, "__self__", None)
        if len(keyed) == 1 and issubclass(type(keyed[0]), torch.Tensor) \
                and isinstance(container, _CONTAINERS) and self.callers(container):
            self._guard_reached(keyed[0])

    def _guard_reached(self, tensor: torch.Tensor) -> None:
        """Guard the identity of a caller's tensor the program holds itself, not as a proxy, and uses as
        a key of a caller's container (Note [A caller's tensor reached as itself as a key])."""
        path = self.provenance.path_of(tensor)
        if path is not None:
            self.provenance.guard(path, "identity", tensor)

    def _pin_key(self, key: TensorId | weakref.ref) -> None:
        if isinstance(key, TensorId):
            key.pin()
            return
        referent = key()
        proxy = self.provenance.bound_proxy(referent) if isinstance(referent, torch.Tensor) else None
        found = None if proxy is None else self.provenance.input_of(proxy)
        if found is not None:
            self.provenance.guard(found[0], "identity", found[1])

    def _referent(self, value: Any) -> Any:
        found = self.provenance.input_of(value) if isinstance(value, TensorProxy) else None
        return value if found is None else found[1]

    def dereferenced(self, value: Any) -> Any:
        """What calling a weak reference returned, as the program sees it: a caller's tensor is its proxy."""
        proxy = self.provenance.bound_proxy(value) if isinstance(value, torch.Tensor) else None
        return value if proxy is None else proxy

    def identity(self, fn: Callable[[Any], int], args: tuple, call: Callable[..., Any]) -> int:
        """``id(value)`` or ``hash(value)`` (``fn``): for a caller's tensor, its own id as a ``TensorId``
        (Note [The id of a caller's tensor]); otherwise ``call(fn, args, {})``, the jit's call of C code
        (which pins another object of the caller's)."""
        if len(args) == 1 and issubclass(type(args[0]), TensorProxy):
            own = args[0].python_type.__hash__
            if fn is hash and own is not torch.Tensor.__hash__ and type(own) is types.FunctionType:
                return _subclass_hash(own, args[0])  # Note [A subclass's own hash]
            found = self.provenance.input_of(args[0])
            if found is not None and (fn is id or type(found[1]).__hash__ is torch.Tensor.__hash__):
                path, tensor = found
                return TensorId(id(tensor), lambda: self.provenance.guard(path, "identity", tensor))
        return call(fn, args, {})

    def arguments(self, fn: Callable[..., Any], args: tuple) -> tuple:
        """The arguments C code ``fn`` is handed, with the caller's tensor where it is a key or searched
        for (``d.get(t)``, ``s.add(t)``, ``l.index(t)``); a ``TensorId`` handed to C code is pinned but
        by a method of a container the program made (it hashes and compares ids, which pin themselves)."""
        if not any(issubclass(type(arg), (TensorProxy, TensorId)) for arg in args):
            if any(issubclass(type(arg), torch.Tensor) for arg in args):
                self._reached_key(fn, args)  # ``state.setdefault(p, {})`` of an iterated ``p``
            return args
        if _makes_weakref(fn):  # ``weakref.ref(t)``, torch's ``WeakIdRef(t)``: a reference to the caller's t
            return tuple(self._referent(arg) for arg in args)
        keyed = identity_arguments(fn, args)
        container = args[0] if isinstance(fn, types.MethodDescriptorType) else getattr(fn, "__self__", None)
        if any(isinstance(arg, TensorId) for arg in args):  # ``memo.get(id(x))``, ``seen.append(id(x))``
            if not isinstance(container, _CONTAINERS) or self.callers(container):
                args = pin_tensor_ids(args)
        if len(keyed) != 1 or not isinstance(keyed[0], TensorProxy) or not isinstance(container, _CONTAINERS):
            return args  # ``id(t)``, ``operator.eq(t, u)``: not a container's key
        key = keyed[0]
        tensor = self._key(container, key)
        return args if tensor is key else tuple(tensor if arg is key else arg for arg in args)

    def _key(self, container: Any, proxy: TensorProxy) -> Any:
        """The caller's tensor where ``container`` holds it, or is the caller's and does not hold the
        proxy (its identity guarded); the proxy otherwise."""
        found = self.provenance.input_of(proxy)
        if found is None:
            return proxy  # a tensor the program made: the proxy is its only identity
        path, tensor = found
        # a keys view's dict is out of reach (its ``mapping`` is a proxy of it): taken as the caller's
        callers = type(container) is _KEYS_VIEW or self.callers(container)
        if _holds(container, tensor) or (callers and not _holds(container, proxy)
                                         and not isinstance(container, _SEARCHING)):
            self.provenance.guard(path, "identity", tensor)
            return tensor
        return proxy


class TensorId(int):
    """``id()`` of a caller's tensor (Note [The id of a caller's tensor]): the id's value; ``pin`` guards
    the tensor's identity, which every use that can tell its value from another id does first."""

    def __new__(cls, value: int, guard: Callable[[], None]) -> TensorId:
        self = super().__new__(cls, value)
        self._guard: Callable[[], None] | None = guard
        return self

    def pin(self) -> None:
        if self._guard is not None:
            guard, self._guard = self._guard, None
            guard()

    def __hash__(self) -> int:
        return int.__hash__(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorId):  # another tensor's id: decided by which tensors the call passes
            self.pin()
        return int.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, TensorId):
            self.pin()
        return int.__ne__(self, other)

    def __reduce__(self) -> tuple:
        self.pin()
        return int, (int(self),)


def _pinning(name: str) -> Callable[..., Any]:
    method = getattr(int, name)

    def pinned(self: TensorId, *args: Any) -> Any:
        self.pin()
        return method(self, *args)

    pinned.__name__ = name
    return pinned


for _name in ("__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__index__", "__int__", "__float__",
              "__repr__", "__str__", "__format__", "__neg__", "__pos__", "__abs__", "__invert__",
              "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
              "__rfloordiv__", "__truediv__", "__rtruediv__", "__mod__", "__rmod__", "__divmod__",
              "__rdivmod__", "__pow__", "__rpow__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__",
              "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "to_bytes", "bit_length",
              "bit_count", "as_integer_ratio", "conjugate", "__round__", "__trunc__", "__floor__",
              "__ceil__", "__getnewargs__", "__sizeof__"):
    setattr(TensorId, _name, _pinning(_name))
STAND_INS[TensorId] = int  # ``type(id(t)) is int`` to the program


def pin_tensor_ids(value: Any) -> Any:
    """``value`` (a returned value, a value stored into the caller's objects, arguments of C code) with
    every ``TensorId`` in it pinned and made a plain ``int``: lists, dicts and sets in place, tuples anew.
    Python's own containers are looked into, 8 levels deep; ``value`` is returned as it is when it holds
    no ``TensorId``."""
    return _plain(value, 0) if _has_id(value, 0) else value


def _has_id(value: Any, depth: int) -> bool:
    if isinstance(value, TensorId):
        return True
    if depth >= 8 or type(value) not in (tuple, list, set, frozenset, dict):
        return False
    items = [*value, *value.values()] if type(value) is dict else value
    return any(_has_id(item, depth + 1) for item in items)


def _plain(value: Any, depth: int) -> Any:
    if isinstance(value, TensorId):
        value.pin()
        return int(value)
    if depth >= 8 or type(value) not in (tuple, list, set, frozenset, dict) or not _has_id(value, depth):
        return value
    if type(value) is dict:
        items = [(_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()]
        value.clear()
        value.update(items)
        return value
    items = [_plain(item, depth + 1) for item in value]
    if type(value) in (tuple, frozenset):
        return type(value)(items)
    value.clear()
    if type(value) is list:
        value.extend(items)
    else:
        value.update(items)
    return value


def _makes_weakref(fn: Any) -> bool:
    if fn is weakref.ref.__new__:  # ``WeakIdRef(t)``: a subclass's construction
        return True
    return isinstance(fn, type) and issubclass(fn, weakref.ref)


def calls_weakref(fn: Any) -> bool:
    """Whether calling ``fn`` dereferences a weak reference (``r()``, a subclass's ``super().__call__()``)."""
    if isinstance(fn, weakref.ref):
        return True
    owner = getattr(fn, "__self__", None)
    return getattr(fn, "__name__", None) == "__call__" and isinstance(owner, weakref.ref)


# Note [A subclass's own hash]
# A tensor subclass that defines ``__hash__`` in Python (a content or tag hash) hashes by it eagerly;
# while tracing ``hash(x)`` reached the proxy's own hash, its id: a wrong answer. The subclass's
# method is interpreted on the proxy, and its result made a hash as CPython's ``__hash__`` slot does
# (kept where it fits a machine int, else the int's own hash).
def _subclass_hash(method: types.FunctionType, value: TensorProxy) -> int:
    run = current_run()
    result = run.call(method, value) if run is not None else method(value)
    if not isinstance(result, int):
        raise TypeError("__hash__ method should return an integer")
    if -sys.maxsize - 1 <= result <= sys.maxsize:  # the slot keeps a machine-sized int (-1 is the error)
        return -2 if result == -1 else int(result)
    return hash(result)


def _holds(container: Any, value: Any) -> bool:
    """Whether ``container`` holds ``value`` itself (by identity)."""
    try:
        if isinstance(container, (dict, set, frozenset, _KEYS_VIEW)):
            return value in container  # hashed by identity: compares nothing else
        if isinstance(container, _SEARCHING):
            return any(item is value for item in container)
    except TypeError:
        return False
    return False
