"""Copies jitcore makes of the objects a program returns or stores, one for each call as eagerly.

Eager's call makes anew every object it returns or stores, except the caller's objects it hands on. A
cached call makes them again from what the pass made (jit/outputs.py): an object around traced tensors
from a shallow copy of a template (``copier``), an object the program made that holds nothing traced
(a set, an instance of the program's class, a deque) from a deep copy of the pass's (``made_anew``).

Invariants: copying never writes the copied object's class (Note [jitcore's own copy leaves no
__slotnames__]); a deep copy keeps every caller's object and every tensor it reaches as that very object;
an object no copy can make again is refused while tracing (JC-T001: the call runs eagerly), never handed
to two calls.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import copyreg
import enum
import types
from collections.abc import Callable
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError

__all__ = ["copied", "copier", "made_anew", "programs_own"]


# Note [jitcore's own copy leaves no __slotnames__]
# ``copy.copy`` of an object whose class has no ``__slotnames__`` yet runs copyreg's ``_slotnames``, which
# caches the class's slot names in the class itself (``cls.__slotnames__ = []``). Made here, in the pass,
# that write was taken for the program's: the pass's class states are diffed after it, and every cached
# call of HF Llama and GPT-2 then set ``__slotnames__`` on transformers' ``DynamicCache`` and
# ``DynamicLayer``, which eager never does. A cache the copy made is taken out of the class again.
def copied(value: Any) -> Any:
    """``copy.copy(value)``, leaving the class's ``__dict__`` as it was."""
    cls = type(value)
    had = "__slotnames__" in vars(cls)
    copied = copy.copy(value)
    if not had and "__slotnames__" in vars(cls):
        with contextlib.suppress(AttributeError, TypeError):
            delattr(cls, "__slotnames__")
    return copied


# Note [A template copied again from one reduction]
# Each cached call makes the program's returned objects again from a template (``rebuild_object``).
# ``copied(template)`` on every call took the template's reduction again each time: copyreg's
# ``_slotnames`` walked the class's MRO, and the class got ``__slotnames__`` set and deleted on every call
# (a type write each way, which also empties the type's attribute cache). ``copy.copy`` makes a shallow
# copy from ``template.__reduce_ex__(4)``: (func, args, state, list items, dict items). The template is
# jitcore's own and never changes, so the reduction is taken once, in the pass, and each call makes the
# copy from it as ``copy._reconstruct`` does. That gives ``copy.copy``'s object only where reducing again
# would give the same parts, so the reduction is taken twice and kept only when both hold the very same
# objects (a reduction that makes lists or dicts of its own would otherwise hand one of them to every
# call's copy). A class with ``__copy__`` or a ``copyreg`` reducer, and any other reduction, is copied
# by ``copied`` on every call as before.
def copier(template: Any) -> Callable[[], Any]:
    """A function making ``copy.copy(template)`` again, leaving the class as eager leaves it."""
    cls = type(template)
    if getattr(cls, "__copy__", None) is not None or cls in copyreg.dispatch_table:
        return lambda: copied(template)
    first, again = _reduction(template), _reduction(template)
    if first is None or again is None or not _same_parts(first, again):
        return lambda: copied(template)
    func, args, state, items, pairs = first

    def copy_again() -> Any:
        made = func(*args)
        if state is not None:
            _set_state(made, state)
        for item in items:
            made.append(item)
        for key, item in pairs:
            made[key] = item
        return made

    return copy_again


def _reduction(template: Any) -> tuple | None:
    """``template``'s reduction for ``copy.copy`` as (func, args, state, items, pairs), or None."""
    cls = type(template)
    had = "__slotnames__" in vars(cls)
    try:
        reduced = template.__reduce_ex__(4)
    except Exception:  # noqa: BLE001 - left to ``copied`` on every call, which raises as copy does
        return None
    finally:
        if not had and "__slotnames__" in vars(cls):
            with contextlib.suppress(AttributeError, TypeError):
                delattr(cls, "__slotnames__")
    if not isinstance(reduced, tuple) or not 2 <= len(reduced) <= 5:
        return None
    func, args, state, items, pairs = (*reduced, None, None, None)[:5]
    return func, tuple(args), state, tuple(items or ()), tuple(pairs or ())


