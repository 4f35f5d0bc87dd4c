"""Negative-step slices for ``torch._numpy``'s indexing, which mistranslates them.

``torch._numpy.ndarray.__getitem__`` flips the tensor for a negative-step slice but converts the
slice's bounds without the dimension's size (``a[1::-1]`` of ``[0, 1, 2]`` gives ``[1, 1]``) and
counts dimensions by index position (wrong after ``None`` or ``...``). ``positive_steps`` rewrites
such an index into the dimensions to flip first and an index with positive steps only, which
``torch._numpy`` indexes correctly.

Invariant: an index it cannot analyse (boolean scalars, non-integer bounds) is left as it is.
"""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["positive_steps"]


def positive_steps(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], Any] | None:
    """(dimensions to flip, equivalent index with positive steps), or None when nothing to rewrite."""
    items = index if type(index) is tuple else (index,)
    if not any(type(s) is slice and s.step is not None and _negative(s.step) for s in items):
        return None
    widths = [_width(item) for item in items]
    if any(w is None for w in widths):
        return None
    ellipsis_width = len(shape) - sum(w for w in widths if w > 0)
    flips: list[int] = []
    rewritten: list[Any] = []
    dim = 0
    for item, width in zip(items, widths):
        if width == -1:  # Ellipsis
            dim += ellipsis_width
            rewritten.append(item)
            continue
        if type(item) is slice and item.step is not None and _negative(item.step):
            converted = _flipped_slice(item, shape[dim])
            if converted is None:
                return None
            flip, item = converted
            if flip:
                flips.append(dim)
        rewritten.append(item)
        dim += width
    return tuple(flips), tuple(rewritten) if type(index) is tuple else rewritten[0]


def _negative(step: Any) -> bool:
    try:
        return operator.index(step) < 0
    except TypeError:
        return False


def _width(item: Any) -> int | None:
    """How many dimensions an index item consumes (-1: Ellipsis; None: cannot tell)."""
    if item is None:
        return 0
    if item is Ellipsis:
        return -1
    if type(item) is bool:
        return None
    if type(item) is slice:
        return 1
    dtype = getattr(item, "dtype", None)
    if dtype is not None:
        return getattr(item, "ndim", 1) if str(dtype).endswith("bool") else 1
    try:
        operator.index(item)
        return 1
    except TypeError:
        return 1 if isinstance(item, (list, tuple)) else None


def _flipped_slice(s: slice, size: int) -> tuple[bool, slice] | None:
    """For a negative-step slice of a dimension of ``size``: whether to flip it, and the slice of
    the flipped dimension selecting the same elements in the same order."""
    try:
        selected = range(size)[
            slice(*(None if v is None else operator.index(v) for v in (s.start, s.stop, s.step)))
        ]
    except TypeError:
        return None
    if len(selected) == 0:
        return False, slice(0, 0)
    first, last = size - 1 - selected[0], size - 1 - selected[-1]
    return True, slice(first, last + 1, -selected.step)
