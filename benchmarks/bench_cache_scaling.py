"""Cached-call cost of jitcore.jit as the cache grows: 1, 10, 100 and 300 entries.

Each entry is one specialization of the same function for a different input shape (``(n,)`` for
n = 1..N; small, so that the newest entry's larger input adds little compute). The call measured is a cache
hit on the *oldest* entry (the worst case for a linear scan
of the entries newest first) and on the newest one; times are per call, with the ratio to the
1-entry case, and — for reference — what trying every entry in turn (a linear scan, as before the
dispatch table) costs for the same hit on the oldest entry. Past a few entries a call is dispatched on a cheap
key of its arguments (tensor shapes
and dtypes) to the candidate entries, so the ratio should stay near 1 (docs/user-guide.md, "The
cache"). Eager's time for the same call is printed for scale.

Run: python benchmarks/bench_cache_scaling.py
"""

from __future__ import annotations

import time
import timeit
import warnings

import torch

import jitcore
from jitcore.prologue import MISS

SIZES = (1, 10, 100, 300)


def f(x):
    return (x * 2 + 1).sin()


def per_call_us(fn, arg, number: int = 2000) -> float:
    """CPU time per call (process time: other processes on a busy machine do not count)."""
    fn(arg)
    return timeit.timeit(lambda: fn(arg), number=number, timer=time.process_time) / number * 1e6


def linear_scan(jf):
    """The pre-dispatch-table lookup: every entry's fused prologue in turn, newest first."""
    entries = list(reversed(jf.entries))

    def call(*args):
        for entry in entries:
            out = entry.cached_call(args, {})
            if out is not MISS:
                return out
        raise AssertionError("no entry accepted the call")

    return call


def main(rounds: int = 5) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    inputs = [torch.randn(n) for n in range(1, max(SIZES) + 1)]
    jitted = {}
    for size in SIZES:
        jf = jitcore.jit(f, cache_limit=max(SIZES))
        for x in inputs[:size]:
            jf(x)
        assert len(jf.entries) == size and jitcore.cache_misses(jf) == size
        jitted[size] = jf
    # Rounds interleave the configurations; the best of the rounds is reported (least disturbed).
    best: dict[tuple[int, str], float] = {}
    eager = min(per_call_us(f, inputs[0]) for _ in range(rounds))
    for _ in range(rounds):
        for size, jf in jitted.items():
            for column, fn, x in (("oldest", jf, inputs[0]), ("newest", jf, inputs[size - 1]),
                                  ("scan", linear_scan(jf), inputs[0])):
                t = per_call_us(fn, x)
                best[size, column] = min(best.get((size, column), t), t)
    for size, jf in jitted.items():
        assert jitcore.cache_misses(jf) == size  # every measured call was a hit
    print(f"eager: {eager:.2f} us per call (CPU time)")
    print(
        f"{'entries':>8} {'oldest us':>10} {'ratio':>6} "
        f"{'newest us':>10} {'ratio':>6} {'scan us':>9} {'ratio':>6}"
    )
    base = best[SIZES[0], "oldest"]
    for size in SIZES:
        o, n, s = best[size, "oldest"], best[size, "newest"], best[size, "scan"]
        print(f"{size:8d} {o:10.2f} {o / base:6.2f} {n:10.2f} {n / base:6.2f} {s:9.2f} {s / base:6.2f}")


if __name__ == "__main__":
    main()
