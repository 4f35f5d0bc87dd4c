"""``diff``: the first op of a trace whose value differs from the same op run eagerly.

The original function runs eagerly under a TorchDispatchMode that records every aten op's outputs
with the stack of lines (outside jitcore) that called it. The trace then runs in a fresh Debugger,
from the same RNG state as the eager run (random ops draw the same numbers; the state is restored
afterwards). Each top-level op's tensor outputs are matched, in order, to eager records made from
the op's user line with the same shape and dtype: a record with close values is a match (and later
ops match only later records); when records with that metadata exist but none is close, that op is
the divergence; when there is none at all, the op has no eager counterpart (the trace no longer
matches the program: code changed since it was traced) and is reported as such.
Invariants: ops without tensor outputs, and ops that return one of their inputs unchanged
(``x.to(x.dtype)``), are skipped; ``breakpoint()`` in the program does not stop the eager run.

Through an execution trace (fused regions as calls, docs/executors.md): each output of a lowered
call is matched at the user line of the subsymbol that makes it; ``region_divergence`` compares a
lowered call's outputs with its subsymbols run one by one on the torch executor (the same ops
eager runs), on the same inputs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.diagnostics import JITCORE_DIR
from jitcore.executors import is_lowered
from jitcore.ir import BoundSymbol, Proxy, Trace, proxies_in
from jitcore.langctx.thread_state import rng_state, set_rng_state

__all__ = ["Divergence", "OutputDiff", "RegionDiff", "first_divergence", "record_eager", "region_divergence"]


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first op whose value under jitcore differs from eager, or that eager never ran.

    ``eager_value`` is None (and ``max_abs_diff`` nan) for an op with no eager counterpart.
    """

    index: int
    bound_symbol: BoundSymbol
    name: str
    max_abs_diff: float
    jit_value: torch.Tensor
    eager_value: torch.Tensor | None

    @property
    def unmatched(self) -> bool:
        """Whether eager made no tensor of this op's metadata at its line (a stale trace)."""
        return self.eager_value is None

    def __str__(self) -> str:
        where = ""
        if self.bound_symbol.source:
            frame = self.bound_symbol.source[-1]
            import linecache

            code = linecache.getline(frame.filename, frame.lineno).strip()
            where = f" from {frame.filename}:{frame.lineno} in {frame.function}: {code}"
        op = f"op {self.index} ({self.bound_symbol.symbol.id} -> {self.name})"
        if self.unmatched:
            meta = f"{tuple(self.jit_value.shape)} {self.jit_value.dtype}"
            return (
                f"{op}{where} has no eager counterpart: the eager run made no {meta} tensor at that line. "
                "The trace no longer matches the program (was code changed, or a class or function "
                "swapped, since it was traced?); 'restart' after retracing, or compare from here on with care"
            )
        return f"{op} diverges{where}; max |jit - eager| = {self.max_abs_diff:.4g}"


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[tuple[str, int] | None, torch.Tensor]] = []

    def __torch_dispatch__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        lines = _calling_lines()
        for leaf in _tensors(out):
            self.records.append((lines, leaf.detach().clone()))
        return out


def _calling_lines() -> frozenset[tuple[str, int]]:
    """The (file, line) of every frame calling the op, torch's included (a trace op's innermost
    line is torch's own module code when no user frame produced it), jitcore's excluded."""
    lines = set()
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(JITCORE_DIR) and not name.startswith("<"):
            lines.add((name, frame.f_lineno))
        frame = frame.f_back
    return frozenset(lines)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


Record = tuple[frozenset[tuple[str, int]], torch.Tensor]


def record_eager(fn: Any, args: tuple, kwargs: dict) -> list[Record]:
    """Run ``fn`` eagerly; every aten op's tensor outputs with the lines that called it.

    A ``breakpoint()`` in ``fn`` does nothing during this run (``diff`` is not a debugging session).
    """
    import copy

    args, kwargs = copy.deepcopy((args, kwargs))  # the eager run must not mutate the debugged inputs
    recorder = _Recorder()
    hook, sys.breakpointhook = sys.breakpointhook, _no_breakpoint
    try:
        with recorder:
            fn(*args, **kwargs)
    finally:
        sys.breakpointhook = hook
    return recorder.records


def _no_breakpoint(*args: Any, **kwargs: Any) -> None:
    return None


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
    rng = rng_state()
    try:
        records = record_eager(original, debugger.args, debugger.kwargs)
        set_rng_state(rng)  # the trace draws the numbers eager drew
        return _first(fresh, debugger.trace.bound_symbols, records)
    finally:
        set_rng_state(rng)


