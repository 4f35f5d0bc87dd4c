"""Lists of state a pass reads only through ``len()`` and ``append``/``extend``: their length a number
read per call (Note [A list's length read per call]); which reads only measure a list is decided by
``measured_by_len`` (jit/appends.py).

Invariant: a measured list is guarded by its type only; its ``len()`` is the caller's list's length read
per call plus what the pass appended before the read.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

__all__ = ["MeasuredLists"]

# Note [A buffer argument only appended to]
# ``buf.append(3); return x * len(buf)`` with an ``array.array`` (or ``bytearray``) argument: only a list
# parameter was bound as one only appended to, so the buffer was bound whole, its length and items guarded,
# and every call traced again (20 in 20: /tmp/eff58-probes/why.py ``arr``). The bytecode proof
# (``appended_parameters``, jit/appends.py) does not depend on the type, and these exact types' ``append``
# and ``extend`` read no item (Note [A buffer only appended to]): the argument is bound as a list is, its
# type guarded and an array's typecode (what ``append`` accepts and makes), the program appending to an
# empty buffer of its own of that typecode, whose items are replayed onto the caller's (the ``extend``
# effect). Its ``len()`` is the caller's buffer's read per call plus the copy's items, as a list's.
_MEASURED = (list, bytearray, array.array)  # exact types whose ``__len__`` counts items and runs no code


class MeasuredLists:
    """Lists of state a pass reads only through ``len()`` and ``append``/``extend`` (Note [A list's
    length read per call]).

    Note [A list's length read per call]
    ``hist.append(x); y = x * len(hist)`` on a list of state: guarded by its length, every call found
    a longer list and traced again. A read that only measures the list (``measured_by_len``) guards
    its type; ``len()`` of it is a dynamic number input read per call through ``path.__len__()``,
    plus what the pass appended before the read (appends are replayed onto the call's list, so the
    difference is the same on every call). Any other read of the list (indexing, iterating, ``pop``)
    binds it whole as before, its length guarded, so the number can differ from the trace's only
    where the list's length alone does.
    """

    def __init__(self, provenance: Any) -> None:
        self._provenance = provenance
        # id(list the program sees) -> (its path, its length when the call started: None for a list of
        # state, whose first state says it, and the length of the program's list then)
        self._lists: dict[int, tuple[Any, int | None, int]] = {}
        self.emptied: set[int] = set()  # ids of lists the pass emptied: Note [A list the program empties]
        # how many pushes onto a list are recorded and not made (PendingKeys.pending, set by the pass):
        # Note [A list argument only pushed onto], jit/pending_keys.py
        self.pending: Callable[[Any], int] = lambda value: 0
        self._made: list[tuple[BaseException, list]] = []  # exceptions made holding copies: ``note_made``

    def bind(self, value: list, path: Any, name: str) -> list:
        """The list a ``len()`` read measures: its type guarded, remembered for ``length``. A list the
        call passes as well (an argument that is also a global) is bound whole, as any read of it:
        the program's length is that of its own copy (Note [Containers reached twice])."""
        if self._provenance.is_argument_container(value):
            return self._provenance.bind_state(value, path, name)
        self._lists[id(value)] = (path, None, 0)
        return self._provenance.bind_appended_list(value, path)

    def bind_argument(self, value: list, path: Any) -> list:
        """A list argument the function only appends to and measures (``appended_parameters``): the
        program appends to a list of its own (``Provenance.bind_appended_argument``), whose length for
        ``len()`` is the caller's list's, read per call, plus the appends made before the read."""
        if self._provenance.reached_as_state(value):  # Note [An argument reached as state first]
            return self._provenance.bind_argument(value, path, path.describe())
        own = self._provenance.bind_appended_argument(value, path)
        if id(own) not in self._lists:  # the same list passed twice: one record
            self._lists[id(own)] = (path, len(value), len(own))
        return own

    def note_made(self, fn: Any, args: tuple, made: Any) -> None:
        """``made = fn(*args)``, a C call: an exception's ``__new__`` handed the program's copy of a list
        argument keeps it as its ``args`` (Note [A list argument passed to a class's __init__],
        jit/helper_appends.py)."""
        if self._lists and isinstance(made, BaseException) and getattr(fn, "__name__", None) == "__new__":
            held = [a for a in args[1:] if type(a) is list and self.is_copy(a)]
            if held:
                self._made.append((made, held))

    def check_made(self) -> None:
        """When the pass ends: a list argument whose copy an exception still holds is read after all (a pass
        binding it whole: Note [Containers reached twice])."""
        for made, held in self._made:
            for copy in held:
                if any(item is copy for item in tuple.__iter__(BaseException.args.__get__(made))):
                    self._provenance.appended_read.add(self._lists[id(copy)][0])

    def is_copy(self, value: Any) -> bool:
        """Whether ``value`` is the program's own copy of a list argument only appended to or emptied."""
        found = self._lists.get(id(value))
        return found is not None and found[1] is not None

    def length(self, value: Any) -> Any:
        """``len(value)``: a number of the computation for a measured list; None for anything else."""
        found = self._lists.get(id(value))
        if found is None or type(value) not in _MEASURED or id(value) in self.emptied:
            return None  # an emptied list holds the pass's own items: its length is the trace's
        path, first, start = found
        if first is None:
            first = start = len(self._provenance.first_state(value))
        read = self._provenance.bind_dynamic_number(first, path.attr("__len__").call(), "length")
        grown = type(value).__len__(value) - start + self.pending(value)
        return read + grown if grown else read

    def len_lookaside(self, base: Any) -> Any:
        """``len`` answering measured lists (``length``), every other call by ``base``."""

        def len_(*args: Any, **kwargs: Any) -> Any:
            measured = self.length(args[0]) if len(args) == 1 and not kwargs else None
            return base(*args, **kwargs) if measured is None else measured

        return len_
