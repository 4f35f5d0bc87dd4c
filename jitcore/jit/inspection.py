"""What a jitted function's cache holds and did: its traces, prologues, hits, misses and their reasons.

Read-only views over a JittedFunction (or a JittedModule's jitted forward); nothing here changes the
cache. Each returns a new list, so a caller can keep it across later calls.
"""

from __future__ import annotations

from typing import Any

from jitcore.ir import Trace
from jitcore.jit.api import JittedFunction
from jitcore.prologue import MissReason, Prologue, PrologueBuilder

__all__ = [
    "as_jitted",
    "cache_hits",
    "cache_misses",
    "last_backward_traces",
    "last_prologue_traces",
    "last_rederived_traces",
    "last_traces",
    "miss_reasons",
]

def as_jitted(jfn: Any) -> JittedFunction:
    from jitcore.jit.module import JittedModule

    if isinstance(jfn, JittedModule):
        jfn = jfn.jitted_forward
    if not isinstance(jfn, JittedFunction):
        raise TypeError(f"expected a function returned by jitcore.jit, got {type(jfn).__qualname__}")
    return jfn


def last_traces(jfn: Any) -> list[Trace]:
    """The computation traces of the most recent tracing, one per pass, each headed by its producer."""
    return list(as_jitted(jfn).last_traces)


def last_backward_traces(jfn: Any) -> list[Trace]:
    """The backward traces of the most recent tracing (empty when no input required grad):
    ``[backward]``; the forward it pairs with is the last of ``last_traces(jfn)``."""
    return list(as_jitted(jfn).last_backward_traces)


def last_rederived_traces(jfn: Any) -> list[Trace]:
    """The backward traces derived, for the most recent tracing's entry, for gradients of other kinds
    than its backward was traced for (a plain gradient reaching a subclass output, another flatten
    context: docs/autograd.md), one per kinds, in the order the gradients came."""
    return list(as_jitted(jfn).last_rederived_traces)


def last_prologue_traces(jfn: Any) -> list[Prologue]:
    """The prologue of the most recent tracing (printable as Python)."""
    prologue = as_jitted(jfn).last_prologue
    if isinstance(prologue, PrologueBuilder):  # the pass stopped: what it had recorded
        prologue = prologue.build()
    return [prologue] if prologue is not None else []


def cache_hits(jfn: Any) -> int:
    """How many calls were answered by a cache entry."""
    return as_jitted(jfn).hits


def cache_misses(jfn: Any) -> int:
    """How many calls had to trace (the first call included)."""
    return as_jitted(jfn).misses


def miss_reasons(jfn: Any) -> list[list[MissReason]]:
    """For each miss, why each existing cache entry rejected the call."""
    return list(as_jitted(jfn).miss_log)
