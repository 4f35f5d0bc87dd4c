"""The executors of a jitted function, and when they lower its traces (the fusion policy).

``Executors`` is what ``jit(fn, executors=...)`` makes: the executors in priority order (``torch``
last, implicitly) and ``fuse_after``, the number of cached calls after which a cache entry's trace
is lowered. ``compile(trace)`` returns the computation of a cache entry.

Note [The default fusion policy]
Compiling a region with inductor costs about 1.5 s of C++ compilation per region the first time
(0.1-0.4 s from inductor's disk cache), against microseconds per call saved. A program called a
few times (a script, a test) never earns that back; a loop does. So by default (no ``executors=``)
a cache entry runs on torch and counts its calls; after ``fuse_after`` of them (default 100, or
``$JITCORE_FUSE_AFTER``) it is lowered with ``("inductor", "torch")`` and its later calls run the
fused code. ``executors=(...)`` given explicitly lowers on the first call (``fuse_after=0``);
``executor="torch"`` (or ``JITCORE_FUSE_AFTER=never``) never lowers. The hot call does not wait for
the compile: it is done on a background thread while the entry keeps running on torch
(background.py, Note [Compiling in the background]; ``JITCORE_BACKGROUND_COMPILE=0``: on the hot call).

Note [Lowering only what is faster]
A lowered region costs a call of inductor's compiled module (its argument checks and the
wrapper around the kernels, a few microseconds) and saves the per-op Python calls and memory
traffic of its ops. On tiny tensors and regions of a few ops (an 8-16-8 MLP forward: two matmuls
that inductor calls as extern kernels and one relu) the first is the larger: the lowered forward
ran 36.3 us against the torch trace's 32.1 us. Whether it is cannot be read off the trace without
a model of the machine, so the default policy measures it: once the lowered computation is ready,
the entry's next runs alternate between it and the torch one, ``trial_runs`` (16) runs each, each
callable timed (trial.py), and the faster is kept for good (the torch one only when it was
measured faster; its lowered traces are then withdrawn from the entry's traces, and a log line
gives both times). Each call is timed on the wall clock and a callable's cost is its fastest call,
so a call slowed by other work on the machine does not decide. The trial costs 32 runs, each on code
that computes the same thing. Only the
default policy measures (no ``executors=``, no ``fuse_after=``): lowering asked for explicitly is
kept, as asked.

Invariants:
- a cache entry's computation computes the same thing before and after it is lowered;
- lowering never raises to the user: a failure is logged and the entry keeps running on torch;
- a trace whose inputs require grad runs under torch's autograd: it is lowered only by executors
  that compile for autograd (``trains``: the inductor executor compiles such a region's forward and
  backward through AOTAutograd, as torch.compile does), never into an inference graph that would
  cut the autograd graph; traces of the grad transform (forward, backward) are lowered each,
  at the same run (``compile_together``), and the forward chooses the backward of its call: what it
  saved is what that backward takes, even when the pair switches between the forward and backward.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from jitcore.executors.background import background_enabled, submit
from jitcore.executors.composites import composite_calls
from jitcore.executors.functional import out_of_place
from jitcore.executors.interface import Executor, FusionExecutor, get_executor
from jitcore.executors.regions import LOG, lower, merge_regions, partition
from jitcore.executors.trial import DEFAULT_TRIAL_RUNS, Clock, Trial
from jitcore.ir import BoundSymbol, Trace, compile_trace
from jitcore.proxies import TensorProxy

__all__ = ["Executors", "DEFAULT_FUSE_AFTER", "FUSE_AFTER_ENV", "executors_from_options", "record_lowered"]

DEFAULT_FUSE_AFTER = 100
FUSE_AFTER_ENV = "JITCORE_FUSE_AFTER"
NEVER = -1

# given the execution trace when one is made; may return how to withdraw what it recorded
OnLowered = Callable[[Trace], Callable[[], None] | None]
# given ``Executors.fuses``, traces suited to fusion that compute what the given ones compute
Alternative = Callable[[Callable[[BoundSymbol], bool]], Sequence[Trace] | None]
T = TypeVar("T")
Callables = tuple[Callable[..., Any], ...]


class Executors:
    """Executors in priority order and the policy for lowering with them (Note above).

    Attributes:
        executors: the executors tried for each bound symbol, first claim wins; torch runs the rest.
        fuse_after: cached calls before an entry is lowered; 0: at once; -1: never.
        background: whether the hot call hands the lowering to the background thread (and keeps
            running on torch until it is done) rather than lowering before it runs.
        trial_runs: runs of each, the lowered and the torch computation, timed before the faster
            is kept (Note [Lowering only what is faster]); 0: the lowered one is kept untimed.
        clock: the clock of those timings (integer units).
    """

    def __init__(self, executors: Sequence[Executor], fuse_after: int,
                 background: bool | None = None, *, trial_runs: int = 0,
                 clock: Clock = time.perf_counter_ns) -> None:
        """Args:
            executors, fuse_after, trial_runs, clock: as the attributes.
            background: lower a hot entry in the background (None: ``$JITCORE_BACKGROUND_COMPILE``,
                default on; background.py, Note [Compiling in the background]).
        """
        self.executors = tuple(executors)
        self.fuse_after = fuse_after
        self.background = background_enabled() if background is None else background
        self.trial_runs = trial_runs
        self.clock = clock
        self.name = ",".join(e.name for e in self.executors)

    @property
    def lowers(self) -> bool:
        return self.fuse_after >= 0 and any(e.name != "torch" for e in self.executors)

    def compile(self, trace: Trace, on_lowered: OnLowered | None = None, *,
                grad_off: bool = False) -> Callable[..., Any]:
        """The computation running ``trace``.

        Args:
            trace: a final computation trace (plain tensors), or a forward or backward trace.
            on_lowered: called with the execution trace (fused regions as calls) when one is made:
                at once when ``fuse_after`` is 0, on the call that makes the entry hot otherwise.
            grad_off: the trace runs with grad mode off (a forward or backward of the grad
                transform), so inputs that require grad do not keep it from being lowered.

        Returns:
            A function taking ``trace.args`` positionally.
        """
        on_torch = compile_trace(trace)
        if not self.lowers:
            return on_torch
        withdraw: list[Callable[[], None]] = []

        def lower() -> Callable[..., Any] | None:
            return self.lowered(trace, _recording(on_lowered, withdraw), grad_off=grad_off)

        if self.fuse_after == 0:
            return lower() or on_torch
        select = self._when_hot(on_torch, lower, trace.name, withdraw)
        return lambda *inputs: select()(*inputs)

    def compile_together(self, traces: Sequence[Trace], on_lowered: Sequence[OnLowered | None],
                         alternative: Alternative | None = None) -> Callable[[], Callables]:
        """Traces that run together (the grad transform's forward and the backward that takes what
        it saved): they are lowered at the same run, so a call never mixes two choices.

        Args:
            traces: the traces, each run with grad mode off.
            on_lowered: per trace, as for ``compile``.
            alternative: given which bound symbols the executors fuse, other traces computing the
                same thing that suit fusion (transforms/mincut.py: fewer saved values, cheap ops
                recomputed), or None. Used only when every one of them is lowered; otherwise
                ``traces`` are lowered.

        Returns:
            ``select()``: the callables of one run (one per trace, in order); each call of it counts
            a run towards ``fuse_after``. Call it once per run and use what it returned throughout.
        """
        on_torch = tuple(compile_trace(t) for t in self._on_torch(traces, on_lowered))
        if not self.lowers:
            return _settled_at(on_torch)
        withdraw: list[Callable[[], None]] = []

        def lower() -> tuple[Callable[..., Any], ...] | None:
            return self._lowered_together(traces, [_recording(c, withdraw) for c in on_lowered], alternative)

        if self.fuse_after == 0:
            return _settled_at(lower() or on_torch)
        return self._when_hot(on_torch, lower, "/".join(t.name for t in traces), withdraw)

    @staticmethod
    def _on_torch(traces: Sequence[Trace], on_lowered: Sequence[OnLowered | None]) -> list[Trace]:
        """What the torch executor runs of ``traces``: the forward (the first) with its composite calls
        (composites.py), shown by its ``on_lowered`` when it has any; the others as they are."""
        forward = composite_calls(traces[0])
        if forward is not traces[0] and on_lowered[0] is not None:
            on_lowered[0](forward)
        return [forward, *traces[1:]]

    def fuses(self, bsym: BoundSymbol) -> bool:
        """Whether ``bsym`` would be claimed by a fusion executor that asks for recomputation
        (``recompute`` attribute true): the first executor claiming it is one."""
        for executor in self.executors:
            if executor.name == "torch":
                return False
            if executor.claim(bsym) is None:
                return isinstance(executor, FusionExecutor) and bool(getattr(executor, "recompute", False))
        return False

    def lowered(self, trace: Trace, on_lowered: OnLowered | None = None, *,
                grad_off: bool = False) -> Callable[..., Any] | None:
        """``trace`` lowered by the executors, or None when nothing was lowered (then it runs on
        torch as compiled by ``compile_trace``); ``grad_off`` as for ``compile``."""
        made = self._lower(trace, grad_off)
        if made is None:
            return None
        if on_lowered is not None:
            on_lowered(made[1])
        return made[0]

    def _lower(self, trace: Trace, grad_off: bool) -> tuple[Callable[..., Any], Trace] | None:
        """The lowered computation and its execution trace, or None (nothing lowered, logged)."""
        grad = [] if grad_off else [a.name for a in trace.args
                                    if isinstance(a, TensorProxy) and a.shadow.requires_grad]
        if grad and not all(getattr(e, "trains", False) for e in self.executors if e.name != "torch"):
            LOG.info("%s not lowered: its inputs %s require grad (it runs under torch's autograd) and "
                     "not every executor compiles for autograd", trace.name, ", ".join(grad))
            return None
        try:
            rewritten = out_of_place(trace)  # private in-place writes do not split regions
            result = lower(rewritten, merge_regions(partition(rewritten, self.executors)), grad=bool(grad))
            if not result.lowered:
                return None
            computation = compile_trace(result.trace, result.callables)
        except Exception as exc:  # noqa: BLE001 - Note above: lowering never raises
            LOG.warning("%s not lowered: %s: %s; it runs on torch", trace.name, type(exc).__name__, exc)
            return None
        LOG.info("%s lowered: %s", trace.name, "; ".join(result.lowered))
        return computation, result.trace

    def _lowered_together(self, traces: Sequence[Trace], on_lowered: Sequence[OnLowered | None],
                          alternative: Alternative | None) -> tuple[Callable[..., Any], ...] | None:
        """``compile_together``'s callables once lowered, or None when nothing was lowered."""
        candidates = [traces]
        if alternative is not None and any(getattr(e, "recompute", False) for e in self.executors):
            try:
                other = alternative(self.fuses)
            except Exception as exc:  # noqa: BLE001 - Note above: lowering never raises
                LOG.warning("%s: no alternative for fusion: %s: %s", traces[0].name, type(exc).__name__, exc)
                other = None
            if other is not None:
                candidates.insert(0, other)
        for chosen in candidates:
            made = [self._lower(t, grad_off=True) for t in chosen]
            if chosen is not traces and any(m is None for m in made):
                LOG.info("%s: the traces chosen for fusion were not all lowered; the others are",
                         "/".join(t.name for t in traces))
                continue
            if all(m is None for m in made):
                return None
            for m, callback in zip(made, on_lowered):
                if m is not None and callback is not None:
                    callback(m[1])
            return tuple(m[0] if m is not None else compile_trace(t) for m, t in zip(made, chosen))
        return None

    def _when_hot(self, on_torch: T, lower: Callable[[], T | None], what: str,
                  withdraw: list[Callable[[], None]]) -> Callable[[], T]:
        """``select()``: ``on_torch`` for an entry's first ``fuse_after`` runs (the tracing call is
        run 0), then what ``lower()`` returns (``on_torch`` when None), made at run ``fuse_after``:
        before it runs, or, with ``background``, on the background thread while it and later runs
        use ``on_torch`` until the lowered one is swapped in. With ``trial_runs``, the lowered one
        and ``on_torch`` are timed in turn before one is kept (Note [Lowering only what is
        faster]; ``withdraw`` undoes the lowered traces' records)."""
        current = on_torch
        trial: Trial[T] | None = None
        left = self.fuse_after + 1

        def made(lowered: T | None) -> None:
            nonlocal current, trial
            if lowered is None:
                select.settled = on_torch  # type: ignore[attr-defined]
                return
            if self.trial_runs:
                trial = Trial(on_torch, lowered, what, runs=self.trial_runs, clock=self.clock,
                              withdraw=withdraw)
            else:
                current = lowered  # one assignment: a run reads either the old or the new
                select.settled = lowered  # type: ignore[attr-defined]

        def select() -> T:
            nonlocal current, trial, left
            if left:
                left -= 1
                if not left:
                    if self.background:
                        submit(what, lambda: made(lower()))
                    else:
                        made(lower())
            elif trial is not None:
                if trial.chosen is None:
                    return trial.pick()
                current, trial = trial.chosen, None
                select.settled = current  # type: ignore[attr-defined]
            return current

        select.settled = None  # type: ignore[attr-defined]
        return select


