"""Questions about a tree of arguments: does a value of some kind occur in it?

A tree is a value and, recursively, the elements of its tuples and lists (named tuples included) and
the values of its dicts: the shape of a call's ``args``/``kwargs``. Other containers are leaves.
Invariants: these predicates only read; they never call user code (no ``__iter__``, no ``__eq__``, no
``values()`` of a subclass: an OrderedDict emptied by ``dict.clear`` raises KeyError from its own);
each container is visited once, so a container that holds itself (``a = []; a.append(a)``, whose
``repr`` is ``[[...]]``) is answered, not recursed into without end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["tree_any", "tree_has"]


def tree_has(tree: Any, cls: type | tuple[type, ...]) -> bool:
    """Whether an instance of ``cls`` is ``tree`` or occurs inside it (a slice's bounds included:
    ``x[:, a:b]``)."""
    kind = type(tree)
    if issubclass(kind, cls):
        return True
    if issubclass(kind, _CONTAINERS):
        return _has(tree, cls, set())
    return kind is slice and _bound_has(tree, cls)


def tree_any(tree: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for a leaf of ``tree`` (a value that is no tuple, list or dict)."""
    if issubclass(type(tree), _CONTAINERS):
        return _any(tree, test, set())
    return not isinstance(tree, _CONTAINERS) and bool(test(tree))


_CONTAINERS = (tuple, list, dict)


# Note [Tree searches without a call per node]
# Every recorded call asks these questions of its arguments several times (held tensors, subclass
# values, numbers), so the walk visits a container's elements in one loop and calls itself only for a
# nested container: a leaf costs a type test, not a Python call. Answers are those of the plain
# recursive definition (``found(node)``, then a container's items each once, then a slice's bounds),
# which tests/ir/test_ir_tree.py checks against random trees.
def _has(tree: tuple | list | dict, cls: type | tuple[type, ...], seen: set[int]) -> bool:
    """Whether an instance of ``cls`` occurs below the container ``tree`` (not yet in ``seen``)."""
    seen.add(id(tree))
    for value in _items(tree):
        kind = type(value)
        if issubclass(kind, cls):
            return True
        if issubclass(kind, _CONTAINERS):
            if id(value) not in seen and _has(value, cls, seen):
                return True
        elif kind is slice and _bound_has(value, cls):
            return True
    return False


def _bound_has(bounds: slice, cls: type | tuple[type, ...]) -> bool:
    return (issubclass(type(bounds.start), cls) or issubclass(type(bounds.stop), cls)
            or issubclass(type(bounds.step), cls))


def _any(tree: tuple | list | dict, test: Callable[[Any], bool], seen: set[int]) -> bool:
    """Whether ``test`` holds for a leaf below the container ``tree`` (not yet in ``seen``)."""
    seen.add(id(tree))
    for value in _items(tree):
        if issubclass(type(value), _CONTAINERS):
            if id(value) not in seen and _any(value, test, seen):
                return True
        elif not isinstance(value, _CONTAINERS) and test(value):
            return True
    return False


def _items(tree: tuple | list | dict) -> Any:
    """The elements of a tuple or list, the values of a dict: read by the base type's own methods."""
    kind = type(tree)
    if kind is tuple or kind is list:
        return tree
    if isinstance(tree, dict):
        return dict.values(tree)
    return list.__iter__(tree) if isinstance(tree, list) else tuple.__iter__(tree)
