"""A set's hash table put back exactly as it was before the pass changed it.

Note [A set's table put back exactly]
A set iterates in its hash table's order, which its whole history decides: a discard leaves a dummy slot,
and CPython (3.7 on) never inserts into a dummy, so an add probes past it. The pass makes the program's
``add``s and ``discard``s on the caller's set, and ``object_states.restore`` then discarded what it added
and added back what it removed: the table kept those dummies, so the replayed ops, the same in the same
order, probed past them and landed elsewhere, and the set iterated in another order than eager's
(``S.add(a); S.add(b)`` per call, an add and a discard: /tmp/eff55-probes/set_order3.py,
set_dummy_demo.py). ``table_of`` copies the table's entries (each slot's key and hash, dummies included)
with ``fill``, ``used`` and ``finger`` when the pass first reaches the set; ``put_back`` writes them back
where the pass left the same table (the same ``mask`` and table memory: no resize), taking a reference
to each key it puts back and releasing those of the keys it replaces, so the set is the very table the
pass found and the replayed ops make eager's. A table the pass resized is put back too: the entries
written into the inline small table again where it was that one, else into a table of the old size
allocated with ``PyMem_Malloc`` (the old one was freed by the resize), the table pointer and mask set
back, and the table the resize made freed with ``PyMem_Free``, as setobject.c allocates and frees them. The
fields are read through ``ctypes`` at the
``PySetObject`` offsets, checked at import on probe sets (3.11 to 3.13: ``fill``, ``used``, ``mask``,
``table``, ``hash``, ``finger`` after the object header, the small table inline after them); where the
check fails, nothing is done here and the set is put back as before (its order may then differ from
eager's).

Invariant: ``put_back`` changes the set only to the table ``table_of`` read, entry for entry; the keys it
holds are those of the snapshot (``keys``, which keeps them alive), each with one reference of the set's.
``made_as`` writes a set it has just made into the table ``shape_of`` read only where each element's hash is
the one its slot held there (Note [A made set's table as the pass made it]).
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["SetShape", "SetTable", "arrange", "filled", "layout_of", "made_as", "next_popped", "put_back",
           "shape_of", "table_of"]


class _SetHeader(ctypes.Structure):
    _fields_ = [("refcnt", ctypes.c_ssize_t), ("type", ctypes.c_void_p), ("fill", ctypes.c_ssize_t),
                ("used", ctypes.c_ssize_t), ("mask", ctypes.c_ssize_t), ("table", ctypes.c_void_p),
                ("hash", ctypes.c_ssize_t), ("finger", ctypes.c_ssize_t)]


SetTable = tuple  # (mask, table address, fill, used, finger, entries, {id: key})


def _header(s: set) -> _SetHeader:
    return _SetHeader.from_address(id(s))


def _entries(header: _SetHeader) -> Any:
    return (ctypes.c_ssize_t * (2 * (header.mask + 1))).from_address(header.table)


def _dummy_address() -> int | None:
    """The address of CPython's dummy key (a discarded slot's), read from a probe set; None where the
    layout is not the one expected."""
    try:
        small = {1, 2}
        header = _header(small)
        if (header.fill, header.used, header.mask) != (2, 2, 7) \
                or header.table != id(small) + ctypes.sizeof(_SetHeader) or header.type != id(set):
            return None
        big = set(range(100))
        entries = _entries(_header(big))
        if {entries[2 * i] for i in range(_header(big).mask + 1)} - {0} != {id(k) for k in big}:
            return None
        small.discard(1)
        keys = {_entries(header)[2 * i] for i in range(8)} - {0, id(2)}
        return keys.pop() if len(keys) == 1 and header.fill == 2 and header.used == 1 else None
    except Exception:  # noqa: BLE001 - any surprise disables the exact put-back
        return None


_DUMMY = _dummy_address()
_MALLOC = ctypes.pythonapi.PyMem_Malloc  # setobject.c's PyMem_NEW and PyMem_Free
_MALLOC.restype, _MALLOC.argtypes = ctypes.c_void_p, [ctypes.c_size_t]


def table_of(s: set) -> SetTable | None:
    """A copy of an exact ``set``'s table now; None where the layout was not confirmed."""
    if _DUMMY is None or type(s) is not set:
        return None
    header = _header(s)
    entries = tuple(_entries(header))
    keys = {id(k): k for k in set.__iter__(s)}
    return header.mask, header.table, header.fill, header.used, header.finger, entries, keys


