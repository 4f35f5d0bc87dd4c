"""Fewer automatic garbage collections while a call is traced (Note [Collections while tracing]).

Invariants:
- only the threshold of the youngest generation changes, and only while at least one trace is in
  progress in the process (any thread, nested or not); the last trace to finish restores the value
  the first one found;
- a threshold the program or another thread set meanwhile is kept (never overwritten on exit);
- nothing changes when automatic collection is off (``gc.disable()`` or a youngest threshold of 0);
- explicit ``gc.collect()`` calls are untouched: only the timing of automatic collections moves.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["TRACING_GC_FACTOR", "fewer_collections"]

# Note [Collections while tracing]
# Tracing a call allocates many long-lived objects (decoded instructions, proxies, bound symbols,
# traces, generated code), so CPython's collector, which runs when allocations outnumber
# deallocations by the youngest threshold (700), ran 43 collections in a tiny HF Llama's first
# call; the full ones walk every object of torch and transformers: 0.8 s of a 3.3-3.5 s first call
# (gc.callbacks). While a call is traced the youngest threshold is TRACING_GC_FACTOR times its
# value: 2 collections, 0.03-0.05 s. Cyclic garbage made meanwhile
# lives until the next collection, up to about 20x longer in allocations; no program can rely on that
# timing (the interpreter allocates far more than eager does, which already moves every automatic
# collection), and ``gc.collect()`` still collects at once. The threshold is process-wide, so
# entries and exits of traces on any thread are counted under a lock: the first entry raises it, the
# last exit restores it, and only if it is still the raised value (a program that sets its own keeps
# it). The program reads the raised value if it calls ``gc.get_threshold()`` while traced.
TRACING_GC_FACTOR = 20

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] | None = None  # the threshold the first trace found; None: left as it was
_raised: tuple[int, ...] | None = None  # the threshold set while tracing


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the youngest generation's collection threshold for the duration of a trace."""
    _enter()
    try:
        yield
    finally:
        _exit()


def _enter() -> None:
    global _depth, _saved, _raised
    with _lock:
        _depth += 1
        if _depth > 1:
            return
        threshold = gc.get_threshold()
        if not gc.isenabled() or threshold[0] <= 0:
            _saved = _raised = None
            return
        _saved = threshold
        _raised = (threshold[0] * TRACING_GC_FACTOR, *threshold[1:])
        gc.set_threshold(*_raised)


def _exit() -> None:
    global _depth, _saved, _raised
    with _lock:
        _depth -= 1
        if _depth > 0:
            return
        if _saved is not None and gc.get_threshold() == _raised:
            gc.set_threshold(*_saved)
        _saved = _raised = None
