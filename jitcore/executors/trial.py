"""The default policy's measurement: a hot entry's lowered computation timed against its torch one
on the entry's own runs, and the faster kept (plan.py, Note [Lowering only what is faster]).

A candidate is what ``select()`` hands a run: one callable (a computation) or a tuple of them (the
grad transform's forward and backward). ``Trial.pick`` hands out the two candidates in turn, each
callable wrapped to time its calls, for ``runs`` runs each; the next pick decides, and from then on
``pick`` returns the chosen candidate itself (no wrapper, no timing).

Invariants:
- a run uses one candidate whole: its forward and its backward are of the same candidate;
- the candidates alternate run by run, so drift in the machine's speed falls on both alike;
- the cost of a candidate is, over the callables both candidates timed at least once, the sum of
  each callable's fastest call (a backward never run, as in a forward-only loop, does not count);
- a trial whose two costs are within ``CLOSE`` of each other runs another round of ``runs`` runs each,
  up to ``ROUNDS`` rounds, and decides on all of them (Note [A close trial runs again]);
- the torch candidate is kept only when it is measured faster; then what was recorded of the lowered
  one (its execution traces) is withdrawn, so the traces shown are the ones that run;
- a call that raises records no time;
- a timed callable is a new object: ``untimed`` gives the callable it times, whose identity is the
  candidate's (jit_hook.py keys what a forward saved by its backward's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from jitcore.executors.regions import LOG

__all__ = ["CLOSE", "DEFAULT_TRIAL_RUNS", "ROUNDS", "Trial", "is_close", "keeps_lowered", "untimed"]

DEFAULT_TRIAL_RUNS = 16
# Note [A close trial runs again]
# The decision is made once, for good, on the fastest call of each candidate's runs; the runs
# alternate, so a machine that is slower for the whole trial is slower for both. What a loaded
# machine (two cores shared by a test run and other processes) still does is add noise of a few
# percent to each fastest call, which decides a trial whose candidates are that close: it keeps
# whichever the noise favoured. Such a trial runs another round before deciding, up to ROUNDS
# rounds, each fastest call then taken over more runs (the chance that a candidate's every call was
# slowed falls with each round); a clear trial decides after one round as before. Only trial runs
# are timed: once decided, calls run the chosen candidate itself.
CLOSE = 0.1  # costs within 10% of the larger one
ROUNDS = 3
T = TypeVar("T")
Clock = Callable[[], int]


def keeps_lowered(on_torch: Sequence[Sequence[int]], lowered: Sequence[Sequence[int]]) -> bool:
    """Whether the lowered candidate is kept, given each candidate's call times per callable.

    Args:
        on_torch, lowered: per callable of the candidate (one, or forward and backward), the times
            of its timed calls in clock units.

    Returns:
        False only when the torch candidate's cost is lower (module docstring: the cost).
    """
    torch_cost, lowered_cost = _costs(on_torch, lowered)
    return lowered_cost <= torch_cost


def _costs(on_torch: Sequence[Sequence[int]], lowered: Sequence[Sequence[int]]) -> tuple[int, int]:
    """Each candidate's cost (module docstring), over the callables both timed; (0, 0) for none."""
    pairs = [(min(a), min(b)) for a, b in zip(on_torch, lowered) if a and b]
    return sum(a for a, _ in pairs), sum(b for _, b in pairs)


def is_close(on_torch: Sequence[Sequence[int]], lowered: Sequence[Sequence[int]]) -> bool:
    """Whether the two costs are within ``CLOSE`` of the larger (Note [A close trial runs again])."""
    torch_cost, lowered_cost = _costs(on_torch, lowered)
    larger = max(torch_cost, lowered_cost)
    return larger > 0 and abs(torch_cost - lowered_cost) <= CLOSE * larger


class Trial(Generic[T]):
    """Two candidates for an entry's runs, timed in turn until one is chosen."""

    def __init__(self, on_torch: T, lowered: T, what: str, *, runs: int = DEFAULT_TRIAL_RUNS,
                 clock: Clock = time.perf_counter_ns, withdraw: Sequence[Callable[[], None]] = ()) -> None:
        """Args:
            on_torch, lowered: the candidates (a callable, or a tuple of callables, of one shape).
            what: the entry's name, for the log line.
            runs: timed runs of each candidate before choosing.
            clock: the time in integer units (injected by tests).
            withdraw: called when the torch candidate is kept (the lowered traces' records).
        """
        self.what, self.runs, self.clock, self.withdraw = what, runs, clock, tuple(withdraw)
        self.candidates = (on_torch, lowered)
        width = len(lowered) if isinstance(lowered, tuple) else 1
        self.times: tuple[list[list[int]], ...] = ([[] for _ in range(width)], [[] for _ in range(width)])
        self.timed = (self._timing(0, on_torch), self._timing(1, lowered))
        self.picks = 0
        self.rounds = 1
        self.chosen: T | None = None
        self.lock = threading.Lock()  # one decision, even with runs on several threads

    def pick(self) -> T:
        """The candidate for this run: the two in turn (timed), then the chosen one."""
        if self.chosen is not None:
            return self.chosen
        if self.picks >= 2 * self.runs * self.rounds:
            if self.rounds < ROUNDS and is_close(*self.times):
                self.rounds += 1  # Note [A close trial runs again]
            else:
                return self._decide()
        self.picks += 1
        return self.timed[self.picks % 2]  # the lowered one first: its first call warms it

    def _decide(self) -> T:
        with self.lock:
            if self.chosen is None:
                on_torch, lowered = self.times
                keep = keeps_lowered(on_torch, lowered)
                torch_ns, lowered_ns = (sum(min(t) for t in ts if t) for ts in self.times)
                LOG.info("%s: lowered %.1f us per run, on torch %.1f us (%d rounds): %s", self.what,
                         lowered_ns / 1e3, torch_ns / 1e3, self.rounds,
                         "keeps the lowered one" if keep else "keeps running on torch")
                if not keep:
                    for undo in self.withdraw:
                        undo()
                self.chosen = self.candidates[1 if keep else 0]
        return self.chosen

    def _timing(self, which: int, candidate: Any) -> Any:
        if isinstance(candidate, tuple):
            return tuple(self._timed(self.times[which][i], fn) for i, fn in enumerate(candidate))
        return self._timed(self.times[which][0], candidate)

    def _timed(self, times: list[int], fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self.clock

        def timed(*args: Any) -> Any:
            start = clock()
            result = fn(*args)
            times.append(clock() - start)
            return result

        timed.untimed = fn  # type: ignore[attr-defined]
        return timed


def untimed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable a trial's timed callable times, or ``fn`` itself when it is not one."""
    return getattr(fn, "untimed", fn)
