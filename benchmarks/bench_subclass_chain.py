"""Per-call time of a TwoTensor program: jitcore vs eager vs torch.compile(aot_eager) vs plain tensors.

The program is a chain of 50 elementwise ops plus a matmul on TwoTensor (8x8) inputs. Eager runs
``__torch_dispatch__`` in Python for every op; jitcore resolves it once while tracing and runs only
aten ops on the inner tensors; the last column is the same flattened chain written by hand on the
plain inner tensors (the floor). Targets (issue 5): jitcore <= 0.1x eager and <= 1.5x the flattened
chain. Ratios are measured in one run.

Run: python benchmarks/bench_subclass_chain.py
"""

from __future__ import annotations

import timeit
import warnings

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def chain(x, w):
    for _ in range(10):
        x = ((x + 1) * 0.5).sin().cos() - 0.25
    return x @ w


def flattened(a, b, wa, wb):
    for _ in range(10):
        a = ((a + 1) * 0.5).sin().cos() - 0.25
        b = ((b + 1) * 0.5).sin().cos() - 0.25
    return a @ wa, b @ wb


def per_call_us(fn, *args, number: int = 200, repeat: int = 7) -> float:
    fn(*args)
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    torch.set_num_threads(1)
    a, b, wa, wb = (torch.randn(8, 8) for _ in range(4))
    x, w = TwoTensor(a, b), TwoTensor(wa, wb)
    eager = per_call_us(chain, x, w)
    jitted = per_call_us(jitcore.jit(chain), x, w, number=2000)
    plain = per_call_us(flattened, a, b, wa, wb, number=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compiled = per_call_us(torch.compile(chain, backend="aot_eager"), x, w, number=2000)
        except Exception as exc:  # noqa: BLE001 - report, do not hide
            compiled = float("nan")
            print(f"torch.compile(aot_eager) failed: {type(exc).__name__}: {exc}")
    print(f"{'variant':34} {'us/call':>9} {'vs eager':>9} {'vs flattened':>13}")
    for name, t in [
        ("eager (TwoTensor)", eager),
        ("jitcore (TwoTensor)", jitted),
        ("torch.compile aot_eager (TwoTensor)", compiled),
        ("flattened chain, plain tensors", plain),
    ]:
        print(f"{name:34} {t:9.1f} {t / eager:9.3f} {t / plain:13.2f}")


if __name__ == "__main__":
    main()
