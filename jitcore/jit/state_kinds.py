"""What kind of value of persistent state a reached object is, for guarding it (jitcore/jit/provenance.py).

Pure predicates on values and paths, no guards made here:
- ``is_structured``: a container guarded element by element rather than by identity;
- ``items_read_natively``: an object guarded by identity whose items C still reads past the hooks;
- ``is_plain_instance``: an object of a Python class guarded by its class and the attributes read;
- ``all_literal``: a container whose contents one ``contents`` guard compares;
- ``is_library_class``: a class of torch, jitcore or the standard library, taken as constant;
- ``is_module_registry``: a path ending at torch's own containers inside an ``nn.Module``;
- ``identity_arguments``: the arguments whose identity a C function may look at (``d.get(obj)``).
Invariant: each answer depends only on the value (and path) given, never on the pass.
"""

from __future__ import annotations

import argparse
import array
import collections
import enum
import functools
import operator
import sys
import types
from typing import Any

import torch

from jitcore.jit.code_kinds import class_module
from jitcore.prologue import Path
from jitcore.prologue.literals import is_literal_value

__all__ = [
    "MAX_ELEMENTS", "all_literal", "identity_arguments", "is_library_class", "is_module_registry",
    "is_plain_instance", "is_structured", "items_read_natively", "tensors_read_natively",
]

# Containers of state up to this size are guarded element by element; larger ones (of non-literals)
# by identity and length only (docs/user-guide.md, "What is guarded").
MAX_ELEMENTS = 4096
# torch's own containers in every nn.Module (``_modules``, ``_parameters``, hook dicts): only assigning
# one to another attribute would make it alias a container of the program's (Note [Containers reached
# twice] in jitcore/jit/provenance.py)
_MODULE_REGISTRIES = frozenset(k for k, v in vars(torch.nn.Module()).items() if isinstance(v, (dict, set)))


def is_module_registry(path: Path) -> bool:
    """Whether ``path`` ends at a torch registry of a module: ``m._modules``, ``m.__dict__['_modules']``."""
    steps = path.steps
    if not steps or steps[-1].value not in _MODULE_REGISTRIES:
        return False
    last = steps[-1]
    return last.kind == "attr" or (
        last.kind == "key" and len(steps) > 1 and steps[-2].kind == "attr" and steps[-2].value == "__dict__"
    )


def is_library_class(klass: type) -> bool:
    module = getattr(klass, "__module__", None) or ""
    if type(module) is not str:  # a descriptor for its instances (the interpreter's FrameProxy): not known
        return False
    module = module.split(".")[0]
    return module in ("torch", "jitcore") or module in _STDLIB  # the standard library's classes too


_STDLIB = frozenset(sys.stdlib_module_names) | {"builtins"}


def all_literal(value: Any) -> bool:
    if type(value) is dict:
        return all(is_literal_value(k) and is_literal_value(v) for k, v in value.items())
    return all(is_literal_value(v) for v in value)  # any length: one 'contents' guard compares them all


def is_plain_instance(value: Any) -> bool:
    """An instance of a Python class holding its state in its ``__dict__`` (not a function, class,
    module, torch module or other object whose behaviour lives outside the attributes read)."""
    t = type(value)
    return (
        hasattr(value, "__dict__")
        and t.__module__ not in ("builtins", "types", "functools")
        and not issubclass(type(value), (type, types.ModuleType, types.FunctionType, types.MethodType,
                                   functools.partial, torch.nn.Module, torch.Tensor, enum.Enum))
    )


def is_structured(value: Any) -> bool:
    """Whether a container of state is guarded element by element (``_container``), not by identity:
    lists, tuples, dicts and deques up to ``MAX_ELEMENTS``; a ``defaultdict`` whose keys are plain
    (GradScaler's per-optimizer states by ``id``, remade by every ``update()``; an optimizer's state,
    keyed by parameters, stays an object of its own), and a ``Counter`` whose keys are plain (its
    ``update`` reads counts in library and C code, past the hooks: Note [Counters read natively]).
    Modules' OrderedDicts keep their identity guards (jit/module_guards.py groups them)."""
    t = type(value)
    if t in (list, tuple, dict, collections.deque):
        return len(value) <= MAX_ELEMENTS
    return (t in (collections.defaultdict, collections.Counter) and len(value) <= MAX_ELEMENTS
            and all(type(k) in (int, str) for k in value))


