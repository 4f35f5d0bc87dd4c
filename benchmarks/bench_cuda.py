"""CUDA: per-call time of jitted programs on a GPU, in absolute microseconds and as ratios against eager
and torch.compile (inductor), measured in one run. Needs a CUDA device (exits with a message without
one). docs/executors.md, "CUDA", records a run.

Rows (each program's inputs live on the GPU; times include launching and waiting for the kernels):
- the 20-op elementwise chain of bench_executors.py on 4 elements (launch-bound: the cost is Python and
  kernel launches) and on 2**24 elements (memory-bound: one fused kernel reads and writes once);
- a TwoTensor chain of 50 elementwise ops and a matmul on 1024x1024 inner tensors (the subclass is
  resolved while tracing; the executed trace holds plain tensors);
- one training step (forward, backward, SGD) of an MLP 1024-4096-1024 on a batch of 256;
- a float8 linear layer (tests/executors/test_devices.py's Float8Weight: the activation quantized per
  tensor, then torch._scaled_mm) of a 4096x4096 weight on 4096 bf16 rows;
- the forward of a small Llama (transformers, 4 layers, hidden 512, batch 8, 256 tokens), without grad.
Variants: eager, torch.compile(backend="eager"), torch.compile (inductor), jitcore with the torch
executor and with the inductor executor. Per-call time: the best of interleaved rounds, each round a
synchronize, N calls, a synchronize. The first call of each variant (tracing and compiling) is printed.

Run: python benchmarks/bench_cuda.py [--quick] [--no-llama] [--device cpu]
     [--only chain,chain-big,two-tensor,training,float8,llama]
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.testing._internal.two_tensor import TwoTensor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "executors"))
from bench_executors import twenty_ops as chain  # noqa: E402
from bench_executors import two_tensor_chain, variants  # noqa: E402 - the programs of the CPU rows
from test_devices import Float8Weight, float8_linear  # noqa: E402 - the subclass the tests check

DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cuda"


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(call) -> float:
    synchronize()
    start = time.perf_counter()
    call()
    synchronize()
    return time.perf_counter() - start


def measure(title: str, named: list, call, number: int, repeat: int) -> None:
    """Prints the first-call time, the best per-call time and its ratios for each (name, fn)."""
    firsts = [timed(lambda fn=fn: call(fn)) for _, fn in named]
    for _, fn in named:
        for _ in range(3):
            call(fn)
    best = [float("inf")] * len(named)
    for _ in range(repeat):
        for i, (_, fn) in enumerate(named):
            best[i] = min(best[i], timed(lambda fn=fn: [call(fn) for _ in range(number)]) / number)
    eager, inductor = best[0], best[2]
    print(f"\n{title}")
    print(f"  {'variant':32} {'first call s':>12} {'us/call':>10} {'vs eager':>9} {'vs inductor':>12}")
    for (name, _), first, t in zip(named, firsts, best):
        print(f"  {name:32} {first:12.2f} {t * 1e6:10.1f} {t / eager:9.3f} {t / inductor:12.2f}", flush=True)


def training_step(quick: bool) -> None:
    torch.manual_seed(0)

    def make():
        return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                   torch.nn.Linear(4096, 1024)).to(DEVICE)

    base = make()
    x = torch.randn(256, 1024, device=DEVICE)
    y = torch.randn(256, 1024, device=DEVICE)
    named = []
    for name, fn in variants(lambda m, x, y: torch.nn.functional.mse_loss(m(x), y)):
        model = make()
        model.load_state_dict(base.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(fn=fn, model=model, opt=opt):
            opt.zero_grad(set_to_none=True)
            fn(model, x, y).backward()
            opt.step()

        named.append((name, step))
    measure("training step, MLP 1024-4096-1024, batch 256 (forward, backward, SGD)", named,
            lambda s: s(), number=10 if quick else 50, repeat=5)


def llama_forward(quick: bool) -> None:
    import transformers

    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1408,
                                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                                      max_position_embeddings=512)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(DEVICE).eval()
    ids = torch.randint(0, 4096, (8, 256), device=DEVICE)

    def forward(model, ids):
        return model(input_ids=ids).logits

    with torch.no_grad():
        measure("Llama forward (4 layers, hidden 512), batch 8 x 256 tokens, no grad",
                variants(forward), lambda fn: fn(model, ids), number=5 if quick else 20, repeat=5)


def main() -> None:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("bench_cuda.py: no CUDA device on this machine (--device cpu runs the same rows on the CPU)")
        return
    quick = "--quick" in sys.argv
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    n = 20 if quick else 100
    only = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
    rows = {"chain": lambda: chain_row(4, n, "launch-bound"),
            "chain-big": lambda: chain_row(2**24, n, "memory-bound"),
            "two-tensor": lambda: two_tensor_row(n), "training": lambda: training_step(quick),
            "float8": lambda: float8_row(n), "llama": lambda: llama_forward(quick)}
    skipped = {"llama"} if "--no-llama" in sys.argv else set()
    for row_name, row in rows.items():
        if row_name in only if only is not None else row_name not in skipped:
            row()


def chain_row(numel: int, n: int, kind: str) -> None:
    x = torch.randn(numel, device=DEVICE)
    measure(f"20-op elementwise chain, {numel} elements ({kind})", variants(chain),
            lambda fn: fn(x), number=n, repeat=5)


def two_tensor_row(n: int) -> None:
    x = TwoTensor(torch.randn(1024, 1024, device=DEVICE), torch.randn(1024, 1024, device=DEVICE))
    w = TwoTensor(torch.randn(1024, 1024, device=DEVICE), torch.randn(1024, 1024, device=DEVICE))
    measure("TwoTensor chain, 50 elementwise ops and a matmul, 1024x1024 inner tensors",
            variants(two_tensor_chain), lambda fn: fn(x, w), number=n, repeat=5)


def float8_row(n: int) -> None:
    weight = Float8Weight.quantize(torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16))
    bias = torch.randn(4096, device=DEVICE, dtype=torch.bfloat16)
    rows = torch.randn(4096, 4096, device=DEVICE, dtype=torch.bfloat16)
    measure("float8 linear (Float8Weight, torch._scaled_mm), 4096x4096 weight, 4096 bf16 rows",
            variants(float8_linear), lambda fn: fn(rows, weight, bias), number=n, repeat=5)

if __name__ == "__main__":
    main()
