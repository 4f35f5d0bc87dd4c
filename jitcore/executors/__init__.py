"""Executors: how a computation trace runs (docs/executors.md).

An executor claims bound symbols of a final computation trace (flattened: plain tensors, torch and
aten ops). ``torch`` runs the trace's generated Python, calling torch directly; ``inductor`` compiles
regions of it with torch's inductor. ``jit(fn, executors=("inductor", "torch"))`` lists them in
priority order; by default an entry is fused once it is hot (plan.py, Note [The default fusion
policy]). A user adds an executor with ``register_executor`` or by passing the object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jitcore.executors.background import BACKGROUND_ENV, wait_for_compiles
from jitcore.executors.inductor import InductorExecutor
from jitcore.executors.interface import (
    Executor,
    FusionExecutor,
    OperatorExecutor,
    Region,
    get_executor,
    register_executor,
    registered_executors,
)
from jitcore.executors.plan import (
    DEFAULT_FUSE_AFTER,
    FUSE_AFTER_ENV,
    Executors,
    executors_from_options,
    record_lowered,
)
from jitcore.executors.regions import is_lowered
from jitcore.ir import BoundSymbol, Trace, compile_trace

__all__ = [
    "BACKGROUND_ENV",
    "DEFAULT_FUSE_AFTER",
    "FUSE_AFTER_ENV",
    "Executor",
    "Executors",
    "FusionExecutor",
    "InductorExecutor",
    "OperatorExecutor",
    "Region",
    "TorchExecutor",
    "executors_from_options",
    "is_lowered",
    "record_lowered",
    "get_executor",
    "register_executor",
    "registered_executors",
    "wait_for_compiles",
]


class TorchExecutor:
    """Runs the trace as generated Python calling torch directly: claims everything, changes nothing."""

    name = "torch"

    def claim(self, bsym: BoundSymbol) -> str | None:
        return None

    def implement(self, bsym: BoundSymbol) -> Callable[..., Any]:
        return bsym.symbol.fn

    def compile(self, trace: Trace, on_lowered: Any = None, *, grad_off: bool = False) -> Callable[..., Any]:
        """The trace as compiled Python (``Executors.compile``'s signature; nothing is lowered)."""
        return compile_trace(trace)


register_executor(TorchExecutor())
register_executor(InductorExecutor())
