"""Debugging tools: error reports, ``explain``, the stepping debugger and logging.

This package stands on top of the jit: it reads what the jit recorded (traces, prologues, bound
symbols' source) and never changes how a program is traced or run. Its names are loaded lazily
(the jit's error boundary imports ``jitcore.debug.boundary`` only when an error passes it).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "report": "jitcore.debug.report",
    "install_report_hook": "jitcore.debug.report",
    "explain": "jitcore.debug.explain",
    "dispatch_map": "jitcore.debug.explain",
    "debug": "jitcore.debug.debugger",
    "Debugger": "jitcore.debug.debugger",
    "ErrorContext": "jitcore.debug.context",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jitcore.debug' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
