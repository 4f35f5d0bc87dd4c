"""Per-call time of programs on subclasses written by others: jitcore vs eager vs torch.compile(aot_eager).

- an MLP (64 -> 128 -> 32, batch 8) quantized with torchao's ``Int8WeightOnlyConfig``;
- a 20-op elementwise chain on a ``__torch_function__`` subclass that counts its calls;
- a 20-op elementwise chain on ``torch.testing._internal.logging_tensor.LoggingTensor`` (a wrapper
  subclass without ``__tensor_flatten__``);
- a DTensor matmul + redistribute (``x @ w`` with x Shard(0), w Replicate, then to Replicate and
  ``full_tensor()``), world size 1 (gloo, in this process): eager runs DTensor's dispatch and sharding
  propagation per op; a cached jitcore call runs the local ops only;
- scaled dot-product attention over a nested jagged tensor (4 sequences of 3-17 tokens, 4 heads of
  16): eager's CPU math path splits by the offsets' values into a strided nested tensor; a cached
  jitcore call checks the lengths and runs the math per sequence on plain tensors.
Eager runs the subclasses' Python code on every op; jitcore resolves it while tracing and a cached
call runs the recorded ops on plain tensors. Ratios are measured in one run (machines are shared:
compare the ratios, not the absolute times).

Run: python benchmarks/bench_foreign_subclasses.py
"""

from __future__ import annotations

import timeit
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.testing._internal.logging_tensor import LoggingTensor

import jitcore

warnings.filterwarnings("ignore")


class Counted(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def chain(x: torch.Tensor) -> torch.Tensor:
    for _ in range(5):
        x = ((x + 1) * 0.5).sin() - 0.25
    return x


def dtensor_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = (x @ w).relu() + 1
    return y.redistribute(y.device_mesh, [Replicate()]).full_tensor()


def njt_attention(q: torch.Tensor) -> torch.Tensor:
    q = q.transpose(1, 2)
    return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2) * 2


def per_call_us(fn: Callable[..., Any], *args: Any, number: int = 200, repeat: int = 5) -> float:
    fn(*args)
    fn(*args)
    return min(timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)) / number * 1e6


def compiled_us(fn: Callable[..., Any], *args: Any, number: int = 200) -> float:
    try:
        return per_call_us(torch.compile(fn, backend="aot_eager"), *args, number=number)
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        print(f"  torch.compile(aot_eager) failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return float("nan")


def main() -> None:
    torch.set_num_threads(1)
    import torchao.quantization as Q

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    Q.quantize_(model, Q.Int8WeightOnlyConfig())
    x = torch.randn(8, 64)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    xs = distribute_tensor(torch.randn(16, 16), mesh, [Shard(0)])
    ws = distribute_tensor(torch.randn(16, 16), mesh, [Replicate()])
    njt = torch.nested.nested_tensor([torch.randn(n, 4, 16) for n in (3, 17, 9, 12)], layout=torch.jagged)
    programs = [
        ("torchao int8 weight-only MLP", model, (x,)),
        ("__torch_function__ subclass, 20 ops", chain, (torch.randn(16, 16).as_subclass(Counted),)),
        ("LoggingTensor (no flatten), 20 ops", chain, (LoggingTensor(torch.randn(16, 16)),)),
        ("DTensor matmul + redistribute", dtensor_matmul, (xs, ws)),
        ("NJT SDPA (4 sequences)", njt_attention, (njt,)),
    ]
    print(f"{'program':38} {'eager us':>9} {'jitcore us':>11} {'aot_eager us':>13} "
          f"{'jit/eager':>10} {'jit/aot':>8}")
    for name, fn, args in programs:
        eager = per_call_us(fn, *args)
        jitted = per_call_us(jitcore.jit(fn), *args, number=1000)
        compiled = compiled_us(fn, *args)
        print(f"{name:38} {eager:9.1f} {jitted:11.1f} {compiled:13.1f} "
              f"{jitted / eager:9.2f}x {jitted / compiled:7.2f}x")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
