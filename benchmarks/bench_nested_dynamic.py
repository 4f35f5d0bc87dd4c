"""Nested jagged tensors whose ragged structure changes every call: jitcore vs eager vs torch.compile.

Each program runs on 20 NJTs of 4 sequences with random lengths in 1..32 (features 64), every one a
ragged structure not seen before, twice over: the first 20 calls include every trace or compile
(``first 20``), the next 20 (new structures again) are what a warm model pays per call (``warm``).
Printed, from one run: the per-call time (microseconds, CPU time of this process) of eager,
``jitcore.jit`` (``dynamic=None``), ``torch.compile`` with backend ``"eager"`` and with inductor, the
ratios against eager, how many traces (jitcore's cache misses) or compiles (torch.compile's frames)
each made, and that every result equals eager's. The machine is shared: compare ratios.

- ``linear+relu+softmax``: ``softmax(relu(linear(x)), -1) * 2`` under ``torch.no_grad()``;
- ``... fwd+bwd``: the same with the linear layer's parameters requiring grad and ``backward()``
  (jitcore runs the torch-level calls of its symbolic entry under torch's autograd);
- ``softmax over ragged + padded``: ``to_padded_tensor(x.softmax(1), 0).sum(1)``, no grad.

Run: python benchmarks/bench_nested_dynamic.py
"""

from __future__ import annotations

import logging
import random
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

import jitcore

_RNG = random.Random(0)
BATCH, FEATURES, CALLS = 4, 64, 20


def structures(count: int) -> list[tuple[int, ...]]:
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < count:
        lengths = tuple(_RNG.randint(1, 32) for _ in range(BATCH))
        if lengths not in seen:
            seen.add(lengths)
            out.append(lengths)
    return out


def njt(lengths: tuple[int, ...]) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.randn(n, FEATURES) for n in lengths], layout=torch.jagged)


def run(fn: Callable[[torch.Tensor], Any], inputs: list[torch.Tensor], grad: bool) -> tuple[float, list]:
    """CPU seconds per call over ``inputs``, and the outputs (values, and the weight's gradient)."""
    outs = []
    start = time.process_time()
    for x in inputs:
        if grad:
            out = fn(x)
            out.values().square().sum().backward()
            outs.append(out.values().detach())
        else:
            with torch.no_grad():
                out = fn(x)
            outs.append(out.values() if out.is_nested else out)
    return (time.process_time() - start) / len(inputs), outs


def main() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("torch._inductor.codecache").setLevel(logging.ERROR)  # NJT cache keys do not pickle
    torch.set_num_threads(1)
    torch.manual_seed(0)
    from torch._dynamo.testing import CompileCounterWithBackend

    linear = torch.nn.Linear(FEATURES, FEATURES)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(linear(x)).softmax(-1) * 2

    def padded(x: torch.Tensor) -> torch.Tensor:
        return torch.nested.to_padded_tensor(x.softmax(1), 0.0).sum(1)

    programs = [("linear+relu+softmax", mlp, False), ("linear+relu+softmax fwd+bwd", mlp, True),
                ("softmax over ragged + padded", padded, False)]
    first_inputs = [njt(s) for s in structures(CALLS)]
    warm_inputs = [njt(s) for s in structures(CALLS)]
    print(f"{'program':30} {'system':18} {'first 20 us':>12} {'warm us':>9} {'warm/eager':>11} {'traces':>7}")
    for name, fn, grad in programs:
        linear.requires_grad_(grad)
        _, expected_first = run(fn, first_inputs, grad)
        eager_warm, expected_warm = run(fn, warm_inputs, grad)
        eager_first, _ = run(fn, first_inputs, grad)
        rows: list[tuple[str, float, float, int | str]] = [("eager", eager_first, eager_warm, 0)]
        jitted = jitcore.jit(fn)
        systems: list[tuple[str, Callable[..., Any], Callable[[], int]]] = [
            ("jitcore", jitted, lambda jitted=jitted: jitcore.cache_misses(jitted))]
        for backend in ("eager", "inductor"):
            counter = CompileCounterWithBackend(backend)
            torch._dynamo.reset()
            systems.append((f"compile({backend})", torch.compile(fn, backend=counter),
                            lambda counter=counter: counter.frame_count))
        for label, system, traces in systems:
            try:
                first, outs_first = run(system, first_inputs, grad)
                warm, outs_warm = run(system, warm_inputs, grad)
                torch.testing.assert_close(outs_first, expected_first)
                torch.testing.assert_close(outs_warm, expected_warm)
                rows.append((label, first, warm, traces()))
            except Exception as exc:  # noqa: BLE001 - reported, not hidden
                rows.append((label, float("nan"), float("nan"),
                             f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:60]}"))
        for label, first, warm, traces_made in rows:
            print(f"{name:30} {label:18} {first * 1e6:12.0f} {warm * 1e6:9.0f} "
                  f"{warm / eager_warm:10.2f}x {traces_made!s:>7}")


if __name__ == "__main__":
    main()
