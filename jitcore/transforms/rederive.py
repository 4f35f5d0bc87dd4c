"""A backward for gradients of other kinds than traced, taking what the forward already saved.

``rederived_backward`` asks the grad transform's ``BackwardDeriver`` for a backward recorded with
tangents of the received kinds (Note [A backward for other tangent kinds], backward_deriver.py) and
connects it to the values the call's forward saved. Invariants:
- its arguments are exactly the running forward's saved values, then the tangents' plain tensors:
  it runs as ``backward(*ctx.saved_tensors, *tangents)``, whichever forward (saving.py's or the one
  chosen for fusion, mincut.py) ran;
- a forward value it reads that was not saved is recomputed in it by the forward ops that made it,
  from saved values only (Note [Recomputing for another backward]); when that is impossible it is
  an error naming the output, the value and the user's line that made it, never a wrong gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jitcore.ir import BoundSymbol, Proxy, Trace
from jitcore.transforms.grad import GradTraces
from jitcore.transforms.saving import backward_reads, proxies_in
from jitcore.transforms.tangents import TangentKind

__all__ = ["Unsaved", "describe_unsaved", "rederived_backward"]


class Unsaved(Exception):
    """The backward for other tangent kinds reads a forward value the forward did not save."""

    def __init__(self, value: Proxy, producer: BoundSymbol | None, why: str) -> None:
        self.value, self.producer, self.why = value, producer, why
        self.reader: BoundSymbol | None = None  # the backward op that reads it (set by rederived_backward)
        super().__init__(why)


def rederived_backward(
    traces: GradTraces, kinds: Sequence[TangentKind | None], saved: Sequence[Proxy]
) -> Trace:
    """The backward trace for tangents of ``kinds`` (one per ``traces.differentiable``; None for an
    output no gradient reaches), taking ``(*saved, *tangents)``.

    Raises:
        Unsaved: it reads a forward value that is neither saved nor recomputable from saved values.
    """
    assert traces.deriver is not None
    derived = traces.deriver.derive(kinds)
    backward = derived.backward
    needed = backward_reads(backward.bound_symbols, derived.tangent_args, derived.outputs)
    try:
        recomputed = _recomputed(traces.forward.args, traces.forward_body, saved, needed)
    except Unsaved as error:
        readers = (b for b in backward.bound_symbols if any(p is error.value for p in proxies_in(b.args)))
        error.reader = next(readers, None)
        raise
    backward.bound_symbols[:0] = recomputed
    backward.args = [*saved, *derived.tangent_args]
    backward.output = tuple(derived.outputs)
    kinds_text = ", ".join(
        f"output {spec.index}: {kind.describe() if kind is not None else 'no gradient'}"
        for spec, kind in zip(traces.differentiable, kinds)
    )
    backward.header = [*backward.header, f"derived again for gradients of other kinds ({kinds_text})"]
    return backward


# Note [Recomputing for another backward]
# The backward for other tangent kinds runs the same autograd formulas over the same saved
# variables as the traced one, so it usually reads values the forward saved (or saving.py
# recomputes from them). A subclass's ``__torch_dispatch__`` may read other inner tensors of a saved
# value for a gradient of another kind, though, and the forward chosen for fusion saves fewer values.
# Such a value is recomputed in the backward by the forward ops that made it, any deterministic aten
# op (this backward is the exception, not the common path), from saved values only: the forward's
# inputs are not kept for it, so no call pays memory for a gradient that may never come. Random ops
# and forwards that write in place (a value read again could differ) are never recomputed.
def _recomputed(forward_args: Sequence[Any], forward_ops: Sequence[BoundSymbol], saved: Sequence[Proxy],
                needed: dict[int, Proxy]) -> list[BoundSymbol]:
    """The forward ops (of ``forward_ops``: all of them, Note [Unread views in a forward]) that
    recompute what ``needed`` holds beyond ``saved``, in forward order.

    Raises:
        Unsaved: a value cannot be recomputed from saved values (the value the backward reads, the
            op that made it, and why: the input or op the recomputation would need).
    """
    have = {id(p) for p in saved}
    producer: dict[int, BoundSymbol] = {}
    for bsym in forward_ops:
        for p in proxies_in(bsym.output):
            producer.setdefault(id(p), bsym)
    writes = any("inplace" in b.symbol.tags for b in forward_ops)
    inputs = {id(a) for a in forward_args}
    chosen: dict[int, BoundSymbol] = {}
    for read in needed.values():
        made = producer.get(id(read))
        pending = [read]
        while pending:
            value = pending.pop()
            if id(value) in have:
                continue
            bsym = producer.get(id(value))
            if id(value) in inputs or bsym is None:
                what = "an input of the function" if id(value) in inputs else "a value no forward op makes"
                raise Unsaved(read, made, f"{value.name} is {what} the forward did not save")
            if writes or "random" in bsym.symbol.tags or bsym.symbol.langctx != "aten":
                reason = "the forward writes in place" if writes else f"{bsym.symbol.name} is not recomputed"
                raise Unsaved(read, made, f"the forward did not save {value.name} ({reason})")
            chosen[id(bsym)] = bsym
            have.update(id(p) for p in proxies_in(bsym.output))
            pending.extend(p for p in proxies_in((bsym.args, bsym.kwargs)) if id(p) not in have)
    order = {id(b): i for i, b in enumerate(forward_ops)}
    return sorted(chosen.values(), key=lambda b: order[id(b)])


def describe_unsaved(error: Unsaved) -> tuple[str, str | None]:
    """What to tell the user: the reason, and the user's line whose backward reads the value (else
    the line that made it), if known."""
    made, reader = error.producer, error.reader
    source = reader.source if reader is not None else None
    if not source and made is not None:
        source = made.source
    where = str(source[-1]) if source else None
    op = f" (made by {made.symbol.name})" if made is not None else ""
    return f"it reads {error.value.name}{op}, and {error.why}", where
