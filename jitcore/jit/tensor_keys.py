"""A caller's tensor where its identity decides: dict keys, set members, ``id()``, ``hash()``, weakrefs.

A tensor hashes by its identity, so ``D[key]`` with a tensor the call passes (or one the program reads
from state) finds the item the caller stored under that very object. While tracing the program holds
a proxy in its place, a different object: native lookups would miss (``D[k]`` a KeyError,
``D.get(k, 0)`` and ``k in D`` silently the default and False), and stores would put the proxy into the
caller's dict, where it would outlive the pass.

Note [A caller's tensor as a key]
Where a dict, set or frozenset (or a dict's keys view) is indexed, tested, written or deleted with the
proxy of a caller's tensor (``Hooks.item_key``), and where such a proxy is handed to C code that keys by
identity (``id``, ``hash``, ``weakref.ref``, ``operator.is_``, a dict's or set's key methods, a list's
search for the tensor itself), the caller's tensor stands in for the proxy and the identity of the
tensor is guarded: a call with another tensor object is another cache entry, as eagerly it is another
key. A container the program built while tracing with the proxy itself as a key (``{x: 1}[x]``) keeps
finding the proxy: the proxy is used wherever the container already holds it, so a container never
holds both for one tensor unless the program stores the tensor itself besides (never seen).

Invariants: only proxies of tensors the call passes or the program reads from state are replaced (the
program's own tensors have no other identity); every replacement adds the identity guard of the
tensor's path; a container holds the caller's tensor, never a proxy, after a store keyed by one.
"""

from __future__ import annotations

import operator
import types
import weakref
from collections.abc import Callable
from typing import Any

from jitcore.jit.provenance import Provenance
from jitcore.jit.state_kinds import identity_arguments
from jitcore.proxies import TensorProxy

__all__ = ["CallerKeys"]

# C functions whose answer is about the identity of each argument: they see the caller's tensor
# (``weakref.ref.__new__``: a subclass's construction, torch.utils.weak.WeakIdRef)
_BY_IDENTITY = frozenset(map(id, (id, hash, weakref.ref, weakref.ref.__new__, operator.is_, operator.is_not)))
_SEARCHING = (list, tuple)  # ``l.index(t)``: found by identity before ``==``


class CallerKeys:
    """The caller's tensors in place of their proxies where identity decides (Note [A caller's tensor as a
    key])."""

    def __init__(self, provenance: Provenance) -> None:
        self.provenance = provenance

    def item_key(self, _frame: Any, container: Any, key: Any) -> Any:
        """``Hooks.item_key``: the key a hashed container is used with."""
        if not isinstance(key, TensorProxy) or _holds(container, key):
            return key
        return self._caller_tensor(key)

    def arguments(self, fn: Callable[..., Any], args: tuple) -> tuple:
        """The arguments C code ``fn`` is handed, with the caller's tensors where it keys by identity."""
        if not any(isinstance(arg, TensorProxy) for arg in args):
            return args
        if id(fn) in _BY_IDENTITY:
            return tuple(self._caller_tensor(arg) if isinstance(arg, TensorProxy) else arg for arg in args)
        keyed = identity_arguments(fn, args)
        if len(keyed) != 1 or not isinstance(keyed[0], TensorProxy):
            return args  # ``operator.eq(t, u)``: ``==`` on a tensor is a tensor operation of the proxy
        container = getattr(fn, "__self__", None) if not isinstance(fn, types.MethodDescriptorType) \
            else args[0]
        key = keyed[0]
        if container is None or _holds(container, key):
            return args
        if isinstance(container, _SEARCHING):
            tensor = self._caller_tensor(key, guard=False)
            if not any(item is tensor for item in container):
                return args  # compared with ``==``: the proxy's, a tensor operation
            self._caller_tensor(key)
            return tuple(tensor if arg is key else arg for arg in args)
        tensor = self._caller_tensor(key)
        return tuple(tensor if arg is key else arg for arg in args)

    def _caller_tensor(self, proxy: TensorProxy, *, guard: bool = True) -> Any:
        found = self.provenance.input_of(proxy)
        if found is None:
            return proxy  # a tensor the program made: the proxy is its only identity
        path, tensor = found
        if guard:
            self.provenance.guard(path, "identity", tensor)
        return tensor


def _holds(container: Any, proxy: TensorProxy) -> bool:
    """Whether ``container`` already holds the proxy itself (a container the program built with it)."""
    try:
        if isinstance(container, (dict, set, frozenset, type({}.keys()))):
            return proxy in container  # hashed by identity: compares nothing else
        if isinstance(container, _SEARCHING):
            return any(item is proxy for item in container)
    except TypeError:
        return False
    return False
