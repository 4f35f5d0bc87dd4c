"""Outer sizes a tensor subclass's ``__tensor_flatten__`` ctx holds, checked per call instead of pinned.

A subclass input bound with symbolic sizes (Note [Subclass inputs that follow an inner tensor],
jitcore/jit/subclass_inputs.py) whose ctx holds its outer sizes (``{"shape": (n, 4)}``, a row count) has
its ``flatten`` guard expect a ``SizedContext``: the ctx as traced and the places in it that hold an
outer size. The guard compares the caller's ctx with the traced one where each such place reads the
caller's own outer size instead.

Invariants:
- a place is a path of dict keys and sequence indices through dicts, lists and tuples (``torch.Size``
  too) from the ctx to an int, and stands for ``value.shape[dim]`` of the value the guard checks;
- the outer sizes are read only of values that follow an inner tensor, which run no
  ``__torch_dispatch__`` to answer them.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.proxies.protocol import replaced_at

__all__ = ["Place", "SizedContext", "places_of", "resolved", "with_sizes"]

Place = tuple[tuple[Any, ...], int]  # (keys from the ctx to the entry, the outer dimension it is)


class SizedContext(tuple):
    """What a ``flatten`` guard expects of a ctx holding outer sizes: ``(ctx, places)``."""

    __slots__ = ()

    def __repr__(self) -> str:
        ctx, places = self
        return f"{ctx!r} with {', '.join(f'{_where(k)} == shape[{d}]' for k, d in places)}"


def places_of(ctx: Any, shape: tuple[int, ...], dims: frozenset[int]) -> tuple[Place, ...]:
    """The places of ``ctx`` holding an int equal to ``shape[d]`` for a ``d`` of ``dims`` (the first such
    ``d``; in a sequence equal to ``shape``, its own ``d``), through dicts, lists and tuples."""
    places: list[Place] = []

    def walk(tree: Any, keys: tuple) -> None:
        if type(tree) is int:
            dim = next((d for d in sorted(dims) if shape[d] == tree), None)
            if dim is not None:
                places.append((keys, dim))
        elif type(tree) is dict:
            for k, v in tree.items():
                walk(v, (*keys, k))
        elif type(tree) in (list, tuple, torch.Size) and tuple(tree) == shape:  # the shape itself
            places.extend(((*keys, d), d) for d in sorted(dims))
        elif type(tree) in (list, tuple, torch.Size):
            for i, v in enumerate(tree):
                walk(v, (*keys, i))

    walk(ctx, ())
    return tuple(places)


def with_sizes(ctx: Any, places: tuple[Place, ...], sizes: Any) -> Any:
    """``ctx`` with the entry at each place replaced by ``sizes[dim]``."""
    for keys, dim in places:
        ctx = replaced_at(ctx, keys, lambda _old, size=sizes[dim]: size)
    return ctx


def resolved(expected: SizedContext, value: torch.Tensor) -> Any:
    """The ctx ``value`` must have: the traced one, with ``value``'s outer sizes at the places."""
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - jitcore's own read of the sizes
        shape = tuple(value.shape)
    ctx, places = expected
    if any(d >= len(shape) for _, d in places):
        return expected  # another rank: never equal
    return with_sizes(ctx, places, shape)


def _where(keys: tuple) -> str:
    return "ctx" + "".join(f"[{k!r}]" for k in keys)
