"""Dynamic numbers as keys of dicts of state the program only stores into (and elements of sets it only adds
to), replayed with each call's number.

``hist[step] = loss`` on a dict of state read only to be stored into (Note [A dict only stored into],
jit/appends.py) is guarded by the dict's type alone; the key, a dynamic number (an int argument that
changed between calls, a counter, a ``t.item()`` read), was hashed by the store, which specialized it:
one cache entry per step. Here such a store puts a ``PendingKey`` in the pass's dict, a stand-in that
hashes and compares by identity, so nothing of the number's value is read; when the pass ends the
stand-in is diffed into a ``"setitem_at"`` effect whose key, like its value, is a slot the computation
returns per call (jit/effects.py). ``seen.add(n)`` on a set of state read only to be added to is the same
(Note [An element only added]): an ``"add"`` effect.

Invariants (Note [A key only stored]):
- a stand-in lives only in a dict no load of this pass has read any other way: the first such read, or a
  store at another key, turns every stand-in of that dict into its number first (hashed as the store
  would have hashed it, so guarded as before), in the place eager gives it;
- a dict's stand-ins are diffed in the order the program stored them, and each is replayed as
  ``d[number] = value`` on the dict each call finds, so a key already there keeps its place and takes the
  value, and a new one goes last, as eagerly.
"""

from __future__ import annotations

import bisect
import collections
import heapq
from collections.abc import Callable
from typing import Any

from jitcore.jit.appends import stack_use
from jitcore.prologue import Path
from jitcore.proxies.number import NumberProxy, ObjectProxy, specialize_all
from jitcore.proxies.text import TextProxy

__all__ = ["PUSHES", "PendingKey", "PendingKeys", "is_push", "only_added_to", "pushed_onto"]

# Exact types whose ``__setitem__`` is dict's own, so the stand-ins can be swapped in place (an
# OrderedDict keeps its own order list, which ``dict.__setitem__`` would not update).
_PLAIN_DICTS = (dict, collections.defaultdict)


_HELD = (*_PLAIN_DICTS, set, list)  # the containers that can hold stand-ins or pending pushes
_BUILTIN_METHOD = type([].append)


def _number_key(key: Any) -> bool:
    """Whether ``key`` is a dynamic number that a stand-in can take the place of."""
    return isinstance(key, NumberProxy) and not isinstance(key, ObjectProxy) \
        and type(key.value) in (int, float, bool)


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
# ``settle``s it: each stand-in is replaced by its number, hashed as the store would have hashed it, the
# dict rebuilt in order so a value already there as a key keeps its first place and takes the stored
# value (eager's ``d[n] = v``). A store at any other key into a dict holding stand-ins settles it first
# too: the diff gives a dict's item effects in the dict's order, so ``d[n] = a; d[0] = b`` with ``0`` there
# already (earlier in the order) would replay ``d[0] = b`` before ``d[n] = a``: a wrong value where n == 0.
# Two stores at the same number share one stand-in (the second overwrites, as eagerly). Stores at two
# different numbers keep two stand-ins, replayed in program order: eager's result whether or not the
# numbers are equal. Not covered (they read the dict natively, past the pass's hooks, after the store):
# C code handed an object that holds the dict (``json.dumps(state)`` where ``state["hist"]`` is it) would
# see the stand-in; the program reaches the dict through no path there, so its keys went unguarded before
# too (docs/user-guide.md, "Side effects").
# Note [An element only added]
# ``seen.add(n)`` on a set of state bound it whole (its contents guarded), and hashing ``n`` specialized
# it: an entry per element and per set. A load consumed by looking ``add`` up on an exact ``set``
# (``only_added_to``) reads nothing of the set (``add`` only inserts; whether the element was there
# changes nothing the program sees): its type is guarded, and the set is only added to, like a dict
# only stored into (Note [A key only stored]). The element a C call ``add`` is handed is a stand-in
# where it is a dynamic number; a plain element (numbers, text, bytes, None, tuples of them) goes in as
# it is; any other (a class with a Python ``__hash__``/``__eq__``, compared natively with the set's
# elements) binds the set whole first (``bind_whole``), as before. What the pass added is replayed as
# ``s.add(e)`` onto the set each call finds (the ``"add"`` effect, jit/effects.py), each stand-in as its
# call's number. A later load of the set (``len(seen)``, ``n in seen``) settles its stand-ins, as for a
# dict: the answer depends on the element, which is then guarded by value.
_PLAIN_ELEMENTS = (int, float, bool, str, bytes, type(None))


