"""What a value holds: the proxies (and fake tensors) reachable from an object the program returns or
stores, through containers, pytree nodes, dataclass fields, instance dicts, slots, closures and tensors'
``.grad`` (jit/outputs.py takes outputs apart with it; the jit refuses a pass that leaves one reachable).

Invariants: a walk reads no attribute through the program's code (``__dict__``, slots by name, C
containers' items), and stops ``MAX_DEPTH`` steps down or at an object it reached before.
"""

from __future__ import annotations

import collections
import types
import weakref
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from jitcore.ir import Proxy
from jitcore.jit.code_kinds import class_module
from jitcore.jit.made_functions import EMPTY, function_state
from jitcore.jit.object_states import MISSING, get_slot, slot_members
from jitcore.proxies.text import TextProxy, plain_key

__all__ = ["DICT_VIEWS", "MAX_DEPTH", "children", "escaped", "held", "holds_proxy", "is_iterator"]

MAX_DEPTH = 64
# Note [Sets, views and iterators in outputs] (jit/outputs.py)
DICT_VIEWS = {type({}.keys()): dict.keys, type({}.values()): dict.values, type({}.items()): dict.items}


def holds_proxy(value: Any, depth: int) -> bool:
    """A proxy, or an iterator made while tracing (taken apart only here: ``split``), is in ``value``."""
    return escaped(value, depth, iterators=True) is not None


def escaped(value: Any, depth: int = 0, _seen: set[int] | None = None, *, iterators: bool = False) -> Any:
    """A proxy, or a fake tensor (a shadow: a subclass value's inner tensor, a gradient), reachable from
    ``value`` through containers, pytree nodes, dataclass fields, instance dicts, slots and tensors'
    ``.grad``, at most ``MAX_DEPTH - depth`` steps away (None: none is)."""
    if issubclass(type(value), (Proxy, FakeTensor, TextProxy)) or iterators and is_iterator(value):
        return value
    if depth > MAX_DEPTH or value is None or type(value) in (int, float, bool, str, bytes, complex):
        return None
    seen = _seen if _seen is not None else set()
    if id(value) in seen:
        return None
    seen.add(id(value))
    for child in children(value):
        found = escaped(child, depth + 1, seen, iterators=iterators)
        if found is not None:
            return found
    return None


def children(value: Any) -> list[Any]:
    kind = type(value)  # not isinstance: it reads ``__class__``, which a class may compute
    if class_module(kind).startswith("jitcore"):
        return []  # jitcore's own records (a jitted function's traces) hold proxies by design
    if issubclass(kind, (tuple, list, set, frozenset, collections.deque)):
        return list(value)
    if kind is weakref.ref:  # a weak reference to a proxy leaks it as surely as a strong one
        target = value()
        return [] if target is None else [target]
    if issubclass(kind, dict):
        return [*value.values(), *(k for k in value if plain_key(k) is not k)]
    if kind in DICT_VIEWS:
        return [*value.mapping.keys(), *value.mapping.values()]
    if issubclass(kind, (type, types.ModuleType)) or callable(value) and not hasattr(value, "__dict__"):
        return []
    if kind is types.FunctionType:  # a function returned or stored: what its cells, defaults, attributes hold
        return [part for part in function_state(value) if part is not EMPTY and part is not None]
    found = list(getattr(value, "__dict__", {}).values()) if hasattr(value, "__dict__") else []
    if issubclass(kind, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ sees no read
            try:  # (a non-leaf's .grad warns and is unused)
                grad = value.grad if value.is_leaf else None
            except RuntimeError:  # a view autograd refuses to make again (transforms/view_versions.py)
                grad = None
        if grad is not None:
            found.append(grad)  # set by a backward the program ran
    for member in slot_members(kind).values():  # through the descriptors: a private slot by its mangled name
        child = get_slot(member, value)
        if child is not MISSING and child is not None:
            found.append(child)
    return found


def is_iterator(value: Any) -> bool:
    """A generator, or a builtin or ``itertools`` iterator (``iter(l)``, ``zip``, ``map``, ``enumerate``,
    ``itertools.count``): stateful, made while tracing (Note [Sets, views and iterators in outputs])."""
    return issubclass(type(value), types.GeneratorType) or (
        type(value).__module__ in _ITERATOR_MODULES and hasattr(type(value), "__next__"))


# ``itertools``' iterators (``count``, ``chain``, ``islice``, ``product``, ...) and the ``collections``
# C iterators are stateful as ``iter(l)`` is: returned as the pass's object, every cached call handed on
# the one iterator the first caller consumed (``itertools.chain([1], [n])``: [] from the second call)
_ITERATOR_MODULES = frozenset(("builtins", "itertools", "_collections", "collections"))


def held(value: Any) -> Proxy | None:
    """A proxy ``value`` holds directly: as an item, a dict value, an attribute or a slot."""
    if issubclass(type(value), Proxy):
        return value
    if value is None or type(value) in (int, float, bool, str, bytes, complex):
        return None
    return next((child for child in children(value) if issubclass(type(child), Proxy)), None)
