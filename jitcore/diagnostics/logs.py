"""``JITCORE_LOGS``: what the jit did, on stdlib logging, quiet by default.

Components are loggers under ``jitcore``: ``jitcore.traces`` (each computation trace made),
``jitcore.guards`` (each prologue, its checks in words), ``jitcore.recompiles`` (why a call
missed every cache entry) and ``jitcore.graph_breaks`` (each tensor value a trace reads and checks,
with the user's line: jitcore/jit/value_reads.py). ``JITCORE_LOGS=traces,guards`` or ``JITCORE_LOGS=all``
attaches a
stderr handler to the chosen ones at INFO; applications may configure the loggers themselves.
Invariant: with nothing enabled, a miss costs one ``isEnabledFor`` check per component.
"""

from __future__ import annotations

import logging
import os
from typing import Any

__all__ = ["COMPONENTS", "configure", "entry_added", "static_shapes", "symbolic_sizes"]

COMPONENTS = ("traces", "guards", "recompiles", "graph_breaks")
_LOGGERS = {name: logging.getLogger(f"jitcore.{name}") for name in COMPONENTS}
_HANDLER_TAG = "_jitcore_logs_handler"


def configure(spec: str | None = None) -> list[str]:
    """Enable the components named in ``spec`` (default: ``$JITCORE_LOGS``); returns those enabled.

    Args:
        spec: comma-separated component names, or ``all``; ``''`` disables the handlers jitcore added.

    Raises:
        ValueError: a name is not a component.
    """
    spec = os.environ.get("JITCORE_LOGS", "") if spec is None else spec
    names = [n.strip() for n in spec.split(",") if n.strip()]
    chosen = list(COMPONENTS) if "all" in names else names
    unknown = sorted(set(chosen) - set(COMPONENTS))
    if unknown:
        raise ValueError(
            f"unknown JITCORE_LOGS component(s) {unknown}; choose from {list(COMPONENTS)} or 'all'"
        )
    for name, logger in _LOGGERS.items():
        for handler in [h for h in logger.handlers if getattr(h, _HANDLER_TAG, False)]:
            logger.removeHandler(handler)
        if name in chosen:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
            setattr(handler, _HANDLER_TAG, True)
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        else:
            logger.setLevel(logging.NOTSET)
    return chosen


def entry_added(jfn: Any, entry: Any, reasons: list[Any]) -> None:
    """Log a new cache entry of ``jfn``: why it was needed, its traces and its guards."""
    label = getattr(jfn, "_label", repr(jfn))
    recompiles = _LOGGERS["recompiles"]
    if reasons and recompiles.isEnabledFor(logging.INFO):
        recompiles.info(
            "%s: cache entry %d traced because %s", label, entry.number, "; ".join(str(r) for r in reasons)
        )
    traces = _LOGGERS["traces"]
    if traces.isEnabledFor(logging.INFO):
        for trace in entry.traces:
            traces.info("%s: cache entry %d\n%s", label, entry.number, trace)
    guards = _LOGGERS["guards"]
    if guards.isEnabledFor(logging.INFO):
        guards.info(
            "%s: cache entry %d accepts a call when\n%s",
            label,
            entry.number,
            "\n".join(f"  {line}" for line in entry.prologue.sentences()),
        )


def symbolic_sizes(jfn: Any, number: int, sizes: list[str]) -> None:
    """Log that cache entry ``number`` of ``jfn`` keeps ``sizes`` symbolic (jitcore/jit/shapes.py)."""
    recompiles = _LOGGERS["recompiles"]
    if recompiles.isEnabledFor(logging.INFO):
        label = getattr(jfn, "_label", repr(jfn))
        recompiles.info("%s: cache entry %d traced with symbolic sizes %s", label, number, ", ".join(sizes))


def static_shapes(jfn: Any, number: int, reason: str) -> None:
    """Log that cache entry ``number`` of ``jfn`` is traced again with static shapes, and why."""
    recompiles = _LOGGERS["recompiles"]
    if recompiles.isEnabledFor(logging.INFO):
        label = getattr(jfn, "_label", repr(jfn))
        recompiles.info("%s: cache entry %d traced with static shapes: %s", label, number, reason)


try:
    configure()
except ValueError as _error:
    from jitcore.diagnostics.user_warnings import warn_at_caller

    warn_at_caller(f"jitcore: JITCORE_LOGS ignored: {_error}")  # at the user's line that imported jitcore
