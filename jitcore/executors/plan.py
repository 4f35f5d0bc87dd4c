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
``executor="torch"`` (or ``JITCORE_FUSE_AFTER=never``) never lowers.

Invariants:
- a cache entry's computation computes the same thing before and after it is lowered;
- lowering never raises to the user: a failure is logged and the entry keeps running on torch;
- a trace whose inputs require grad is not lowered (it runs under torch's autograd, which a fused
  inference graph would cut); traces of the grad transform (forward, backward) are lowered each.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from jitcore.executors.interface import Executor, get_executor
from jitcore.executors.regions import LOG, lower, partition
from jitcore.ir import Trace, compile_trace
from jitcore.proxies import TensorProxy

__all__ = ["Executors", "DEFAULT_FUSE_AFTER", "FUSE_AFTER_ENV", "executors_from_options", "record_lowered"]

DEFAULT_FUSE_AFTER = 100
FUSE_AFTER_ENV = "JITCORE_FUSE_AFTER"
NEVER = -1

OnLowered = Callable[[Trace], None]


class Executors:
    """Executors in priority order and the policy for lowering with them (Note above).

    Attributes:
        executors: the executors tried for each bound symbol, first claim wins; torch runs the rest.
        fuse_after: cached calls before an entry is lowered; 0: at once; -1: never.
    """

    def __init__(self, executors: Sequence[Executor], fuse_after: int) -> None:
        self.executors = tuple(executors)
        self.fuse_after = fuse_after
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
        if self.fuse_after == 0:
            return self.lowered(trace, on_lowered, grad_off=grad_off) or on_torch
        return self._warming(trace, on_torch, on_lowered, grad_off)

    def lowered(self, trace: Trace, on_lowered: OnLowered | None = None, *,
                grad_off: bool = False) -> Callable[..., Any] | None:
        """``trace`` lowered by the executors, or None when nothing was lowered (then it runs on
        torch as compiled by ``compile_trace``); ``grad_off`` as for ``compile``."""
        grad = [] if grad_off else [a.name for a in trace.args
                                    if isinstance(a, TensorProxy) and a.shadow.requires_grad]
        if grad:
            LOG.info("%s not lowered: its inputs %s require grad (it runs under torch's autograd)",
                     trace.name, ", ".join(grad))
            return None
        try:
            result = lower(trace, partition(trace, self.executors))
            if not result.lowered:
                return None
            computation = compile_trace(result.trace, result.callables)
        except Exception as exc:  # noqa: BLE001 - Note above: lowering never raises
            LOG.warning("%s not lowered: %s: %s; it runs on torch", trace.name, type(exc).__name__, exc)
            return None
        LOG.info("%s lowered: %s", trace.name, "; ".join(result.lowered))
        if on_lowered is not None:
            on_lowered(result.trace)
        return computation

    def _warming(self, trace: Trace, on_torch: Callable[..., Any],
                 on_lowered: OnLowered | None, grad_off: bool) -> Callable[..., Any]:
        """Runs ``on_torch`` for the entry's first ``fuse_after`` runs, then lowers the trace."""
        current = on_torch
        left = self.fuse_after + 1  # runs 0 .. fuse_after - 1 on torch (the tracing call is run 0)

        def computation(*inputs: Any) -> Any:
            nonlocal current, left
            if left:
                left -= 1
                if not left:
                    current = self.lowered(trace, on_lowered, grad_off=grad_off) or on_torch
            return current(*inputs)

        return computation


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
