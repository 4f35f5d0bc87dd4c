"""Symbolic ragged sizes: which sizes of a nested jagged tensor input a trace keeps symbolic.

A nested jagged tensor (NJT) of outer shape ``(B, j0, D)`` is bound through its inner tensors
(jitcore/jit/provenance.py): ``_values`` of shape ``(total, D)``, ``_offsets`` of shape ``(B + 1,)``,
and, where torch cached them, ``_min_seqlen_tensor``/``_max_seqlen_tensor`` of shapes ``(min, 0)`` and
``(max, 0)``. Its *ragged sizes* are the total length and the extreme lengths; ``j0`` is a nested int,
a symbol of the pass's ShapeEnv tied to the offsets' shadow (Note [Nested ints],
jitcore/langctx/shadows.py).

Invariants:
- in a pass with symbolic sizes, an NJT's ragged sizes are symbolic all together or not at all:
  together once one of them is found to change (``dynamic=None``), from the first call with
  ``dynamic=True`` or a ``mark_dynamic`` on one of its inner tensors' ragged dimension;
- every other size of its inner tensors (``B + 1``, ``D``) stays static, as a subclass's inner
  tensors do, and so does its outer shape but for ``j0``;
- a nested int's symbol is never an input of the computation nor a size the entry checks: it is a
  constant of the trace (as in a static pass), the outer size given to ``__tensor_unflatten__``,
  which computes the output's nested int from the call's own offsets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from jitcore.prologue import Path

__all__ = ["is_nested_symbol", "ragged_dims"]


# Note [Symbolic ragged sizes]
# Each batch of an NJT model has other lengths: with static inner shapes each was a cache miss (an
# entry per total length and per extreme lengths). As torch.compile (nested_tensor.py marks the
# values' ragged dimension and the min/max seqlen tensors dynamic), the ragged sizes become symbols
# of the pass's ShapeEnv, here from the second structure on, as jitcore's automatic dynamic shapes
# do for plain tensors. They are symbolic together, since any batch changes them together, and
# without torch's 0/1 specialization (``keep_zero_one``, jitcore/langctx/shadows.py): a minimum length
# of 1 is common and nothing below compares it with 1 without a guard. What a program reads of them
# is guarded by the ShapeEnv as for any size: ``x._get_max_seqlen()`` used as an int specializes the
# maximum (a call with another misses), passed to an op (``to_padded_tensor``) it stays a symbol. The
# offsets' *values* are never part of an entry: a program that reads them (``unbind``, SDPA) checks
# them per call (jitcore/jit/value_reads.py), as in a static entry.
_EXTREME_LENGTHS = ("_min_seqlen_tensor", "_max_seqlen_tensor")


DimsFor = Callable[[Path, torch.Tensor], frozenset[int]]


def ragged_dims(names: list[str], ctx: Any, tensor: torch.Tensor, path: Path,
                dims_for: DimsFor | None) -> dict[Path, frozenset[int]]:
    """The symbolic dimensions of an NJT input's inner tensors (Note [Symbolic ragged sizes]).

    Args:
        names: its inner tensors' names (``__tensor_flatten__``).
        ctx: its flatten context (``ragged_idx``).
        tensor: the NJT.
        path: where it was found.
        dims_for: the pass's shape policy (``ShapePolicy.dims_for``, jitcore/jit/shapes.py); None in a
            static pass.

    Returns:
        Inner tensor path -> its symbolic dimensions; empty when the ragged sizes stay static.
    """
    ragged_idx = ctx.get("ragged_idx") if isinstance(ctx, dict) else None
    if dims_for is None or not isinstance(ragged_idx, int) or "_values" not in names:
        return {}
    ragged = {"_values": frozenset({ragged_idx - 1})}
    ragged.update({n: frozenset({0}) for n in _EXTREME_LENGTHS if n in names})
    if not any(dims_for(path.attr(n), getattr(tensor, n)) & dims for n, dims in ragged.items()):
        return {}
    return {path.attr(n): dims for n, dims in ragged.items()}


def is_nested_symbol(env: Any, symbol: sympy.Symbol) -> bool:
    """Whether ``symbol`` of ``env`` stands for a nested int (an NJT's ``j0``, made from its offsets'
    shadow: Note [Nested ints], jitcore/langctx/shadows.py), not for a size."""
    from torch.utils._sympy.singleton_int import SingletonInt

    values = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val
    return isinstance(values.get(symbol), SingletonInt)
