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


def tree_has(tree: Any, cls: type | tuple[type, ...], _seen: set[int] | None = None) -> bool:
    """Whether an instance of ``cls`` is ``tree`` or occurs inside it."""
    if isinstance(tree, cls):
        return True
    if isinstance(tree, (tuple, list, dict)):
        seen = _seen if _seen is not None else set()
        if id(tree) in seen:
            return False
        seen.add(id(tree))
        for value in _items(tree):
            if tree_has(value, cls, seen):
                return True
    elif type(tree) is slice:  # ``x[:, a:b]``'s bounds
        return tree_has((tree.start, tree.stop, tree.step), cls)
    return False


def tree_any(tree: Any, test: Callable[[Any], bool], _seen: set[int] | None = None) -> bool:
    """Whether ``test`` holds for a leaf of ``tree`` (a value that is no tuple, list or dict)."""
    if isinstance(tree, (tuple, list, dict)):
        seen = _seen if _seen is not None else set()
        if id(tree) in seen:
            return False
        seen.add(id(tree))
        for value in _items(tree):
            if tree_any(value, test, seen):
                return True
        return False
    return test(tree)


def _items(tree: tuple | list | dict) -> Any:
    """The elements of a tuple or list, the values of a dict: read by the base type's own methods."""
    if isinstance(tree, dict):
        return dict.values(tree)
    return list.__iter__(tree) if isinstance(tree, list) else tuple.__iter__(tree)
