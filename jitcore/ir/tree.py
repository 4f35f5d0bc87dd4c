"""Questions about a tree of arguments: does a value of some kind occur in it?

A tree is a value and, recursively, the elements of its tuples and lists (named tuples included) and
the values of its dicts: the shape of a call's ``args``/``kwargs``. Other containers are leaves.
Invariant: these predicates only read; they never call user code (no ``__iter__``, no ``__eq__``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["tree_any", "tree_has"]


def tree_has(tree: Any, cls: type | tuple[type, ...]) -> bool:
    """Whether an instance of ``cls`` is ``tree`` or occurs inside it."""
    if isinstance(tree, cls):
        return True
    if isinstance(tree, (tuple, list)):
        for value in tree:
            if tree_has(value, cls):
                return True
    elif isinstance(tree, dict):
        for value in tree.values():
            if tree_has(value, cls):
                return True
    return False


def tree_any(tree: Any, test: Callable[[Any], bool]) -> bool:
    """Whether ``test`` holds for a leaf of ``tree`` (a value that is no tuple, list or dict)."""
    if isinstance(tree, (tuple, list)):
        for value in tree:
            if tree_any(value, test):
                return True
        return False
    if isinstance(tree, dict):
        for value in tree.values():
            if tree_any(value, test):
                return True
        return False
    return test(tree)
