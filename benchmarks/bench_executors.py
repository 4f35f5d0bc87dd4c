"""Executors: per-call and first-call time of jitcore with the inductor executor, as ratios measured
in one run against eager, torch.compile(backend="eager") and torch.compile (inductor).

Rows:
- a 20-op elementwise chain on a 4-element tensor, cached call (goal: jitcore+inductor <= 0.3x
  eager and <= 1.2x torch.compile's);
- a TwoTensor chain of 50 elementwise ops and a matmul on 8x8 inner tensors (goal <= 0.015x eager);
- one training step (forward, backward, SGD update) of a small MLP (64 -> 256 -> 256 -> 10), and of
  a pointwise-heavy model (a linear layer and 40 pointwise ops), each with the bytes the step saves
  for its backward; ``jitcore (inductor, no recompute)`` saves what the torch executor saves (the
  saved values are not chosen for fusion: jitcore/transforms/mincut.py);
- varying batch size (``--dynamic``, and in the default run): the two training steps above,
  cycling through batch sizes, against eager and torch.compile(dynamic=True); jitcore's entry
  becomes symbolic at the second size (its default dynamic=None) and the regions of that entry are
  compiled once for all sizes (the count of AOTAutograd compiles during the warm-up is printed);
- the first call of the 20-op chain in a fresh process, with an empty and with a warm inductor disk
  cache (``TORCHINDUCTOR_CACHE_DIR`` pointed at a new directory, then reused);
- the hot call of the default policy (``--hot-call``: only this): the longest call of a loop whose
  entry becomes hot at run 20, lowered on the hot call or in the background, the calls served on
  torch meanwhile and how long until the fused code serves.
``jitcore (torch)`` is ``executor="torch"`` (the trace as generated Python), ``jitcore (inductor)``
is ``executors=("inductor", "torch")``, ``jitcore (default)`` is ``jitcore.jit(fn)``: lowered once hot
and kept only where measured faster (plan.py, Note [Lowering only what is faster]). Per-call times are
the best of interleaved rounds, one thread, after warm calls past the default policy's trial.

Run: python benchmarks/bench_executors.py [--quick] [--no-first-call] | --hot-call | --dynamic
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import timeit
import warnings

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def twenty_ops(x):
    for _ in range(5):
        x = ((x.sin() * 2).cos() + 1).tanh()
    return x


def two_tensor_chain(x, w):
    for _ in range(10):
        x = ((x + 1) * 0.5).sin().cos() - 0.25
    return x @ w


def variants(fn):
    """(name, callable) for each way of running ``fn``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            ("eager", fn),
            ("torch.compile(backend='eager')", torch.compile(fn, backend="eager")),
            ("torch.compile (inductor)", torch.compile(fn)),
            ("jitcore (torch)", jitcore.jit(fn, executor="torch")),
            ("jitcore (inductor)", jitcore.jit(fn, executors=("inductor", "torch"))),
            ("jitcore (default)", jitcore.jit(fn)),
        ]


def per_call_us(fns: list, call, number: int, repeat: int) -> list[float]:
    """Best per-call time of ``call(fn)`` for each of ``fns``, measured interleaved, after warm calls
    past the default policy's hot run (100), its background compile and its 32 timed trial runs."""
    from jitcore.executors import wait_for_compiles

    for fn in fns:
        for _ in range(110):
            call(fn)
    wait_for_compiles(600.0)
    for fn in fns:
        for _ in range(40):
            call(fn)
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(lambda: call(fn), number=number))  # noqa: B023 - timed now
    return [b / number * 1e6 for b in best]


def table(title: str, names: list[str], times: list[float]) -> None:
    eager, inductor = times[0], times[2]
    print(f"\n{title}")
    print(f"  {'variant':32} {'us/call':>10} {'vs eager':>9} {'vs inductor':>12}")
    for name, t in zip(names, times):
        print(f"  {name:32} {t:10.1f} {t / eager:9.3f} {t / inductor:12.2f}")


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                                       torch.nn.GELU(), torch.nn.Linear(256, 10))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.net(x), y)


