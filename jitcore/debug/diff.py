"""``diff``: the first op of a trace whose value differs from the same op run eagerly.

The original function runs eagerly under a TorchDispatchMode that records every aten op's outputs
with the user line that called it. The trace runs in a fresh Debugger. Each top-level op's tensor
outputs are then matched, in order, to eager records from the same user line with the same shape
and dtype: a record with close values is a match (and later ops match only later records); when
records with that metadata exist but none is close, that op is the divergence.
Invariant: ops without tensor outputs, or with no eager record of their metadata on their line,
are skipped rather than guessed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore
from jitcore.ir import BoundSymbol, Proxy

__all__ = ["Divergence", "first_divergence", "record_eager"]

_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(jitcore.__file__) + os.sep)


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first op whose value under jitcore differs from eager."""

    index: int
    bound_symbol: BoundSymbol
    name: str
    max_abs_diff: float
    jit_value: torch.Tensor
    eager_value: torch.Tensor

    def __str__(self) -> str:
        where = ""
        if self.bound_symbol.source:
            frame = self.bound_symbol.source[-1]
            import linecache

            code = linecache.getline(frame.filename, frame.lineno).strip()
            where = f" from {frame.filename}:{frame.lineno} in {frame.function}: {code}"
        return (
            f"op {self.index} ({self.bound_symbol.symbol.id} -> {self.name}) diverges{where}; "
            f"max |jit - eager| = {self.max_abs_diff:.4g}"
        )


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[tuple[str, int] | None, torch.Tensor]] = []

    def __torch_dispatch__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        line = _user_line()
        for leaf in _tensors(out):
            self.records.append((line, leaf.detach().clone()))
        return out


def _user_line() -> tuple[str, int] | None:
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP_DIRS) and not name.startswith("<"):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def record_eager(fn: Any, args: tuple, kwargs: dict) -> list[tuple[tuple[str, int] | None, torch.Tensor]]:
    """Run ``fn`` eagerly; every aten op's tensor outputs with the user line that called it."""
    import copy

    args, kwargs = copy.deepcopy((args, kwargs))  # the eager run must not mutate the debugged inputs
    recorder = _Recorder()
    with recorder:
        fn(*args, **kwargs)
    return recorder.records


def first_divergence(debugger: Any) -> Divergence | None:
    """The first top-level op of ``debugger``'s trace whose value differs from eager, or None."""
    from jitcore.debug.debugger import Debugger

    fresh = (
        Debugger(trace=debugger.trace, inputs=[debugger.values.get(_name(a)) for a in debugger.trace.args])
        if debugger.entry is None
        else Debugger(debugger.jfn, debugger.args, debugger.kwargs, trace=debugger.trace)
    )
    original = getattr(debugger.jfn, "fn", None)
    if original is None:
        raise ValueError("diff needs the jitted function to run it eagerly")
    records = record_eager(original, debugger.args, debugger.kwargs)
    position = 0
    for index, bsym in enumerate(debugger.trace.bound_symbols):
        fresh.next()
        line = (bsym.source[-1].filename, bsym.source[-1].lineno) if bsym.source else None
        for proxy in _output_proxies(bsym.output):
            value = fresh.values.get(proxy.name)
            if not isinstance(value, torch.Tensor):
                continue
            candidates = [
                (i, v)
                for i, (where, v) in enumerate(records[position:], start=position)
                if where == line and v.shape == value.shape and v.dtype == value.dtype
            ]
            if not candidates:
                continue
            close = [i for i, v in candidates if _close(v, value.detach())]
            if close:
                position = close[0] + 1
                continue
            _i, eager = candidates[0]
            diff = (value.detach().double() - eager.double()).abs().max().item() if value.numel() else 0.0
            # (bool and integer values are compared exactly; their difference is shown as a number too)
            return Divergence(index, bsym, proxy.name, diff, value, eager)
    return None


def _close(eager: torch.Tensor, jit: torch.Tensor) -> bool:
    if eager.is_floating_point() or eager.is_complex():
        return torch.allclose(eager, jit, rtol=1e-4, atol=1e-5, equal_nan=True)
    return torch.equal(eager, jit)


def _name(param: Any) -> str:
    return param.name if isinstance(param, Proxy) else str(param)


def _output_proxies(value: Any) -> list[Proxy]:
    if isinstance(value, Proxy):
        return [value]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in _output_proxies(v)]
    return []
