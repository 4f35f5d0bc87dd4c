"""Reads of the program's state that the code a recorded backward runs makes past its watched numbers
(``BackwardWatch``, jitcore/transforms/backward_effects.py): a ``Counter``'s default for a key it lacks,
handed out as a read of that key, and the size of a container (``len(LOG)``, ``LOG.count(x)``), noted
so that a plain number it writes is refused rather than replayed as recorded.

Invariants:
- ``Counter.__missing__`` is replaced at most once for the process, while any thread records, and put
  back when the last recording ends; a recording's own counters are kept per thread, so another thread's
  ``Counter`` (or this thread's outside a recording) gets the class's own default;
- the size reads of a recording are those of the code the recording interprets on its own thread (a
  subclass's ``__torch_dispatch__``/``__torch_function__``), whose C calls pass through
  ``note_native_call``; Python code autograd runs natively (an ``autograd.Function``'s own
  ``backward``) is not seen.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["SizeReads", "counter_defaults", "note_native_call", "size_reads"]

_LOCAL = threading.local()  # .defaults: (ids of the recording's Counters, how to hand out a default)
_LOCK = threading.Lock()
_installed: list[None] = []  # one entry per recording in progress, on any thread
_own: list[Any] = [vars(collections.Counter)["__missing__"]]  # the class's own, as ours was installed


def _missing(counter: Any, key: Any) -> Any:
    ids, default = getattr(_LOCAL, "defaults", (frozenset(), None))
    if id(counter) in ids:
        return default(counter, key)
    return _own[0](counter, key)


@contextlib.contextmanager
def counter_defaults(counters: frozenset[int], default: Callable[[Any, Any], Any]) -> Iterator[None]:
    """In the body, ``counter[key]`` of a ``Counter`` whose ``id`` is in ``counters`` and lacks ``key``
    answers ``default(counter, key)`` (a read of that key: ``COUNTS[k] += 1``), on this thread only."""
    if not counters:
        yield
        return
    outer = getattr(_LOCAL, "defaults", None)
    _LOCAL.defaults = (counters, default)
    with _LOCK:
        if not _installed:
            _own[0] = vars(collections.Counter)["__missing__"]
            collections.Counter.__missing__ = _missing
        _installed.append(None)
    try:
        yield
    finally:
        with _LOCK:
            _installed.pop()
            if not _installed:
                collections.Counter.__missing__ = _own[0]
        _LOCAL.defaults = outer


class SizeReads:
    """The size reads of one recording: ``found`` names the first call that measured a watched container
    (``len(LOG)``, ``LOG.count(x)``), None while there was none."""

    def __init__(self, watched: frozenset[int]) -> None:
        self.watched, self.found = watched, None

    def see(self, fn: Any, args: tuple) -> None:
        if self.found is not None:
            return
        name = getattr(fn, "__name__", "")
        if fn is builtins.len:
            owner = args[0] if len(args) == 1 else None
        elif name in _SIZE_METHODS:  # a bound method, or a method descriptor given its object first
            owner = getattr(fn, "__self__", None)
            if owner is None or isinstance(owner, (type, types.ModuleType)):
                owner = args[0] if args else None
        else:
            return
        if owner is not None and id(owner) in self.watched:
            self.found = f"len({type(owner).__name__})" if fn is builtins.len \
                else f"{type(owner).__name__}.{name}()"


_SIZE_METHODS = frozenset({"count", "index", "__len__", "__length_hint__"})


@contextlib.contextmanager
def size_reads(watched: frozenset[int]) -> Iterator[SizeReads]:
    """The body's measures of an object whose ``id`` is in ``watched``, by code the grad transform's
    recording interprets (a subclass's ``__torch_dispatch__``: ``note_native_call``)."""
    outer = getattr(_LOCAL, "sizes", None)
    _LOCAL.sizes = reads = SizeReads(watched)
    try:
        yield reads
    finally:
        _LOCAL.sizes = outer


def note_native_call(fn: Any, args: tuple) -> None:
    """A call of C code (``fn(*args)``) by code the recording interprets, seen by this thread's
    ``size_reads`` if one is open."""
    reads = getattr(_LOCAL, "sizes", None)
    if reads is not None:
        reads.see(fn, args)
