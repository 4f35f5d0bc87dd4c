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
    return _search(tree, lambda node: issubclass(type(node), cls), set(), bounds=True)


def tree_any(tree: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for a leaf of ``tree`` (a value that is no tuple, list or dict)."""
    return _search(tree, lambda node: not isinstance(node, _CONTAINERS) and test(node), set(), bounds=False)


_CONTAINERS = (tuple, list, dict)


def _search(tree: Any, found: Callable[[Any], bool], seen: set[int], *, bounds: bool) -> bool:
    """Whether ``found`` holds for ``tree`` or for a node below it: an element of its tuples and lists, a
    value of its dicts, each container visited once (a container may hold itself); ``bounds``: a
    slice's bounds too."""
    if found(tree):
        return True
    if issubclass(type(tree), _CONTAINERS):
        if id(tree) in seen:
            return False
        seen.add(id(tree))
        for value in _items(tree):
            if _search(value, found, seen, bounds=bounds):
                return True
        return False
    if bounds and type(tree) is slice:
        return found(tree.start) or found(tree.stop) or found(tree.step)
    return False


def _items(tree: tuple | list | dict) -> Any:
    """The elements of a tuple or list, the values of a dict: read by the base type's own methods."""
    if isinstance(tree, dict):
        return dict.values(tree)
    return list.__iter__(tree) if isinstance(tree, list) else tuple.__iter__(tree)
