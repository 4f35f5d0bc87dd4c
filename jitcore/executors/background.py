"""Lowering hot cache entries in a background thread, so that the hot call does not stall.

Note [Compiling in the background]
An entry made hot by the default policy (plan.py) would compile its regions on the call that made
it hot: a stall of seconds in the middle of a training or serving loop. Instead that call hands the
lowering to one daemon thread and returns on torch; the entry keeps running on torch until the
thread has made the lowered computation, which the entry then swaps in (one assignment of a
callable, or of a forward/backward pair: a call never mixes the two). ``$JITCORE_BACKGROUND_COMPILE=0``
lowers on the hot call instead; ``wait_for_compiles()`` blocks until every lowering handed over so
far has finished (tests, benchmarks: deterministic).

Invariants:
- jobs run one at a time, in the order they were handed over, on one thread;
- a job never raises into the caller: what lowering does not catch itself is logged;
- a job runs in a copy of the context (``contextvars``) of the thread that handed it over, as it
  was then: torch's configuration modules keep their settings per thread in context variables, so
  the compile sees the settings the hot call saw (the same as lowering on the hot call);
- inductor compiles, from this thread and from any other, hold ``COMPILE_LOCK`` and Dynamo's compile
  lock (isolation.py, Note [Torch's process-global state while compiling]), so two compiles never
  overlap, and what a compile sets process-wide is kept from the program's other threads;
- after ``fork`` the child starts with no jobs (the parent's pending ones are not copied: those
  entries keep running on torch in the child); at exit, jobs not yet started are dropped.
"""

from __future__ import annotations

import atexit
import contextvars
import os
import threading
from collections import deque
from collections.abc import Callable

from jitcore.executors.regions import LOG

__all__ = ["BACKGROUND_ENV", "COMPILE_LOCK", "background_enabled", "on_compile_thread", "submit",
           "wait_for_compiles"]

BACKGROUND_ENV = "JITCORE_BACKGROUND_COMPILE"
COMPILE_LOCK = threading.RLock()


class _Compiler:
    """The jobs handed over and the one thread running them."""

    def __init__(self) -> None:
        self.jobs: deque[tuple[str, Callable[[], None], contextvars.Context]] = deque()
        self.pending = 0  # handed over and not finished
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None
        self.closing = False

    def submit(self, what: str, job: Callable[[], None]) -> None:
        with self.changed:
            if self.closing:
                return
            self.jobs.append((what, job, contextvars.copy_context()))
            self.pending += 1
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="jitcore-compile", daemon=True)
                self.thread.start()
            self.changed.notify_all()

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(lambda: self.jobs or self.closing)
                if self.closing:
                    self.jobs.clear()
                    self.pending = 0
                    self.changed.notify_all()
                    return
                what, job, context = self.jobs.popleft()
            try:
                context.run(job)
            except Exception as exc:  # noqa: BLE001 - a job never raises into anyone (Note above)
                LOG.warning("%s: lowering in the background failed: %s: %s; it runs on torch",
                            what, type(exc).__name__, exc)
            finally:
                with self.changed:
                    self.pending -= 1
                    self.changed.notify_all()

    def wait(self, timeout: float | None) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.pending == 0, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop taking jobs; with ``timeout``, wait that long for the job running now to end."""
        with self.changed:
            self.closing = True
            self.changed.notify_all()
            thread = self.thread
        if timeout is not None and thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


_COMPILER = _Compiler()


def _fresh_after_fork() -> None:
    global _COMPILER, COMPILE_LOCK
    _COMPILER = _Compiler()
    COMPILE_LOCK = threading.RLock()


os.register_at_fork(after_in_child=_fresh_after_fork)
# Note [The compile thread at exit]
# A daemon thread still inside a compile when the interpreter finalizes runs torch's C++ while the
# runtime is torn down: the process aborted ("terminate called without an active exception", exit
# status 134) after a program whose last calls had just handed an entry over. At exit the job running
# now is let finish (torch's own exit handlers, registered before jitcore's, run after this one).
atexit.register(lambda: _COMPILER.close(timeout=120.0))


def background_enabled() -> bool:
    """Whether hot entries are lowered in the background (``$JITCORE_BACKGROUND_COMPILE``, default on).

    Raises:
        ValueError: the variable is set to something other than 0/1.
    """
    text = os.environ.get(BACKGROUND_ENV, "1").strip().lower()
    if text not in ("0", "1", "off", "on", ""):
        raise ValueError(f"${BACKGROUND_ENV} must be 1 or 0, not {text!r}")
    return text not in ("0", "off")


def on_compile_thread() -> bool:
    """Whether the calling thread is the background thread running the lowerings."""
    return threading.current_thread() is _COMPILER.thread


def submit(what: str, job: Callable[[], None]) -> None:
    """Run ``job`` (a lowering that swaps in its result) on the background thread; ``what`` names
    it in log lines."""
    LOG.info("%s is hot: lowering it in the background; it runs on torch meanwhile", what)
    _COMPILER.submit(what, job)


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Block until every lowering handed to the background so far has finished.

    Args:
        timeout: seconds to wait at most (None: no limit).

    Returns:
        True when none is pending, False when ``timeout`` passed first.
    """
    return _COMPILER.wait(timeout)
