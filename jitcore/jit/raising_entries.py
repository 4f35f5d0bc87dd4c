"""Raising entries: a call whose pass stopped on the program's own exception keeps a cache entry that runs
calls like it eagerly, until one of them returns (Note [Raising entries]).

Invariants:
- a raising entry's prologue is the stopped pass's guards, as an eager entry's (any set of guards is
  sound: eager is what the call computes, Note [Eager entries] in jit/api.py);
- a call it accepts runs the function eagerly: eager's exception, traceback, effects and message;
- a call it accepts that returns takes the entry out of the cache first thing after: the next call
  like it traces again, so no entry keeps running calls that return eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jitcore.diagnostics.context import ErrorContext, attach
from jitcore.jit.cache_entry import CacheEntry, not_compiled
from jitcore.jit.eager_entries import Eager
from jitcore.prologue import MISS, Guard, Path, Prologue, PrologueBuilder

__all__ = ["RAISING_LIMIT", "RaisedWhenTraced", "past_the_limit", "raising_entry"]

RAISING_LIMIT = 8  # raising entries kept per jitted function: Note [Raising entries]


class RaisedWhenTraced(Exception):  # noqa: N818 - a reason shown by explain, never raised
    """Why a raising entry's calls run eagerly: the text of the exception that stopped the pass."""


# Note [What a raising entry keeps]
# The exception that stopped the pass holds its traceback, whose frames hold the pass: its interpreter
# frames, traces, proxies and shadow tensors (a model's worth, for a model's forward). An entry kept for
# as long as the function lives keeps only that exception's text (its reason) and its guards.


# Note [Raising entries]
# ``if x.shape[0] > 4: raise ValueError(...)`` called five times with the same ``x``: each call missed,
# traced the function again (2 to 3 ms) and raised where the pass stopped, where eager raises in a few
# microseconds (so too a torch error on shapes, ``x @ y`` with sizes that do not match, a failed
# ``assert``, a subclass op that raises eagerly). Note [A program that raises] (jit/eager_entries.py)
# kept no entry, since a pass that raised has no computation. Now it keeps a *raising entry*: its
# prologue is what the pass guarded before it stopped (the sizes, the numbers and the state it had
# read), and a call it accepts runs the function eagerly: eager's exception, with eager's traceback,
# effects and message, and a note. Any set of guards is sound for that, as for an eager entry (Note
# [Eager entries], jit/api.py); but the pass's guards do not pin everything that made it raise (a
# tensor's values: an index out of range, ``if x.sum() > 0: raise``), so a call the entry accepts may
# return. Such a call answers with eager's result and takes the entry out of the cache: the next call
# like it traces again and keeps the entry it traces, so a call that returns runs eagerly at most once
# per raising entry. Under ``fullgraph=True`` no raising entry is kept: that option promises that no
# call runs eagerly, and one that returns would (every call that raises traces again there, as
# before). A pass guards the state it read as the call found it, so a program that reads what it wrote
# before it raised (``LOG.append(x); raise ValueError(len(LOG))``: ``len(LOG) == 0``) would make
# entries no later call matches: a raising entry leaves out the guards on the objects the pass wrote
# (``Pass.raised_writes``), which the call itself changes, and at most ``RAISING_LIMIT`` raising entries
# are kept (the oldest taken out first), so that no program fills the cache with them. The entry's calls
# count as hits; the first call, a miss, answers as before (the pass's exception, or an eager run where
# the pass had made effects eager keeps).
def raising_entry(number: int, traced: Prologue | PrologueBuilder, outcome: Eager, fn: Callable[..., Any],
                  error: BaseException, label: str, *, raised: Callable[[], None],
                  returned: Callable[[CacheEntry], None]) -> CacheEntry:
    """A raising entry (Note [Raising entries]) numbered ``number``: its guards ``traced``'s but those on
    the objects the pass wrote, and the guards of the tensor inputs the pass had bound (``outcome``'s).

    Args:
        number: the entry's number (the miss that made it).
        traced: the stopped pass's prologue (a builder while it ran).
        outcome: the pass's outcome (jit/eager_entries.py): its ``tensor_guards`` and ``written``.
        fn: what a call it accepts runs (the function, eagerly).
        error: the exception that stopped the pass (its text is the entry's reason).
        label: the jitted function's label, for the prologue's header.
        raised: called when a call it accepts raises (the jit counts a hit).
        returned: called with the entry when a call it accepts returns (the jit takes it out).

    Returns:
        The entry, its ``cached_call`` compiled.
    """
    guards = [g for g in traced.guards if not _on_written(g, outcome.written)]
    prologue = Prologue(guards=[*guards, *outcome.tensor_guards], state=list(traced.state), header=[
        f"Constructed by jitcore.jit for {label}: prologue of cache entry {number}, a raising entry "
        "(the calls it accepts run eagerly; one that returns drops it)"])
    check = prologue.compile(_accept)
    reason = RaisedWhenTraced(f"tracing a call like it raised {type(error).__name__}: {error} "
                              "(a call that returns drops this entry)")  # not the error: Note [What a ...]
    entry = CacheEntry(number, prologue, [], not_compiled, not_compiled, eager_reason=reason)

    def cached_call(args: tuple, kwargs: dict) -> Any:
        if check(args, kwargs) is MISS:
            return MISS
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            attach(exc, ErrorContext("eager-raising-entry", entry=number))
            raised()
            raise
        returned(entry)
        return result

    entry.cached_call = cached_call
    return entry


def past_the_limit(newest_first: Sequence[CacheEntry]) -> list[CacheEntry]:
    """The raising entries among ``newest_first`` to take out before another is added: the oldest past
    ``RAISING_LIMIT - 1`` (Note [Raising entries])."""
    raising = [e for e in newest_first if isinstance(e.eager_reason, RaisedWhenTraced)]
    return raising[RAISING_LIMIT - 1:]


def _on_written(guard: Guard, written: frozenset[Path]) -> bool:
    """Whether ``guard`` reads an object at one of the ``written`` paths, or something reached from it."""
    return any(_under(path, place) for path in (guard.path, *guard.related) for place in written)


def _under(path: Path, place: Path) -> bool:
    if path.root != place.root or len(path.steps) < len(place.steps):
        return False
    try:
        return bool(path.steps[:len(place.steps)] == place.steps)
    except Exception:  # noqa: BLE001 - a step's key that cannot be compared: said to be under it
        return True


def _accept(*_inputs: Any) -> bool:
    return True