# Note [Items C reads natively]
# An OrderedDict of state, an instance of a dict or list subclass, and a namespace (``types.SimpleNamespace``,
# ``argparse.Namespace``) are guarded by identity (and length), their items only as the program subscripts
# them. C reads all of them past the hooks: ``repr(od)``, ``od == other``, ``dict(od)``, ``copy.copy(od)``,
# ``sum(od.values())``, ``for k, v in od.items()`` (the items iterator is C's), and ``repr(ns)``,
# ``ns == other``, ``copy.copy(ns)`` (C reads a SimpleNamespace's ``__dict__``; an argparse Namespace's are
# the standard library's Python, whose reads of a caller's object are not taken as state). A cached call
# returned the first call's answer once the caller changed an item (a wrong answer). Their items are now
# guarded as a plain dict's or list's are (``Provenance._container``: keys or length, each item by value,
# identity or as a container again; a namespace's at its ``__dict__``). Only where C reads them as a dict
# or list does (no reading method of the class is Python code: that code is interpreted where the program
# calls it) and a dict's keys are plain (an optimizer's state, keyed by parameters, stays guarded by
# identity); torch's registries in a module are left to jit/module_guards.py (``is_module_registry``).
# A ``types.MappingProxyType`` of state is one too (``repr(mp)``, ``dict(mp)``, ``mp == other`` read the
# mapping it views in C): its keys and items are guarded through it (``mp[k]``).
# A ``bytearray`` or ``array.array`` of state is such a container too (``len(buf)``, ``sum(arr)``,
# ``bytes(buf)`` read it in C): its length and each item are guarded. A dict of these read only by a
# constant subscript (``od["lr"]``) is narrowed as a plain dict's read is (jit/state_reads.py
# ``_bind_state``): another item the caller changes (a counter) is then no new entry.
_NAMESPACES = (types.SimpleNamespace, argparse.Namespace)  # whose repr and == read their ``__dict__``
_READING_METHODS = ("__getitem__", "__iter__", "__len__", "__contains__", "keys", "items", "values")


def items_read_natively(value: Any) -> tuple[dict | list, str | None] | None:
    """The container whose items C reads past the hooks (Note [Items C reads natively]), with the
    attribute it is at (``"__dict__"`` for a namespace, None for the object itself); None for others."""
    t = type(value)
    if t in (list, tuple, dict, collections.deque):
        return None  # guarded element by element or by contents already (``is_structured``)
    if issubclass(t, _NAMESPACES):
        items, attribute = object.__getattribute__(value, "__dict__"), "__dict__"
    elif t is types.MappingProxyType:
        items, attribute = value, None  # a read-only view of a mapping: C reads the mapping's items
    elif issubclass(t, (bytearray, array.array)):
        items, attribute = value, None  # a buffer C reads whole: ``len``, ``sum``, ``bytes(b)``
    elif issubclass(t, (dict, list)):
        if any(type(getattr(t, name, None)) is types.FunctionType for name in _READING_METHODS):
            return None
        items, attribute = value, None
    else:
        return None
    if len(items) > MAX_ELEMENTS or isinstance(items, (dict, types.MappingProxyType)) and \
            not all(type(k) in (int, str) for k in items):
        return None
    return items, attribute


_IDENTITY_FUNCTIONS = frozenset(map(id, (id, hash, operator.is_, operator.is_not, operator.contains,
                                         operator.eq, operator.ne, operator.countOf, operator.indexOf)))
_HASHING_TYPES = (dict, set, frozenset)
_KEY_METHODS = frozenset({"__getitem__", "__setitem__", "__delitem__", "__contains__", "get", "pop",
                          "setdefault", "add", "discard", "remove"})
_SEQUENCE_TYPES = (list, tuple, collections.deque)
_COMPARING_METHODS = frozenset({"index", "count", "remove", "__contains__"})


def identity_arguments(fn: Any, args: tuple) -> tuple:
    """The arguments whose identity ``fn`` may look at: all of them for ``id``/``hash``/``is``, the key
    of a dict's or set's key method (hashed by identity), the value a sequence searches for (compared
    with the default ``==``)."""
    if id(fn) in _IDENTITY_FUNCTIONS:  # by identity: a pybind11 property getter is unhashable
        return args
    if not args:
        return ()
    if isinstance(fn, types.MethodDescriptorType):  # ``dict.get(d, key)``: the receiver comes first
        owner, args = fn.__objclass__, args[1:]
    else:
        owner = type(getattr(fn, "__self__", None))
    name = getattr(fn, "__name__", "")
    if issubclass(owner, _HASHING_TYPES) and name in _KEY_METHODS:
        return args[:1]
    if issubclass(owner, _SEQUENCE_TYPES) and name in _COMPARING_METHODS:
        return args[:1]
    return ()



# Note [Tensors in dicts read natively]
# ``d.values()``/``d.items()`` of an OrderedDict or a dict subclass that the provenance guards by
# identity (state) or by class (an argument) read its tensors in C, past the hooks: they were bound as
# captured tensors, so a global OrderedDict's first tensors were used by every later call (a wrong
# answer once it held others) and a ModelOutput passed per call missed every time. Such a dict's keys
# are guarded and its tensors remembered at their keys, read through that path per call, as for a
# plain dict (Provenance._container). Only where ``obj[key]`` reads the item: ``__getitem__`` is
# dict's, OrderedDict's or transformers' ModelOutput's (string keys read from the dict).
_MAX_ITEMS = 256


def tensors_read_natively(value: Any, first: Any) -> list[tuple[Any, torch.Tensor]]:
    """(key, tensor) of each caller's tensor in ``first`` (``value`` as the call found it) that C code
    may read from ``value`` past the hooks (Note [Tensors in dicts read natively]); [] for others."""
    if not issubclass(type(value), dict) or len(value) > _MAX_ITEMS:
        return []
    getitem = getattr(type(value), "__getitem__", None)
    if getitem not in (dict.__getitem__, collections.OrderedDict.__getitem__) and not (
        getattr(getitem, "__qualname__", None) == "ModelOutput.__getitem__"
        and (getattr(getitem, "__module__", None) or "").startswith("transformers.")
    ):
        return []
    return [(k, v) for k, v in dict.items(first) if type(v) is torch.Tensor or (
        issubclass(type(v), torch.Tensor) and not class_module(type(v)).startswith("jitcore"))]