def put_back(s: set, before: SetTable | None) -> bool:
    """Write the table ``before`` back into ``s`` where the pass did not resize it (Note [A set's table put
    back exactly]); whether it did."""
    if before is None or type(s) is not set or _DUMMY is None:
        return False
    mask, table, fill, used, finger, entries, keys = before
    header = _header(s)
    small = id(s) + ctypes.sizeof(_SetHeader)  # the small table, inline: never freed
    resized = (header.mask, header.table) != (mask, table)  # the pass's resize made another table
    if not resized and tuple(_entries(header)) == entries and (header.fill, header.used) == (fill, used):
        return True
    if any(e not in keys for e in entries[0::2] if e and e != _DUMMY):
        return False  # (cannot happen: the snapshot's keys are the table's)
    target = table
    if resized and table != small:  # the old table was freed by the resize: one of the same size again
        target = _MALLOC(ctypes.sizeof(ctypes.c_ssize_t) * len(entries))
        if not target:
            return False
    held = [k for k in set.__iter__(s)]  # the keys the set holds now: released once the table is written
    for key in keys.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(key))
    outgrown = header.table if resized and header.table != small else None
    header.table, header.mask = target, mask
    now = _entries(header)
    for i, value in enumerate(entries):
        now[i] = value
    header.fill, header.used, header.finger = fill, used, finger
    if outgrown is not None:  # the table the resize made (setobject.c allocates it with PyMem_NEW)
        ctypes.pythonapi.PyMem_Free(ctypes.c_void_p(outgrown))
    for key in held:
        ctypes.pythonapi.Py_DecRef(ctypes.py_object(key))
    return True


def next_popped(s: set) -> tuple[bool, Any]:
    """``(True, the element s.pop() returns now)``: the first key at or after the table's ``finger``, as
    setobject.c's ``set_pop`` finds it; ``(False, None)`` for an empty set or where the layout was not
    confirmed (Note [A set's merges replayed as C makes them], jit/set_ops.py)."""
    if _DUMMY is None or type(s) is not set or not set.__len__(s):
        return False, None
    header = _header(s)
    entries, size = _entries(header), header.mask + 1
    keys = {id(k): k for k in set.__iter__(s)}
    for step in range(size):
        address = entries[2 * ((header.finger + step) % size)]
        if address and address != _DUMMY:
            return (True, keys[address]) if address in keys else (False, None)
    return False, None


def layout_of(s: set | frozenset) -> tuple[int, tuple[int, ...]] | None:
    """``(mask, the slot of each element in iteration order)`` of an exact set or frozenset without dummies
    (the tables setobject.c's ``set_merge`` copies slot for slot into an empty set); None otherwise."""
    if _DUMMY is None or type(s) not in (set, frozenset):
        return None
    header = _header(s)
    if header.fill != header.used:
        return None
    entries = _entries(header)
    return header.mask, tuple(i for i in range(header.mask + 1) if entries[2 * i])


def arrange(s: set, layout: tuple[int, tuple[int, ...]], elements: Any) -> None:
    """Move each of ``elements`` (the keys of ``s``, which has no dummies and a table of ``layout``'s size)
    to its slot in ``layout`` (``elements[i]`` to ``layout[1][i]``): the table ``set_merge`` makes by copying
    the slots of a set of that layout into an empty one (Note [A set's merges replayed as C makes them],
    jit/set_ops.py)."""
    mask, slots = layout
    if _DUMMY is None or type(s) is not set or len(slots) != len(elements):
        return
    header = _header(s)
    if header.mask != mask or header.fill != header.used or header.used != len(slots):
        return
    entries = _entries(header)
    slot_of = {id(e): slot for e, slot in zip(elements, slots)}
    held = [(entries[2 * i], entries[2 * i + 1]) for i in range(mask + 1) if entries[2 * i]]
    if any(key not in slot_of for key, _hashed in held):
        return
    for i in range(2 * (mask + 1)):
        entries[i] = 0
    for key, hashed in held:
        entries[2 * slot_of[key]], entries[2 * slot_of[key] + 1] = key, hashed