class Pointwise(torch.nn.Module):
    """A linear layer followed by 40 pointwise ops (arithmetic and one sigmoid per round, as SiLU):
    the backward reads many activations."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(256, 256)

    def forward(self, x, y):
        h = self.linear(x)
        for _ in range(4):
            h = torch.where(h > 0, h * 1.5, h * 0.1) + (h - 0.5).clamp(-2, 2) * 0.5
            h = h * torch.sigmoid(h) - h.abs() * 0.25
        return ((h - y) ** 2).mean()


def saved_bytes(step) -> int:
    """Bytes of the tensors one training step hands to autograd to keep for its backward."""
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        step()
    return sum(t.numel() * t.element_size() for t in packed)


def training_steps(quick: bool, title: str, make, x, y) -> None:
    """One training step (forward, backward, SGD) per variant, with the bytes saved for backward."""
    from jitcore.executors import InductorExecutor

    saving_all = InductorExecutor("inductor_saving_all", recompute=False)
    torch.manual_seed(0)
    base = make()
    steps = []
    names = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, wrap in [("eager", lambda m: m), ("torch.compile(backend='eager')",
                                                    lambda m: torch.compile(m, backend="eager")),
                           ("torch.compile (inductor)", torch.compile),
                           ("jitcore (torch)", lambda m: jitcore.jit(m, executor="torch")),
                           ("jitcore (inductor)", lambda m: jitcore.jit(m, executors=("inductor", "torch"))),
                           ("jitcore (inductor, no recompute)",
                            lambda m: jitcore.jit(m, executors=(saving_all, "torch"))),
                           ("jitcore (default)", jitcore.jit)]:
            model = make()
            model.load_state_dict(base.state_dict())
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            fn = wrap(model)

            def step(fn=fn, opt=opt):
                opt.zero_grad(set_to_none=True)
                fn(x, y).backward()
                opt.step()

            steps.append(step)
            names.append(name)
    times = per_call_us(steps, lambda s: s(), number=20 if quick else 100, repeat=5)
    table(title, names, times)
    print("  saved for backward per step (bytes): " + ", ".join(
        f"{name} {saved_bytes(step)}" for name, step in zip(names, steps) if "torch.compile" not in name))


BATCHES = (16, 24, 40, 64, 96, 128)
INDUCTOR = ("inductor", "torch")


def dynamic_batches(quick: bool) -> None:
    """Per-step time averaged over a cycle of batch sizes, after each variant saw every size once."""
    from torch._dynamo.utils import counters

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for title, make, data in (
                ("training step of the MLP 64-256-256-10", MLP,
                 [(torch.randn(b, 64), torch.randint(0, 10, (b,))) for b in BATCHES]),
                ("training step of a linear layer + 40 pointwise ops, (batch, 256)", Pointwise,
                 [(torch.randn(b, 256), torch.randn(b, 256)) for b in BATCHES])):
            torch.manual_seed(0)
            base = make()
            names, steps, compiles = [], [], []
            for name, wrap in [("eager", lambda m: m),
                               ("torch.compile(dynamic=True)", lambda m: torch.compile(m, dynamic=True)),
                               ("jitcore (torch)", lambda m: jitcore.jit(m, executor="torch")),
                               ("jitcore (inductor)", lambda m: jitcore.jit(m, executors=INDUCTOR))]:
                model = make()
                model.load_state_dict(base.state_dict())
                opt = torch.optim.SGD(model.parameters(), lr=0.01)

                def step(fn=wrap(model), opt=opt, data=data):  # noqa: B008 - this iteration's model, wrapped once
                    for x, y in data:
                        opt.zero_grad(set_to_none=True)
                        fn(x, y).backward()
                        opt.step()

                before = counters["aot_autograd"]["total"]
                step()
                compiles.append(counters["aot_autograd"]["total"] - before)
                names.append(name)
                steps.append(step)
            times = per_call_us(steps, lambda s: s(), number=3 if quick else 20, repeat=5)
            times = [t / len(BATCHES) for t in times]
            eager, compiled = times[0], times[1]
            print(f"\nvarying batch size {BATCHES}, {title} (forward, backward, SGD)")
            print(f"  {'variant':32} {'us/step':>10} {'vs eager':>9} {'vs tc(dynamic)':>15} {'compiles':>9}")
            for name, t, n in zip(names, times, compiles):
                print(f"  {name:32} {t:10.1f} {t / eager:9.3f} {t / compiled:15.2f} {n:9d}")


FIRST_CALL = """
import time, torch, jitcore
from bench_executors import twenty_ops
kind = {kind!r}
t0 = time.perf_counter()
if kind == "torch.compile":
    fn = torch.compile(twenty_ops)