def only_added_to(frame: Any) -> bool:
    """Whether the value the current load pushes is consumed by looking ``add`` up on it (the next
    instruction), so the program cannot read the set through it (Note [An element only added])."""
    instructions = frame.info.instructions
    following = instructions[frame.index] if frame.index < len(instructions) else None
    return following is not None and following.opname in _LOOKUPS and following.argval == "add"


_LOOKUPS = frozenset({"LOAD_METHOD", "LOAD_ATTR"})


def _plain(element: Any) -> bool:
    kind = type(element)
    return kind in _PLAIN_ELEMENTS or kind is tuple and all(_plain(e) for e in element)


# Note [An item only pushed]
# ``heapq.heappush(heap, (loss.item(), step))`` on a list of state bound the list whole (its contents
# guarded) and handed C the item's values, specialized: where the item lands depends on comparisons with
# the items there, so every call was an entry. A load that is the heap of such a call, its item computed
# by the instructions right after it (``pushed_onto``), reads nothing of the list itself: its type is
# guarded, and the push of an item C compares alone (plain values, numbers and text of the computation,
# tuples of them: ``_pushable``) is not made while tracing but recorded, with the item as the program made it
# (its numbers names of the computation), and replayed as ``heappush`` onto the list each call finds (the
# ``"heappush"`` effect, jit/effects.py), whose comparisons are then eager's own. A later load of the
# list in the pass (``heap[0]``, ``len(heap)``, ``heappop(heap)``, ``heap.append``) settles its pending
# pushes first: each made then, in program order, with its numbers specialized, and the list bound whole
# by that load, as before. A push onto a list loaded for a push but read since (``len(heap)`` inside the
# item), or reached through two paths, binds the list whole and is made at once, as before. Not covered:
# items C cannot compare (``(1.0, None)`` pushed over ``(1.0, 2)``) raise eager's TypeError when the push
# is replayed, after the computation and after the effects on other objects: eager raises at the push.
# ``bisect.insort(top, v)`` (``insort_left``/``insort_right``, no ``lo``/``hi``/``key``) is such a push too:
# where the item lands depends on the items there alone, compared by C (20 traces in 20 calls before:
# /tmp/eff55-probes/push_forms.py); it is recorded and replayed as the same function.
# Note [A list argument only pushed onto]
# ``heapq.heappush(s, v)`` or ``bisect.insort(s, v)`` on a list parameter: the parameter was handed to a
# call, so the list was bound whole and every call traced again (20 in 20: /tmp/eff55-probes/item1.py).
# Such a call is a helper that only adds to the list (jit/helper_appends.py: the callee a module's
# function, ``heapq.heappush``, or a global naming one, the list its first argument), so the parameter is
# bound as a list only appended to: the program's own copy, empty, its type guarded. The copy is noted
# here as a heap of its own (``pushed_argument``) and its pushes recorded as those onto a heap of state,
# replayed onto the caller's list. ``len(s)`` (jit/measured_lists.py) counts the pushes recorded before
# it. The copy cannot settle a push (nothing else loads it); a push it cannot record (an item C compares
# through Python code, ``lo``/``key`` arguments), or one with appends around it (their replayed order
# would not be the program's: the copy's appends are replayed before the pushes), asks for a pass that
# binds the list whole (``read_argument``, Note [Containers reached twice]).
_SCAN = 32
PUSHES = (heapq.heappush, bisect.insort_right, bisect.insort_left)  # ``bisect.insort`` is ``insort_right``


def is_push(fn: Any) -> bool:
    """Whether ``fn`` is one of the C functions that add an item to a list by comparing it with the items
    there (Note [An item only pushed])."""
    return any(fn is push for push in PUSHES)


