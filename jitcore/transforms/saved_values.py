"""Which forward values a grad computation's backward takes: the grad transform's own choice, or the
lowered forward's, per backward callable.

Invariant: a backward callable is paired with the saved values of the forward it was selected with,
so a backward derived later for other tangent kinds takes what the call's forward saved.
"""

from __future__ import annotations

from typing import Any

from jitcore.executors.trial import untimed
from jitcore.ir import Trace

__all__ = ["SavedValues"]


# Note [The pair of a settled select]
# Once the executors' ``select`` is settled (executors/plan.py, Note [A settled choice]) it returns one
# pair for good, and ``tracked`` has recorded that pair's saved values on the call that returned it:
# nothing a later call of ``tracked`` would record is new. ``tracked.settled`` is then that pair, and
# the grad computation's forward uses it without calling ``tracked`` (autograd.py). A pair is only
# marked settled by the call that recorded it, so ``of(backward)`` finds every backward a forward ran with.


class SavedValues:
    """Which forward values the forward paired with each backward callable saves: the grad
    transform's own choice, or the lowered forward's (the pair chosen for fusion, mincut.py), so that
    a backward derived for other tangent kinds takes what the call's forward saved (rederive.py)."""

    def __init__(self, own: Any, record: Any) -> None:
        self._own, self._record = own, record
        self._lowered: Any = None  # the lowered forward's saved values, once lowered
        self._by_backward: dict[int, tuple[Any, Any]] = {}  # id -> (backward callable, saved)

    def lowered(self, trace: Trace) -> Any:
        """``on_lowered`` of the forward: runs before its pair is first selected; returns how to
        withdraw the record (``record_lowered``)."""
        self._lowered = trace.output[1]
        return self._record(trace)

    def tracking(self, select: Any) -> Any:
        """``select`` (a grad computation's pair of each call), recording which values each pair's
        forward saves; its ``settled`` attribute is the pair once ``select``'s is and that pair has
        been recorded (Note [The pair of a settled select])."""

        def tracked() -> Any:
            pair = select()
            backward = untimed(pair[1])  # the trial's timing of the pair (executors/trial.py)
            if id(backward) not in self._by_backward:  # first seen: the pair lowered last, if any
                saved = self._own if self._lowered is None else self._lowered
                self._by_backward[id(backward)] = (backward, saved)
            if getattr(select, "settled", None) is pair:
                tracked.settled = pair  # type: ignore[attr-defined]
            return pair

        tracked.settled = None  # type: ignore[attr-defined]
        return tracked

    def of(self, backward: Any) -> Any:
        return self._by_backward[id(untimed(backward))][1]
