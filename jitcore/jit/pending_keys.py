"""Dynamic numbers as keys of dicts of state the program only stores into, replayed with each call's number.

``hist[step] = loss`` on a dict of state read only to be stored into (Note [A dict only stored into],
jit/appends.py) is guarded by the dict's type alone; the key, a dynamic number (an int argument that
changed between calls, a counter, a ``t.item()`` read), was hashed by the store, which specialized it:
one cache entry per step. Here such a store puts a ``PendingKey`` in the pass's dict, a stand-in that
hashes and compares by identity, so nothing of the number's value is read; when the pass ends the
stand-in is diffed into a ``"setitem_at"`` effect whose key, like its value, is a slot the computation
returns per call (jit/effects.py).

Invariants (Note [A key only stored]):
- a stand-in lives only in a dict no load of this pass has read any other way: the first such read, or a
  store at another key, turns every stand-in of that dict into its number's value first (specialized,
  guarded by value as before), in the place eager gives it;
- a dict's stand-ins are diffed in the order the program stored them, and each is replayed as
  ``d[number] = value`` on the dict each call finds, so a key already there keeps its place and takes the
  value, and a new one goes last, as eagerly.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from jitcore.proxies.number import NumberProxy, ObjectProxy

__all__ = ["PendingKey", "PendingKeys"]

# Exact types whose ``__setitem__`` is dict's own, so the stand-ins can be swapped in place (an
# OrderedDict keeps its own order list, which ``dict.__setitem__`` would not update).
_PLAIN_DICTS = (dict, collections.defaultdict)


class PendingKey:
    """A dynamic number stored as a key while tracing, standing in for it in the pass's dict (identity
    hash and equality: the number's value is never read through it)."""

    __slots__ = ("number",)

    def __init__(self, number: NumberProxy) -> None:
        self.number = number

    def __repr__(self) -> str:
        return f"<key {self.number.name}>"


# Note [A key only stored]
# Replaying ``d[n] = v`` with each call's ``n`` is eager's store exactly when nothing else the pass
# does depends on which key ``n`` is: eager's later reads of ``d`` (``len(d)``, ``n in d``, iterating
# it, ``d[k]``) depend on whether ``n`` was new and where it went. So a store takes a stand-in only into
# a dict this pass reached only through loads consumed by a subscript store (``stored_into``), never
# bound whole or read before in the pass (an alias read earlier, ``h = hist``, could read it later
# without a load: such a dict is bound and its keys are specialized as before). Any later load of the
# dict that is not such a store (and any binding of its guards: Provenance asks ``first_state``) first
# ``settle``s it: each stand-in is replaced by its number's value, specialized, the dict rebuilt in
# order so a value already there as a key keeps its first place and takes the stored value (eager's
# ``d[n] = v``). A store at any other key into a dict holding stand-ins settles it first too: the diff
# gives a dict's item effects in the dict's order, so ``d[n] = a; d[0] = b`` with ``0`` already there
# (earlier in the order) would replay ``d[0] = b`` before ``d[n] = a``, a wrong value where ``n == 0``.
# Two stores at the same number share one stand-in (the second overwrites, as eagerly). Stores at two
# different numbers keep two stand-ins, replayed in program order: eager's result whether or not the
# numbers are equal. Not covered (they read the dict natively, past the pass's hooks, after the store):
# C code handed an object that holds the dict (``json.dumps(state)`` where ``state["hist"]`` is it) would
# see the stand-in; the program reaches the dict through no path there, so its keys went unguarded before
# too (docs/user-guide.md, "Side effects").
class PendingKeys:
    """The stand-in keys of one tracing pass (Note [A key only stored])."""

    def __init__(self) -> None:
        self._write_only: dict[int, dict] = {}  # id -> dict reached only by stores
        self._read: set[int] = set()  # ids of dicts read another way in this pass
        self._pending: dict[int, dict[int, PendingKey]] = {}  # id(dict) -> id(number) -> its stand-in

    def stored_into(self, container: Any) -> None:
        """A load of ``container`` consumed by a subscript store (its type alone guarded)."""
        if type(container) in _PLAIN_DICTS and id(container) not in self._read:
            self._write_only[id(container)] = container

    def read(self, container: Any) -> None:
        """Any other load or binding of ``container``: its stand-ins settle, and it takes no more."""
        key = id(container)
        if key in self._read:
            return
        if self._write_only.get(key) is container:
            self.settle(container)
            del self._write_only[key]
        self._read.add(key)

    def store_key(self, container: Any, key: Any) -> Any:
        """The key a subscript store into ``container`` uses: a stand-in for a dynamic number stored into
        a dict only stored into; otherwise ``key``, the dict's stand-ins settled first."""
        if self._write_only.get(id(container)) is not container:
            return key
        if isinstance(key, NumberProxy) and not isinstance(key, ObjectProxy) \
                and type(key.value) in (int, float, bool):
            by_number = self._pending.setdefault(id(container), {})
            found = by_number.get(id(key))
            if found is None:
                found = by_number[id(key)] = PendingKey(key)
            return found
        self.settle(container)
        return key

    def reading(self, first_state: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``first_state`` (StateSnapshots'), which Provenance asks for each container whose guards it
        binds: such a binding reads the container (``read``) first."""

        def first(obj: Any) -> Any:
            if type(obj) in _PLAIN_DICTS:
                self.read(obj)
            return first_state(obj)

        return first

    def keying(self, item_key: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        """The interpreter's ``item_key`` hook: ``item_key`` (jit/tensor_keys.py), then a stand-in where a
        subscript store keys a dict only stored into by a dynamic number (``store_key``)."""

        def keyed(frame: Any, container: Any, key: Any) -> Any:
            key = item_key(frame, container, key)
            if id(container) not in self._write_only:
                return key
            if frame.info.instructions[frame.index - 1].opname == "STORE_SUBSCR":
                return self.store_key(container, key)
            self.read(container)  # (no other use of a load only stored into: Note [A dict only stored into])
            return key

        return keyed

    def settle(self, container: dict) -> None:
        """Replace each stand-in of ``container`` by its number's value, specialized, in eager's place."""
        pending = self._pending.pop(id(container), None)
        if not pending:
            return
        items = list(dict.items(container))
        if not any(type(key) is PendingKey for key, _value in items):
            return
        dict.clear(container)
        for key, value in items:
            dict.__setitem__(container, key.number.specialize() if type(key) is PendingKey else key, value)
