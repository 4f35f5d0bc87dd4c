"""Interpreted/native time ratios of jitcore's interpreter on fixed pure-Python workloads.

Run: ``python benchmarks/bench_interpreter.py`` (add ``--quick`` for fewer repeats, ``--repeats N`` for more
on a busy machine, ``--unfused`` to switch the fused handlers and superinstructions off). Prints the Python
version, one line per workload and the median ratio. Target (see the interpreter issues): median slowdown at
most 30x, on 3.11 and on 3.13.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from jitcore.interpreter import interpret


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def loop_sum(xs: list[int]) -> int:
    total = 0
    for x in xs:
        if x % 3:
            total += x
    return total


def comprehensions(n: int) -> dict[int, list[int]]:
    return {k: [i * k for i in range(n) if i % 2] for k in range(20)}


def pipeline(n: int) -> int:
    squares = (i * i for i in range(n))
    odd = (s for s in squares if s % 2)
    return sum(s // 3 for s in odd)


class Vec:
    def __init__(self, x: float, y: float) -> None:
        self.x = x
        self.y = y

    @property
    def norm2(self) -> float:
        return self.x * self.x + self.y * self.y

    def scaled(self, k: float) -> Vec:
        return Vec(self.x * k, self.y * k)

    def __add__(self, other: Vec) -> Vec:
        return Vec(self.x + other.x, self.y + other.y)


def classes(n: int) -> float:
    acc = Vec(0.0, 0.0)
    for i in range(n):
        acc = acc + Vec(i, 1.0).scaled(0.5)
    return acc.norm2


def exceptions(n: int) -> int:
    caught = 0
    for i in range(n):
        try:
            if i % 2:
                raise ValueError(i)
            caught += 1
        except ValueError:
            caught += 2
        finally:
            caught += 1
    return caught


WORKLOADS: list[tuple[str, Callable, tuple]] = [
    ("recursion fib(20)", fib, (20,)),
    ("loop over list (20k)", loop_sum, (list(range(20_000)),)),
    ("comprehensions", comprehensions, (500,)),
    ("generator pipeline (20k)", pipeline, (20_000,)),
    ("methods/properties/__add__ (5k)", classes, (5_000,)),
    ("exception handling (5k)", exceptions, (5_000,)),
]


def _best_pair(native: Callable, interpreted: Callable, args: tuple, repeats: int) -> tuple[float, float]:
    """The best CPU time of each, the two measured in turn so that a busy moment of a shared machine falls on
    both rather than on one of them."""
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for k, fn in enumerate((native, interpreted)):
            start = time.process_time()
            fn(*args)
            best[k] = min(best[k], time.process_time() - start)
    return best[0], best[1]


def main(argv: list[str]) -> None:
    """Measure and print each workload's interpreted/native ratio and the median."""
    repeats = 2 if "--quick" in argv else 7
    if "--repeats" in argv:
        repeats = int(argv[argv.index("--repeats") + 1])
    if "--unfused" in argv:  # decode every code object without fusing (Note [Fused instructions])
        from jitcore.interpreter import instructions

        instructions._fuse = lambda insts, hooked=frozenset(): list(insts)
    ratios = []
    version = ".".join(map(str, sys.version_info[:3]))
    print(f"Python {version}, {'unfused' if '--unfused' in argv else 'fused'} handlers")
    print(f"{'workload':34} {'native ms':>10} {'interp ms':>10} {'ratio':>8}")
    for name, fn, args in WORKLOADS:
        interpreted = interpret(fn)
        assert interpreted(*args) == fn(*args), name
        native_s, interp_s = _best_pair(fn, interpreted, args, repeats)
        ratio = interp_s / native_s
        ratios.append(ratio)
        print(f"{name:34} {native_s * 1e3:10.2f} {interp_s * 1e3:10.2f} {ratio:7.1f}x")
    print(f"{'median':34} {'':10} {'':10} {statistics.median(ratios):7.1f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
