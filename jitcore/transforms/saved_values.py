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
        def tracked() -> Any:
            pair = select()
            backward = untimed(pair[1])  # the trial's timing of the pair (executors/trial.py)
            if id(backward) not in self._by_backward:  # first seen: the pair lowered last, if any
                saved = self._own if self._lowered is None else self._lowered
                self._by_backward[id(backward)] = (backward, saved)
            return pair

        return tracked

    def of(self, backward: Any) -> Any:
        return self._by_backward[id(untimed(backward))][1]
