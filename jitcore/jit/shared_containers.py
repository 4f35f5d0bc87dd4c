"""Containers a traced call stores in more than one place are one object on every call, as eagerly.

An entry's effects (jit/effects.py) rebuild the values a call stores from a flat tree, a new list or
dict for every place one occurs: ``s.a = [0, s.b]`` (with ``s.b = [7]`` stored by the same call)
left ``s.a[1]`` a copy of ``s.b``, so a later ``s.b.append(1)`` did not show in ``s.a`` (pprint's
test_knotted tied its knot in a jitted ``setUp``: ``isrecursive`` said False). When the entry is
made, ``shared_places`` finds each list or dict that occurs in more than one place among the values;
after each call's rebuild, ``reshare`` puts the first place's object in the others.

Invariants: only lists and dicts the call made are shared again (a caller's object is stored as the
very object already); places are reached through lists, tuples and dicts only; a place inside a tuple
keeps its copy (a tuple's items cannot be replaced), as does a place under a dict key the rebuild makes
anew (a key of text made from numbers); the values hold no container inside itself
(refused before: ``outputs.taken_apart``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

__all__ = ["shared_places", "reshare"]

Place = tuple[Any, ...]  # the keys (list indices, dict keys) from the values' root list to an object
_SHAREABLE = (list, dict, collections.OrderedDict, collections.defaultdict)


def shared_places(values: list[Any], preexisting: Callable[[Any], bool]) -> list[list[Place]]:
    """For each list or dict made by the call that occurs in more than one place among ``values``,
    its places, first place first (its insides are walked from there only)."""
    places: dict[int, list[Place]] = {}

    def walk(value: Any, place: Place) -> None:
        kind = type(value)
        if kind in _SHAREABLE:
            if preexisting(value):
                return
            found = places.setdefault(id(value), [])
            found.append(place)
            if len(found) > 1:
                return
        elif not isinstance(value, tuple):
            return
        for key, item in (value.items() if isinstance(value, dict) else enumerate(value)):
            walk(item, (*place, key))

    for index, value in enumerate(values):
        walk(value, (index,))
    return [found for found in places.values() if len(found) > 1]


def reshare(values: list[Any], shared: list[list[Place]]) -> None:
    """Put the object at each group's first place into its other places (outermost groups first, as
    ``shared_places`` found them)."""
    for first, *others in shared:
        try:
            obj = _at(values, first)
            for place in others:
                parent = _at(values, place[:-1])
                if type(parent) in _SHAREABLE:
                    parent[place[-1]] = obj
        except (LookupError, TypeError):  # a key the rebuild made anew (text of numbers): a copy, as before
            continue


def _at(values: list[Any], place: Place) -> Any:
    obj: Any = values
    for key in place:
        obj = obj[key]
    return obj
