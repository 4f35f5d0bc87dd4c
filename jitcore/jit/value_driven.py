"""Read sites whose values drive a function: where a new value on (nearly) every call means a new trace.

A value the program reads (``t.item()``, ``t.tolist()``, ``bool(t)``) and needs as a Python value is
checked by the computation (jitcore/jit/value_reads.py); a call that reads another value goes to
another entry, or traces a new one. ``DrivenReads`` counts, per read site, the distinct values such
misses showed; a site that reached ``LIMIT`` of them drives the function (Note [Programs that tensor
values drive]).

Invariants: only the misses of value checks are counted (never a value the computation accepted); the
values kept per site are at most ``LIMIT``; a site, once driving, stays so for the life of the jitted
function.
"""

from __future__ import annotations

from typing import Any

from jitcore.errors import DataDependentError
from jitcore.langctx.reads import ReadSite, ValueCheckFailed, same_value

__all__ = ["LIMIT", "DrivenReads"]

LIMIT = 8  # distinct values at one read site (torch.compile's recompile limit is 8 too)


# Note [Programs that tensor values drive]
# A program whose Python control flow follows tensor values (a beam search ranking ``topk(...).tolist()``
# with ``heapq.nlargest``, a k-means loop that stops on ``allclose``, an early exit on ``loss.item()``)
# is traced with the values of its first call and checked by value on every later one. Where the values
# repeat (a flag, a few iteration counts) the entries serve them. Where they are new on nearly every
# call, every call traced again: a beam search over fresh inputs ran 500x slower than eager (80 ms a
# call), evicting entries at the cache limit without end. torch.compile breaks its graph at such a
# read and runs the Python after it eagerly. Here, once a read site has shown ``LIMIT`` distinct values
# in the checks that sent calls away, a call that no entry takes and that failed at that site runs
# eagerly and adds an eager entry (Note [Eager entries], jit/api.py) whose guards are those of the entry
# that failed there: it accepted this call's inputs, and any guards are sound for an eager entry. Calls
# like it then run eagerly at once (the eager entry is tried first), with one warning naming the line.
# Calls whose inputs differ (another shape, another type) still trace. ``fullgraph=True`` refuses such
# reads from the start (no entry checks values).
class DrivenReads:
    """The distinct values that failed value checks showed, by read site, for one jitted function."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._values: dict[tuple, list[Any]] = {}
        self._driving: set[tuple] = set()

    def note(self, failed: ValueCheckFailed) -> None:
        """Count the traced and the new value of a failed check at its site."""
        key = failed.site.key
        if key in self._driving:
            return
        seen = self._values.setdefault(key, [])
        for value in (failed.expected, failed.got):
            if not any(same_value(value, s) for s in seen):
                seen.append(value)
        if len(seen) >= self.limit:
            self._driving.add(key)
            del self._values[key]

    def drives(self, site: ReadSite) -> bool:
        """Whether the values read at ``site`` drive the function (the Note above)."""
        return site.key in self._driving

    def reason(self, site: ReadSite, label: str) -> DataDependentError:
        """The eager entry's reason: the site and its line."""
        return DataDependentError(
            f"the value read by {site} was new on {self.limit} calls, each a new trace of {label}: "
            "the program's Python follows tensor values there, so calls like it run eagerly",
            hints=("move the Python that follows the values (the loop over .tolist() or .item()) out of "
                   "the jitted function, and jit the tensor work it calls",),
        )
