"""jitcore's default executors on small CPU programs, against eager, torch.compile(backend="eager"),
torch.compile (inductor) and jitcore's torch executor alone, as ratios from one run.

Programs: the 20-op elementwise chain (4 elements) and the TwoTensor chain (50 ops and a matmul,
8x8) of bench_executors.py, its MLP 64-256-256-10 training step (forward, backward, SGD; batch 32),
and a tiny Hugging Face Llama (2 layers, dim 64) forward in eval mode under no_grad. ``jitcore
(default)`` is ``jitcore.jit(fn)``: the torch executor first, lowered with inductor in the background
once hot (run 100) and kept only where its trial measures it faster (docs/executors.md, "The default
policy"). Per-call times are the best of interleaved rounds of thread CPU time, one thread, after 110
warm calls, ``wait_for_compiles`` and 160 more (past the trial); the first call is the first of each
variant in this process (later variants reuse what earlier ones warmed, inductor's caches included).
The trial's decision is printed from the ``jitcore.executors`` log.

Run: python benchmarks/bench_default_executors.py [chain] [twotensor] [mlp] [llama]
"""

from __future__ import annotations

import logging
import math
import sys
import time
import timeit
import warnings

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.executors import wait_for_compiles

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from bench_executors import MLP, twenty_ops, two_tensor_chain  # noqa: E402 - a sibling script

VARIANTS = ("eager", "tc(eager)", "tc(inductor)", "jitcore torch", "jitcore default")


def _wrappers():
    return (lambda f: f, lambda f: torch.compile(f, backend="eager"), torch.compile,
            lambda f: jitcore.jit(f, executor="torch"), jitcore.jit)


def _functions(fn, *args):
    wrapped = [wrap(fn) for wrap in _wrappers()]
    return [lambda f=f: f(*args) for f in wrapped]


def _training_steps():
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    torch.manual_seed(0)
    base = MLP()
    steps = []
    for wrap in _wrappers():
        model = MLP()
        model.load_state_dict(base.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        f = wrap(model)

        def step(f=f, opt=opt):
            opt.zero_grad(set_to_none=True)
            f(x, y).backward()
            opt.step()

        steps.append(step)
    return steps


def _llama_calls():
    import transformers

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    calls = []
    for wrap in _wrappers():
        torch.manual_seed(0)
        model = wrap(transformers.LlamaForCausalLM(config).eval())

        def call(model=model):
            with torch.no_grad():
                return model(ids).logits

        calls.append(call)
    return calls


def program(name: str) -> list:
    if name == "chain":
        return _functions(twenty_ops, torch.randn(4))
    if name == "twotensor":
        def two():
            return TwoTensor(torch.randn(8, 8), torch.randn(8, 8))
        return _functions(two_tensor_chain, two(), two())
    if name == "mlp":
        return _training_steps()
    return _llama_calls()


class _Decisions(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "keeps" in message:
            self.lines.append(message)


def measure(name: str, decisions: _Decisions) -> None:
    fns = program(name)
    first = []
    for fn in fns:
        start = time.perf_counter()
        fn()
        first.append(time.perf_counter() - start)
    for fn in fns:
        for _ in range(110):
            fn()
    wait_for_compiles(900.0)
    for _ in range(4):
        for fn in fns:
            for _ in range(40):
                fn()
    wait_for_compiles(900.0)
    number = 5 if name in ("llama", "mlp") else 50
    best = [math.inf] * len(fns)
    for _ in range(15):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(fn, number=number, timer=time.thread_time) / number)
    eager, tc_eager, tc_inductor = best[0], best[1], best[2]
    print(f"\n{name}")
    print(f"  {'variant':18} {'us/call':>10} {'vs eager':>9} {'vs tc(eager)':>13} {'vs tc(ind)':>11}"
          f" {'1st call':>9}")
    for variant, t, f in zip(VARIANTS, best, first, strict=True):
        print(f"  {variant:18} {t * 1e6:10.1f} {t / eager:9.3f} {t / tc_eager:13.3f} {t / tc_inductor:11.3f} "
              f"{f:8.2f}s")
    print("  the default's trial: " + ("; ".join(decisions.lines) or "no lowering"))
    decisions.lines.clear()
    sys.stdout.flush()


def main() -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    torch._dynamo.config.cache_size_limit = 64
    decisions = _Decisions()
    log = logging.getLogger("jitcore.executors")
    log.setLevel(logging.INFO)
    log.addHandler(decisions)
    log.propagate = False
    for name in sys.argv[1:] or ["chain", "twotensor", "mlp", "llama"]:
        measure(name, decisions)


if __name__ == "__main__":
    main()
