"""The state of one object a side-effect snapshot holds, read and put back (jit/effects.py).

``state_of`` reads what the program may change of an object it reached (a cell's contents, a list's,
deque's, set's, dict's, ``bytearray``'s or ``array.array``'s items, a class's own attributes, an
instance's ``__dict__`` or ``__slots__`` fields, a caller's tensor's attributes and ``.grad``), in a form
``jit/effects.py`` diffs; ``restore`` puts such a state back.

Invariants: both read and write through the built-in types' own methods and through slot member
descriptors, never through a subclass's overrides, a ``__setattr__`` or a tensor class's
``__torch_function__`` (those are the program's code, which the pass runs, not jitcore's); a field
that is absent is ``MISSING``, never a value.
"""

from __future__ import annotations

import array
import collections
import functools
import types
import weakref
from typing import Any

import torch

from jitcore.ir import Proxy
from jitcore.proxies.protocol import instance_attributes
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["BUFFERS", "MISSING", "attributes", "buffer_type", "get_slot", "grad_of", "is_slot", "restore",
           "same_state", "set_slot", "slot_members", "state_of"]

MISSING = object()  # an absent field, cell contents or slot
BUFFERS = (bytearray, array.array)  # sequences of numbers held in C, diffed as lists are


def buffer_type(obj: Any) -> type:
    """The built-in type of a ``bytearray`` or ``array.array`` (of a subclass's instance too)."""
    return bytearray if issubclass(type(obj), bytearray) else array.array


def state_of(obj: Any) -> Any:
    kind = type(obj)
    if kind is types.CellType:
        try:
            return ("cell", obj.cell_contents)
        except ValueError:
            return ("cell", MISSING)
    if issubclass(kind, collections.deque):
        return ("deque", list(obj))
    # the built-in types' own methods: a subclass's overrides (a registry's ``get``) are the program's
    if issubclass(kind, list):
        return ("list", list(list.__iter__(obj)))
    if issubclass(kind, BUFFERS):  # a copy of its items, as its base type's (``buf.extend(b"c")``)
        return ("buffer", buffer_type(obj).__getitem__(obj, slice(None)))
    if issubclass(kind, collections.OrderedDict):  # its own order (``move_to_end``), not its dict's
        return ("dict", dict(collections.OrderedDict.items(obj)))
    if issubclass(kind, dict):
        return ("dict", dict(dict.items(obj)))
    if issubclass(kind, set):
        return ("set", set(set.__iter__(obj)))
    if issubclass(kind, type):  # a class's own attributes (``Counter.calls += 1``)
        return ("class", dict(vars(obj)))
    attrs = attributes(obj)
    if issubclass(kind, torch.Tensor) and not issubclass(kind, Proxy):
        # a tensor of the caller's: its Python attributes and its ``.grad`` (optimizers and
        # ``zero_grad`` set it)
        return ("tensor", (dict(attrs) if type(attrs) is dict else {}, grad_of(obj)))
    if type(attrs) is dict:
        return ("attrs", dict(attrs))
    slots = slot_members(type(obj))
    if slots:
        return ("slots", {name: get_slot(member, obj) for name, member in slots.items()})
    return None


def same_state(a: Any, b: Any) -> bool:
    """Whether two states ``state_of`` read of one object hold the very same objects (items, values, a
    cell's contents and a ``.grad`` by identity; keys by identity or as equal plain values)."""
    if type(a) is not tuple or type(b) is not tuple or len(a) != 2 or len(b) != 2 or a[0] != b[0]:
        return a is b
    if a[0] == "tensor":  # (its attributes, its grad)
        return _same_items(a[1][0], b[1][0]) and a[1][1] is b[1][1]
    return _same_items(a[1], b[1])


def _same_items(a: Any, b: Any) -> bool:
    t = type(a)
    if t is not type(b):
        return False
    if t is list:
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    if t is dict:
        return len(a) == len(b) and all(
            _same_key(ka, kb) and va is vb for (ka, va), (kb, vb) in zip(a.items(), b.items()))
    if t is set:
        return len(a) == len(b) and {id(x) for x in a} == {id(x) for x in b}
    return a is b or t in (bytes, bytearray, array.array) and a == b


def _same_key(a: Any, b: Any) -> bool:
    return a is b or type(a) is type(b) and type(a) in (str, int, float, bool, bytes) and a == b


