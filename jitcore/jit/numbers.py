"""Dynamic numbers in a tracing pass (``jit(fn, dynamic_numbers=...)``, jitcore/proxies/number.py).

After interpretation the pass writes every dynamic number the program specialized as the constant it
is for the entry (``fold_specialized``) and drops recorded arithmetic nobody uses
(``drop_unused_arithmetic``); transforms that record below torch's Python layer ask which numbers are
still symbolic (``symbolic``) or make them all constants (``specialize``).

Invariants:
- a number input is guarded by value exactly when something the entry runs depends on its value;
- folding and specializing only ever replace a NumberProxy by the value its guards pin.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import optree

from jitcore.ir import BoundSymbol, Trace
from jitcore.prologue import Guard, Path, Prologue
from jitcore.proxies.number import NumberProxy

__all__ = ["SLOT_TYPES", "drop_unused_arithmetic", "fold_specialized", "roots_used",
           "specialize", "symbolic"]


def symbolic(trace: Trace, prologue: Prologue, inputs: list[tuple[Path, NumberProxy]]) -> list[NumberProxy]:
    """The number inputs the trace uses that the program did not specialize (no value guard)."""
    pinned = {g.path for g in prologue.guards if g.kind == "value"}
    used = roots_used(trace)
    return [proxy for path, proxy in inputs if path not in pinned and id(proxy) in used]


def specialize(trace: Trace, prologue: Prologue, inputs: list[tuple[Path, NumberProxy]]) -> None:
    """Make every number input a constant of the entry: guarded by value where the trace uses it,
    and no longer an argument. For transforms that record below torch's Python layer, where numbers
    are values (the grad transform: autograd runs aten ops on them); their traces read
    ``NumberProxy.value``."""
    if not inputs:
        return
    numbers = {id(proxy) for _path, proxy in inputs}
    used = roots_used(trace)
    pinned = {g.path for g in prologue.guards if g.kind == "value"}
    for path, proxy in inputs:
        if id(proxy) in used and path not in pinned:  # an unused number needs no guard
            prologue.guards.append(Guard(path, "value", proxy.value))
    dropped = {i for i, a in enumerate(trace.args) if id(a) in numbers}
    trace.args = [a for i, a in enumerate(trace.args) if i not in dropped]
    prologue.drop_inputs(dropped)


def roots_used(trace: Trace) -> set[int]:
    """``id`` of each dynamic-number input the trace's records or output depend on."""
    used: set[int] = set()
    pending = list(trace.bound_symbols)
    leaves = optree.tree_leaves(trace.output, none_is_leaf=True)
    while pending:
        bsym = pending.pop()
        leaves.extend(optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True))
        pending.extend(bsym.subsymbols)
    for leaf in leaves:
        if isinstance(leaf, NumberProxy):
            used.update(id(root) for root in leaf.roots)
    return used


def fold_specialized(trace: Trace, specialized: set[int]) -> None:
    """Write a dynamic number, and what was computed from it, as a constant wherever the program
    specialized it (its value is guarded for the whole entry): the trace reads as it runs."""
    if not specialized:
        return

    def fold(value: Any) -> Any:
        if isinstance(value, NumberProxy) and all(id(r) in specialized for r in value.roots):
            return value.value
        return value

    def rewrite(bsym: BoundSymbol) -> BoundSymbol:
        args, kwargs = optree.tree_map(fold, (bsym.args, bsym.kwargs), none_is_leaf=True)
        subsymbols = tuple(rewrite(b) for b in bsym.subsymbols)
        return dataclasses.replace(bsym, args=args, kwargs=kwargs, subsymbols=subsymbols)

    trace.bound_symbols[:] = [rewrite(b) for b in trace.bound_symbols]
    trace.output = optree.tree_map(fold, trace.output, none_is_leaf=True)


def drop_unused_arithmetic(trace: Trace) -> None:
    """Remove recorded arithmetic on dynamic numbers whose result nothing uses (library code computes
    numbers it then discards, or that it specialized): it is pure, so the trace need not run it."""
    used: set[int] = {id(v) for v in optree.tree_leaves(trace.output, none_is_leaf=True)}
    kept: list[BoundSymbol] = []
    for bsym in reversed(trace.bound_symbols):
        if bsym.symbol.langctx == "python" and id(bsym.output) not in used:
            continue
        kept.append(bsym)
        pending = [bsym]
        while pending:
            b = pending.pop()
            used.update(id(v) for v in optree.tree_leaves((b.args, b.kwargs), none_is_leaf=True))
            pending.extend(b.subsymbols)
    trace.bound_symbols[:] = reversed(kept)


# ``int.__sub__(1, n)`` (the interpreter trying an operator's slots): a number's slot returns
# NotImplemented for a proxy, others read the value through the proxy's own methods.
SLOT_TYPES = (types.WrapperDescriptorType, types.MethodWrapperType)
