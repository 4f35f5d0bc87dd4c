"""Saved tensors chosen for fusion: the backward recomputes cheap fused ops instead of saving them.

When an executor fuses the forward and the backward traces (the inductor executor), an op the
backward recomputes inside a fused region costs almost nothing, while every value the forward saves
is a tensor written to memory in the forward, kept alive until the backward, and read back. So for
fused traces the saved values are chosen by a *minimum cut*, as min-cut partitioners do (Note [The
min-cut of saved values]): the cheapest set of forward values (by bytes kept alive) from which the
backward can recompute everything it reads, recomputing only ops the executor fuses.

Invariants:
- the pair computes what the grad transform's own pair (saving.py) computes: the same forward ops
  in the same order, the same backward ops, plus recomputed forward ops in the backward, each just
  before its first use (the same aten calls on the same values, so the same results);
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


def saved_for_fusion(forward: Trace, forward_body: tuple[BoundSymbol, ...], backward: Trace,
                     backward_body: tuple[BoundSymbol, ...], fusible: Fusible) -> tuple[Trace, Trace] | None:
    """The grad transform's forward/backward pair with the saved values chosen by a minimum cut.

    Args:
        forward: the forward trace (``output == (outputs, saved)``), as the grad transform made it.
        forward_body: all of the forward's ops, the views nothing reads in ``forward`` included: a cut
            may save or recompute them (Note [Unread views in a forward], view_round_trips.py).
        backward: the backward trace (``args == [*saved, *tangents]``).
        backward_body: the backward's own ops, before saving.py prepended its recomputed ones.
        fusible: whether the executors fuse a bound symbol (only those are recomputed).

    Returns:
        New forward and backward traces (the given ones are not changed), or None when the cut saves
        what saving.py saves already, or the forward writes in place (nothing may be recomputed).
    """
    forward = dataclasses.replace(forward, bound_symbols=list(forward_body))
    if any("inplace" in b.symbol.tags for b in forward.bound_symbols):
        return None
    outputs, saved_before = forward.output
    tangents = list(backward.args[len(saved_before):])
    needed = backward_reads(list(backward_body), tangents, list(backward.output))
    choice = min_cut_saved(forward, list(needed.values()), fusible)
    if choice is None:
        return None
    saved, recomputed = choice
    inputs = {id(a) for a in forward.args}
    if _saving_cost(saved, inputs) >= _saving_cost(saved_before, inputs):
        return None  # never more memory than the torch executor's pair (Note [Recomputing on CPU])
    note = (f"saved for fusion: {len(saved)} values ({saved_bytes(saved)} bytes) instead of "
            f"{len(saved_before)} ({saved_bytes(saved_before)} bytes); the backward recomputes "
            f"{len(recomputed)} ops")
    new_forward = dataclasses.replace(forward, bound_symbols=list(forward.bound_symbols),
                                      output=(outputs, tuple(saved)), header=[*forward.header, note])
    new_backward = dataclasses.replace(backward, args=[*saved, *tangents], header=[*backward.header, note],
                                       bound_symbols=_placed(recomputed, backward_body, backward.output))
    return new_forward, new_backward


def _placed(recomputed: list[BoundSymbol], body: tuple[BoundSymbol, ...], output: Any) -> list[BoundSymbol]:
    """The backward's ops with each recomputed op just before the first op that reads what it makes
    (after what it reads): it lands in the fused region that uses it, not in an earlier one that
    would then write it to memory for the later one."""
    makes = {id(p): b for b in recomputed for p in proxies_in(b.output)}
    placed: set[int] = set()
    result: list[BoundSymbol] = []

    def place(value: Any) -> None:
        for read in proxies_in(value):
            bsym = makes.get(id(read))
            if bsym is not None and id(bsym) not in placed:
                placed.add(id(bsym))
                place((bsym.args, bsym.kwargs))
                result.append(bsym)

    for bsym in body:
        place((bsym.args, bsym.kwargs))
        result.append(bsym)
    place(output)
    return result


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
        bsym = producer.get(id(value))
        reads = _recomputable_reads(bsym, producer, inputs, fusible)
        if reads is None:
            graph.add_edge(_SOURCE, (id(value), "in"))
            continue
        assert bsym is not None
        recompute = _recompute_cost(bsym, value)
        if recompute:
            graph.add_edge(_SOURCE, (id(value), "in"), capacity=recompute)
        for read in reads:
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


# Note [Recomputing on CPU]
# On a GPU a fused pointwise kernel is bound by memory: recomputing a pointwise op inside it costs
# less than writing and reading back its output, so recomputing costs nothing in the cut. On CPU,
# transcendental functions (exp, tanh, gelu, sin, sigmoid, ...) are bound by arithmetic: recomputing
# all of them made the measured pointwise training step 1.3x slower than saving their outputs
# (benchmarks/bench_executors.py, 64x256 and 512x1024). So on CPU recomputing such an op costs its
# output's bytes times CPU_RECOMPUTE_FACTOR in the cut (an edge source -> v.in: paid when v lies
# behind the cut, i.e. is recomputed): it is recomputed only where that saves twice what it costs.
# Arithmetic (an instruction or two per element) and views cost nothing to recompute. A cut that
# would keep more bytes alive than the grad transform's own choice (saving.py recomputes any
# pointwise op whose inputs are saved anyway, e.g. gelu) is not used.
CPU_RECOMPUTE_FACTOR = 2
ARITHMETIC = frozenset({
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "sign", "reciprocal", "square", "sqrt", "rsqrt",
    "relu", "threshold", "threshold_backward", "clamp", "clamp_min", "clamp_max", "where", "maximum",
    "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
    "bitwise_not", "bitwise_and", "bitwise_or", "masked_fill", "fill", "_to_copy", "clone", "lerp",
    "addcmul", "addcdiv", "floor", "ceil", "round", "trunc", "copy", "hardtanh", "hardtanh_backward",
    "leaky_relu", "leaky_relu_backward", "tanh_backward", "sigmoid_backward",
})


def _recompute_cost(bsym: BoundSymbol, value: TensorProxy) -> int:
    """Note [Recomputing on CPU]: what recomputing ``bsym`` (which makes ``value``) costs in the cut."""
    if "view" in bsym.symbol.tags or value.shadow.device.type != "cpu":
        return 0
    name = getattr(bsym.symbol.fn, "name", None)
    op = name().split("::")[-1].split(".")[0] if callable(name) else ""
    if op in ARITHMETIC:
        return 0
    return CPU_RECOMPUTE_FACTOR * int(value.shadow.numel()) * value.shadow.element_size()


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


def _saving_cost(values: Any, inputs: set[int]) -> int:
    return sum(_cost(p, id(p) in inputs) or 0 for p in proxies_in(values) if isinstance(p, TensorProxy))


def saved_bytes(values: Any) -> int:
    """The bytes of the tensors among ``values`` (a forward's saved tuple), for reports and tests."""
    total = 0
    for p in proxies_in(values):
        if isinstance(p, TensorProxy):
            total += int(p.shadow.numel()) * p.shadow.element_size()
    return total
