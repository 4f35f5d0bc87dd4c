"""A cached call whose computation raises the program's own error runs eagerly, with eager's effects.

An entry's Python effects (jit/effects.py) are performed after its computation, the first call's
included. Where the computation raises while it runs (an op whose values decide: ``torch.linalg.inv``
of a singular matrix, an index out of range, a failed ``torch._check``), none is performed.

Invariants: a computation wrapped here has changed nothing the caller can see when it raises its signal
(its draws and thread settings are put back, and no input was written: an entry whose computation
writes into an input signals only where the input's version counter says it was not written yet, or
where the input was copied before the call and is put back: Note [An input written before the
computation raises]); the
call then runs eagerly, so its effects, its exception and its message are eager's. An entry with neither
Python effects, input writes nor handlers that a raise would skip (Note [Handlers a raising computation
skips], jit/caught_errors.py), or whose computation writes an input other than as that input itself (a
view, ``.data``), is left as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from jitcore.errors import JitcoreError
from jitcore.ir import BoundSymbol, Trace
from jitcore.jit.caught_errors import raises_on_values
from jitcore.jit.effects import Effects
from jitcore.jit.read_rollback import Undo, writes_inputs_themselves
from jitcore.langctx.reads import ValueCheckFailed
from jitcore.langctx.thread_state import SET_GRAD_ENABLED

__all__ = ["ComputationRaised", "with_eager_on_raise"]


class ComputationRaised(Exception):  # noqa: N818 - a signal to the jit, never seen by the program
    """The computation raised ``error`` and undid its changes: the call runs eagerly. ``handled``: a handler
    the computation skipped may catch the error, so eager may return."""

    def __init__(self, error: Exception, handled: bool = False) -> None:
        super().__init__(str(error))
        self.error, self.handled = error, handled


# Note [Effects of a raising call]
# ``try: return torch.linalg.inv(a) finally: log.append(1)`` with a singular ``a``: eagerly the append
# happens and then the error propagates; the traced computation raised the error from the op, and the
# effects replayed after it (the append, a counter bumped before the ``try``) were lost: a wrong log
# and a wrong count on every call that raises. Which effects eager makes depends on where it raised,
# which ``finally`` bodies and ``except`` handlers ran on the way out, and what they did: the diffed
# effects of the traced path say none of it. So a computation of an entry with Python effects that
# raises the program's error puts back what it changed (RNG draws, Python generators:
# ``read_rollback.Undo``; the thread's settings: Note [A computation that raises inside no_grad]) and
# signals ``ComputationRaised``; the call then runs eagerly (jit/api.py), which makes eager's effects
# and raises eager's exception. Transformers
# wraps forwards in try/finally, so such code is traced, not refused: only a call that raises pays.
# A computation that writes into an input (in place) cannot be undone without copying the input on every
# call. Note [A raise before the computation writes an input] decides when it need not be.
def with_eager_on_raise(trace: Trace, computation: Callable[..., Any],
                        effects: Effects | None, *, handlers: bool = False) -> Callable[..., Any]:
    """``computation``, signalling ``ComputationRaised`` where it raises the program's error and the entry
    has Python effects or writes its inputs, or ``handlers`` the computation skips may catch the error
    (Notes [Effects of a raising call], [A raise before the computation writes an input], [Handlers a
    raising computation skips] in jit/caught_errors.py)."""
    undo = Undo.of(trace, trace.bound_symbols)
    if not handlers and (effects is None or not effects.effects) and (undo is None or not undo.positions):
        return _eager_on_raise_with_grad_records(trace, computation, undo)
    written: tuple[int, ...] = ()
    if undo is not None and undo.positions:
        copies = handlers or effects is not None and bool(effects.effects)  # Note [An input written ...]
        copied = _written_before_a_raise(trace, undo.positions) if copies else ()
        written = tuple(i for i in undo.positions if i not in copied)
        if written and not writes_inputs_themselves(trace):
            return computation
        undo = dataclasses.replace(undo, positions=copied)
    if undo is not None:  # the thread's settings are put back inside (``with_settings_restored``)
        undo = dataclasses.replace(undo, state_changes=False)
        if not undo.random and not undo.drawn and not undo.positions:
            undo = None

    def run(*inputs: Any) -> Any:
        versions = _versions(inputs, written)
        restore = undo.take(inputs) if undo is not None else None
        try:
            return computation(*inputs)
        except (ValueCheckFailed, JitcoreError):
            raise
        except Exception as error:
            if written and (versions is None or _versions(inputs, written) != versions):
                raise  # an input written before the raise: Note [A raise before the computation writes ...]
            if restore is not None:
                restore()
            raise ComputationRaised(error, handled=handlers) from error

    return run


# Note [A raise before the computation writes an input]
# A training step that raises in its forward (a singular matrix, an index out of range) and updates its
# parameters in place after it (``w.sub_(lr * g)``, an optimizer's step) writes no input on the calls
# that raise: eager made the effects before the raise and those of the ``finally`` bodies, the cached
# computation none of them. Every in-place write of a tensor bumps its version counter (``_version``),
# which a view and ``detach()`` share with it: so where every record that writes an input's storage
# writes the input itself (not ``x.data``, whose counter is its own, nor a view, to keep it plain), the
# computation reads the written inputs' versions before it runs (a few ints a call, no copy) and, where
# it raises and none changed, nothing was written: it signals as an entry without writes does. Where one
# changed it raises as before, the effects of that call lost (``a.add_(0)`` before the raising op: a
# known limit, docs/user-guide.md). An inference tensor has no version counter: never signalled.
# An entry without Python effects that writes its inputs is wrapped so too: ``try: return x[i]
# finally: acc.mul_(2)`` with ``i`` out of range doubles ``acc`` eagerly, and the computation raised at
# the index, before the write; the eager run makes it. A call that returns pays a few version reads.
def _versions(inputs: tuple, positions: tuple[int, ...]) -> tuple[int, ...] | None:
    """The version counters of ``inputs[i]`` for ``i`` in ``positions``; None where one has none."""
    try:
        return tuple(inputs[i]._version for i in positions)  # noqa: SLF001 - Note [A raise before the ...]
    except (RuntimeError, AttributeError):  # an inference tensor
        return None


# Note [An input written before the computation raises]
# ``box.n += 1; x.mul_(2); return torch.gather(x, 0, idx)`` with ``idx`` out of range: eagerly ``x`` is
# doubled, ``box.n`` counted, and the error propagates. The computation doubled ``x`` and raised at the
# gather, and the entry's effects, performed after the computation, were lost (``box.n`` stayed): the
# version check above saw the write, so the call could not run eagerly on top of it. So too a handler
# the computation skips (``except IndexError as e: raise ValueError(...) from e`` around ``x.add_(1);
# return x[i]``: the IndexError came out where eager raised ValueError). Which of the program's effects
# eager made before the raise, the traced records do not say (the effects are diffs of the whole pass).
# So for an entry with Python effects or such handlers, the inputs that a record before the last op that
# may raise on values (``raises_on_values``, jit/caught_errors.py: the ops whose errors only the values
# decide, the list that decides which calls a ``try`` block refuses) may write are copied before each
# call; when the computation raises, they are put back with the draws, and the call runs eagerly:
# eager's writes, effects and exception. A write after that op is seen by its version, as before. Only
# entries with effects or such handlers and such a write pay (a copy of those inputs per call; a
# training step updates its parameters after its forward's last such op and copies nothing). An op
# outside the list that raises after a write still loses the call's effects (docs/user-guide.md).
def _written_before_a_raise(trace: Trace, positions: tuple[int, ...]) -> tuple[int, ...]:
    """The inputs among ``positions`` that a record of ``trace`` before its last op that may raise on
    values may write (Note [An input written before the computation raises])."""
    records = trace.bound_symbols
    last = max((i for i, b in enumerate(records) if any(
        s.symbol.langctx == "torch" and raises_on_values(s.symbol, s.args) for s in _flat(b))), default=-1)
    before = Undo.of(trace, records[:last]) if last > 0 else None
    return tuple(i for i in positions if before is not None and i in before.positions)


def _flat(bsym: BoundSymbol) -> Iterator[BoundSymbol]:
    """``bsym`` and its subsymbols, in program order."""
    yield bsym
    for sub in bsym.subsymbols:
        yield from _flat(sub)


# Note [A raising call that leaves grad mode changed]
# ``torch.set_grad_enabled(False)`` called outside a ``with`` block, then an op that raises on values:
# eagerly grad mode stays off after the error (nothing puts it back); the computation put it back as the
# call found it (Note [A computation that raises inside no_grad], jit/read_rollback.py), so the caller's
# next eager code built graphs that eager's would not. The records cannot tell such a call from a
# ``with`` block's ``__enter__`` (both are ``_set_grad_enabled(False)``; where the error leaves the
# block decides), so a computation with grad-mode records that raises signals ``ComputationRaised``:
# the call runs eagerly and leaves grad mode where eager does (only calls that raise pay), unless it
# draws random numbers or writes its inputs (not undone here: such a trace is left as it is, its grad
# mode put back). An entry with Python effects already runs so (above).
def _eager_on_raise_with_grad_records(trace: Trace, computation: Callable[..., Any],
                                      undo: Undo | None) -> Callable[..., Any]:
    """``computation``, signalling ``ComputationRaised`` where it raises with grad-mode records
    (Note [A raising call that leaves grad mode changed]); ``undo``: the trace's ``Undo.of``."""
    if not any(b.symbol is SET_GRAD_ENABLED for b in trace.bound_symbols):
        return computation
    if undo is not None and (undo.positions or undo.random or undo.drawn):
        return computation

    def run(*inputs: Any) -> Any:
        try:
            return computation(*inputs)
        except (ValueCheckFailed, JitcoreError):
            raise
        except Exception as error:
            raise ComputationRaised(error) from error

    return run
