"""Counters held in containers: the counter half of ``Provenance`` that a container walk reaches.

A counter is a number of state the program reads and writes back (jit/effects.py). Where the
program reads it through a hook it is bound as a dynamic number (``Provenance.bind_state``); where a
container walk reaches it first, it is bound in its place for the pass (Note [Counters bound where
they are held]) or left for a hook to bind and guarded by value if none did (Note [Counters read
natively]).

Invariants:
- a number put in place for the pass is put back before the pass's changes are diffed into
  effects, unless the program stored it there itself;
- a counter the program read past the hooks is guarded by value.
"""

from __future__ import annotations

import collections
from typing import Any

from jitcore.jit.state_names import qualified_name
from jitcore.prologue import Path

__all__ = ["HeldCounters"]

_COUNTING_DICTS = (dict, collections.Counter, collections.defaultdict)  # held counters bound in place
_NO_ITEM = object()


class HeldCounters:
    """The counter-binding methods of ``Provenance`` (jit/provenance.py), which owns the state they
    use (``counters``, ``_walked_counters``, ``_in_place``, ``number_inputs``, ``native_reads``) and
    gives them ``guard``, ``bind_dynamic_number``, ``snapshot_taken`` and ``stored_by_program``."""

    def _holds_counter(self, path: Path) -> bool:
        """Whether a counter lies inside the container at ``path``: one of its items, or an item of a
        tuple it holds (Note [A tuple of counters], jit/numbers.py)."""
        n = len(path.steps)
        return any(c.root == path.root and c.steps[:n] == path.steps
                   and (len(c.steps) == n + 1 or len(c.steps) == n + 2 and c.steps[-1].kind == "index")
                   for c in self.counters)

    # Note [Counters bound where they are held]
    # A counter a container walk reaches (``D["steps"]`` of a global dict, ``opt.param_groups[0]["lr"]``)
    # was left unguarded for the program's subscript to bind, and guarded by value where no subscript
    # did. C code reads a container's items past the hooks: with ``s = sum(D.values()); D["b"] += 1``
    # the sum was a constant of the trace while ``D["b"]`` was a dynamic number, so every cached call
    # answered the first call's sum (a wrong answer); ``for v in L``, ``max(L)``, ``{**D}``, ``L == M``,
    # ``copy.copy(D)`` alike. And a learning rate the program only writes (``g["lr"] = get_lr(it)``)
    # was guarded by value: an entry per step. The walk now binds such a counter as a dynamic number
    # and puts it in its place for the rest of the pass (the container's snapshot was taken first), so
    # every read, through a hook or by C code, sees the traced number, as it sees one the program
    # stored: arithmetic is traced, a branch guards its predicate, C code asking for the number gets
    # its value and guards it (Note [Objects handed to C hold values], jit/numbers.py). Before the
    # pass's changes are diffed into effects, a number still in its place is put back
    # (``put_back_counters``): it is no write, unless the program stored it there itself (StepLR writes
    # back the rate it read between its steps), which is replayed with the value each call finds. A
    # ``Counter`` or ``defaultdict`` holds its counters so too (``counts[k] += 1`` at a key the call
    # passes: before, the walk guarded the other keys' counts by value, an entry per call). A
    # tuple of counters held in such a container (Adam's ``betas``, ``state["t"] = (a + 1, b)``) is put
    # in place as a tuple of its numbers, each counter bound (before, C code reading it, ``st.get("t")``,
    # ``st.values()``, ``copy.copy(st)``, guarded it by value: an entry per call). A container of
    # another type keeps ``_walked_counters``. A deque holds them as a list does (Note [A list of numbers
    # that changed between calls], jit/numbers.py: the recent losses a ring buffer sums).
    def _bind_counter_in_place(self, container: Any, key: Any, item: Any, path: Path) -> bool:
        """Bind the counter ``item`` at ``container[key]`` as a dynamic number and put it there for the
        pass (Note [Counters bound where they are held]); False where it is not one to bind so."""
        kind = dict if type(container) in _COUNTING_DICTS else type(container)
        if kind not in (dict, list, collections.deque) or not self.snapshot_taken(container):
            return False
        if type(item) is tuple:  # Note [A tuple of counters], jit/numbers.py
            if not self._tuple_of_counters(item, path):
                return False
        elif path not in self.counters or type(item) not in (int, float):
            return False
        if kind is dict and dict.get(container, key, _NO_ITEM) is not item \
                or kind is not dict and not (key < len(container) and container[key] is item):
            return False  # the program changed it already: the walk read the call's copy of it
        if type(item) is tuple:
            proxy = tuple(self._bound_item(v, path.index(i)) for i, v in enumerate(item))
        else:
            proxy = self.bind_dynamic_number(item, path, qualified_name(path) or "s")
        kind.__setitem__(container, key, proxy)
        self._in_place.append((container, key, proxy, item))
        return True

    def _bound_item(self, item: Any, path: Path) -> Any:
        """An item of a tuple of counters put in place: a counter bound as a dynamic number, any other
        item walked as a literal (guarded by value)."""
        if path in self.counters and type(item) in (int, float):
            return self.bind_dynamic_number(item, path, qualified_name(path) or "s")
        self._walked_literal(item, path)
        return item

    def put_back_counters(self) -> None:
        """Put back the numbers ``_bind_counter_in_place`` put in place that are still there, unless the
        program stored one there itself (``d[k] = d[k]``: replayed, with the value each call finds)."""
        for container, key, proxy, item in reversed(self._in_place):
            if self.stored_by_program(container, key):
                continue
            if type(container) in _COUNTING_DICTS and dict.get(container, key, _NO_ITEM) is proxy:
                dict.__setitem__(container, key, item)
            elif type(container) in (list, collections.deque) and key < len(container) \
                    and container[key] is proxy:
                type(container).__setitem__(container, key, item)
        self._in_place.clear()

    def _walked_literal(self, item: Any, path: Path) -> None:
        """A literal a container walk reached: guarded by value, a counter left to ``bind_state``
        (Note [Counters read natively]), a tuple holding counters item by item (Note [A tuple of
        counters], jit/numbers.py)."""
        if path in self.counters:
            self._walked_counters[path] = item
        elif self._tuple_of_counters(item, path):
            for i, element in enumerate(item):
                self._walked_literal(element, path.index(i))
        else:
            self.guard(path, "value", item)

    def _tuple_of_counters(self, value: Any, path: Path) -> bool:
        """Whether ``value`` is a tuple holding counters, read item by item (Note [A tuple of counters],
        jit/effects.py); its type and length are then guarded."""
        if type(value) is not tuple or not self.counters or not self._holds_counter(path):
            return False
        self.guard(path, "type", tuple)
        self.guard(path, "len", len(value))
        return True

    # Note [Counters read natively]
    # A counter (a number of state the program reads and writes back, jit/effects.py) is bound as a
    # dynamic number where the program reads it through a hook (a subscript, an attribute), so the
    # write replayed on each call is computed from the value that call finds. A container walk
    # therefore leaves its value unguarded. A read that passes no hook (``d.get('m', 0)`` in library
    # code, a C helper such as Counter's ``_count_elements``, ``d.pop``) gives the program the real
    # number: what it writes back is then a constant of the trace, right only for that value. Such a
    # counter is guarded by value (an entry per value, as before it was a counter): one the pass never
    # bound, or one it read past the hooks (``native_reads``, filled by jit/dict_reads.py).
    def _guard_counters_read_natively(self) -> None:
        # a list item walked by index is bound by key (``l[0]``): the same place, described alike
        bound = {path.describe() for path, _number in self.number_inputs}
        native = {path.describe() for path in self.native_reads}
        for path, value in self._walked_counters.items():
            if path.describe() not in bound or path.describe() in native:
                self.guard(path, "value", value)
