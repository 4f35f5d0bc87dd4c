"""One training step of the transformer block: eager vs jitcore.jit vs torch.compile(backend="aot_eager").

A step is forward, ``loss.backward()`` and an AdamW update, on a pre-norm transformer block (the
``Block`` of tests/jit/test_jit_programs.py, dropout active) at two sizes: a small one where
per-op Python overhead dominates, and a larger one where the kernels do. Times are CPU time per
step (process time: other processes on a busy machine do not count), the best of several rounds,
and are printed as ratios to eager, all measured in this one run. ``aot_eager`` is torch.compile's
AOTAutograd forward/backward split run by eager kernels: the closest thing in torch to what
jitcore does. Also printed: how many values the forward saves for the backward under each, and the
whole step jitted (``jitcore.jit(step)``: forward, backward and AdamW update in one trace,
jitcore/jit/autograd_calls.py) beside torch.compile of the whole step (which breaks its graph at
``backward()``).

Run: python benchmarks/bench_training_step.py [--quick]
"""

from __future__ import annotations

import copy
import math
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

import jitcore


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(0.1)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.drop(self.mlp(self.ln2(x)))


def make_step(model: nn.Module, forward):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def per_step_ms(step, x, y, iters: int, rounds: int) -> float:
    for _ in range(3):
        step(x, y)  # warm-up: tracing / compilation happen here
    best = math.inf
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(iters):
            step(x, y)
        best = min(best, (time.process_time() - start) / iters)
    return best * 1e3


def main(quick: bool = False) -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    sizes = [(2, 16, 64), (8, 128, 256)]
    iters, rounds = (5, 2) if quick else (20, 5)
    print(
        f"torch {torch.__version__}, 1 thread; CPU ms per training step (best of {rounds} x {iters}), "
        f"ratio to eager"
    )
    print(f"{'batch x seq x dim':>20} {'eager':>9} {'jitcore':>16} {'aot_eager':>16} "
          f"{'jit(step)':>16} {'compile(step)':>16}  saved (jitcore)")
    for b, t, dim in sizes:
        base = Block(dim)
        x, y = torch.randn(b, t, dim), torch.randn(b, t, dim)
        eager_model, jit_model, aot_model = base, copy.deepcopy(base), copy.deepcopy(base)
        jfn = jitcore.jit(jit_model)
        compiled = torch.compile(aot_model, backend="aot_eager")
        eager = per_step_ms(make_step(eager_model, eager_model), x, y, iters, rounds)
        jitted = per_step_ms(make_step(jit_model, jfn), x, y, iters, rounds)
        aot = per_step_ms(make_step(aot_model, compiled), x, y, iters, rounds)
        whole_model, whole_aot_model = copy.deepcopy(base), copy.deepcopy(base)
        whole = jitcore.jit(make_step(whole_model, whole_model))
        whole_ms = per_step_ms(whole, x, y, iters, rounds)
        compiled_step = torch.compile(make_step(whole_aot_model, whole_aot_model), backend="aot_eager")
        whole_aot = per_step_ms(compiled_step, x, y, iters, rounds)
        saved = len(jitcore.last_traces(jfn)[-1].output[1])
        print(f"{f'{b} x {t} x {dim}':>20} {eager:9.3f} {jitted:9.3f} ({jitted / eager:4.2f}x) "
              f"{aot:9.3f} ({aot / eager:4.2f}x) {whole_ms:9.3f} ({whole_ms / eager:4.2f}x) "
              f"{whole_aot:9.3f} ({whole_aot / eager:4.2f}x)  {saved}")
        assert jitcore.cache_misses(jfn) == 1, "the training step must not retrace"
        # the whole step: no gradients yet, gradients, AdamW's state made by the first update
        assert jitcore.cache_misses(whole) <= 3, jitcore.miss_reasons(whole)


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
