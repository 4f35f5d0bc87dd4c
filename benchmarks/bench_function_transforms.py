"""torch.func's transforms inside a jitted function (traced since they run on the traced tensors:
Note [Function transforms run on the traced tensors], jitcore/jit/function_transforms.py), in one run.

1. A DP-SGD step's gradients: per-sample gradients of a 10-32-3 MLP (``vmap(grad(loss))`` over a
   ``functional_call``), each sample's gradient clipped to norm 1, then averaged; batch 16.
2. Surface normals of an SDF network: ``vmap(jacrev(mlp))`` over 64 points, MLP 3-64-1.
3. An ensemble of 4 linear models (``stack_module_state``) over one batch, ``vmap`` over the models.

For each: the best cached-call time (CPU) of eager, ``torch.compile(backend="eager")`` (Dynamo's
capture of the transform, no inductor), and jitcore with ``executor="torch"`` (no fusion), with ratios
to eager. Before these transforms were traced, jitcore ran every such call eagerly (1.0x and over).

Run: python benchmarks/bench_function_transforms.py
"""

from __future__ import annotations

import copy
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, stack_module_state, vmap

import jitcore

torch.manual_seed(0)
MLP = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 3))
SDF = nn.Sequential(nn.Linear(3, 64), nn.SiLU(), nn.Linear(64, 1))
MODELS = [nn.Linear(8, 4) for _ in range(4)]
BASE = copy.deepcopy(MODELS[0]).to("meta")


def dp_gradients(params, x, y):
    def loss(p, xi, yi):
        return F.cross_entropy(functional_call(MLP, p, (xi[None],)), yi[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    scale = (1.0 / norms).clamp(max=1.0)
    return {k: (g * scale.view(-1, *[1] * (g.dim() - 1))).mean(0) for k, g in grads.items()}


def sdf_normals(points):
    return vmap(jacrev(lambda q: SDF(q).squeeze(-1)))(points)


def ensemble(params, buffers, x):
    def one(p, b, x):
        return functional_call(BASE, (p, b), (x,))

    return vmap(one, in_dims=(0, 0, None))(params, buffers, x)


def best(fn, args, repeat: int = 30) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    params = {k: v.detach() for k, v in MLP.named_parameters()}
    stacked = stack_module_state(MODELS)
    programs = [
        ("DP-SGD per-sample gradients", dp_gradients,
         (params, torch.randn(16, 10), torch.randint(0, 3, (16,)))),
        ("SDF normals vmap(jacrev)", sdf_normals, (torch.randn(64, 3),)),
        ("ensemble of 4 models", ensemble, (*stacked, torch.randn(32, 8))),
    ]
    print(f"{'program':30} {'eager us':>10} {'tc(eager)':>10} {'jitcore':>10}   (ratios to eager)")
    for name, fn, args in programs:
        torch._dynamo.reset()  # noqa: SLF001
        eager = best(fn, args)
        compiled = best(torch.compile(fn, backend="eager"), args)
        jitted = jitcore.jit(fn, executor="torch")
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # an eager entry would warn
            jit_time = best(jitted, args)
        assert jitted.fallback_reason is None
        print(f"{name:30} {eager * 1e6:10.0f} {compiled / eager:9.2f}x {jit_time / eager:9.2f}x")


if __name__ == "__main__":
    main()
