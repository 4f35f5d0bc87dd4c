"""Cached calls of programs with Python side effects (issue 14): read-modify-write counters and logs on the
caller's objects, measured against eager in one run.

Prints, for each program, the per-call time of eager PyTorch and of jitcore's cached call (after 110 warm
calls and ``wait_for_compiles``), their ratio, and how many traces jitcore made over all its calls (the goal:
one, whatever the counters' values). Each program's state is its own for eager and for jitcore; the two are
compared after the run (a wrong answer would make the numbers meaningless).

Run: python benchmarks/bench_side_effects.py
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
import timeit
import types

import torch

import jitcore
from jitcore.executors.background import wait_for_compiles


class Trainer:
    def __init__(self) -> None:
        self.steps = 0
        self.losses: list = []


def attribute_counter(s: Trainer, x: torch.Tensor) -> torch.Tensor:
    s.steps += 1
    y = (x * 2).sin().sum()
    s.losses.append(y)
    return y * s.steps


def namespace_counter(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.n += 1
    s.log.append(x.sum())
    return x * 2


@dataclasses.dataclass
class State:
    step: int = 0
    losses: list = dataclasses.field(default_factory=list)


def dataclass_counter(st: State, x: torch.Tensor) -> torch.Tensor:
    st.step += 1
    st.losses.append(x.mean())
    return x + st.step


def module_counter(m: types.ModuleType, x: torch.Tensor) -> torch.Tensor:
    m.count += 1
    return x * m.count


def dict_counter(d: dict, x: torch.Tensor) -> torch.Tensor:
    d["n"] += 1
    d["total"] = d["total"] + 0.5
    return x * d["n"]


def _record(log: list, v: torch.Tensor) -> None:
    log.append(v)


def helper_log(log: list, x: torch.Tensor) -> torch.Tensor:
    _record(log, x.sum())
    return x * 2


@functools.lru_cache
def _table(n: int) -> float:
    return float(n) * 0.5


def lru_counts(log: list, x: torch.Tensor) -> torch.Tensor:
    y = x * _table(4)
    log.append(_table.cache_info().hits)
    return y


def _module() -> types.ModuleType:
    m = types.ModuleType("bench_side_effects_state")
    m.count = 0
    return m


PROGRAMS = [
    ("attribute counter + log", attribute_counter, Trainer),
    ("namespace counter + log", namespace_counter, lambda: types.SimpleNamespace(n=0, log=[])),
    ("dataclass counter + log", dataclass_counter, State),
    ("module attribute counter", module_counter, _module),
    ("dict counters", dict_counter, lambda: {"n": 0, "total": 0.0}),
    ("log through a helper", helper_log, list),
    ("lru_cache + cache_info()", lru_counts, list),  # one cache for both: its logs' lengths compared
]


def per_call_us(fn, state, x, number: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        best = min(best, timeit.timeit(lambda: fn(state, x), number=number))  # noqa: B023 - timed now
    return best / number * 1e6


def main(number: int = 2000, repeat: int = 7) -> None:
    x = torch.randn(16)
    print(f"{'program':26} {'eager us':>9} {'jitcore us':>11} {'ratio':>6} {'traces':>7}")
    for name, fn, make in PROGRAMS:
        eager_state, jit_state = make(), make()
        jf = jitcore.jit(fn)
        for _ in range(110):  # past fuse_after: the entry is hot and lowered
            fn(eager_state, x)
            jf(jit_state, x)
        wait_for_compiles(600.0)
        eager = per_call_us(fn, eager_state, x, number, repeat)
        jitted = per_call_us(jf, jit_state, x, number, repeat)
        same = _view(eager_state) == _view(jit_state) if fn is not lru_counts \
            else len(eager_state) == len(jit_state)
        note = "" if same else "  (state differs from eager's!)"
        traces = jitcore.cache_misses(jf)
        print(f"{name:26} {eager:9.1f} {jitted:11.1f} {jitted / eager:6.2f} {traces:7}{note}")


def _view(state):
    """Numbers and lengths of the state (tensors by count only: the logs grow the same way)."""
    if isinstance(state, types.ModuleType):
        return state.count
    if isinstance(state, list):
        return [v if type(v) in (int, float) else type(v).__name__ for v in state]
    if isinstance(state, dict):
        return copy.copy(state)
    return {k: _view(v) if isinstance(v, list) else v for k, v in vars(state).items()} \
        if hasattr(state, "__dict__") else dataclasses.asdict(state)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
