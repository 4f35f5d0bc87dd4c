"""Language contexts: the torch level (what users call) and the aten level (torch.ops.aten).

``lookup(fn)`` answers, for any callable, the symbol (or adapter) that runs instead of it while
tracing, or None when ``fn`` is not an operation of a language context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jitcore.langctx import aten, copying, generators, torch
from jitcore.langctx.shadows import TensorValues, evaluate, new_context

__all__ = ["TensorValues", "aten", "copying", "evaluate", "generators", "lookup", "new_context", "torch"]


def lookup(fn: Any) -> Callable[..., Any] | None:
    """The symbol or adapter that records ``fn`` while tracing; None when ``fn`` is no torch op."""
    found = torch.TORCH_TABLE.lookup(fn)
    if found is not None:
        return found
    return aten.lookup(fn)
