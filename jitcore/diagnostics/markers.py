"""``breakpoint()`` inside a jitted function: a marker in the trace that ``jitcore.debug`` stops at.

While tracing, ``breakpoint()`` is not called (a debugger opened then would show proxies, and a
cached call never reaches the line): the pass records a ``Marker`` (where in the trace, which user
line) and warns once, at the user's line, that the call has no effect at run time.
``jitcore.debug`` and ``Debugger`` start with a breakpoint before the first op recorded after
each marker.
Invariant: markers never change a trace; they live beside it, keyed by the trace object.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from jitcore.diagnostics.user_warnings import warn_user
from jitcore.ir import SourceFrame, Trace

__all__ = ["Marker", "markers_of", "record_breakpoint"]

_MARKERS: weakref.WeakKeyDictionary[Trace, list[Marker]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class Marker:
    """A ``breakpoint()`` call met while tracing: before top-level op ``index``, at ``source``."""

    index: int
    source: tuple[SourceFrame, ...] | None


def record_breakpoint(trace: Trace, source: tuple[SourceFrame, ...] | None) -> None:
    """Record a ``breakpoint()`` call at the current end of ``trace`` (called by the tracing pass)."""
    marks = _MARKERS.setdefault(trace, [])
    if not marks:
        warn_user(
            "breakpoint() inside a jitted function does not stop when the compiled function runs; "
            "jitcore.debug(fn, *args) stops there (docs/debugging.md)",
            source,
        )
    marks.append(Marker(len(trace.bound_symbols), source))


def markers_of(trace: Trace) -> list[Marker]:
    """The breakpoint markers recorded for ``trace``."""
    return list(_MARKERS.get(trace, ()))
