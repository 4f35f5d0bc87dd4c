"""jitcore: a JIT for PyTorch programs that resolves tensor subclasses while interpreting.

This module holds the public API only. Its names are loaded on first use, so that importing a
lower layer (``jitcore.ir``, ``jitcore.interpreter``) does not import the jit.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "jit": "jitcore.jit.api",
    "JittedFunction": "jitcore.jit.api",
    "last_traces": "jitcore.jit.api",
    "last_prologue_traces": "jitcore.jit.api",
    "cache_hits": "jitcore.jit.api",
    "cache_misses": "jitcore.jit.api",
    "miss_reasons": "jitcore.jit.api",
    "last_backward_traces": "jitcore.transforms.autograd",
    "JitcoreError": "jitcore.errors",
    "DataDependentError": "jitcore.errors",
    "UnsupportedInputError": "jitcore.errors",
    "UnsupportedOperationError": "jitcore.errors",
    "report": "jitcore.debug.report",
    "install_report_hook": "jitcore.debug.report",
    "explain": "jitcore.debug.explain",
    "debug": "jitcore.debug",
    "Debugger": "jitcore.debug.debugger",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jitcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
