"""Compiled regions are cached on disk by inductor's FX graph cache: a second process's first call
does not compile again, and regions that differ only in a constant baked into the code (``x * 2``
vs ``x * 3``) never share an entry."""

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