# Note [A settled choice]
# ``compile_together``'s ``select`` returns the same pair on every run once nothing is left to choose:
# no lowering (or lowering at once), the lowering made and kept without a trial, nothing lowered, or
# the trial decided. It says so by its ``settled`` attribute, the pair it returns from then on (None
# before). A grad computation's forward then takes that pair without calling ``select`` and the
# saved values' tracking around it (saved_values.py, Note [The pair of a settled select]): three
# Python frames of each cached call of a module under grad mode (an MLP forward, about 0.4 us of 30).
def _settled_at(chosen: T) -> Callable[[], T]:
    """A ``select`` returning ``chosen`` on every run, settled from the start (Note [A settled choice])."""

    def select() -> T:
        return chosen

    select.settled = chosen  # type: ignore[attr-defined]
    return select


def executors_from_options(executor: str | None, executors: Sequence[Any] | None,
                           fuse_after: int | None) -> Executors:
    """The ``Executors`` for ``jit``'s options.

    Args:
        executor: the older single-executor option: ``"torch"`` means never lower.
        executors: names or executor objects in priority order; lowers at once unless ``fuse_after``.
        fuse_after: cached calls before lowering (None: 0 with ``executors``, else the default).

    Raises:
        ValueError: an unknown executor name, both options given, or a negative ``fuse_after``.
        TypeError: ``executors`` is a string rather than a sequence.
    """
    if executor is not None and executors is not None:
        raise ValueError("pass executors=(...) or the older executor=, not both")
    if isinstance(executors, str):
        raise TypeError(f"executors takes a sequence of names, e.g. ({executors!r}, 'torch')")
    if fuse_after is not None and (type(fuse_after) is not int or fuse_after < 0):
        raise ValueError(f"fuse_after must be a non-negative int, not {fuse_after!r}")
    if executor is not None:
        chosen = [get_executor(executor)]
        return Executors([*chosen, get_executor("torch")] if executor != "torch" else chosen,
                         0 if fuse_after is None else fuse_after)
    if executors is not None:
        chosen = [get_executor(e) if isinstance(e, str) else e for e in executors]
        return Executors(chosen, 0 if fuse_after is None else fuse_after)
    default = [get_executor("inductor"), get_executor("torch")]
    if fuse_after is not None:
        return Executors(default, fuse_after)
    return Executors(default, _default_fuse_after(), trial_runs=DEFAULT_TRIAL_RUNS)