def grad_of(tensor: torch.Tensor) -> Any:
    """``tensor.grad`` as torch holds it, never through the tensor's class's ``__torch_function__``."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [The grad of a caller's subclass]
        return tensor.grad


# Note [The grad of a caller's subclass]
# The snapshot of a caller's tensor (its ``.grad``, which a backward inside the function sets while
# tracing, on the shadows) is jitcore's read, not the program's: read natively, ``p.grad`` ran the
# class's ``__torch_function__``, and one that wraps every result in its class (a tensor with units,
# ``Unit(out, unit)`` over ``as_subclass``) was handed the fake gradient of the pass and raised
# (RuntimeError: ... already associated to a python object of type FakeTensor) where eager computes.


def attributes(obj: Any) -> Any:
    """``obj.__dict__`` (None without one); for a subclass value's proxy, its class's slots too (they are
    real slots of the proxy, as of the caller's tensor)."""
    if issubclass(type(obj), SubclassTensorProxy):
        return instance_attributes(obj, obj.python_type)
    return getattr(obj, "__dict__", None)


_SLOT_MEMBERS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def slot_members(cls: type) -> dict[str, Any]:
    """The ``__slots__`` fields of ``cls`` and its bases, each by its member descriptor (read and written
    through it, never through a property of the same name: 3.13's ``PurePath._raw_path`` is one over
    ``PurePathBase``'s slot)."""
    found = _SLOT_MEMBERS.get(cls)
    if found is None:
        found = {}
        for klass in cls.__mro__:
            declared = getattr(klass, "__slots__", ()) if "__slots__" in vars(klass) else ()
            for name in (declared,) if isinstance(declared, str) else declared:
                if isinstance(name, str) and name.startswith("__") and not name.endswith("__"):
                    name = f"_{klass.__name__.lstrip('_')}{name}"  # a private slot's mangled name
                member = vars(klass).get(name)
                if type(member) is types.MemberDescriptorType:
                    found.setdefault(name, member)
        _SLOT_MEMBERS[cls] = found
    return found


def get_slot(member: Any, obj: Any) -> Any:
    try:
        return member.__get__(obj, type(obj))
    except AttributeError:
        return MISSING



# Note [A set put back element by element]
# A set's iteration order is its hash table's, which its whole history of adds, removals and resizes
# decides. Put back with ``clear()`` and ``update()``, a set the pass had added to was a new table, so the
# replayed ``add``s (in eager's order) gave the same elements in another order from the first resize on
# (``s.add(str(len(s)))`` on a set argument: /tmp/eff54-probes/set_order2.py, "diverged at 5"). The
# elements the pass added are discarded and those it removed added back: a discarded element's slot is
# found again by the replayed ``add`` of it, so the table is eager's where the call adds one element. (Not
# so in general: CPython never inserts into a dummy. An exact set's table is now written back as the pass
# found it, Note [A set's table put back exactly], jit/set_tables.py; this is the fallback where that cannot
# be done.)
def restore(obj: Any, state: Any) -> None:
    kind, old = state
    if kind == "cell":
        if old is MISSING:
            try:
                del obj.cell_contents
            except ValueError:
                pass
        else:
            obj.cell_contents = old
    elif kind == "list":
        list.__setitem__(obj, slice(None), old)
    elif kind == "deque":
        obj.clear()
        obj.extend(old)
    elif kind == "buffer":
        buffer_type(obj).__setitem__(obj, slice(None), old)
    elif kind == "tensor":
        attrs, grad = old
        if grad_of(obj) is not grad:
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [The grad of a caller's subclass]
                obj.grad = grad
        if attrs or vars(obj):
            restore(obj, ("attrs", attrs))
    elif kind == "attrs" and issubclass(type(obj), SubclassTensorProxy):
        for name in attributes(obj).keys() - old.keys():
            if is_slot(obj.python_type, name):
                set_slot(obj, name, MISSING)
            else:
                del obj.__dict__[name]
        for name, value in old.items():
            obj.hold(name, value)
    elif kind == "class":
        for name in vars(obj).keys() - old.keys():
            type.__delattr__(obj, name)
        for name, value in old.items():
            if vars(obj).get(name, MISSING) is not value:
                type.__setattr__(obj, name, value)
    elif kind in ("dict", "attrs"):
        target = obj if kind == "dict" else obj.__dict__
        if dict.__len__(target) != len(old) or list(_keys(target)) != list(old) or any(
            dict.get(target, k, MISSING) is not v for k, v in old.items()
        ):
            _refill(target, old)
    elif kind == "set":  # Note [A set put back element by element]
        now = list(set.__iter__(obj))
        kept, present = set(old), set(now)  # membership as the set has it (hash, then identity or ==),
        for element in reversed([e for e in now if e not in kept]):  # not a list's == on every item
            set.discard(obj, element)
        set.update(obj, [e for e in old if e not in present])
    elif kind == "slots":
        for name, value in old.items():
            set_slot(obj, name, value)


# Note [Restoring an OrderedDict]
# ``dict.clear`` and ``dict.update`` called on an OrderedDict change its dict but not its own list
# of keys: iterating it afterwards raises KeyError (Segformer's forward hooks, which transformers
# registers while the program runs, left the model's hook dict broken for every later call, eager
# ones too). An OrderedDict is refilled through its own methods; other dicts through dict's, which
# runs no ``__setitem__`` a subclass overrides. A dict whose keys were only reordered is refilled too.
def _keys(target: dict) -> Any:
    ordered = isinstance(target, collections.OrderedDict)
    return collections.OrderedDict.keys(target) if ordered else dict.keys(target)


def _refill(target: dict, old: dict) -> None:
    if isinstance(target, collections.OrderedDict):
        collections.OrderedDict.clear(target)
        for key, value in old.items():
            collections.OrderedDict.__setitem__(target, key, value)
    else:
        dict.clear(target)
        dict.update(target, old)


@functools.cache
def is_slot(cls: type, name: Any) -> bool:
    """Whether ``name`` is a ``__slots__`` field of ``cls`` (its descriptor found first in the MRO)."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return isinstance(vars(klass)[name], types.MemberDescriptorType)
    return False


def set_slot(obj: Any, name: str, value: Any) -> None:
    """Write a ``__slots__`` field through its member descriptor (not the class's ``__setattr__``)."""
    descriptor = slot_members(type(obj)).get(name)
    if descriptor is None:
        descriptor = next(vars(k)[name] for k in type(obj).__mro__ if name in vars(k))
    if value is MISSING:
        try:
            descriptor.__delete__(obj)
        except AttributeError:
            pass
    else:
        descriptor.__set__(obj, value)
