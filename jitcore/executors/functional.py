"""In-place writes into tensors a trace made itself, rewritten out of place so they do not split fusion.

Autograd's backward formulas write into fresh temporaries (``clamp``'s backward combines its two
masks with ``logical_and_``). A fusion executor claims no in-place op (effects stay where they were
recorded), so each such write splits a fused region in two and the values between go through
memory: a backward of four ``clamp`` calls ran as five regions, 2.4x slower than one would. When the
written tensor is private to the trace, ``t = op_(t, u)`` computes what ``t = op(t, u)`` computes
(the name is rebound to the new value), and the out-of-place op fuses.

A write ``t = op_(t, ...)`` (aten, in place on its first argument, returning it) is rewritten when:
- ``t`` was made in the trace by a pointwise aten op (fresh memory: not a view, not an input);
- no view of ``t`` is taken anywhere in the trace, and ``t`` is not part of the trace's output;
- the out-of-place twin (the same name without ``_``, the same overload) exists and gives ``t``'s
  dtype and shape on the shadows.
Invariant: the rewritten trace computes the same values, and nothing outside it can tell.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optree
import torch
from torch._ops import OpOverload

from jitcore.ir import BoundSymbol, Proxy, Trace, proxies_in
from jitcore.langctx.aten import aten_symbol
from jitcore.proxies import TensorProxy

__all__ = ["out_of_place"]


def out_of_place(trace: Trace) -> Trace:
    """``trace`` with its private in-place writes rewritten out of place (the module docstring);
    ``trace`` itself when there is none."""
    viewed = {id(p) for b in trace.bound_symbols if "view" in b.symbol.tags
              for p in proxies_in((b.args, b.kwargs))}
    returned = {id(p) for p in proxies_in(trace.output)}
    shared = viewed | returned
    producer: dict[int, BoundSymbol] = {}
    body: list[BoundSymbol] = []
    for bsym in trace.bound_symbols:
        twin = _twin(bsym, producer, shared)
        rewritten = dataclasses.replace(bsym, symbol=aten_symbol(twin), subsymbols=()) if twin else bsym
        body.append(rewritten)
        for p in proxies_in(bsym.output):
            producer.setdefault(id(p), bsym)
    if all(a is b for a, b in zip(body, trace.bound_symbols)):
        return trace
    return dataclasses.replace(trace, bound_symbols=body)


def _twin(bsym: BoundSymbol, producer: dict[int, BoundSymbol], shared: set[int]) -> OpOverload | None:
    """The out-of-place twin ``bsym`` may be rewritten to, or None."""
    op = bsym.symbol.fn
    if bsym.symbol.langctx != "aten" or "inplace" not in bsym.symbol.tags or not isinstance(op, OpOverload):
        return None
    target = bsym.output
    if not isinstance(target, TensorProxy) or not bsym.args or bsym.args[0] is not target:
        return None
    if "out" in bsym.kwargs:
        return None
    if id(target) in shared or not _fresh(producer.get(id(target))):
        return None
    name = op._opname
    if not name.endswith("_") or name.endswith("__"):
        return None
    twin = getattr(getattr(torch.ops.aten, name[:-1], None), op._overloadname, None)
    if not isinstance(twin, OpOverload) or "inplace" in aten_symbol(twin).tags:
        return None
    return twin if _same_metadata(twin, bsym, target) else None


def _fresh(bsym: BoundSymbol | None) -> bool:
    """Whether ``bsym`` makes new memory: a pointwise aten op, not in place."""
    if bsym is None or bsym.symbol.langctx != "aten" or bsym.symbol.tags & {"inplace", "view"}:
        return False
    return torch.Tag.pointwise in getattr(bsym.symbol.fn, "tags", ())


def _same_metadata(twin: OpOverload, bsym: BoundSymbol, target: TensorProxy) -> bool:
    """Whether ``twin`` on the shadows gives ``target``'s dtype and shape (no type promotion)."""
    def shadow(value: Any) -> Any:
        return value.shadow if isinstance(value, Proxy) else value

    fake_mode = getattr(target.shadow, "fake_mode", None)
    if fake_mode is None:
        return False
    try:
        args, kwargs = optree.tree_map(shadow, (bsym.args, bsym.kwargs), none_is_leaf=True,
                                       is_leaf=lambda v: isinstance(v, Proxy))
        with fake_mode:
            result = twin(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a twin torch refuses here is not used
        return False
    return (isinstance(result, torch.Tensor) and result.dtype == target.shadow.dtype
            and tuple(result.shape) == tuple(target.shadow.shape))
