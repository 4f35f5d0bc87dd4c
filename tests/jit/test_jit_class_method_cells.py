"""A static method or class method of a user's class, read from the class, is state as any function:
what it writes through its closure's cells is replayed on every call (issue 14).

Note [The cells of a static method] (jitcore/jit/state_reads.py): the class's entry is the wrapper, not
the function the program calls, and that function's cells counted as made while tracing.
"""

from __future__ import annotations

import torch

import jitcore


def _helpers() -> tuple[type, list, dict]:
    log: list = []
    counts = {"calls": 0}

    class Helper:
        @staticmethod
        def step(x):
            log.append(x.shape[0])
            counts["calls"] += 1
            return x * 2

        @classmethod
        def shifted(cls, x):
            log.append(cls.__name__)
            return x + counts["calls"]

    return Helper, log, counts


def _calls(jit: bool) -> list:
    """Each call's result, log and counter, eagerly or jitted."""
    Helper, log, counts = _helpers()

    def f(x):
        return Helper.step(x) + Helper.shifted(x)

    fn = jitcore.jit(f) if jit else f
    per_call = []
    for n in (4, 4, 4, 4):
        out = fn(torch.arange(float(n)))
        per_call.append((out.tolist(), list(log), dict(counts)))
    if jit:
        assert jitcore.cache_misses(fn) == 1
    return per_call


def test_a_static_and_a_class_methods_cell_writes_happen_on_every_call() -> None:
    """Before: the appends and the counter ran while tracing only; a cached call made none of them
    (and ``x + counts["calls"]`` kept the first call's count)."""
    assert _calls(jit=True) == _calls(jit=False)
