"""Dynamic shapes on the 2-layer Llama-style decoder (benchmarks/bench_module_llama.py), eval, no_grad.

Printed, from one run, for eager PyTorch, ``jitcore.jit(model)`` (``dynamic=None``: automatic) and
``torch.compile(model, backend="eager")`` (its default, automatic dynamic too):
- the cached call at sequence length 64, once each has seen two lengths (so both run their symbolic
  entry), with ratios against eager;
- the first call (length 16), and the first call at a second length (the symbolic trace);
- the total time of 100 calls with random sequence lengths in 1..512 on a fresh model wrapper,
  tracing included, with the number of cache entries jitcore made;
- that every result equals eager's.
Times are CPU time of this process (the machine is shared).

Run: python benchmarks/bench_dynamic_shapes.py
"""

from __future__ import annotations

import random
import time
import warnings

import torch
from bench_module_llama import Decoder, per_call_us

import jitcore

_RNG = random.Random(0)
LENGTHS = [_RNG.randint(1, 512) for _ in range(100)]


def tokens(length: int, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(length))


def timed(fn, *args) -> tuple[float, object]:
    start = time.process_time()
    out = fn(*args)
    return time.process_time() - start, out


def random_lengths(fn) -> tuple[float, list[torch.Tensor]]:
    inputs = [tokens(length) for length in LENGTHS]
    start = time.process_time()
    outs = [fn(x) for x in inputs]
    return time.process_time() - start, outs


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # CPU time of one thread: other jobs on a shared machine count less
    torch.manual_seed(0)
    model = Decoder(max_len=512).eval()
    with torch.no_grad():
        jitted = jitcore.jit(model)
        compiled = torch.compile(model, backend="eager")
        first_j, out = timed(jitted, tokens(16))
        torch.testing.assert_close(out, model(tokens(16)))
        first_c, _ = timed(compiled, tokens(16))
        second_j, out = timed(jitted, tokens(40))
        torch.testing.assert_close(out, model(tokens(40)))
        second_c, _ = timed(compiled, tokens(40))
        eager, jit_us, compile_us = per_call_us([model, jitted, compiled], tokens(64), number=20, repeat=5)
        print("2-layer decoder, eval, no_grad, batch 2 (CPU time)")
        print(f"cached call, length 64:  eager {eager:8.0f} us"
              f" | jitcore {jit_us:8.0f} us {jit_us / eager:5.2f}x"
              f" | torch.compile {compile_us:8.0f} us {compile_us / eager:5.2f}x")
        print(f"first call (length 16):  jitcore {first_j:6.2f} s | torch.compile {first_c:6.2f} s"
              f" | jitcore/compile {first_j / first_c:5.2f}x")
        print(f"second length (40):      jitcore {second_j:6.2f} s | torch.compile {second_c:6.2f} s"
              f" | jitcore/compile {second_j / second_c:5.2f}x")

        eager_total, expected = random_lengths(model)
        fresh_j = jitcore.jit(model)
        jit_total, outs = random_lengths(fresh_j)
        for out, ref in zip(outs, expected):
            torch.testing.assert_close(out, ref)
        torch._dynamo.reset()
        compile_total, outs = random_lengths(torch.compile(model, backend="eager"))
        for out, ref in zip(outs, expected):
            torch.testing.assert_close(out, ref)
        print("100 calls, random lengths 1..512 (tracing included, results checked against eager):")
        print(f"  eager {eager_total:6.2f} s | jitcore {jit_total:6.2f} s {jit_total / eager_total:5.2f}x"
              f" ({len(fresh_j.jitted_forward.entries)} cache entries)"
              f" | torch.compile {compile_total:6.2f} s {compile_total / eager_total:5.2f}x")


if __name__ == "__main__":
    main()
