"""Breakpoints of the stepping debugger: where they stop, and why one that never can is refused.

A breakpoint names a user line (``FILE:LINE``: ops recorded from that line, in any frame of their
stack) or an op (``aten.mm``, ``torch.matmul``, ``mm``). An op breakpoint also stops before a
torch-level op that *runs* that aten op: ``torch.matmul`` on plain tensors is one op of the trace,
and which aten ops it decomposes to is found by running it once on meta tensors of the recorded
metadata under a dispatch mode (``decomposition``). ``refusal`` says why a breakpoint can never
be hit in a trace (no such file, a line past its end or without ops, an op the trace never runs).
Invariants: a breakpoint that ``refusal`` accepts matches at least one op of the trace or of its
subsymbols; matching never runs anything on real values.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from jitcore.ir import BoundSymbol, Proxy, Trace

__all__ = ["Breakpoint", "decomposition", "op_names", "refusal"]


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """Stop before an op: by user line (``file.py:12``), by op (``aten.mm``), or a ``breakpoint()`` marker."""

    spec: str
    filename: str | None = None
    lineno: int | None = None
    op: str | None = None
    index: int | None = None  # a marker: before top-level op ``index``

    @classmethod
    def parse(cls, spec: str) -> Breakpoint:
        """``FILE:LINE`` or an op name (``aten.mm``, ``torch.matmul``, ``mm``).

        Raises:
            ValueError: ``spec`` is empty.
        """
        spec = spec.strip()
        if not spec:
            raise ValueError("a breakpoint needs FILE:LINE or an op name")
        filename, sep, line = spec.rpartition(":")
        if sep and line.isdigit() and filename:
            return cls(spec, filename=filename, lineno=int(line))
        return cls(spec, op=spec)

    def matches(self, bsym: BoundSymbol, index: int | None = None) -> bool:
        if self.index is not None:
            return index == self.index
        if self.op is not None:
            names = op_names(bsym.symbol.id)
            if self.op in names or self.runs_op(bsym) is not None:
                return True
            # ``aten.softmax`` also names ``torch.softmax``: the aten op that torch function calls
            # (inside subsymbols the aten op itself is found instead)
            return (
                self.op.startswith("aten.")
                and not bsym.subsymbols
                and not bsym.symbol.id.startswith("torch.ops.")
                and self.op[5:] in names
            )
        return any(
            f.lineno == self.lineno and same_file(f.filename, self.filename or "") for f in bsym.source or ()
        )

    def runs_op(self, bsym: BoundSymbol) -> str | None:
        """The aten op of this breakpoint that ``bsym`` (an op without subsymbols) runs, if any."""
        if self.op is None or bsym.subsymbols:
            return None
        return next((a for a in decomposition(bsym) if self.op in op_names(a)), None)


def same_file(actual: str, wanted: str) -> bool:
    """Whether ``actual`` (a recorded file name) is the file the user named ``wanted`` (maybe relative)."""
    return actual == wanted or actual.endswith("/" + wanted.lstrip("./"))


def op_names(symbol_id: str) -> frozenset[str]:
    """Every name an op breakpoint may use for ``symbol_id``: ``torch.ops.aten.mm.default`` answers to
    ``aten.mm.default``, ``aten.mm``, ``mm.default`` and ``mm``; ``torch.Tensor.relu`` to
    ``Tensor.relu`` and ``relu``."""
    bare = symbol_id.removeprefix("torch.ops.")
    parts = bare.split(".")
    names = {symbol_id, bare} | {".".join(parts[i:]) for i in range(len(parts))}
    if symbol_id.startswith("torch.ops.") and len(parts) >= 3:  # without the overload name
        names |= {".".join(parts[i:-1]) for i in range(len(parts) - 1)}
    return frozenset(n for n in names if n)


_DECOMPOSITIONS: dict[int, tuple[BoundSymbol, tuple[str, ...]]] = {}


class _AtenOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        self.ops.append(f"torch.ops.{func}")
        return func(*args, **(kwargs or {}))


def decomposition(bsym: BoundSymbol) -> tuple[str, ...]:
    """The aten ops a torch-level op without subsymbols runs (``torch.matmul`` -> ``aten.mm``...),
    from one run on meta tensors of its inputs' recorded metadata; () when that cannot be done."""
    cached = _DECOMPOSITIONS.get(id(bsym))
    if cached is not None and cached[0] is bsym:
        return cached[1]
    found: tuple[str, ...] = ()
    symbol = bsym.symbol
    runnable = not symbol.tags & {"global_state", "autograd_function"}  # no state changes, no user code
    if not bsym.subsymbols and symbol.langctx == "torch" and runnable:
        try:
            args, kwargs = optree.tree_map(
                _meta, (bsym.args, bsym.kwargs), is_leaf=lambda v: isinstance(v, Proxy)
            )
            mode = _AtenOps()
            with mode:
                symbol.fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - an op that cannot run on meta tensors has no known decomposition
            pass
        else:
            found = tuple(dict.fromkeys(mode.ops))
    _DECOMPOSITIONS[id(bsym)] = (bsym, found)
    return found


