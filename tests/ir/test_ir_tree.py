"""jitcore/ir/tree.py: its answers are those of the plain recursive definition of a tree search.

The module walks a container's elements in one loop (Note [Tree searches without a call per node]);
the reference below is the definition it must agree with: ``found(node)``, then each container's
items once (a container may hold itself), then a slice's bounds (``tree_has`` only).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jitcore.ir.tree import tree_any, tree_has

_CONTAINERS = (tuple, list, dict)
Pair = collections.namedtuple("Pair", "a b")


class Marker:
    pass


class SubMarker(Marker):
    pass


class Items(list):
    def __iter__(self) -> Any:  # never called by the search (it reads list's own elements)
        raise AssertionError("user __iter__ called")


class Values(dict):
    def values(self) -> Any:
        raise AssertionError("user values() called")


def _reference(tree: Any, found: Callable[[Any], bool], seen: set[int], *, bounds: bool) -> bool:
    if found(tree):
        return True
    if issubclass(type(tree), _CONTAINERS):
        if id(tree) in seen:
            return False
        seen.add(id(tree))
        if isinstance(tree, dict):
            items: Any = dict.values(tree)
        else:
            items = list.__iter__(tree) if isinstance(tree, list) else tuple.__iter__(tree)
        return any(_reference(value, found, seen, bounds=bounds) for value in items)
    if bounds and type(tree) is slice:
        return bool(found(tree.start) or found(tree.stop) or found(tree.step))
    return False


_LEAVES = st.sampled_from([0, 1.5, "s", None, True, Marker(), SubMarker(), Ellipsis]) | st.builds(
    slice, st.sampled_from([None, 1, Marker()]), st.sampled_from([None, 2, SubMarker()]),
    st.sampled_from([None, 3, Marker()]),
)


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    return (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.lists(children, max_size=4).map(Items)
        | st.builds(Pair, children, children)
        | st.dictionaries(st.integers(0, 5), children, max_size=4)
        | st.dictionaries(st.integers(0, 5), children, max_size=4).map(Values)
    )


_TREES = st.recursive(_LEAVES, _extend, max_leaves=25)


def _with_cycles(tree: Any, data: st.DataObject) -> Any:
    """``tree`` with some of its lists appended to themselves or to a list inside them."""
    lists: list[list] = []

    def collect(node: Any) -> None:
        if isinstance(node, list):
            lists.append(node)
        if isinstance(node, dict):
            for v in dict.values(node):
                collect(v)
        elif isinstance(node, (list, tuple)):
            for v in (list.__iter__(node) if isinstance(node, list) else tuple.__iter__(node)):
                collect(v)

    collect(tree)
    for node in lists:
        if data.draw(st.booleans()):
            list.append(node, data.draw(st.sampled_from(lists)))
    return tree


_CLASSES = st.sampled_from([Marker, SubMarker, (SubMarker, str), int, (list,), slice, tuple, dict, Pair])


@settings(max_examples=400, deadline=None)
@given(_TREES, _CLASSES, st.data())
def test_tree_has_answers_as_the_recursive_definition(tree: Any, cls: Any, data: st.DataObject) -> None:
    tree = _with_cycles(tree, data)
    expected = _reference(tree, lambda node: issubclass(type(node), cls), set(), bounds=True)
    assert tree_has(tree, cls) is expected


_TESTS = st.sampled_from([
    lambda v: isinstance(v, Marker),
    lambda v: type(v) is SubMarker,
    lambda v: v is None,
    lambda v: isinstance(v, slice),  # a slice is a leaf of tree_any, never searched inside
    lambda v: isinstance(v, str),
])


@settings(max_examples=400, deadline=None)
@given(_TREES, _TESTS, st.data())
def test_tree_any_answers_as_the_recursive_definition(tree: Any, test: Any, data: st.DataObject) -> None:
    tree = _with_cycles(tree, data)
    expected = _reference(tree, lambda node: not isinstance(node, _CONTAINERS) and test(node), set(),
                          bounds=False)
    assert tree_any(tree, test) is expected


def test_a_list_that_holds_itself_is_answered() -> None:
    a: list = [1]
    a.append(a)
    assert not tree_has(a, Marker) and not tree_any(a, lambda v: v is None)
    a.append((None, Marker()))
    assert tree_has(a, Marker) and tree_any(a, lambda v: v is None)
