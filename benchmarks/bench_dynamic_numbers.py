"""A number argument that changes on every call (a learning-rate schedule): dynamic vs specialized.

The program is an SGD-with-momentum update written with plain torch ops; ``lr`` follows a cosine
schedule, so no two calls see the same value. Measured in one run, per call, each variant fresh
(its first call, the trace, included in the total, as a training loop would see it):
- eager;
- ``jitcore.jit(step)``: ``lr`` specialized on the first trace, a dynamic number from the second call's
  trace on (Note [Numbers that change between calls become dynamic]): two traces;
- ``jitcore.jit(step, dynamic=False)``: every new ``lr`` is a new specialization (a retrace per call, and
  past the cache limit evictions);
- ``jitcore.jit(step, dynamic_numbers=("lr",))``: one trace, ``lr`` an input of the computation;
- ``torch.compile(step, backend="eager")`` with its defaults (how Dynamo treats the float).
Ratios are to eager's time for the same calls.

Run: python benchmarks/bench_dynamic_numbers.py
"""

from __future__ import annotations

import math
import time
import warnings

import torch

import jitcore

CALLS = 200


def step(p, g, buf, lr, momentum: float = 0.9):
    buf = buf * momentum + g
    p = p - lr * buf
    return p, buf


def schedule(i: int) -> float:
    return 0.05 * 0.5 * (1 + math.cos(math.pi * i / CALLS)) + 1e-4


def run(fn, tensors, calls: int) -> float:
    p, g, buf = tensors
    start = time.perf_counter()
    for i in range(calls):
        p, buf = fn(p, g, buf, schedule(i))
    return (time.perf_counter() - start) / calls * 1e6


def main(size: int = 256) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    torch._dynamo.config.cache_size_limit = 8  # noqa: SLF001 - torch's default, stated
    tensors = (torch.randn(size), torch.randn(size), torch.zeros(size))
    variants = {
        "eager": lambda: step,
        "jitcore (default)": lambda: jitcore.jit(step),
        "jitcore dynamic=False": lambda: jitcore.jit(step, dynamic=False),
        "jitcore dynamic_numbers": lambda: jitcore.jit(step, dynamic_numbers=("lr",)),
        "torch.compile(eager)": lambda: torch.compile(step, backend="eager"),
    }
    times = {}
    run(step, tensors, 20)  # warm eager's kernels and allocator, so that its loop is not charged for them
    for name, make in variants.items():
        torch._dynamo.reset()  # noqa: SLF001
        fn = make()
        times[name] = run(fn, tensors, CALLS)
        if isinstance(fn, jitcore.JittedFunction):
            times[name + " traces"] = jitcore.cache_misses(fn)
    base = times["eager"]
    print(f"{CALLS} calls, each with a new lr, tensors of {size} elements (us per call, first call included)")
    for name in variants:
        extra = f"  ({times[name + ' traces']} traces)" if name + " traces" in times else ""
        print(f"  {name:26s} {times[name]:10.1f} us  {times[name] / base:8.2f}x eager{extra}")
    # steady state: the same loop again on the warm dynamic entry
    jf = jitcore.jit(step, dynamic_numbers=("lr",))
    run(jf, tensors, 5)
    warm = run(jf, tensors, CALLS)
    eager = run(step, tensors, CALLS)
    print(f"  steady state: jitcore dynamic {warm:.1f} us, eager {eager:.1f} us ({warm / eager:.2f}x eager)")


if __name__ == "__main__":
    main()