def pushed_onto(frame: Any) -> bool:
    """Whether the value the current load pushes is the list of a ``heapq.heappush(heap, item)`` (or
    ``bisect.insort(top, item)``) call whose item the instructions right after the load compute (Note
    [An item only pushed])."""
    if not any(is_push(v) for v in frame.stack[-3:]):
        return False
    instructions, i = frame.info.instructions, frame.index
    above = 0  # values pushed over the list
    for j in range(i, min(i + _SCAN, len(instructions))):
        inst = instructions[j]
        use = stack_use(inst)
        if inst.opname == "CALL" and use is not None and use[0] > above:  # the call taking the list
            return inst.arg == 2 and above == 1
        if use is None or use[0] > above:
            return False
        above += use[1] - use[0]
    return False


def _pushable(item: Any) -> bool:
    """Whether ``item`` is compared by C alone: plain values, numbers and text of the computation, and
    tuples of them (an object with a Python ``__lt__`` is pushed at once, as before)."""
    return _plain(item) or isinstance(item, (NumberProxy, TextProxy)) and not isinstance(item, ObjectProxy) \
        or type(item) is tuple and all(_pushable(e) for e in item)


class PendingKeys:
    """The stand-in keys of one tracing pass (Note [A key only stored])."""

    def __init__(self, bind_whole: Callable[[Any], None], read_argument: Callable[[Path], None]) -> None:
        """``bind_whole(container)``: bind a container of state with the guards of its first state;
        ``read_argument(path)``: ask for a pass binding a list argument whole (Note [A list argument only
        pushed onto])."""
        self._bind_whole = bind_whole
        self._read_argument = read_argument
        self._arguments: set[int] = set()  # ids of argument copies noted by ``pushed_argument``
        self._write_only: dict[int, Any] = {}  # id -> dict reached only by stores, set only by ``add``
        self._read: set[int] = set()  # ids of dicts read another way in this pass
        self._pending: dict[int, dict[int, PendingKey]] = {}  # id(dict) -> id(number) -> its stand-in
        self._pushes: dict[int, list[Any]] = {}  # id(list) -> (function, item) pushed onto it, not made yet
        self._paths: dict[int, tuple[list, Path]] = {}  # id(list) loaded for a push -> (it, its path)
        # ``settle_set(s, stand_ins)``: put a reached set's stand-ins in eager's place, whether it could
        self.settle_set: Callable[[set, dict[int, PendingKey]], bool] | None = None

    def stored_into(self, container: Any) -> None:
        """A load of ``container`` consumed by a subscript store (its type alone guarded)."""
        if type(container) in _PLAIN_DICTS and id(container) not in self._read:
            self._write_only[id(container)] = container

    def added_to(self, container: set) -> None:
        """A load of the set ``container`` consumed by looking ``add`` up on it (its type alone guarded)."""
        if id(container) not in self._read:
            self._write_only[id(container)] = container

    def added(self, fn: Any, args: tuple) -> tuple:
        """The arguments the C call ``fn`` is handed: a stand-in for a dynamic number added to a set only
        added to (Note [An element only added]); an element that is not plain binds the set whole."""
        if not self._write_only or getattr(fn, "__name__", None) != "add":
            return args
        if fn is set.add and len(args) == 2:
            container, element = args
        elif type(fn) is _BUILTIN_METHOD and len(args) == 1:
            container, element = fn.__self__, args[0]
        else:
            return args
        if type(container) is not set or self._write_only.get(id(container)) is not container:
            return args
        if _number_key(element):
            found = self._stand_in(container, element)
            return (container, found) if fn is set.add else (found,)
        if not _plain(element):
            self.read(container)
            self._bind_whole(container)
        return args

    def _stand_in(self, container: Any, number: NumberProxy) -> PendingKey:
        by_number = self._pending.setdefault(id(container), {})
        found = by_number.get(id(number))
        if found is None:
            found = by_number[id(number)] = PendingKey(number)
        return found

    def pushed_to(self, heap: list, path: Path) -> None:
        """A load of the list ``heap`` that is the heap of a ``heappush`` (its type alone guarded)."""
        found = self._paths.setdefault(id(heap), (heap, path))
        if found[1] != path:  # reached two ways: the effect's path must be the one each call's list is at
            self.read(heap)
        elif id(heap) not in self._read:
            self._write_only[id(heap)] = heap

    def pushed_argument(self, own: list, path: Path) -> None:
        """The program's copy ``own`` of a list argument only appended to or pushed onto (Note [A list
        argument only pushed onto])."""
        self._arguments.add(id(own))
        self.pushed_to(own, path)

    def push(self, fn: Any, args: tuple, kwargs: dict) -> bool:
        """``heapq.heappush(*args)``, ``bisect.insort(*args)``: recorded, not made, where the list is only
        pushed onto (Note [An item only pushed]); False where it is to be made now (the list bound whole
        first where a load for this push guarded only its type)."""
        if len(args) != 2 or kwargs or type(args[0]) is not list:
            if args and id(args[0]) in self._arguments:
                self._read_argument(self._paths[id(args[0])][1])
            return False
        heap, item = args
        argument = id(heap) in self._arguments
        if self._write_only.get(id(heap)) is heap and _pushable(item) and not (argument and heap):
            self._pushes.setdefault(id(heap), []).append((fn, item))
            return True
        if argument:  # an item C compares through Python code, or the copy's appends before it
            self._read_argument(self._paths[id(heap)][1])
        elif id(heap) in self._paths:
            self._bind_whole(heap)
        return False

    def pending(self, container: Any) -> int:
        """How many pushes onto ``container`` are recorded and not made (its ``len()`` counts them)."""
        return len(self._pushes.get(id(container), ()))

    def has_pushes(self) -> bool:
        """Whether pushes are recorded and not made (effects eager keeps)."""
        return any(self._pushes.values())

    def pushes(self) -> list[tuple[Path, Any, Any]]:
        """The recorded pushes (where the list is, the function, the item), in program order:
        ``"heappush"`` effects. An argument's copy appended to after its pushes asks for a pass binding
        it whole (Note [A list argument only pushed onto])."""
        for key, items in self._pushes.items():
            if key in self._arguments and items and list.__len__(self._paths[key][0]):
                self._read_argument(self._paths[key][1])
        return [(self._paths[key][1], fn, item) for key, items in self._pushes.items() for fn, item in items]

    def read(self, container: Any) -> None:
        """Any other load or binding of ``container``: its stand-ins settle, and it takes no more."""
        key = id(container)
        if key in self._read:
            return
        if key in self._arguments and self._pushes.get(key):  # Note [A list argument only pushed onto]
            self._read_argument(self._paths[key][1])
        if self._write_only.get(key) is container:
            self.settle(container)
            del self._write_only[key]
        self._read.add(key)

    def store_key(self, container: Any, key: Any) -> Any:
        """The key a subscript store into ``container`` uses: a stand-in for a dynamic number stored into
        a dict only stored into; otherwise ``key``, the dict's stand-ins settled first."""
        if self._write_only.get(id(container)) is not container:
            return key
        if type(container) in _PLAIN_DICTS and _number_key(key):
            return self._stand_in(container, key)
        self.settle(container)
        return key

    def reading(self, first_state: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``first_state`` (StateSnapshots'), which Provenance asks for each container whose guards it
        binds: such a binding reads the container (``read``) first."""

        def first(obj: Any) -> Any:
            if type(obj) in _HELD:
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

    def settle(self, container: Any) -> None:
        """Replace each stand-in of ``container`` by its number, in eager's place: hashed there, as the
        store would have hashed it (its value guarded, or only which value it equals where it is computed:
        Note [Hashing a computed number])."""
        for fn, item in self._pushes.pop(id(container), ()):
            fn(container, specialize_all(item, (NumberProxy, TextProxy)))
        pending = self._pending.pop(id(container), None)
        if not pending:
            return
        if type(container) is set:
            if self.settle_set is not None and self.settle_set(container, pending):
                return  # Note [A set's stand-ins settled in eager's place] (jit/set_ops.py)
            for stand_in in pending.values():
                if set.__contains__(container, stand_in):
                    set.discard(container, stand_in)
                    set.add(container, stand_in.number)  # hashed: Note [Hashing a computed number]
            return
        items = list(dict.items(container))
        if not any(type(key) is PendingKey for key, _value in items):
            return
        dict.clear(container)
        for key, value in items:
            dict.__setitem__(container, key.number if type(key) is PendingKey else key, value)
