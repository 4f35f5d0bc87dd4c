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
the proxy, so a fresh tensor per call is not a new entry per call. ``id()`` and ``hash()`` of a
caller's tensor stay the proxy's: library code uses them for containers of its own (``copy.deepcopy``'s
memo); a program comparing them with ids the caller kept, or a ``WeakIdKeyDictionary`` of the caller's
keyed by the tensor, does not see the caller's tensor (docs/user-guide.md, "What is guarded").

Invariants: only proxies of tensors the call passes or the program reads from state are replaced (the
program's own tensors have no other identity); every replacement adds the identity guard of the
tensor's path; a caller's container holds the caller's tensor, never a proxy, after a store keyed by one.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable
from typing import Any

from jitcore.jit.provenance import Provenance
from jitcore.jit.state_kinds import identity_arguments
from jitcore.proxies import TensorProxy

__all__ = ["CallerKeys"]

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
        return self._key(container, key) if isinstance(key, TensorProxy) else key

    def arguments(self, fn: Callable[..., Any], args: tuple) -> tuple:
        """The arguments C code ``fn`` is handed, with the caller's tensor where it is a key or searched
        for (``d.get(t)``, ``s.add(t)``, ``l.index(t)``)."""
        if not any(isinstance(arg, TensorProxy) for arg in args):
            return args
        keyed = identity_arguments(fn, args)
        container = args[0] if isinstance(fn, types.MethodDescriptorType) else getattr(fn, "__self__", None)
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
