"""Cached calls of programs that return closures, classes and objects they make (issue 14), in one run.

Eagerly each call makes a new closure (or class, or instance; ``over_a_list_argument``'s closure holds the
list the caller passes); jitcore's cached call makes them again
from a copy plan compiled once per entry (jit/copy_plans.py). Prints, for each program, the per-call time
of eager PyTorch, of jitcore's cached call and of torch.compile(backend="eager"), and jitcore's and
torch.compile's ratio to eager; the programs are tiny (one add on 4 elements), so the ratio is the cost of
making the objects again against eager's own making. Each time is the best of many short rounds,
interleaved, in CPU time of the process (``time.process_time``: on a machine shared with other work,
wall-clock rounds swing 3x), so that a busy machine's slow rounds drop out alike. torch.compile makes a
new guard per class a call makes: past its recompile limit it runs those programs eagerly.

Run: python benchmarks/bench_made_objects.py
"""

from __future__ import annotations

import logging
import time
import timeit
import warnings

import torch

import jitcore
from jitcore.executors.background import wait_for_compiles


def plain(x):
    return x + 1


def counter(x):
    count = [0]

    def bump():
        count[0] += 1
        return count[0]

    return bump, x + 1


def over_tensor(x):
    c = x * 2
    return (lambda: c), x + 1


def a_class(x):
    class C:
        def m(self):
            return 1

    return C, x + 1


def an_instance(x):
    class C:
        def __init__(self):
            self.items = []

    return C(), x + 1


def over_a_list_argument(x, log):
    return (lambda v: log.append(v)), x + 1


def per_call_us(fns: list, *args, number: int = 500, repeat: int = 25) -> list[float]:
    """Best per-call time of each of ``fns``, measured interleaved."""
    for fn in fns:
        for _ in range(110):  # past jitcore's fuse_after: the entry is hot and lowered
            fn(*args)
    wait_for_compiles(600.0)
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            took = timeit.timeit(lambda: fn(*args), number=number, timer=time.process_time)  # noqa: B023
            best[i] = min(best[i], took)
    return [b / number * 1e6 for b in best]


def main() -> None:
    warnings.simplefilter("ignore")
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # its recompile-limit warnings
    torch._dynamo.config.cache_size_limit = 64  # noqa: SLF001 - each program its own entries
    x = torch.ones(4)
    print(f"{'program':20} {'eager us':>9} {'jitcore us':>11} {'ratio':>6} {'compile us':>11} {'ratio':>6}")
    for fn in (plain, counter, over_tensor, a_class, an_instance, over_a_list_argument):
        jitted = jitcore.jit(fn)
        args = (x, []) if fn is over_a_list_argument else (x,)  # a closure over the caller's list
        eager, cached, compiled = per_call_us([fn, jitted, torch.compile(fn, backend="eager")], *args)
        assert jitted.fallback_reason is None, jitted.fallback_reason  # a cached call, not an eager entry
        print(f"{fn.__name__:20} {eager:9.2f} {cached:11.2f} {cached / eager:6.2f} {compiled:11.2f} "
              f"{compiled / eager:6.2f}")


if __name__ == "__main__":
    main()
