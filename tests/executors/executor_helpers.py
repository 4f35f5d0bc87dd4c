"""Shared helpers of the executor tests: the differential checks of tests/jit, and capturing the
``jitcore.executors`` log."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))

from jit_helpers import assert_same, check, clone_tree  # noqa: E402

import jitcore  # noqa: E402

__all__ = ["assert_same", "check", "clone_tree", "executor_log", "fused", "lowered_trace", "INDUCTOR"]

INDUCTOR = ("inductor", "torch")


@contextmanager
def executor_log() -> Iterator[list[str]]:
    """The messages logged on ``jitcore.executors`` inside the block."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger("jitcore.executors")
    handler, level = Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def lowered_trace(jfn: object) -> str:
    """The printed execution trace of ``jfn``'s latest entry (the last of ``last_traces``)."""
    return str(jitcore.last_traces(jfn)[-1])


def fused(trace_text: str) -> list[str]:
    """The lowered calls' lines of a printed trace (``(t3,) = fusion0(x)``)."""
    lines = [line.strip() for line in trace_text.splitlines()]
    return [line for line in lines if "= fusion" in line and not line.startswith("#")]
