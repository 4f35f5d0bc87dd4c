"""Literals in guards: which values a guard compares by type and value, and how.

A literal (``is_literal_value``: numbers, strings, bytes, None, dtypes, devices, and tuples or
frozensets of them) is compared by type and value, never by identity. Invariants:
- ``same_literal`` is true exactly when the two values are the same literal: numbers by type and
  value, floats also by sign of zero and NaN-ness, so ``-0.0`` never passes for ``0.0`` nor ``1``
  (int) for ``1.0``; containers element by element;
- ``same_contents`` and ``same_keys`` decide as ``same_literal`` does, element by element.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "flat_literal_types", "freeze_contents", "is_literal_value", "same_contents", "same_keys", "same_literal",
]


def is_literal_value(value: Any) -> bool:
    """Values compared by type and value (everything else is compared by identity)."""
    t = type(value)
    if t in (int, float, bool, str, bytes, complex, type(None)):
        return True
    if t in (tuple, frozenset, torch.Size) and len(value) <= 64:  # a Size passed per call: by value
        return all(is_literal_value(v) for v in value)
    return t in (torch.dtype, torch.device, torch.layout, torch.memory_format)


def freeze_contents(value: Any) -> tuple:
    """A container of literals as a tuple (dicts as key/value pairs, sets sorted by repr)."""
    if type(value) is dict:
        return tuple(value.items())
    if type(value) is set:
        return tuple(sorted(value, key=repr))
    return tuple(value)


_SCALARS = frozenset((int, float, bool, str, bytes, type(None)))


def same_contents(value: Any, frozen: tuple) -> bool:
    """Whether a list/dict/set/tuple holds exactly the literals ``frozen`` (see freeze_contents)."""
    got = freeze_contents(value)
    # Fast path (comparisons in C) for flat sequences of scalars: equal, with the same types, and no
    # zero whose sign could differ. Anything else (NaNs make == fail) gets the exact comparison.
    if got == frozen:
        types = tuple(map(type, frozen))
        if tuple(map(type, got)) == types and _SCALARS.issuperset(types) and 0.0 not in frozen:
            return True
    return same_literal(got, frozen)


def same_literal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is float:
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is complex:
        return same_literal(a.real, b.real) and same_literal(a.imag, b.imag)
    if type(a) in (tuple, frozenset, torch.Size):
        if len(a) != len(b):
            return False
        if type(a) is frozenset:
            return a == b
        return all(same_literal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a is b  # a dict key (jit/tensor_keys.py): keyed by identity; == is elementwise
    return a == b


def same_keys(got: tuple, expected: tuple) -> bool:
    """Keys equal by type and value: ``{1: a}``, ``{True: a}`` and ``{1.0: a}`` are different calls."""
    return len(got) == len(expected) and all(
        (type(g) is str and g == e) if type(e) is str else same_literal(g, e) for g, e in zip(got, expected)
    )


# Note [A flat tuple of literals compared in C]
# A function's ``__defaults__`` (``(None, None, False)``) is a ``value`` guard on a tuple. Rendered as a
# call of ``same_literal``, which walks it in Python, each cost 3-6 us: twelve of them were about a
# fifth of a tiny HF Llama's 321-check prologue. Where every element of the expected tuple is None, a
# bool, an int, a str, bytes or a float that is neither 0.0 nor NaN, ``same_literal(v, expected)``
# holds exactly when ``v`` is a tuple, ``v == expected``, and its elements' types are the expected
# ones: equal elements of one such type are the same literal (only the sign of 0.0 and NaN escape
# ``==``; those tuples keep the call). The rendered check makes those three tests, in C.
_FLAT_TYPES = frozenset((type(None), bool, int, str, bytes, float))


def flat_literal_types(expected: tuple) -> tuple | None:
    """The element types of a tuple of literals that C's comparisons decide exactly, or None (Note [A
    flat tuple of literals compared in C])."""
    types = tuple(map(type, expected))
    if not _FLAT_TYPES.issuperset(types) or any(type(x) is float and (x != x or x == 0.0) for x in expected):
        return None
    return types