def _first(fresh: Any, bound_symbols: list[BoundSymbol], records: list[Record]) -> Divergence | None:
    position = 0
    for index, bsym in enumerate(bound_symbols):
        fresh.next()
        operands = optree.tree_leaves(fresh._resolve((bsym.args, bsym.kwargs)))
        inputs = [v for v in operands if isinstance(v, torch.Tensor)]
        makers = _makers(bsym)
        for proxy in _output_proxies(bsym.output):
            maker = makers.get(id(proxy), bsym)
            line = (maker.source[-1].filename, maker.source[-1].lineno) if maker.source else None
            value = fresh.values.get(proxy.name)
            if not isinstance(value, torch.Tensor) or any(value is v for v in inputs):
                continue  # no tensor, or an input returned as it was: eager dispatches nothing
            candidates = [
                (i, v)
                for i, (where, v) in enumerate(records[position:], start=position)
                if line in where and v.shape == value.shape and v.dtype == value.dtype
            ]
            if not candidates:
                if line is None or any(line in where for where, _v in records):
                    continue  # ran at that line, with other metadata: not guessed
                return Divergence(index, bsym, proxy.name, float("nan"), value, None)
            close = [i for i, v in candidates if _close(v, value.detach())]
            if close:
                position = close[0] + 1
                continue
            _i, eager = candidates[0]
            diff = (value.detach().double() - eager.double()).abs().max().item() if value.numel() else 0.0
            # (bool and integer values are compared exactly; their difference is shown as a number too)
            return Divergence(index, bsym, proxy.name, diff, value, eager)
    return None


def _makers(bsym: BoundSymbol) -> dict[int, BoundSymbol]:
    """For a lowered call: ``id(output) -> the subsymbol that makes it`` (its user line is the
    output's); empty for other ops (their own line is every output's)."""
    if not is_lowered(bsym):
        return {}
    return {id(p): sub for sub in bsym.subsymbols for p in _output_proxies(sub.output)}


def _close(eager: torch.Tensor, jit: torch.Tensor) -> bool:
    if eager.is_floating_point() or eager.is_complex():
        return torch.allclose(eager, jit, rtol=1e-4, atol=1e-5, equal_nan=True)
    return torch.equal(eager, jit)


@dataclass(frozen=True, slots=True)
class OutputDiff:
    """One output of a lowered call: its value from the lowered code and from its subsymbols."""

    name: str
    maker: BoundSymbol  # the subsymbol that makes it
    max_abs_diff: float
    close: bool
    lowered_value: Any
    torch_value: Any


@dataclass(frozen=True, slots=True)
class RegionDiff:
    """A lowered call's outputs compared with its subsymbols run one by one on torch."""

    bound_symbol: BoundSymbol
    outputs: tuple[OutputDiff, ...]

    @property
    def diverges(self) -> bool:
        return not all(o.close for o in self.outputs)

    def __str__(self) -> str:
        name = self.bound_symbol.symbol.name
        ops = len(self.bound_symbol.subsymbols)
        worst = max((o.max_abs_diff for o in self.outputs), default=0.0)
        if not self.diverges:
            return (f"{name} ({ops} ops): its {len(self.outputs)} outputs match its ops run one by one on "
                    f"torch (max |{name} - torch| = {worst:.4g})")
        lines = [f"{name} ({ops} ops) differs from its ops run one by one on torch:"]
        for o in self.outputs:
            if o.close:
                continue
            where = ""
            if o.maker.source:
                frame = o.maker.source[-1]
                where = f", made at {frame.filename}:{frame.lineno} in {frame.function}"
            lines.append(f"  {o.name} = {o.maker.symbol.id}(...){where}: max |{name} - torch| = "
                         f"{o.max_abs_diff:.4g}")
        return "\n".join(lines)


def region_divergence(bsym: BoundSymbol, values: dict[str, Any]) -> RegionDiff:
    """Run the lowered call ``bsym`` and, on the same inputs, its subsymbols one by one on torch
    (a fresh Debugger over them), and compare each output (the tolerances of ``diff``).

    Args:
        bsym: a lowered call of an execution trace (``jitcore.executors.is_lowered``).
        values: the values of the trace so far by proxy name (``Debugger.values``): its inputs.

    Raises:
        ValueError: ``bsym`` is not a lowered call.
    """
    from jitcore.debug.debugger import Debugger

    if not is_lowered(bsym) or not bsym.subsymbols:
        raise ValueError(f"{bsym.symbol.id} is not a call an executor made (a fused region)")
    inputs = list({id(p): p for p in proxies_in((bsym.args, bsym.kwargs))}.values())
    region = Trace(bsym.symbol.name, list(inputs), list(bsym.subsymbols), bsym.output)
    reference = Debugger(trace=region, inputs=[values[p.name] for p in inputs])
    rng = rng_state()
    try:
        lowered = Debugger(trace=Trace(bsym.symbol.name, list(inputs), [bsym], bsym.output),
                           inputs=[values[p.name] for p in inputs]).run_to_end()
        set_rng_state(rng)
        on_torch = reference.run_to_end()
    finally:
        set_rng_state(rng)
    makers = _makers(bsym)
    outputs = []
    for proxy, got, want in zip(_output_proxies(bsym.output), _leaves(lowered), _leaves(on_torch)):
        if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
            close = got.shape == want.shape and got.dtype == want.dtype and _close(want, got.detach())
            diff = (got.detach().double() - want.detach().double()).abs().max().item() \
                if got.shape == want.shape and got.numel() else 0.0
        else:
            close, diff = got == want, 0.0
        outputs.append(OutputDiff(proxy.name, makers.get(id(proxy), bsym), diff, bool(close), got, want))
    return RegionDiff(bsym, tuple(outputs))


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _name(param: Any) -> str:
    return param.name if isinstance(param, Proxy) else str(param)


def _output_proxies(value: Any) -> list[Proxy]:
    if isinstance(value, Proxy):
        return [value]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in _output_proxies(v)]
    return []
