"""The cache of one jitted function: its entries, newest first, and a dispatch table over them.

A call is answered by the first entry whose prologue accepts it. With a handful of entries they are
simply tried in turn (the one-entry fast path stays one prologue call). Past ``SCAN_LIMIT`` entries a
cheap *dispatch key* of the call — shape and dtype of each positional tensor, the value of each
positional int/str/bool (the type of a dynamic number), the type of anything else — picks the few entries
filed under the same key,
so a cached call's cost stays flat however many entries there are (benchmarks/bench_cache_scaling.py).

Invariants:
- the key only narrows the candidates; every candidate's full prologue still decides, so a key that
  collides (``1`` and ``True``, ``0.0`` and ``-0.0``) costs a check, never a wrong answer;
- everything a guard pins that the key looks at is pinned exactly by the prologue (tensor shape and
  dtype, literal type and value), so an entry filed under one key never accepts a call with another;
  an entry with symbolic sizes (jitcore/jit/shapes.py) accepts calls of many shapes: it is filed
  under every key, a candidate of every call (after the entries of the call's own key that are newer);
- the entry tuple and the dispatch table are replaced, never mutated (copy on write): a call running
  in one thread sees a consistent snapshot while another thread adds or evicts an entry under the
  jitted function's lock.
"""

from __future__ import annotations

from collections.abc import Container, Hashable
from typing import Any

import torch

__all__ = ["SCAN_LIMIT", "EntryCache", "dispatch_key"]

# Up to this many entries a call tries them all (no key computed); past it, the dispatch table.
SCAN_LIMIT = 4

_Tensor = torch.Tensor
_BY_VALUE = frozenset((int, str, bool))
_NO_SUBCLASS_TORCH_FUNCTION = torch._C.DisableTorchFunctionSubclass  # noqa: SLF001
_DYNAMIC = frozenset((int, float))


def dispatch_key(args: tuple, typed: Container[int] = ()) -> tuple:
    """The key a call with positional ``args`` is filed and looked up under (an int or float at a
    position in ``typed``, a dynamic number, by its type only)."""
    if typed:
        return tuple([
            type(a) if type(a) in _DYNAMIC and i in typed else _key_of(a) for i, a in enumerate(args)
        ])
    return tuple(  # a list comprehension: faster than a generator here
        [
            (a.shape, a.dtype) if type(a) is _Tensor else a if type(a) in _BY_VALUE else _key_of(a)
            for a in args
        ]
    )


def _key_of(a: Any) -> Hashable:
    t = type(a)  # not isinstance: it reads ``__class__``, which a class may compute
    if t is _Tensor:
        return a.shape, a.dtype
    if issubclass(t, _Tensor):
        with _NO_SUBCLASS_TORCH_FUNCTION():  # a subclass's own __torch_function__ never runs for the key
            return a.shape, a.dtype
    return a if t in _BY_VALUE else t


class EntryCache:
    """The entries of one jitted function (any objects), newest first, with their dispatch table.

    Attributes:
        newest_first: all entries, the newest first (a tuple, replaced on every change).
        buckets: dispatch key -> entries filed under it, newest first; None while there are at most
            SCAN_LIMIT entries (then callers try ``newest_first``).
    """

    __slots__ = ("_anywhere", "_keys", "_typed", "buckets", "newest_first")

    def __init__(self, typed: Container[int] = ()) -> None:
        self._typed = typed  # positions of dynamic numbers: keyed by type, since entries take any value
        self.newest_first: tuple = ()
        self.buckets: dict[Hashable, tuple] | None = None
        self._keys: dict[int, Hashable] = {}
        self._anywhere: tuple = ()  # the entries filed under every key, newest first

    def type_by_type(self, positions: frozenset[int]) -> None:
        """From now on key the numbers at ``positions`` by type (arguments become dynamic numbers).
        Entries already filed under a value stay there: a call finds them no longer, and is answered
        by an entry filed by type (the next trace's)."""
        self._typed = frozenset(self._typed) | positions  # (every position is typed already when a range)

    def candidates(self, args: tuple) -> tuple:
        """The entries that may accept a call with positional ``args``, newest first."""
        buckets = self.buckets
        if buckets is None:
            return self.newest_first
        try:
            return buckets.get(dispatch_key(args, self._typed), self._anywhere)
        except Exception:  # noqa: BLE001 - see _safe_key
            return buckets.get(_UNKEYED, self._anywhere)

    def add(self, entry: Any, args: tuple, *, limit: int, any_shape: bool = False) -> list[Any]:
        """File ``entry`` (traced for a call with positional ``args``; under every key when it
        accepts ``any_shape``); evict the oldest entries past ``limit``. Returns the evicted
        entries. Callers serialise calls of ``add``."""
        keys = dict(self._keys)
        keys[id(entry)] = _ANYWHERE if any_shape else _safe_key(args, self._typed)
        entries = (entry,) + self.newest_first
        evicted = list(entries[max(limit, 1):])
        entries = entries[: max(limit, 1)]
        for old in evicted:
            keys.pop(id(old), None)
        self._file(entries, keys)
        return evicted

    def remove(self, entry: Any) -> None:
        """Take ``entry`` out of the cache (a raising entry whose call returned: jit/raising_entries.py);
        nothing when it is gone already. Callers serialise calls of ``remove`` and ``add``."""
        if not any(e is entry for e in self.newest_first):
            return
        keys = dict(self._keys)
        keys.pop(id(entry), None)
        self._file(tuple(e for e in self.newest_first if e is not entry), keys)

    def _file(self, entries: tuple, keys: dict[int, Hashable]) -> None:
        """Make ``entries`` (newest first, each filed under ``keys[id(entry)]``) the cache's."""
        buckets = None
        anywhere = tuple(e for e in entries if keys[id(e)] is _ANYWHERE)
        if len(entries) > SCAN_LIMIT:
            table: dict[Hashable, list] = {keys[id(e)]: [] for e in entries if keys[id(e)] is not _ANYWHERE}
            for e in entries:
                for bucket in table.values() if keys[id(e)] is _ANYWHERE else (table[keys[id(e)]],):
                    bucket.append(e)
            buckets = {k: tuple(v) for k, v in table.items()}
        self._anywhere = anywhere
        self._keys = keys
        # Order matters for readers in other threads: a table never names an entry that is gone
        # from newest_first for longer than this assignment pair.
        self.buckets = buckets
        self.newest_first = entries

    def __len__(self) -> int:
        return len(self.newest_first)


class _Unkeyed:
    """The key of calls whose arguments cannot be hashed: they share one bucket."""

    __slots__ = ()


_UNKEYED = _Unkeyed()
_ANYWHERE = _Unkeyed()  # the key of entries with symbolic sizes: filed in every bucket


def _safe_key(args: tuple, typed: Container[int]) -> Hashable:
    try:
        key = dispatch_key(args, typed)
        hash(key)
    except Exception:  # noqa: BLE001 - an unhashable shape or a failing __hash__: one shared bucket
        return _UNKEYED
    return key
