"""The jit: jit(), its cache, and the interpreter hooks that turn torch calls into bound symbols."""

from jitcore.jit.api import CacheEntry, JittedFunction, jit
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
    "CacheEntry",
    "JittedFunction",
    "cache_hits",
    "cache_misses",
    "jit",
    "last_backward_traces",
    "last_prologue_traces",
    "last_rederived_traces",
    "last_traces",
    "miss_reasons",
]
