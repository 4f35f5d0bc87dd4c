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
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from jitcore.executors.background import background_enabled, submit
from jitcore.executors.functional import out_of_place
from jitcore.executors.interface import Executor, FusionExecutor, get_executor
from jitcore.executors.regions import LOG, lower, merge_regions, partition
from jitcore.ir import BoundSymbol, Trace, compile_trace
from jitcore.proxies import TensorProxy

__all__ = ["Executors", "DEFAULT_FUSE_AFTER", "FUSE_AFTER_ENV", "executors_from_options", "record_lowered"]

DEFAULT_FUSE_AFTER = 100
FUSE_AFTER_ENV = "JITCORE_FUSE_AFTER"
NEVER = -1

OnLowered = Callable[[Trace], None]
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
    """

    def __init__(self, executors: Sequence[Executor], fuse_after: int,
                 background: bool | None = None) -> None:
        """Args:
            executors, fuse_after: as the attributes.
            background: lower a hot entry in the background (None: ``$JITCORE_BACKGROUND_COMPILE``,
                default on; background.py, Note [Compiling in the background]).
        """
        self.executors = tuple(executors)
        self.fuse_after = fuse_after
        self.background = background_enabled() if background is None else background
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

        def lower() -> Callable[..., Any] | None:
            return self.lowered(trace, on_lowered, grad_off=grad_off)

        if self.fuse_after == 0:
            return lower() or on_torch
        select = self._when_hot(on_torch, lower, trace.name)
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
        on_torch = tuple(compile_trace(t) for t in traces)
        if not self.lowers:
            return lambda: on_torch

        def lower() -> tuple[Callable[..., Any], ...] | None:
            return self._lowered_together(traces, on_lowered, alternative)

        if self.fuse_after == 0:
            chosen = lower() or on_torch
            return lambda: chosen
        return self._when_hot(on_torch, lower, "/".join(t.name for t in traces))

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

    def _when_hot(self, on_torch: T, lower: Callable[[], T | None], what: str) -> Callable[[], T]:
        """``select()``: ``on_torch`` for an entry's first ``fuse_after`` runs (the tracing call is
        run 0), then what ``lower()`` returns (``on_torch`` when None), made at run ``fuse_after``:
        before it runs, or, with ``background``, on the background thread while it and later runs
        use ``on_torch`` until the lowered one is swapped in."""
        current = on_torch
        left = self.fuse_after + 1

        def swap_in() -> None:
            nonlocal current
            made = lower()
            if made is not None:
                current = made  # one assignment: a run reads either the old or the new

        def select() -> T:
            nonlocal current, left
            if left:
                left -= 1
                if not left:
                    if self.background:
                        submit(what, swap_in)
                    else:
                        current = lower() or on_torch
            return current

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
    return Executors(default, _default_fuse_after() if fuse_after is None else fuse_after)


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
    traces, ``last_traces``)."""

    def record(trace: Trace) -> None:
        for traces in lists:
            traces.append(trace)

    return record
