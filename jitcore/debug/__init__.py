"""Debugging tools that read a jitted function: error reports, ``explain``, the stepping debugger.

This package stands on top of the jit: it reads what the jit recorded (traces, prologues, bound
symbols' source) and never changes how a program is traced or run. The hooks the jit itself calls
(error context and boundary, logs, warnings, breakpoint markers) are ``jitcore/diagnostics/``,
below the jit. Its names are loaded lazily.

Names that are also submodules (``report``, ``explain``) are not re-exported here: the public
functions are ``jitcore.report`` and ``jitcore.explain``, and ``jitcore.debug.report`` is always
the module, whatever was imported first.

The public entry point ``jitcore.debug(jfn, *args, **kwargs)`` is the function
``jitcore.debug.debugger.debug``, bound by ``jitcore/__init__.py`` over this package's name.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "install_report_hook": "jitcore.debug.report",
    "dispatch_map": "jitcore.debug.explain",
    "Debugger": "jitcore.debug.debugger",
}

_SUBMODULES = frozenset(
    {
        "breakpoints", "debugger", "diff", "explain", "names", "report", "shell",
    }
)

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazily loaded names


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        if name in _SUBMODULES:
            return importlib.import_module(f"{__name__}.{name}")  # binds the package attribute too
        raise AttributeError(f"module 'jitcore.debug' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