else:
    fn = jitcore.jit(twenty_ops, executors=("inductor", "torch"))
fn(torch.randn(4))
print(time.perf_counter() - t0)
"""


def first_calls() -> None:
    print("\nfirst call of the 20-op chain in a new process (seconds, imports excluded)")
    here = os.path.dirname(os.path.abspath(__file__))
    for kind in ("jitcore", "torch.compile"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": here}
            script = FIRST_CALL.format(kind=kind)
            command = [sys.executable, "-c", script]
            runs = [
                subprocess.run(command, env=env, check=True, capture_output=True, text=True) for _ in range(2)
            ]
            times = [float(run.stdout.split()[-1]) for run in runs]
        print(f"  {kind:14} empty disk cache {times[0]:6.2f} s   warm disk cache {times[1]:6.2f} s")
    t0 = time.perf_counter()
    jitcore.jit(twenty_ops, executor="torch")(torch.randn(4))
    print(f"  {'jitcore (torch executor, this process)':40} {time.perf_counter() - t0:6.3f} s")


HOT_CALL = """
import time, torch, jitcore
from bench_executors import twenty_ops
fn = jitcore.jit(twenty_ops, fuse_after=20)  # the default executors; hot at run 20
x = torch.randn(4)
traces = jitcore.last_traces
longest, calls, hot_at, t_start = 0.0, 0, None, time.perf_counter()
while time.perf_counter() - t_start < 120:
    t0 = time.perf_counter()
    fn(x)
    took = time.perf_counter() - t0
    longest, calls = max(longest, took), calls + 1
    if calls == 21:
        hot_at = time.perf_counter()
    if hot_at is not None and "fusion" in str(traces(fn)[-1].header):
        break
print(longest, calls - 21, time.perf_counter() - hot_at)
"""


def hot_call_stalls() -> None:
    print("\nthe hot call (run 20 of the 20-op chain, default executors, empty disk cache), new process")
    here = os.path.dirname(os.path.abspath(__file__))
    for background in ("0", "1"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONPATH": here,
                   "JITCORE_BACKGROUND_COMPILE": background}
            run = subprocess.run([sys.executable, "-c", HOT_CALL], env=env, check=True, capture_output=True,
                                 text=True)
        longest, served, until = run.stdout.split()[-3:]
        mode = "in the background" if background == "1" else "on the hot call"
        print(f"  lowered {mode:18} longest call {float(longest) * 1e3:8.1f} ms   calls served on torch "
              f"while compiling {int(served):6d}   fused after {float(until):5.2f} s")


def main() -> None:
    quick = "--quick" in sys.argv
    if "--hot-call" in sys.argv:
        hot_call_stalls()
        return
    torch.set_num_threads(1)
    if "--dynamic" in sys.argv:
        dynamic_batches(quick)
        return
    named = variants(twenty_ops)
    x = torch.randn(4)
    times = per_call_us([f for _, f in named], lambda f: f(x), number=2000 if quick else 20000, repeat=7)
    table("20-op elementwise chain, 4 elements, cached call (goal: jitcore (inductor) <= 0.3x eager, "
          "<= 1.2x inductor)", [n for n, _ in named], times)
    named = variants(two_tensor_chain)
    t, w = TwoTensor(torch.randn(8, 8), torch.randn(8, 8)), TwoTensor(torch.randn(8, 8), torch.randn(8, 8))
    times = per_call_us([f for _, f in named], lambda f: f(t, w), number=200 if quick else 1000, repeat=5)
    table("TwoTensor chain, 50 elementwise ops + matmul, 8x8 (goal: inductor row <= 0.015x eager)",
          [n for n, _ in named], times)
    training_steps(quick, "training step of an MLP 64-256-256-10, batch 32 (forward, backward, SGD)", MLP,
                   torch.randn(32, 64), torch.randint(0, 10, (32,)))
    training_steps(quick, "training step of a linear layer + 40 pointwise ops, 64x256 (forward, backward, "
                   "SGD)", Pointwise, torch.randn(64, 256), torch.randn(64, 256))
    dynamic_batches(quick)
    if "--no-first-call" not in sys.argv:
        first_calls()
        hot_call_stalls()


if __name__ == "__main__":
    main()
