"""Reads of torch's process-wide settings by the traced program: guarded by their value.

``torch.are_deterministic_algorithms_enabled()``, ``torch.get_num_threads()``,
``torch.get_float32_matmul_precision()``, ``torch.backends.mkldnn.enabled``, ``torch.is_anomaly_enabled()``
end in a C getter of torch that takes no tensor and returns a number, a bool or a string. Run natively
while tracing, its answer became a constant of the trace (Note [Settings the program reads]). Invariants:
- each getter of ``SETTINGS_GETTERS`` (their ids) the program calls is run now and its answer guarded
  by value (a prologue guard that calls it again, once per getter and arguments in a pass);
- an answer that is not a literal (a backend enum) is not guarded: such a getter is not listed;
- nothing else is guarded here: grad mode, autocast, the default dtype and device are the thread
  state's (langctx/thread_state.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from jitcore.prologue.paths import Path, Root

__all__ = ["SETTINGS_GETTERS", "SettingsReads"]

# Note [Settings the program reads]
# ``x * (2 if torch.are_deterministic_algorithms_enabled() else 3)`` traced with the flag off gave
# ``x * 3`` on a cached call made with it on (eagerly ``x * 2``): nothing guarded the flag. Grad mode
# and the default dtype are guarded as the thread state (every call); these settings are read by few
# programs, so only a program that reads one pays its guard: one C call per getter in the prologue.
_NAMES = (
    "_get_deterministic_algorithms", "_get_deterministic_algorithms_warn_only",
    "_get_deterministic_fill_uninitialized_memory", "_get_float32_matmul_precision", "get_num_threads",
    "get_num_interop_threads", "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "_get_mkldnn_enabled",
    "_get_mkldnn_deterministic", "_get_cudnn_enabled", "_get_cudnn_benchmark", "_get_cudnn_deterministic",
    "_get_cudnn_allow_tf32", "_get_cublas_allow_tf32", "_get_flash_sdp_enabled",
    "_get_mem_efficient_sdp_enabled", "_get_math_sdp_enabled", "_get_cudnn_sdp_enabled",
    "_get_overrideable_sdp_enabled", "_get_math_sdp_allow_fp16_bf16_reduction", "_get_warnAlways",
    "_get_cublas_allow_fp16_reduced_precision_reduction",
    "_get_cublas_allow_bf16_reduced_precision_reduction",
    "_get_fp32_precision_getter", "_get_sm_carveout_experimental",
)
# by identity: ``fn in`` a set would hash every callable the program calls, some unhashable
SETTINGS_GETTERS: frozenset[int] = frozenset(id(getattr(torch._C, n)) for n in _NAMES if hasattr(torch._C, n))
_LITERALS = (bool, int, float, str, type(None))


class SettingsReads:
    """The settings one pass read, each guarded once (Note [Settings the program reads])."""

    def __init__(self, guard: Callable[[Path, str, Any], None]) -> None:
        self._guard = guard
        self._read: set[tuple] = set()

    def read(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)`` for a settings getter, its answer guarded; others: None."""
        value = fn(*args, **kwargs)
        key = (fn, args, tuple(sorted(kwargs.items())))
        if key not in self._read and type(value) in _LITERALS and all(
            type(a) in _LITERALS for a in (*args, *kwargs.values())
        ):
            self._read.add(key)
            check = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
            label = f"torch._C.{fn.__name__}{args if args else '()'}"
            self._guard(Path(Root("bound", label, check)).call(), "value", value)
        return value
