"""Eager's bounds check of Python int lists in a tensor index, made while tracing.

Invariant: ``x[[i, j]]``, ``x[0, [i]]`` and ``x[idx] = v`` whose advanced indices are all lists (nested or
not) of Python ints raise eager's IndexError while tracing when one of the ints is out of range for its
dimension (Note [Int lists are bounds-checked while tracing]); an index with a tensor, a number that
is a name of the computation, a bool, a mask or a slice inside a list is left to the op.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_int_list_index"]


# Note [Int lists are bounds-checked while tracing]
# Advanced indexing with a list of ints (``x[[5]]``, ``x[i.tolist()]``: the read's ints are checked
# values, Note [Value reads] in langctx/reads.py) is an index tensor to torch, and the fake tensors the
# trace runs on do not look at index values: the bounds were checked only when the computation ran.
# Its IndexError then came from the computation, where none of the program's handlers is, so
# ``try: y = x[i.tolist()] except IndexError: y = default`` returned eager's ``default`` and raised
# under jit (ops43's Left). The ints are known while tracing, and so are the sizes (a symbolic size is
# compared through the ShapeEnv, whose guard the prologue checks), so the check is made here, as
# torch's index kernel makes it: the indices broadcast together, element by element, then index by
# index, the first out of range raising ``index {v} is out of bounds for dimension {k} with size {n}``,
# ``k`` counting the advanced indices (ints and ``None`` apply first, as torch slices before it
# indexes with tensors).


_INDEXING = frozenset({"__getitem__", "__setitem__"})


def _int_list(item: Any) -> bool:
    """A list (of lists) of Python ints, bools excluded (a bool list is a mask)."""
    if type(item) is not list:
        return False
    return all(_int_list(i) if type(i) is list else type(i) is int for i in item) and bool(item)


def _advanced_positions(shape: Any, items: tuple) -> list[tuple[Any, Any]] | None:
    """(list, size of the dimension it indexes) for each advanced index, in order; None where an item
    is one the check does not cover (a tensor, a number proxy, a list of other things)."""
    rank = len(shape)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    sliced, dim, out = list(shape), 0, []
    for item in items:
        if item is None:
            sliced.insert(dim, 1)
            dim += 1
        elif item is Ellipsis:
            dim += rank - consumed
        elif type(item) is int:
            del sliced[dim:dim + 1]
        elif type(item) is slice:
            dim += 1
        elif _int_list(item):
            if dim >= len(sliced):
                return None  # too many indices: the op raises eager's error
            out.append((item, sliced[dim]))
            dim += 1
        else:
            return None
    return out


def _out_of_range(value: int, size: Any) -> bool:
    return bool(value < -size or value >= size)


def check_int_list_index(symbol: Any, args: tuple) -> None:
    """Raise eager's IndexError where the torch-level ``__getitem__``/``__setitem__`` call ``symbol(*args)``
    indexes with an int list out of range (Note [Int lists are bounds-checked while tracing]).

    Raises:
        IndexError: with eager's message.
    """
    if symbol.langctx != "torch" or symbol.name not in _INDEXING or len(args) < 2:
        return
    shape, index = getattr(args[0], "shape", None), args[1]
    if shape is None:
        return
    items = index if type(index) is tuple else (index,)
    if type(index) is list and len(index) < 32 and any(type(i) is list for i in index):
        items = tuple(index)  # torch reads such a sequence as a tuple of indices (deprecated, still so)
    if not any(type(i) is list for i in items):
        return
    advanced = _advanced_positions(shape, items)
    if not advanced:
        return
    try:
        values = torch.broadcast_tensors(*(torch.tensor(lst, dtype=torch.int64) for lst, _ in advanced))
    except RuntimeError:
        return  # shapes that do not broadcast: the op raises eager's error
    columns = [v.reshape(-1).tolist() for v in values]
    for element in range(len(columns[0]) if columns else 0):
        for k, (column, (_, size)) in enumerate(zip(columns, advanced)):
            if _out_of_range(column[element], size):
                raise IndexError(f"index {column[element]} is out of bounds for dimension {k} with size "
                                 f"{int(size)}")
