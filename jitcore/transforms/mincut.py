"""Saved tensors chosen for fusion: the backward recomputes cheap fused ops instead of saving them.

When an executor fuses the forward and the backward traces (the inductor executor), an op the
backward recomputes inside a fused region costs almost nothing, while every value the forward saves
is a tensor written to memory in the forward, kept alive until the backward, and read back. So for
fused traces the saved values are chosen by a *minimum cut*, as min-cut partitioners do (Note [The
min-cut of saved values]): the cheapest set of forward values (by bytes kept alive) from which the
backward can recompute everything it reads, recomputing only ops the executor fuses.

Invariants:
- the pair computes what the grad transform's own pair (saving.py) computes: the same forward ops
  in the same order, the same backward ops, plus recomputed forward ops at the start of the
  backward (the same aten calls on the same values, so the same results);
- only *cheap* ops (views, pointwise aten ops; saving.is_cheap) that the executor fuses, and views,
  are recomputed; random ops and ops of a forward that writes in place never are;
- values the forward gets from its caller cost one slot, not their bytes (the caller holds them);
- the pair is made only for traces that run with fusion (executors/plan.py ``compile_together``); the
  torch executor runs the pair saving.py chose, unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jitcore.ir import BoundSymbol, Proxy, Trace
from jitcore.proxies import TensorProxy
from jitcore.transforms.saving import backward_reads, in_forward_order, is_cheap, proxies_in

__all__ = ["saved_for_fusion", "min_cut_saved", "saved_bytes"]

Fusible = Callable[[BoundSymbol], bool]

# Note [The min-cut of saved values]
# A flow network over the forward's tensor values: each value v is an edge v.in -> v.out whose
# capacity is what saving v costs (its bytes, plus one so that fewer tensors win a tie; a forward
# input costs one). Values that cannot be recomputed in the backward (inputs, outputs of ops that are
# not cheap or not fused, random draws) hang from the source by an edge of infinite capacity; a value
# produced by a recomputable op is reached from each value that op reads (v.out -> op's output.in,
# infinite); every value the backward reads has an infinite edge to the sink. A finite cut crosses
# only value edges: the values it crosses are saved, and each value the backward reads that is not
# saved lies behind the cut, so the ops that produce it are recomputable from saved values. The
# minimum cut is therefore the cheapest saved set; what is recomputed is found by walking back from
# what the backward reads to the saved values.

_SOURCE, _SINK = "source", "sink"


def saved_for_fusion(forward: Trace, backward: Trace, backward_body: tuple[BoundSymbol, ...],
                     fusible: Fusible) -> tuple[Trace, Trace] | None:
    """The grad transform's forward/backward pair with the saved values chosen by a minimum cut.

    Args:
        forward: the forward trace (``output == (outputs, saved)``), as the grad transform made it.
        backward: the backward trace (``args == [*saved, *tangents]``).
        backward_body: the backward's own ops, before saving.py prepended its recomputed ones.
        fusible: whether the executors fuse a bound symbol (only those are recomputed).

    Returns:
        New forward and backward traces (the given ones are not changed), or None when the cut saves
        what saving.py saves already, or the forward writes in place (nothing may be recomputed).
    """
    if any("inplace" in b.symbol.tags for b in forward.bound_symbols):
        return None
    outputs, saved_before = forward.output
    tangents = list(backward.args[len(saved_before):])
    needed = backward_reads(list(backward_body), tangents, list(backward.output))
    choice = min_cut_saved(forward, list(needed.values()), fusible)
    if choice is None:
        return None
    saved, recomputed = choice
    if {id(p) for p in saved} == {id(p) for p in saved_before}:
        return None
    note = (f"saved for fusion: {len(saved)} values ({saved_bytes(saved)} bytes) instead of "
            f"{len(saved_before)} ({saved_bytes(saved_before)} bytes); the backward recomputes "
            f"{len(recomputed)} ops")
    new_forward = dataclasses.replace(forward, bound_symbols=list(forward.bound_symbols),
                                      output=(outputs, tuple(saved)), header=[*forward.header, note])
    new_backward = dataclasses.replace(backward, args=[*saved, *tangents], header=[*backward.header, note],
                                       bound_symbols=[*recomputed, *backward_body])
    return new_forward, new_backward


def min_cut_saved(forward: Trace, needed: list[Proxy],
                  fusible: Fusible) -> tuple[list[Proxy], list[BoundSymbol]] | None:
    """The cheapest values to save for a backward that reads ``needed`` (Note above).

    Returns:
        The saved values in forward order and the forward ops the backward recomputes, in forward
        order; None when a size is symbolic (bytes unknown) or a needed value is not a tensor the
        forward takes or makes.
    """
    import networkx as nx  # imported when a pair is lowered, never on the torch executor's path

    if not all(isinstance(p, TensorProxy) for p in needed):
        return None
    producer: dict[int, BoundSymbol] = {}
    for bsym in forward.bound_symbols:
        for p in proxies_in(bsym.output):
            producer.setdefault(id(p), bsym)
    inputs = {id(a) for a in forward.args}
    values = [a for a in forward.args if isinstance(a, TensorProxy)]
    values += [p for b in forward.bound_symbols for p in proxies_in(b.output) if isinstance(p, TensorProxy)]
    if not {id(p) for p in needed} <= {id(v) for v in values}:
        return None
    graph = nx.DiGraph()
    for value in values:
        cost = _cost(value, id(value) in inputs)
        if cost is None:
            return None
        graph.add_edge((id(value), "in"), (id(value), "out"), capacity=cost)
        reads = _recomputable_reads(producer.get(id(value)), producer, inputs, fusible)
        if reads is None:
            graph.add_edge(_SOURCE, (id(value), "in"))
        for read in reads or ():
            graph.add_edge((id(read), "out"), (id(value), "in"))
    for value in needed:
        graph.add_edge((id(value), "out"), _SINK)
    _, (source_side, _) = nx.minimum_cut(graph, _SOURCE, _SINK)
    saved = [v for v in values if (id(v), "in") in source_side and (id(v), "out") not in source_side]
    return in_forward_order(forward, saved), _recomputed(forward, needed, saved, producer)


def _cost(value: TensorProxy, is_input: bool) -> int | None:
    """What saving ``value`` costs (Note above); None for symbolic sizes."""
    shadow = value.shadow
    if is_input:
        return 1
    try:
        return int(shadow.numel()) * shadow.element_size() + 1
    except TypeError:  # a symbolic size
        return None


def _recomputable_reads(bsym: BoundSymbol | None, producer: dict[int, BoundSymbol], inputs: set[int],
                        fusible: Fusible) -> list[Proxy] | None:
    """The tensors ``bsym`` reads when the backward may recompute it, else None."""
    if bsym is None or not is_cheap(bsym) or not ("view" in bsym.symbol.tags or fusible(bsym)):
        return None  # a view is recomputed on torch too (saving.py): it saves a slot, costs no memory
    if not all(isinstance(p, TensorProxy) for p in proxies_in(bsym.output)):
        return None
    reads = list(proxies_in((bsym.args, bsym.kwargs)))
    if not all(isinstance(r, TensorProxy) and (id(r) in producer or id(r) in inputs) for r in reads):
        return None
    return reads


def _recomputed(forward: Trace, needed: list[Proxy], saved: list[Proxy],
                producer: dict[int, BoundSymbol]) -> list[BoundSymbol]:
    """The forward ops the backward runs to get ``needed`` from ``saved``, in forward order."""
    available = {id(p) for p in saved}
    chosen: dict[int, BoundSymbol] = {}
    pending = [p for p in needed if id(p) not in available]
    while pending:
        value = pending.pop()
        if id(value) in available:
            continue
        bsym = producer[id(value)]  # a finite cut leaves only recomputable values unsaved
        chosen[id(bsym)] = bsym
        available.update(id(p) for p in proxies_in(bsym.output))
        pending.extend(proxies_in((bsym.args, bsym.kwargs)))
    return [b for b in forward.bound_symbols if id(b) in chosen]


def saved_bytes(values: Any) -> int:
    """The bytes of the tensors among ``values`` (a forward's saved tuple), for reports and tests."""
    total = 0
    for p in proxies_in(values):
        if isinstance(p, TensorProxy):
            total += int(p.shadow.numel()) * p.shadow.element_size()
    return total
