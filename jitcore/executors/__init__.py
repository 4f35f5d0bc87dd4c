"""Executors: how a computation trace runs.

An executor turns a finished computation trace into a callable. The default one, ``torch``, runs
the trace's generated Python, which calls torch (and aten) directly.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from jitcore.ir import Trace, compile_trace

__all__ = ["Executor", "TorchExecutor", "get_executor"]


class Executor(Protocol):
    name: str

    def compile(self, trace: Trace) -> Callable[..., Any]: ...


class TorchExecutor:
    """Runs the trace as generated Python calling torch directly."""

    name = "torch"

    def compile(self, trace: Trace) -> Callable[..., Any]:
        return compile_trace(trace)


_EXECUTORS: dict[str, Executor] = {"torch": TorchExecutor()}


def get_executor(name: str) -> Executor:
    """The executor called ``name``.

    Raises:
        ValueError: no executor has that name.
    """
    try:
        return _EXECUTORS[name]
    except KeyError:
        raise ValueError(f"unknown executor {name!r}; available: {sorted(_EXECUTORS)}") from None
