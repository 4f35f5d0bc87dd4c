"""Value reads inside a tensor subclass's ``__torch_dispatch__``, made again by the grad transform's replay.

Pass 1 reads the values a subclass's dispatch code needs (``t._scale.item()``, a sparse format's
``nonzero``: Note [Reads inside a subclass's code], jitcore/jit/value_reads.py) and records each read
among the subclass call's operations. The grad transform replays that call below autograd on fake
tensors (grad.py), where the same code asks for the same values and cannot have them. ``ReplayedReads``
answers those asks, in order, with what pass 1 read, and records each read's check into the forward on
the replay's tensors: the forward checks it on every call, as pass 1's trace would have (a call with
another value goes to another entry). Dispatch code runs below autograd, so nothing it reads carries
a gradient.

Invariants:
- an ask is answered only by the next read pass 1 recorded inside the call being replayed, of the same
  function; anything else (no read left, another function: the replay took another path; a subclass
  tangent's dispatch in the backward) raises the DataDependentError, and the call runs eagerly
  (jitcore/jit/eager_entries.py);
- the answer reaches the forward only behind its check, made on the replay's own arguments: a replay
  that asked another tensor than pass 1 did fails that check on the entry's first run
  (``nondeterministic_read``), never answers wrongly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import _disable_current_modes

from jitcore.errors import DataDependentError
from jitcore.ir import BoundSymbol, Inlined, Symbol, TraceContext
from jitcore.langctx.reads import READ
from jitcore.proxies import TensorProxy
from jitcore.transforms.recording import resolve_flat

__all__ = ["ReplayedReads"]


class ReplayedReads:
    """The replay's call handler: ``resolve_call``, with pass 1's reads answering the calls that need
    values inside the pass-1 call being replayed."""

    def __init__(self, context: TraceContext, fresh: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Args:
            context: the replay's trace context (the forward's).
            fresh: a new shadow with a pass-1 shadow's metadata (a value-shaped output of the replay).
        """
        self.context = context
        self._fresh = fresh
        self._pending: list[BoundSymbol] = []

    @contextlib.contextmanager
    def replaying(self, bsym: BoundSymbol) -> Iterator[None]:
        """Answer the reads of pass-1 record ``bsym`` while it is replayed."""
        self._pending = _reads_within(bsym.subsymbols)
        try:
            yield
        finally:
            self._pending = []

    def __call__(self, symbol: Symbol, args: tuple, kwargs: dict) -> Any:
        try:
            return resolve_flat(symbol, args, kwargs)
        except DataDependentError:
            if not self._pending or _read_function(self._pending[0]) is not symbol.fn:
                raise
            return Inlined(self._answer(args, kwargs))

    def _answer(self, args: tuple, kwargs: dict) -> Any:
        """The next read's value (its check recorded on ``args``), or a value-shaped op's outputs (the
        op and the checks of their shapes recorded)."""
        record = self._pending.pop(0)
        scope = self.context.scopes[-2]  # the enclosing scope, where the call would have been recorded
        if record.symbol is READ:
            site, value, fn = record.args[:3]
            scope.append(BoundSymbol(READ, (site, value, fn, *args), kwargs, None, (), record.source))
            return value
        new: dict[int, TensorProxy] = {}

        def output(old: Any) -> Any:
            if not isinstance(old, TensorProxy):
                return old
            with _disable_current_modes():  # made here, not recorded by the replay's mode
                new[id(old)] = self.context.values.proxy_for(self._fresh(old.shadow))
            return new[id(old)]

        out = optree.tree_map(output, record.output, none_is_leaf=True)
        scope.append(BoundSymbol(record.symbol, args, kwargs, out, (), record.source))
        while self._pending and _checks_shapes_of(self._pending[0], new):  # Note [The shape checks replayed]
            check = self._pending.pop(0)
            site, traced, fn, olds, *rest = check.args
            replayed = tuple(new[id(o)] for o in olds) if type(olds) is tuple else new[id(olds)]
            scope.append(BoundSymbol(READ, (site, traced, fn, replayed, *rest), {}, None, (), check.source))
        return out


# Note [The shape checks replayed]
# A value-shaped op pass 1 read (``nonzero``, ``x[mask]``, ``masked_select`` in a subclass's dispatch) is
# followed by one check of all its outputs' sizes: ``check_read(site, sizes, output_sizes, (t0, ...),
# symbolic)`` (since b64c34e; before, one check per output with the output itself as fourth argument).
# The replay looked for the old form only, so under grad the forward recorded the op and dropped its
# check: ``x * len(x.nonzero())`` over a TwoTensor requiring grad multiplied every cached call by the
# first call's count. Both forms are replayed on the replay's outputs.
def _checks_shapes_of(record: BoundSymbol, new: dict[int, TensorProxy]) -> bool:
    """Whether ``record`` is the check of the sizes of outputs the replay just made (``new``)."""
    if record.symbol is not READ or len(record.args) < 4:
        return False
    olds = record.args[3]
    if type(olds) is tuple:
        return bool(olds) and all(id(o) in new for o in olds)
    return id(olds) in new


def _reads_within(records: tuple[BoundSymbol, ...]) -> list[BoundSymbol]:
    """The reads among ``records`` and their subsymbols, in program order: checks (``READ``) and
    value-shaped ops (tagged ``data_dependent``, each followed by the checks of its outputs' shapes)."""
    found: list[BoundSymbol] = []
    for bsym in records:
        if bsym.symbol is READ or "data_dependent" in bsym.symbol.tags:
            found.append(bsym)
        else:
            found.extend(_reads_within(bsym.subsymbols))
    return found


def _read_function(record: BoundSymbol) -> Any:
    """The function whose call made a read: a check's (its third argument), a value-shaped op's own."""
    return record.args[2] if record.symbol is READ else record.symbol.fn
