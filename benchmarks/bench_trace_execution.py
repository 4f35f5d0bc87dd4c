"""Compiled traces against the same calls written by hand: the overhead of running generated code.

A chain of N torch calls (mixed add/mul/sin/relu, some in-place) is traced, compiled with
``compile_trace`` and timed against two hand-written Python functions making the same calls: one in
the idiomatic style users write (operators and methods: ``x = x + y``, ``x.relu_()``), one spelling
each call the way the trace does (``torch.add(x, y)``). Both run in the same process, best of
several repeats. The target is compiled / hand-written <= 1.2.

Run: python benchmarks/bench_trace_execution.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from typing import Any

import torch

import jitcore.langctx as L
from jitcore.ir import Trace, compile_trace, tracing

TARGET = 1.2

# One step of the chain per entry, cycled: (idiomatic Python, the same call spelled as the trace does).
STEPS: list[tuple[str, str]] = [
    ("x = x + y", "x = torch.add(x, y)"),
    ("x = x * y", "x = torch.mul(x, y)"),
    ("x = x.sin()", "x = torch.sin(x)"),
    ("x = x.relu()", "x = torch.relu(x)"),
    ("x.mul_(0.5)", "x = torch.Tensor.mul_(x, 0.5)"),
    ("x = torch.add(x, y, alpha=2)", "x = torch.add(x, y, alpha=2)"),
]


def hand_written(n: int, style: int) -> Callable[..., Any]:
    """A straight-line function of ``n`` steps, in the idiomatic (0) or the trace's (1) spelling."""
    body = "".join(f"    {STEPS[i % len(STEPS)][style]}\n" for i in range(n))
    namespace: dict[str, Any] = {"torch": torch}
    exec(f"def chain(x, y):\n{body}    return x\n", namespace)  # noqa: S102 - the baseline is generated
    return namespace["chain"]


def traced(n: int, x: torch.Tensor, y: torch.Tensor) -> tuple[Trace, Callable[..., Any]]:
    trace = Trace(imports={"torch": torch}, header=[f"bench: chain of {n} ops"])
    context = L.new_context(trace)
    trace.args = [context.values.input_proxy(x, "x"), context.values.input_proxy(y, "y")]
    with tracing(context):
        trace.output = hand_written(n, 0)(*trace.args)
    return trace, compile_trace(trace)


def best_of(fn: Callable[..., Any], args: tuple, number: int, repeat: int) -> float:
    """Seconds per call, best of ``repeat`` rounds of ``number`` calls."""
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number


def bench(n: int, shape: tuple[int, ...], number: int, repeat: int) -> dict[str, float]:
    x, y = torch.randn(shape), torch.rand(shape)
    trace, compiled = traced(n, x.clone(), y)
    assert len(trace.bound_symbols) == n, len(trace.bound_symbols)
    idiomatic, spelled = hand_written(n, 0), hand_written(n, 1)
    torch.testing.assert_close(compiled(x.clone(), y), idiomatic(x.clone(), y))
    # Interleave the candidates so drift in machine speed hits all of them alike.
    times: dict[str, list[float]] = {"compiled": [], "idiomatic": [], "spelled": []}
    for _ in range(repeat):
        for name, fn in (("compiled", compiled), ("idiomatic", idiomatic), ("spelled", spelled)):
            times[name].append(best_of(fn, (x, y), number, 1))
    return {name: min(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    repeat = 3 if args.quick else 15
    cases = [(20, (8,), 2000), (100, (8,), 400), (20, (256, 256), 50), (100, (256, 256), 10)]
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, 1 thread, best of {repeat}")
    print(
        f"{'ops':>4} {'shape':>10} {'compiled':>12} {'idiomatic':>12} "
        f"{'spelled':>12} {'ratio':>6} {'vs spelled':>10}"
    )
    worst = 0.0
    for n, shape, number in cases:
        t = bench(n, shape, number if not args.quick else max(number // 4, 1), repeat)
        ratio, ratio_spelled = t["compiled"] / t["idiomatic"], t["compiled"] / t["spelled"]
        worst = max(worst, ratio)
        print(
            f"{n:>4} {list(shape)!s:>10} {t['compiled'] * 1e6:>10.1f}us {t['idiomatic'] * 1e6:>10.1f}us"
            f" {t['spelled'] * 1e6:>10.1f}us {ratio:>6.2f} {ratio_spelled:>10.2f}"
        )
    print(f"worst compiled/idiomatic ratio {worst:.2f} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