def _same_parts(first: tuple, again: tuple) -> bool:
    """Whether two reductions hold the very same objects (the tuples and dicts they made, item by item)."""

    def same(a: Any, b: Any) -> bool:
        if a is b:
            return True
        if type(a) is not type(b) or type(a) not in (tuple, dict):
            return False
        if type(a) is dict:
            return list(a) == list(b) and all(a[k] is b[k] for k in a)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))

    return all(same(a, b) for a, b in zip(first, again))


def _set_state(made: Any, state: Any) -> None:
    """The state part of a reduction set on a new object, as ``copy._reconstruct`` sets it."""
    if hasattr(made, "__setstate__"):
        made.__setstate__(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state:
        made.__dict__.update(state)
    for name, item in (slots or {}).items():
        setattr(made, name, item)


# Note [Objects the program makes, anew on every call]
# The trace prints tuples, lists and dicts as literals, so each call's are new; any other object in what
# the program returns or stores was a constant: the very object the pass made, handed to every call. A
# set, an instance of the program's class or a deque (``return x + 1, Info(steps=[])``, ``self.seen =
# set()``) was one object across calls: what the caller did to one call's showed in the next call's. Such
# an object is made anew for each call as a deep copy of the pass's, whose memo holds, as themselves, the
# objects it reaches that are the caller's (``owner``), tensors and torch's other objects (``deepcopy``
# itself keeps classes, functions and modules). An object ``deepcopy`` cannot copy (a lock) is refused
# while tracing: the call runs eagerly. Left: one object the program both returns and stores is two
# copies, and an argument's list or dict that a returned object holds is a copy, not the caller's.
_MUTABLE_BUILTINS = (set, bytearray, collections.deque, collections.OrderedDict, collections.defaultdict,
                     collections.Counter, list, dict)


def made_anew(value: Any, owner: Callable[[Any], str | None],
              children: Callable[[Any], list]) -> Callable[[], Any]:
    """A function making ``value``, an object the program made (``programs_own``), anew for a call.
    ``children``: what an object holds (items, attributes, slots)."""
    memo = _kept_inside(value, owner, children)
    try:
        copy.deepcopy(value, dict(memo))
    except Exception as error:  # noqa: BLE001 - any failure of the object's own copying
        raise UnsupportedOperationError(
            f"the function returns or stores a {type(value).__qualname__} it made, which jitcore cannot "
            f"make anew for each call ({type(error).__name__}: {error})",
        ) from None
    return lambda: copy.deepcopy(value, dict(memo))


def programs_own(value: Any) -> bool:
    """Whether ``value`` is a mutable container or an instance of a class of Python code's."""
    kind = type(value)
    if kind in _MUTABLE_BUILTINS:
        return True
    module = kind.__module__ or "builtins"
    if module == "builtins" or module.split(".")[0] in ("torch", "jitcore"):
        return False  # functions, frozensets, ...; torch's objects (symbolic numbers, placements); jitcore's
    if issubclass(kind, (type, types.ModuleType, torch.Tensor, enum.Enum)):
        return False
    return hasattr(value, "__dict__") or any(getattr(k, "__slots__", ()) for k in kind.__mro__[:-1])


def _torchs_own(value: Any) -> bool:
    """A tensor, or another object of torch's or jitcore's (a symbolic number, a placement, a record)."""
    package = (type(value).__module__ or "").split(".")[0]
    return isinstance(value, torch.Tensor) or package in ("torch", "jitcore")


def _kept_inside(value: Any, owner: Callable[[Any], str | None],
                 children: Callable[[Any], list]) -> dict[int, Any]:
    """A deepcopy memo holding the objects ``value`` reaches that every call shares: the caller's, and
    tensors and torch's other objects (a copy of anything else is the copy ``deepcopy`` makes)."""
    memo: dict[int, Any] = {}
    seen: set[int] = set()
    todo = list(children(value))
    while todo:
        item = todo.pop()
        if id(item) in seen or item is None or type(item) in (int, float, bool, str, bytes, complex):
            continue
        seen.add(id(item))
        if _torchs_own(item) or owner(item) is not None:
            memo[id(item)] = item
        else:
            todo.extend(children(item))
    return memo
