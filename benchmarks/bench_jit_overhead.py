"""Cached-call overhead and first-call (tracing) cost of jitcore.jit, as ratios measured in one run.

Prints, for a 4-op and a 20-op function on a 4-element tensor, the per-call time of eager PyTorch,
jitcore (cached) and torch.compile(backend="eager"), with ratios against eager; then the first-call
time of jitcore for chains of N = 10, 100, 1000 ops, per recorded op.
Targets (issue 4): cached 4-op <= 1.3x eager, 20-op <= 1.05x eager; first call <= 1 ms per op at N=1000.
Cached calls are timed after 110 warm calls and ``wait_for_compiles``: jitcore's default executors
lower a hot entry (100 calls) on a background thread, which must not compete with the timed calls.
Then the cached call of a small MLP (8-16-8, batch 4, so that overhead dominates, issue 17) as users
train it: the loss jitted with forward and backward outside, the whole step jitted (zero_grad,
backward and SGD inside), and ``jitcore.jit(model)``'s forward; each the best of many short rounds
(a busy machine's slow rounds drop out), with jitcore's time over eager's.

Run: python benchmarks/bench_jit_overhead.py
"""

from __future__ import annotations

import time
import timeit
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import jitcore
from jitcore.executors.background import wait_for_compiles


def four_ops(x):
    return ((x.sin() * 2).cos() + 1).exp()


def twenty_ops(x):
    for _ in range(5):
        x = ((x.sin() * 2).cos() + 1).tanh()
    return x


def per_call_us(fns: list, arg, number: int = 20000, repeat: int = 9) -> list[float]:
    """Best per-call time of each of ``fns``, measured interleaved (fn0, fn1, ... per round) so that
    drift in the machine's speed affects all of them alike."""
    for fn in fns:
        for _ in range(110):  # past jitcore's fuse_after (100 calls): the entry is hot and lowered
            fn(arg)
    wait_for_compiles(600.0)  # in the background: done before the timed calls, not inside them
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(lambda: fn(arg), number=number))  # noqa: B023 - timed now
    return [b / number * 1e6 for b in best]


def chain(n: int):
    def f(x):
        for i in range(n):
            x = x + i if i % 2 else x * 1.0001
        return x

    return f


def training_rows() -> None:
    """Cached calls of a small MLP's loss, training step and forward: eager vs jitcore (issue 17)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def loss(m, x, y):
        return F.mse_loss(m(x), y)

    def step(m, x, y):
        opt.zero_grad(set_to_none=True)
        out = F.mse_loss(m(x), y)
        out.backward()
        opt.step()
        return out

    jitted_loss, jitted_step, jitted_model = jitcore.jit(loss), jitcore.jit(step), jitcore.jit(model)
    rows = {
        "loss fwd+bwd": (lambda: loss(model, x, y).backward(), lambda: jitted_loss(model, x, y).backward()),
        "whole step": (lambda: step(model, x, y), lambda: jitted_step(model, x, y)),
        "module fwd": (lambda: model(x), lambda: jitted_model(x)),
    }
    print(f"{'MLP 8-16-8':14} {'eager us':>9} {'jitcore us':>11} {'ratio':>6} {'over us':>8}")
    for name, (eager_fn, jitted_fn) in rows.items():
        for _ in range(110):  # past fuse_after, then the background lowering waited for (above)
            eager_fn(), jitted_fn()
        wait_for_compiles(600.0)
        eager = jitted = float("inf")
        for _ in range(200):  # short interleaved rounds: the best of them is the machine's quiet speed
            eager = min(eager, timeit.timeit(eager_fn, number=20) / 20 * 1e6)
            jitted = min(jitted, timeit.timeit(jitted_fn, number=20) / 20 * 1e6)
        print(f"{name:14} {eager:9.1f} {jitted:11.1f} {jitted / eager:6.2f} {jitted - eager:8.1f}")
    assert jitcore.cache_misses(jitted_loss) == 1 and jitcore.cache_misses(jitted_model) == 1


def main() -> None:
    torch.set_num_threads(1)
    x = torch.randn(4)
    print(f"{'function':10} {'eager us':>9} {'jitcore us':>11} {'ratio':>6} {'compile us':>11} {'ratio':>6}")
    for fn in (four_ops, twenty_ops):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled_fn = torch.compile(fn, backend="eager")
            eager, jitted, compiled = per_call_us([fn, jitcore.jit(fn), compiled_fn], x)
        print(
            f"{fn.__name__:10} {eager:9.2f} {jitted:11.2f} {jitted / eager:6.2f} "
            f"{compiled:11.2f} {compiled / eager:6.2f}"
        )
    print()
    print(f"{'chain N':>8} {'first call ms':>14} {'ms per op':>10}")
    for n in (10, 100, 1000):
        times = []
        for _ in range(3):
            jf = jitcore.jit(chain(n))
            start = time.perf_counter()
            jf(x)
            times.append(time.perf_counter() - start)
        best = min(times) * 1e3
        print(f"{n:8} {best:14.1f} {best / n:10.3f}")
    print()
    training_rows()


if __name__ == "__main__":
    main()
