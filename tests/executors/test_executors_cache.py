"""Compiled regions are cached on disk by inductor's FX graph cache and AOTAutograd's cache: a second
process's first call neither traces a region with AOTAutograd nor compiles it again (counted by
inductor's counters, never timed), and regions that differ only in a constant baked into the code
(``x * 2`` vs ``x * 3``) never share an entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROGRAM = """
import json, sys, torch, jitcore
from torch._dynamo.utils import counters
x = torch.linspace(-1, 1, 7)
report = []
for scale in map(float, sys.argv[1:]):
    def f(x):
        return ((x * scale + 1).sin() * 2).cos()
    counters.clear()
    ok = torch.allclose(jitcore.jit(f, executors=("inductor", "torch"))(x), f(x))
    report.append({"ok": ok, **counters["inductor"]})
print(json.dumps(report))
"""


def _run(cache: Path, *scales: float) -> list[dict]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    command = [sys.executable, "-c", PROGRAM, *map(str, scales)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_hits_the_disk_cache_and_constants_are_keyed(tmp_path: Path) -> None:
    (first,) = _run(tmp_path, 2.0)
    again, other = _run(tmp_path, 2.0, 3.0)
    assert first == {"ok": True, "fxgraph_cache_miss": 1}, first
    assert again == {"ok": True, "fxgraph_cache_hit": 1}, again
    assert other == {"ok": True, "fxgraph_cache_miss": 1}, other
    assert any((tmp_path / "fxgraph").iterdir())


TRAINING = """
import json, torch, jitcore
from torch._dynamo.utils import counters
torch.manual_seed(0)
w = torch.randn(8, 4, requires_grad=True)

def loss(x):
    return (torch.nn.functional.gelu(x @ w).view(-1, 2) * 2).sum()

def chain(x):
    return ((x.sin() * 2).cos() + 1).view(x.shape[0], -1).sum(1)

counters.clear()
fused = jitcore.jit(loss, executors=("inductor", "torch"))  # the grad transform: forward, backward
fused(torch.randn(3, 8)).backward()
dynamic = jitcore.jit(loss, executors=("inductor", "torch"), dynamic=True)  # under torch's autograd
dynamic(torch.randn(5, 8)).backward()
chained = jitcore.jit(chain, executors=("inductor", "torch"), dynamic=True)
x = torch.randn(6, 3, 4)
ok = torch.allclose(chained(x), chain(x))
print(json.dumps({"ok": ok, "aot": dict(counters["aot_autograd"]), "inductor": {
    k: v for k, v in counters["inductor"].items() if "cache" in k}}))
"""


def test_a_second_process_hits_aotautograds_cache_for_grad_and_symbolic_regions(tmp_path: Path) -> None:
    """The grad transform's forward and backward, a symbolic region under torch's autograd and a
    symbolic region with a ``view`` method: a second process loads every one from AOTAutograd's
    cache (no AOT tracing) and inductor's FX graph cache (no C++ compile)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", TRAINING], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["ok"] and second["ok"]
    assert first["aot"].get("autograd_cache_miss") == 4 and "autograd_cache_bypass" not in first["aot"], first
    assert second["aot"].get("autograd_cache_hit") == 4, second
    assert "autograd_cache_miss" not in second["aot"] and "autograd_cache_bypass" not in second["aot"], second
    compiled = second["inductor"]
    assert compiled.get("fxgraph_cache_hit", 0) >= 4 and "fxgraph_cache_miss" not in compiled, compiled
    assert any((tmp_path / "aotautograd").iterdir())
