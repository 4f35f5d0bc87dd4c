"""Shallow copies jitcore makes of the objects a program returns or stores around traced tensors.

Eager's call makes anew every object it returns or stores, except the caller's objects it hands on. A
cached call makes an object around traced tensors again from a shallow copy of a template (``copier``,
jit/outputs.py); an object the program made that holds nothing traced is a deep copy of the pass's
(jit/call_copies.py).

Invariants: copying never writes the copied object's class (Note [jitcore's own copy leaves no
__slotnames__]).
"""

from __future__ import annotations

import contextlib
import copy
import copyreg
from collections.abc import Callable
from typing import Any

__all__ = ["copied", "copier"]


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