def _default_fuse_after() -> int:
    text = os.environ.get(FUSE_AFTER_ENV, "").strip().lower()
    if not text:
        return DEFAULT_FUSE_AFTER
    if text in ("never", "off", "-1"):
        return NEVER
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"${FUSE_AFTER_ENV} must be a number of calls or 'never', not {text!r}") from None
    if value < 0:
        raise ValueError(f"${FUSE_AFTER_ENV} must be a number of calls or 'never', not {text!r}")
    return value


def record_lowered(*lists: list[Trace]) -> OnLowered:
    """An ``on_lowered`` that appends the execution trace to each of ``lists`` (a cache entry's
    traces, ``last_traces``), and returns how to remove it again."""

    def record(trace: Trace) -> Callable[[], None]:
        for traces in lists:
            traces.append(trace)

        def withdraw() -> None:
            for traces in lists:
                traces[:] = [t for t in traces if t is not trace]

        return withdraw

    return record


def _recording(on_lowered: OnLowered | None, withdraw: list[Callable[[], None]]) -> OnLowered | None:
    """``on_lowered`` keeping what it returns (how to withdraw its record) in ``withdraw``."""
    if on_lowered is None:
        return None

    def call(trace: Trace) -> None:
        undo = on_lowered(trace)
        if undo is not None:
            withdraw.append(undo)

    return call