def filled(s: set) -> int | None:
    """The ``fill`` of an exact set (its entries and dummies); None where the layout was not confirmed."""
    return _header(s).fill if _DUMMY is not None and type(s) is set else None


# Note [A made set's table as the pass made it]
# A set the program makes (``S | {a, b}``, ``S - {m}``) and stores into state or returns is made again each
# call from its elements (jit/outputs.py). ``set(elements)`` adds them one by one into a table growing as it
# goes; C's ``set_or`` copied ``S``'s table and merged the other into it (a resize of its own rule), so the
# made set had other slots, and the next call's op on it (a merge, a resize reinserting in table order)
# iterated in another order than eager's (/tmp/set57-probes/wide_sets.py ``rebind``: eager
# [0, 64, 16, 80, 8, 72], jit [0, 64, 8, 72, 16, 80] at call 2). ``shape_of`` reads the table of the set the
# pass made (its size, each slot's element or dummy, ``fill``, ``used``, ``finger`` and each element's hash)
# and ``made_as`` writes the set made again into that table (``put_back``) where its elements have the
# pass's hashes, one for one in iteration order, so it is the table C made. Where a hash differs (a number
# of the trace that is another value on a later call) the slots would not be the elements', and the set is
# ``set(elements)`` as before (its order may then differ from eager's).
SetShape = tuple  # (mask, fill, used, finger, each slot's element index / -1 a dummy / None, the hashes)


def shape_of(s: Any) -> SetShape | None:
    """The table of an exact ``set`` (Note [A made set's table as the pass made it]); None for any other
    object or where the layout was not confirmed."""
    if _DUMMY is None or type(s) is not set:
        return None
    header = _header(s)
    entries = _entries(header)
    index = {id(k): i for i, k in enumerate(set.__iter__(s))}
    keys = [entries[2 * i] for i in range(header.mask + 1)]
    if any(k and k != _DUMMY and k not in index for k in keys):
        return None
    slots = tuple(None if not k else -1 if k == _DUMMY else index[k] for k in keys)
    hashes = tuple(entries[2 * i + 1] for i, k in enumerate(keys) if k and k != _DUMMY)
    return header.mask, header.fill, header.used, header.finger, slots, hashes


def made_as(shape: SetShape | None) -> Any:
    """A maker of a set from its elements (in the iteration order of the set ``shape`` was read from) with
    that set's table where their hashes are its (Note [A made set's table as the pass made it])."""

    def make(elements: tuple) -> set:
        made = set(elements)
        if shape is None or len(made) != len(elements) or len(elements) != len(shape[5]):
            return made
        mask, fill, used, finger, slots, hashes = shape
        header = _header(made)  # each element's hash as ``set`` stored it (no second ``__hash__`` call)
        now = _entries(header)
        stored = {now[2 * i]: now[2 * i + 1] for i in range(header.mask + 1) if now[2 * i]}
        if tuple(stored.get(id(e)) for e in elements) != hashes:
            return made
        entries: list[int] = []
        for slot in slots:
            entries += (0, 0) if slot is None else (_DUMMY, -1) if slot == -1 else \
                (id(elements[slot]), hashes[slot])  # a dummy's hash is -1, as set_discard_entry leaves it
        small = id(made) + ctypes.sizeof(_SetHeader)
        put_back(made, (mask, small if mask == 7 else 0, fill, used, finger, tuple(entries),
                        {id(e): e for e in elements}))
        return made

    return make
