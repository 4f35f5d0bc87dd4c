"""First calls and cached calls of small programs: jitcore against torch.compile, ratios from one run.

For tiny Hugging Face models built from configs (Llama, GPT-2, BERT: 2 layers, hidden size 32, as
tests/jit/test_jit_real_models.py builds them, and a 4-layer Llama; forward with grad, as a user calls
``model(ids)``), a 50-op chain over torch's TwoTensor subclass and a 1000-op chain of plain tensors
(1,500 records: how the cost of a trace grows with its length), prints:
- the first call (jitcore: interpretation, the grad transform and its executor's compile;
  torch.compile(backend="eager"): Dynamo and AOTAutograd), thread CPU time of one call, each in a new
  process (this script run with ``--first``) after the imports, the program's construction, one
  eager call (a module's lazy imports) and a full garbage collection, so that neither JIT starts with
  caches the other lacks, and neither pays for the one collection of the oldest generation that the
  imports' ~400,000 objects leave pending (0.18-0.21 s on the project's machine, which otherwise falls in
  whichever first call crosses CPython's threshold: both JITs' calls of the 2-layer models did);
- the cached call (best of interleaved rounds of thread CPU time), with ratios against eager's.
jitcore runs on ``executor="torch"`` here (its default runs the same until an entry is hot).
``--inductor`` adds torch.compile's default backend's first and cached call (tens of seconds each).

Run: python benchmarks/bench_first_calls.py [--inductor]
"""

from __future__ import annotations

import argparse
import gc
import math
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import transformers
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

VOCAB = 64


def _llama(layers: int = 2) -> torch.nn.Module:
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def _gpt2() -> torch.nn.Module:
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0))


def _bert() -> torch.nn.Module:
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64))


def _chain(x: torch.Tensor, ops: int = 50) -> torch.Tensor:
    for i in range(ops):
        x = x * 1.01 + 0.5 if i % 2 else x.sin()
    return x


def _programs() -> list[tuple[str, Callable[[], Any], Callable[[], tuple]]]:
    """(name, a new callable, its arguments): each call of the maker makes a new instance."""
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0))
    two = TwoTensor(torch.randn(8), torch.randn(8))

    def model(make: Callable[[], torch.nn.Module]) -> Callable[[], Any]:
        def new() -> torch.nn.Module:
            torch.manual_seed(0)
            return make().eval()
        return new

    def chain(ops: int = 50) -> Callable[[], Callable[..., Any]]:
        return lambda: lambda x: _chain(x, ops)  # a new function object: a new jit and a new Dynamo frame

    plain = torch.randn(8)
    return [("HF Llama, 2 layers", model(_llama), lambda: (ids,)),
            ("HF Llama, 4 layers", model(lambda: _llama(4)), lambda: (ids,)),
            ("HF GPT-2, 2 layers", model(_gpt2), lambda: (ids,)),
            ("HF BERT, 2 layers", model(_bert), lambda: (ids,)),
            ("TwoTensor, 50-op chain", chain(), lambda: (two,)),
            ("plain, 1000-op chain", chain(1000), lambda: (plain,))]


def _jits(inductor: bool) -> dict[str, Callable[[Any], Any]]:
    jits: dict[str, Callable[[Any], Any]] = {
        "jitcore": lambda f: jitcore.jit(f, executor="torch"),
        "tc(eager)": lambda f: torch.compile(f, backend="eager"),
    }
    if inductor:
        jits["tc(inductor)"] = torch.compile
    return jits


def _first_here(index: int, jit_name: str) -> None:
    """``--first``: this process's first call of program ``index`` under ``jit_name``, printed."""
    _, new, arguments = _programs()[index]
    program, args = new(), arguments()
    program(*args)  # eager: a model's lazy imports
    jitted = _jits(True)[jit_name](program)
    gc.collect()  # the collection of the oldest generation the imports left pending: not the first call's
    start = time.thread_time()
    jitted(*args)
    print(time.thread_time() - start)


def _first(index: int, jit_name: str) -> float:
    """The first call of program ``index`` under ``jit_name``, in a new process."""
    done = subprocess.run([sys.executable, __file__, "--first", str(index), jit_name],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def _cached(fns: dict[str, Callable[[], Any]], rounds: int = 15, number: int = 10) -> dict[str, float]:
    """Best per-call thread CPU time of each, rounds interleaved."""
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.thread_time() - start) / number)
    return best


def _output(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else value[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inductor", action="store_true", help="also torch.compile's default backend")
    parser.add_argument("--first", nargs=2, metavar=("PROGRAM", "JIT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = 64
    if options.first:
        _first_here(int(options.first[0]), options.first[1])
        return
    jits = _jits(options.inductor)
    print(f"{'program':26s} {'call':7s} {'eager':>10s} " + " ".join(f"{n:>13s}" for n in jits)
          + "   jitcore/" + " jitcore/".join(n for n in ("eager", *list(jits)[1:])))
    for index, (name, new, arguments) in enumerate(_programs()):
        _row(index, name, new, arguments(), jits)


def _row(index: int, name: str, new: Callable[[], Any], args: tuple, jits: dict[str, Callable[[Any], Any]]
         ) -> None:
    """One program's first and cached calls under each JIT, printed as two lines."""
    firsts = {jit_name: _first(index, jit_name) for jit_name in jits}
    eager = new()
    called = {jit_name: make(new()) for jit_name, make in jits.items()}
    expected = _output(eager(*args))
    for jit_name, f in called.items():
        torch.testing.assert_close(_output(f(*args)), expected, msg=lambda m, n=jit_name: f"{n}: {m}")
    cached = _cached({"eager": lambda: eager(*args)} | {n: (lambda f=f: f(*args)) for n, f in called.items()})
    others = list(jits)[1:]
    print(f"{name:26s} {'first':7s} {'':>10s} " + " ".join(f"{firsts[n]:12.3f}s" for n in jits)
          + f"   {'':>8s} " + " ".join(f"{firsts['jitcore'] / firsts[n]:8.2f}x" for n in others))
    print(f"{'':26s} {'cached':7s} {cached['eager'] * 1e6:8.1f}us "
          + " ".join(f"{cached[n] * 1e6:11.1f}us" for n in jits)
          + f"   {cached['jitcore'] / cached['eager']:7.2f}x "
          + " ".join(f"{cached['jitcore'] / cached[n]:8.2f}x" for n in others))

if __name__ == "__main__":
    main()
