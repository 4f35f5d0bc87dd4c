"""A cached call whose computation raises the program's own error runs eagerly, with eager's effects.

An entry's Python effects (jit/effects.py) are performed after its computation, the first call's
included. Where the computation raises while it runs (an op whose values decide: ``torch.linalg.inv``
of a singular matrix, an index out of range, a failed ``torch._check``), none is performed.

Invariants: a computation wrapped here has changed nothing the caller can see when it raises its signal
(its draws and thread settings are put back, and it writes no input); the call then runs eagerly, so
its effects, its exception and its message are eager's. An entry without Python effects, or whose
computation writes into an input, is left as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from jitcore.errors import JitcoreError
from jitcore.ir import Trace
from jitcore.jit.effects import Effects
from jitcore.jit.read_rollback import Undo
from jitcore.langctx.reads import ValueCheckFailed

__all__ = ["ComputationRaised", "with_eager_on_raise"]


class ComputationRaised(Exception):  # noqa: N818 - a signal to the jit, never seen by the program
    """The computation raised ``error`` and undid its changes: the call runs eagerly."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


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
# A computation that writes into an input (in place) is not wrapped: undoing the write would copy the
# input on every call. It raises as before, its effects lost (a known limit, docs/user-guide.md).
def with_eager_on_raise(trace: Trace, computation: Callable[..., Any],
                        effects: Effects | None) -> Callable[..., Any]:
    """``computation``, signalling ``ComputationRaised`` where it raises the program's error and the entry
    has Python effects (Note [Effects of a raising call])."""
    if effects is None or not effects.effects:
        return computation
    undo = Undo.of(trace, trace.bound_symbols)
    if undo is not None and undo.positions:
        return computation
    if undo is not None:  # the thread's settings are put back inside (``with_settings_restored``)
        undo = dataclasses.replace(undo, state_changes=False)

    def run(*inputs: Any) -> Any:
        restore = undo.take(inputs) if undo is not None else None
        try:
            return computation(*inputs)
        except (ValueCheckFailed, JitcoreError):
            raise
        except Exception as error:
            if restore is not None:
                restore()
            raise ComputationRaised(error) from error

    return run
