"""Debugging tools: error reports, ``explain``, the stepping debugger and logging.

This package stands on top of the jit: it reads what the jit recorded (traces, prologues, bound
symbols' source) and never changes how a program is traced or run. Its names are loaded lazily
(the jit's error boundary imports ``jitcore.debug.boundary`` only when an error passes it).

``jitcore.debug`` is both this package and the debugger's entry point: calling the package,
``jitcore.debug(jfn, *args, **kwargs)``, runs ``jitcore.debug.debugger.debug``. (A package
attribute of ``jitcore`` named ``debug`` would otherwise hide a function of that name.)
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_EXPORTS: dict[str, str] = {
    "report": "jitcore.debug.report",
    "install_report_hook": "jitcore.debug.report",
    "explain": "jitcore.debug.explain",
    "dispatch_map": "jitcore.debug.explain",
    "Debugger": "jitcore.debug.debugger",
    "ErrorContext": "jitcore.debug.context",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazily loaded names


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jitcore.debug' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _DebugPackage(types.ModuleType):
    """The module type of ``jitcore.debug``: calling it starts the debugger."""

    def __call__(self, jfn: Any, /, *args: Any, **kwargs: Any) -> Any:
        from jitcore.debug.debugger import debug as run_debugger

        return run_debugger(jfn, *args, **kwargs)


sys.modules[__name__].__class__ = _DebugPackage
debug = sys.modules[__name__]  # ``jitcore._EXPORTS["debug"]`` resolves to the callable package
