"""Python calls whose result differs from call to call: the clock, Python's random generators.

A cached call runs the computation, not the program's Python: a value the program took from
``time.time()``, ``random.random()`` or ``datetime.now()`` while tracing would be a constant of the
trace, the same on every call where eager gets a new one (and a branch on ``random.random() < p``
would always take the traced side). Such a call stops tracing with UnsupportedOperationError
(JC-T001): without ``fullgraph`` the call runs eagerly (Note [Eager entries], jit/api.py), as
torch.compile breaks its graph at ``time.time()``.

Refused: the C functions of ``time`` that read a clock, ``datetime``'s ``now``/``utcnow``/``today``,
``os.urandom``/``os.getrandom``, and every method of a ``random.Random`` instance (the module's
functions are methods of its hidden instance; ``randint``, ``choice`` and ``uuid4`` reach
``random``/``getrandbits``/``urandom``). Exempt: calls made by the standard library's ``logging``
(a record's creation time), whose records are replayed with the trace's time (docs/user-guide.md).

The same holds for ``next(it)`` of an iterator of the caller's or of state that advances in C (a
module-level ``itertools.count()`` handing out ids, an ``itertools.cycle``, a generator made before
the call): jitcore does not snapshot such iterators, so the trace would keep the first call's item
(``iterator_lookasides``). An iterator the program makes itself (``next(iter(xs))``,
``next(model.parameters())``) is traced.

Invariant: a refused call has not run (no generator state was consumed while tracing).
"""

from __future__ import annotations

import datetime
import os
import random
import time
import types
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run

__all__ = ["iterator_lookasides", "refuse_nondeterministic"]

_CLOCKS = frozenset(
    getattr(time, name) for name in (
        "time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
        "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns",
    ) if hasattr(time, name)
) | frozenset(getattr(os, name) for name in ("urandom", "getrandom") if hasattr(os, name))
_NOW = frozenset({"now", "utcnow", "today"})
_CURRENT_TIME = frozenset({time.localtime, time.gmtime, time.ctime, time.asctime, time.strftime})
_LOGGING = os.path.join("logging", "__init__.py")


def refuse_nondeterministic(fn: Any, args: tuple) -> None:
    """Raise JC-T001 when the program's call of ``fn`` with ``args`` gives a value that changes per
    call (a call the standard library's ``logging`` makes is exempt)."""
    name = _nondeterministic(fn, args)
    if name is None:
        return
    run = current_run()
    if run is not None and run.frames and run.frames[-1].code.co_filename.endswith(_LOGGING):
        return
    raise UnsupportedOperationError(
        f"{name}() gives a new value on every call, which a cached call could not reproduce",
        hints=("take the value outside the jitted function and pass it in as an argument",),
    )


def _nondeterministic(fn: Any, args: tuple) -> str | None:
    """The name of ``fn`` when it reads a clock or a Python random generator, else None."""
    try:
        if fn in _CLOCKS:
            return f"{fn.__module__ or 'time'}.{fn.__name__}"
        if fn in _CURRENT_TIME and _reads_the_clock(fn, args):
            return f"time.{fn.__name__}"
    except TypeError:  # an unhashable callable
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinMethodType) and isinstance(owner, random.Random):
        return f"random.{fn.__name__}"
    if isinstance(owner, type) and issubclass(owner, datetime.date) and getattr(fn, "__name__", "") in _NOW:
        return f"{owner.__name__}.{fn.__name__}"
    return None


def _reads_the_clock(fn: Any, args: tuple) -> bool:
    """``time.localtime()`` and the like read the clock only without a time argument."""
    if fn is time.strftime:
        return len(args) < 2
    return not args or args[0] is None


def iterator_lookasides(path_of: Callable[[Any], Any], base: Callable[..., Any]) -> dict[Any, Callable]:
    """``next``: refused (JC-T001) for an iterator the program reached from its arguments or state
    (``path_of`` finds a path) whose ``__next__`` is C code; otherwise ``base``, the interpreter's own."""

    def next_(iterator: Any, *default: Any) -> Any:
        step = getattr(type(iterator), "__next__", None)
        if step is not None and not isinstance(step, types.FunctionType) and path_of(iterator) is not None:
            raise UnsupportedOperationError(
                f"next() of a {type(iterator).__name__} the function reaches from its arguments or state "
                "advances it in C code, which a cached call could not replay",
                hints=("take the item outside the jitted function and pass it in as an argument",),
            )
        return base(iterator, *default)

    return {next: next_}
