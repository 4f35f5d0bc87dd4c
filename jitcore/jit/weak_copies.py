"""Weak references and weak containers inside the objects a program makes, made again for each call.

``copy.deepcopy`` keeps a ``weakref.ref`` as itself and copies a ``WeakSet`` through its ``__reduce__``,
whose state is the original's own set of weak references and its ``_remove`` callback: a call's copy
pointed at the pass's objects, not at the call's copies of them (CPython's test_weakset, ``self.fs =
WeakSet([self.obj])``: the call's ``self.obj`` was not in the call's ``self.fs``). Here each is made as
the program made it, around the call's copies of what it refers to (jit/call_copies.py).

Invariants: an object made here refers weakly to exactly the objects the original refers to, each
replaced by this call's copy (the caller's objects by themselves); a finalizer the program registered is
registered once per call on the call's copy and never fires for the pass's object (it is detached when
the pass takes it); anything weak this module does not know is refused (``knows``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["finalizers_by_object", "held", "is_weak", "knows", "remake", "take_finalizer"]

_CONTAINERS = (weakref.WeakSet, weakref.WeakKeyDictionary, weakref.WeakValueDictionary)
# what ``__init__`` sets on each container (the weak references themselves and their bookkeeping): made
# anew by calling the base class's ``__init__`` on the call's object, never copied
_INTERNALS = {base: frozenset(vars(base())) for base in _CONTAINERS}

Copy = Callable[[Any], Any]  # this call's copy of an object (``copy.deepcopy`` with the call's memo)


def is_weak(value: Any) -> bool:
    """A weak reference, weak container or finalizer: made here, not by ``copy.deepcopy``."""
    return isinstance(value, (weakref.ref, weakref.finalize, *_CONTAINERS))


def knows(value: Any) -> bool:
    """Whether ``remake`` makes ``value`` as the program made it (a plain ``weakref.ref``, a finalizer,
    the three weak containers and their subclasses; not a ``WeakMethod`` or another ``ref`` subclass)."""
    return type(value) is weakref.ref or isinstance(value, (weakref.finalize, *_CONTAINERS))


def held(value: Any) -> list[Any]:
    """What a weak object refers to or holds, for the walk that finds the caller's objects in it."""
    if type(value) is weakref.ref:
        target = value()
        return [] if target is None else [target, value.__callback__]
    if isinstance(value, weakref.finalize):
        info = _taken(value)
        return [] if info[0] is None else [info[0][0], info[0][1], *info[0][2], *info[0][3].values()]
    items: list[Any] = []
    if isinstance(value, weakref.WeakSet):
        items = list(value)
    elif isinstance(value, _CONTAINERS):
        items = [part for pair in list(value.items()) for part in pair]
    return items + [item for _name, item in _extra_state(value)]


# Note [A finalizer of an object the program made]
# ``weakref.finalize(obj, func)`` registers ``func`` to run when ``obj`` dies. The pass's finalizer is
# registered on the pass's object, which the cache keeps as the template of every call's copy: it would
# run when the entry is dropped, or at exit, where eager's never does. The pass takes what it registered
# (``take_finalizer``), detaches it, and each call registers the same function on its own copy.
# (finalizers take no weak reference: kept by id, each with itself so that the id stays its)
_FINALIZERS: dict[int, tuple[weakref.finalize, tuple | None, bool]] = {}


def _taken(value: weakref.finalize) -> tuple[tuple | None, bool]:
    """What ``value`` registered (obj, func, args, kwargs; None when dead) and its ``atexit``."""
    found = _FINALIZERS.get(id(value))
    return (value.peek(), value.atexit) if found is None else found[1:]


def finalizers_by_object() -> dict[int, list[weakref.finalize]]:
    """The live finalizers, by the id of the object each watches (none is held by its object)."""
    found: dict[int, list[weakref.finalize]] = {}
    for finalizer in list(weakref.finalize._registry):  # noqa: SLF001 - the only list of them
        info = finalizer.peek()
        if info is not None:
            found.setdefault(id(info[0]), []).append(finalizer)
    return found


def take_finalizer(value: weakref.finalize) -> None:
    """Keep what ``value`` registered and detach it (Note [A finalizer of an object the program made])."""
    if id(value) not in _FINALIZERS:
        _FINALIZERS[id(value)] = (value, value.peek(), value.atexit)
        value.detach()


def remake(value: Any, memo: dict[int, Any], copied: Copy, register: bool = True) -> Any:
    """This call's ``value``, put in ``memo`` before what it holds is copied (cycles reach it there).
    ``register=False``: a finalizer is made detached (the pass's trial copy runs no finalizer)."""
    if type(value) is weakref.ref:
        made = _remade_ref(value, copied)
        memo[id(value)] = made
        return made
    if isinstance(value, weakref.finalize):
        made = _remade_finalizer(value, copied, register)
        memo[id(value)] = made
        return made
    base = next(b for b in _CONTAINERS if isinstance(value, b))
    made = type(value).__new__(type(value))
    base.__init__(made)
    memo[id(value)] = made
    for name, item in _extra_state(value):
        object.__setattr__(made, name, copied(item))
    if base is weakref.WeakSet:
        for item in list(value):
            made.add(copied(item))
    else:
        for key, item in list(value.items()):
            made[copied(key)] = copied(item)
    return made


def _remade_ref(value: weakref.ref, copied: Copy) -> weakref.ref:
    target = value()
    if target is None:
        return _dead_ref()
    callback = value.__callback__
    target = copied(target)
    return weakref.ref(target) if callback is None else weakref.ref(target, copied(callback))


def _remade_finalizer(value: weakref.finalize, copied: Copy, register: bool) -> weakref.finalize:
    info, atexit = _taken(value)
    if info is None or not register:  # it ran or was detached before the program returned: a dead one
        made = weakref.finalize(_Gone(), _nothing)
        made.detach()
        return made
    obj, func, args, kwargs = info
    made = weakref.finalize(copied(obj), copied(func), *copied(args), **copied(kwargs))
    made.atexit = atexit
    return made


class _Gone:
    """An object only a dead weak reference points to."""


def _dead_ref() -> weakref.ref:
    return weakref.ref(_Gone())  # its object is freed at once: the reference is dead


def _nothing() -> None:
    return None


def _extra_state(value: Any) -> list[tuple[str, Any]]:
    """A weak container's attributes and slots besides what its base class's ``__init__`` sets (a
    subclass's own)."""
    base = next((b for b in _CONTAINERS if isinstance(value, b)), None)
    if base is None:
        return []
    internals = _INTERNALS[base]
    found = [(n, v) for n, v in getattr(value, "__dict__", {}).items() if n not in internals]
    for klass in type(value).__mro__:
        for slot in getattr(klass, "__slots__", ()) if klass not in _CONTAINERS else ():
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                found.append((slot, getattr(value, slot)))
    return found