class _NoMeta(Exception):
    pass


def _meta(value: Any) -> Any:
    if not isinstance(value, Proxy):
        return value
    shadow = getattr(value, "shadow", None)
    if type(shadow).__name__ != "FakeTensor":
        raise _NoMeta(value.name)  # a tensor subclass, a number: not run
    return torch.empty_strided(tuple(shadow.shape), tuple(shadow.stride()), dtype=shadow.dtype, device="meta")


def _walk(bound_symbols: Iterable[BoundSymbol]) -> Iterable[BoundSymbol]:
    for bsym in bound_symbols:
        yield bsym
        yield from _walk(bsym.subsymbols)


def refusal(point: Breakpoint, trace: Trace) -> str | None:
    """Why ``point`` can never be hit in ``trace`` (a sentence), or None when it can."""
    everything = list(_walk(trace.bound_symbols))
    if point.index is not None or any(point.matches(b) for b in everything):
        return None
    if point.op is not None:
        return _op_refusal(point.op, everything)
    return _line_refusal(point.filename or "", point.lineno or 0, everything)


def _line_refusal(filename: str, lineno: int, everything: list[BoundSymbol]) -> str:
    frames = [f for b in everything for f in b.source or ()]
    recorded = sorted({f.filename for f in frames if same_file(f.filename, filename)})
    path = recorded[0] if recorded else filename
    lines = linecache.getlines(path)
    if not recorded and not lines and not os.path.exists(filename):
        return f"no such file: {filename} (no op of the trace was recorded from a file of that name)"
    if lines and lineno > len(lines):
        return f"{filename} has only {len(lines)} lines"
    if lineno < 1:
        return "line numbers start at 1"
    if not recorded:
        return f"no op of the trace was recorded from {filename}"
    with_ops = sorted({f.lineno for f in frames if f.filename == path})
    shown = ", ".join(map(str, with_ops[:20])) + (", ..." if len(with_ops) > 20 else "")
    return f"no op of the trace was recorded from {filename}:{lineno} (lines with ops: {shown})"


def _op_refusal(op: str, everything: list[BoundSymbol]) -> str:
    ops = list(dict.fromkeys(b.symbol.id.removeprefix("torch.ops.") for b in everything))
    shown = ", ".join(ops[:12]) + (", ..." if len(ops) > 12 else "")
    if not _is_known_op(op):
        return f"unknown op {op!r}: not an aten op nor a torch function (the trace's ops: {shown})"
    return f"the trace never runs {op} (its ops: {shown})"


def _is_known_op(op: str) -> bool:
    parts = op.removeprefix("torch.ops.").split(".")
    if parts[0] == "aten" and len(parts) >= 2:
        return hasattr(torch.ops.aten, parts[1])
    candidates = (torch, torch.Tensor, torch.nn.functional, torch.linalg, torch.special, torch.fft)
    name = parts[-1]
    return any(hasattr(c, name) for c in candidates) or hasattr(torch.ops.aten, name)
