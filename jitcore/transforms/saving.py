"""What the forward saves for the backward, and what the backward recomputes instead.

Policy (see docs/autograd.md):
- the backward's inputs are exactly the forward values its ops read (found by proxy identity, since
  forward and backward were recorded over the same proxies) — nothing else is saved;
- a saved value produced in the forward by a *cheap* op is recomputed at the start of the backward
  instead, when everything that op reads is a forward input or is saved anyway. Cheap ops are views
  (``t``, ``view``, ``permute``, ``expand``, ``detach``, ...: saving them saves nothing but a slot)
  and pointwise aten ops (``mul``, ``exp``, ``gelu``, ...: recomputing them frees an activation);
  random ops never are. The rule is applied until nothing changes;
- when the forward mutates a tensor in place, nothing is recomputed (the value read again could
  differ from the one autograd saved);
- an activation-checkpointed region (``torch.utils.checkpoint`` in the program: its records lie
  between ``CHECKPOINT_BEGIN`` and ``CHECKPOINT_END``) is recomputed as eagerly: its ops count as
  cheap too (matmuls included; random ops still never are, so a dropout's mask is saved).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import optree
import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import BoundSymbol, Proxy, Trace, recorded_symbol
from jitcore.proxies import TensorProxy

__all__ = [
    "CHECKPOINT_BEGIN", "CHECKPOINT_END", "backward_reads", "in_forward_order", "is_cheap", "proxies_in",
    "split_saved",
]


def checkpoint_begin() -> None:
    """Where an activation-checkpointed region starts (a marker: it does nothing when run)."""


def checkpoint_end() -> None:
    """Where it ends."""


_HERE = "jitcore.transforms.saving"
CHECKPOINT_BEGIN = recorded_symbol(checkpoint_begin, langctx="torch", path=f"{_HERE}.checkpoint_begin")
CHECKPOINT_END = recorded_symbol(checkpoint_end, langctx="torch", path=f"{_HERE}.checkpoint_end")


def proxies_in(tree: Any) -> Iterator[Proxy]:
    """The proxies among the leaves of ``tree`` (dicts, tuples and lists looked into)."""
    for leaf in optree.tree_leaves(tree, none_is_leaf=True):
        if isinstance(leaf, Proxy):
            yield leaf


def is_cheap(bsym: BoundSymbol) -> bool:
    """A view or a pointwise aten op, neither random nor in place: worth recomputing rather than saving."""
    tags = bsym.symbol.tags
    if "inplace" in tags or "random" in tags or bsym.symbol.langctx != "aten":
        return False
    if "view" in tags:
        return True
    op = bsym.symbol.fn
    return torch.Tag.pointwise in getattr(op, "tags", ())


def split_saved(
    forward: Trace, backward: Trace, tangents: list[TensorProxy], outputs: list[Any],
    checkpointed: frozenset[int] = frozenset(),
) -> list[TensorProxy]:
    """Choose the saved values; prepend the recomputed forward ops to ``backward``.

    Args:
        forward: the forward trace (its bound symbols are complete).
        backward: the backward trace (its bound symbols are complete).
        tangents: the backward's tangent inputs.
        outputs: what the backward returns.
        checkpointed: ids of the forward's bound symbols inside an activation-checkpointed region.

    Returns:
        The forward values the backward takes, in forward order (inputs first).
    """
    needed = backward_reads(backward.bound_symbols, tangents, outputs)
    _check_made(forward, needed)
    recomputed = _recompute(forward, needed, checkpointed)
    if recomputed:
        backward.bound_symbols[:0] = sorted(recomputed, key=lambda b: forward.bound_symbols.index(b))
    return in_forward_order(forward, needed.values())


# Note [A saved value the forward does not make]
# The backward reads forward values by proxy identity: autograd's saved tensors are the shadows the
# forward's records made (or their detached copies, recorded as ``detach``). Where autograd runs below
# a subclass's ``__torch_dispatch__`` (``enable_reentrant_dispatch()`` over inner tensors that require
# grad), a node of that inner graph unpacks a saved output as a shadow no record of the forward made:
# the backward read a fresh name the forward never defines, and the first call died with NameError
# where eager computes. Such a pair is not built: the call is refused (JC-T001), so it runs eagerly.
# The ``detach`` such a node saves of its output is now known as that output (Note [The saved output
# of a graph built below a dispatch], jitcore/langctx/saved_outputs.py); this check remains for any
# other saved value no record names.
def _check_made(forward: Trace, needed: dict[int, Proxy]) -> None:
    made = {id(a) for a in forward.args}
    for bsym in forward.bound_symbols:
        made.update(id(p) for p in proxies_in(bsym.output))
    missing = [p for pid, p in needed.items() if pid not in made and isinstance(p, TensorProxy)]
    if missing:
        names = ", ".join(p.name for p in missing)
        raise UnsupportedOperationError(
            f"the backward reads {names}, which autograd saved but no op of the forward makes (an autograd "
            "graph built inside a tensor subclass's __torch_dispatch__?): Note [A saved value the forward "
            "does not make], jitcore/transforms/saving.py"
        )


def backward_reads(
    backward: list[BoundSymbol], tangents: list[TensorProxy], outputs: list[Any]
) -> dict[int, Proxy]:
    """The forward values the backward's ops read or return (``id -> proxy``, in order of first
    read): what it takes besides the tangents when nothing is recomputed."""
    produced = {id(t) for t in tangents}
    needed: dict[int, Proxy] = {}
    for bsym in backward:  # in order: an op returning its input (``t = resolve_neg(t)``) reads it first
        for p in proxies_in((bsym.args, bsym.kwargs)):
            if id(p) not in produced:
                needed.setdefault(id(p), p)
        produced.update(id(p) for p in proxies_in(bsym.output))
    for p in proxies_in(outputs):
        if id(p) not in produced:
            needed.setdefault(id(p), p)
    return needed


def in_forward_order(forward: Trace, values: Iterable[Proxy]) -> list[Any]:
    """``values`` sorted as the forward makes them: its inputs first, then by producing op."""
    order = {id(a): i for i, a in enumerate(forward.args)}
    base = len(order)
    for i, bsym in enumerate(forward.bound_symbols):
        for p in proxies_in(bsym.output):
            order.setdefault(id(p), base + i)
    return sorted(values, key=lambda p: order.get(id(p), -1))


def _recompute(forward: Trace, needed: dict[int, Proxy], checkpointed: frozenset[int]) -> list[BoundSymbol]:
    if any("inplace" in b.symbol.tags for b in forward.bound_symbols):
        return []
    producer: dict[int, BoundSymbol] = {}
    for bsym in forward.bound_symbols:
        for p in proxies_in(bsym.output):
            producer.setdefault(id(p), bsym)
    inputs = {id(a) for a in forward.args}
    chosen: list[BoundSymbol] = []
    changed = True
    while changed:
        changed = False
        for pid in list(needed):
            bsym = producer.get(pid)
            if bsym is None or bsym in chosen or not (is_cheap(bsym) or _in_region(bsym, checkpointed)):
                continue
            reads = list(proxies_in((bsym.args, bsym.kwargs)))
            if not all(id(r) in needed or id(r) in inputs for r in reads):
                continue
            chosen.append(bsym)
            for p in proxies_in(bsym.output):
                needed.pop(id(p), None)
            for r in reads:
                needed.setdefault(id(r), r)
            changed = True
    return chosen


def _in_region(bsym: BoundSymbol, checkpointed: frozenset[int]) -> bool:
    """An op of a checkpointed region that may run again: an aten op, neither random nor in place."""
    tags = bsym.symbol.tags
    return id(bsym) in checkpointed and bsym.symbol.langctx == "aten" and not tags & {"inplace", "random"}
