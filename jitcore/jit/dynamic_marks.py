"""``jitcore.mark_dynamic``: dimensions of a tensor that are symbolic in every trace that reads it.

Invariants: a mark is an attribute of the tensor itself (a set of dimensions, kept across calls);
``torch._dynamo.mark_dynamic``'s marks count as jitcore's; a marked dimension is symbolic whatever the
``dynamic=`` option (jitcore/jit/shapes.py decides the others).
"""

from __future__ import annotations

import torch

__all__ = ["MARK", "mark_dynamic", "marked_dims"]

# The attribute ``mark_dynamic`` sets on a tensor: the set of its dimensions that are symbolic.
MARK = "_jitcore_dynamic_dims"
_TORCH_MARK = "_dynamo_dynamic_indices"  # torch._dynamo.mark_dynamic's, honoured too


def mark_dynamic(t: torch.Tensor, dim: int | list[int] | tuple[int, ...]) -> None:
    """Make dimension ``dim`` of ``t`` symbolic in every trace that reads ``t``, from its first call.

    As ``torch._dynamo.mark_dynamic`` (whose marks jitcore honours too). A size of 0 or 1 is still
    specialized, and a size the program needs as a Python int (``range(x.shape[0])``) is guarded to
    its value, as torch does; neither is an error.

    Args:
        t: a tensor argument.
        dim: a dimension, or several.

    Raises:
        IndexError: a dimension out of range for ``t``.
    """
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, MARK, ()))
    for d in dims:
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"mark_dynamic: dimension {d} out of range for a tensor of {t.dim()} dimensions")
        marked.add(d % t.dim())
    setattr(t, MARK, marked)


def marked_dims(t: torch.Tensor) -> frozenset[int]:
    """The dimensions of ``t`` marked dynamic, by jitcore or by torch._dynamo."""
    return frozenset(getattr(t, MARK, ())) | frozenset(getattr(t, _TORCH_MARK, ()))
