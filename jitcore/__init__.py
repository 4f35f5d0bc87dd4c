"""jitcore: a JIT for PyTorch programs that resolves tensor subclasses while interpreting.

This module holds the public API only. ``jitcore.jit`` and ``jitcore.debug`` are functions here,
although packages of the same names exist: the names below are bound when this module is imported,
after those packages, so the functions win.
"""

from __future__ import annotations

from jitcore.debug.debugger import Debugger, debug
from jitcore.debug.explain import explain
from jitcore.debug.report import install_report_hook, report
from jitcore.errors import DataDependentError, JitcoreError, UnsupportedInputError, UnsupportedOperationError

# first: refuses a CPython other than the tested ones (UnsupportedPythonVersion) before anything
# version-specific
from jitcore.interpreter import SUPPORTED_VERSIONS  # noqa: F401, I001
from jitcore.jit.api import JittedFunction, jit
from jitcore.jit.dynamic_marks import mark_dynamic
from jitcore.jit.inspection import (
    cache_hits,
    cache_misses,
    last_backward_traces,
    last_prologue_traces,
    last_rederived_traces,
    last_traces,
    miss_reasons,
)

__all__ = [
    "DataDependentError",
    "Debugger",
    "JitcoreError",
    "JittedFunction",
    "UnsupportedInputError",
    "UnsupportedOperationError",
    "cache_hits",
    "cache_misses",
    "debug",
    "explain",
    "install_report_hook",
    "jit",
    "last_backward_traces",
    "last_prologue_traces",
    "last_rederived_traces",
    "last_traces",
    "mark_dynamic",
    "miss_reasons",
    "report",
]
