"""A dict's or set's lookup of a key, made the CPython way with the Python ``__hash__`` and ``__eq__``
involved interpreted (``k in d``, ``d[k]``, ``d.get(k)``, ``k in s``, ``k in d.keys()``).

Invariants:
- ``find`` answers as CPython's ``dict`` lookup does: the stored key that is the key itself, or whose
  hash equals the key's and that compares equal to it (``stored == key``, the stored key's ``__eq__``
  first), the first such in the container's order (Note [A hashed lookup, interpreted]);
- every Python ``__hash__``/``__eq__`` of an object of a Python class it needs is called through
  ``calls.call`` (interpreted, its reads seen), each at most once per object for ``__hash__``; the hash
  of a built-in container (a tuple key) is ``Run.native``'s, watched;
- it is used only where such a method could run (``needs_python``): built-in keys in a container of
  built-in keys are looked up natively, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from jitcore.interpreter.hashes import hash_of, python_hashed, stored_hash, stored_hashes_repeatable
from jitcore.interpreter.protocols import compare_op, truth

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["ABSENT", "dict_get", "dict_item", "find", "keys_equal", "needs_python"]

ABSENT = object()


# Note [A hashed lookup, interpreted]
# ``k in d``, ``d[k]``, ``d.get(k)``, ``k in s`` call the key's ``__hash__`` and, on a hash match, the
# stored key's (or the key's reflected) ``__eq__`` in C. Where those are Python methods of the program's
# class reading the object's state (``self.v``), they ran natively, unseen: the lookup's answer became a
# constant of the trace, and after the caller changed ``d2.v`` a cached call returned the first call's
# answer (a wrong answer, /tmp/shared46/dm8.py). The lookup is emulated instead: the key's hash is
# interpreted, then the stored keys are visited in the container's order, each stored key that is the
# key, or whose hash (interpreted for a Python ``__hash__``: the hash the dict stored, unless the program
# changed the key after storing it) equals the key's and whose ``==`` with the key (interpreted) is true,
# is the one found. Their reads are then the trace's, guarded like any other. A dict's probe sequence
# visits the stored keys of one hash in the order they were inserted, which is its iteration order, so
# the same ``__eq__`` calls are made in the same order; a set's table order may differ from its probe
# order where two stored keys have the same hash and both compare equal to the key (left). The other
# choices: running the native lookup watched (Note [Python code a C call ran natively]) made every
# frozen dataclass key run eagerly (its generated ``__eq__`` is the program's code), and a guard on the
# answer needs the lookup rerun in the prologue, with the key's code run natively there.
# Note [A lookup by a built-in key is C's]
# Only a key of the program's class makes a lookup interpreted. A built-in key (an int, a str) finds a
# stored key of the program's class only where their hashes are equal, and then C calls that stored key's
# ``__eq__``: deciding that needs every stored key looked at, on every ``k in d`` and ``d[k]`` of the
# program, torch's and the standard library's (a first version did: 2,000 lookups in a 5,000-key dict
# took 3.2 s interpreted instead of 11.5 ms). Such a lookup stays C's, unseen, as before.
def needs_python(run: Run, container: Iterable, key: object) -> bool:
    """Whether looking ``key`` up in the dict/set ``container`` calls the key's Python ``__hash__`` or
    ``__eq__`` (Note [A lookup by a built-in key is C's]), and the stored keys may be asked for their hashes
    (else C looks it up: Note [A stored key's hash, asked again], hashes.py)."""
    return python_hashed(run, key) and stored_hashes_repeatable(container)

# Note [Tuple keys compared item by item]
# A tuple key holding the program's object (``d[(cfg, 2)]``) is hashed by ``tuple_hash`` (hashes.py), but
# ``stored == key`` of two tuples is C's ``tuplerichcompare``, which calls the items' ``__eq__`` natively:
# the call ran eagerly. Two tuples are compared here as it compares them: item by item in order (each
# ``a is b`` or ``a == b`` interpreted) until two differ, then, where none differed, by their lengths (no
# shortcut on unequal lengths: ``(a,) == (a2, 1)`` compares ``a`` with ``a2`` first).
def keys_equal(run: Run, stored: object, key: object) -> bool:
    """``stored == key`` as a dict's lookup asks it (``PyObject_RichCompareBool``: identity first), two
    tuples compared item by item (Note [Tuple keys compared item by item])."""
    if stored is key:
        return True
    if type(stored) is tuple and type(key) is tuple:
        for a, b in zip(stored, key):
            if not keys_equal(run, a, b):
                return False
        return len(stored) == len(key)
    return truth(run, compare_op(run, "==", stored, key))


def find(run: Run, container: Iterable, key: object) -> object:
    """The stored key of the dict/set ``container`` that ``key`` finds, else ``ABSENT`` (Note [A hashed
    lookup, interpreted])."""
    h = hash_of(run, key)
    for stored in list(container):  # (an ``__eq__`` may change the container)
        if stored is key:
            return stored
        if stored_hash(run, container, stored) == h and keys_equal(run, stored, key):
            return stored
    return ABSENT


def dict_item(d: dict, stored: object) -> object:
    """``d``'s value at the stored key ``stored`` (by identity: no hash or ``__eq__`` called)."""
    for k, v in d.items():
        if k is stored:
            return v
    raise KeyError(stored)  # (removed by an ``__eq__`` after it was found)


def dict_get(run: Run, d: dict, key: object, default: object) -> object:
    """``dict.get(d, key, default)`` with the Python ``__hash__``/``__eq__`` it calls interpreted."""
    if not needs_python(run, d, key):
        return dict.get(d, key, default)
    found = find(run, d, key)
    return default if found is ABSENT else dict_item(d, found)
