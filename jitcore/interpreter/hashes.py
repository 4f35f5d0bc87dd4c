"""``hash(v)`` the CPython way with the Python ``__hash__`` it calls interpreted: of an object of a Python
class (``slot_tp_hash``), and of a tuple holding such objects (``tuplehash``).

Invariants:
- ``hash_of`` returns what the native ``hash(v)`` returns and raises what it raises, for every value: a
  Python ``__hash__`` is called through ``calls.call`` (interpreted, its reads seen) and its result is
  reduced by ``slot_tp_hash``'s rules (Note [A Python __hash__'s result]); a tuple's hash is
  ``tuplehash``'s xxHash-based mix of its items' hashes (Note [A tuple's hash, interpreted]);
- a value whose hash calls no Python ``__hash__`` (an int, a str, a tuple of them, a tensor, a stand-in of
  the hooks) is hashed natively (``Run.native``/``opaque``), as before: ``hash()`` of built-in values costs
  one type check more.
"""

from __future__ import annotations

import sys
import weakref
from types import FunctionType
from typing import TYPE_CHECKING

from jitcore.interpreter.calls import call, opaque
from jitcore.interpreter.protocols import NATIVE_COMPARANDS, NATIVE_TYPES
from jitcore.interpreter.reading_dunders import reads_only
from jitcore.interpreter.run import current_run

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["hash_", "hash_of", "python_hashed", "stored_hash", "stored_hashes_repeatable", "tuple_hash"]

_SCALARS = NATIVE_COMPARANDS  # built-in values whose hash calls no other object's dunder
_NESTING = 4  # tuples inside tuples looked into by ``hash()`` (deeper ones: C's hash, watched)
_HASH_BITS = sys.hash_info.width
_HASH_MAX = (1 << (_HASH_BITS - 1)) - 1
_MASK = (1 << 64) - 1
_XXPRIME_1 = 11400714785074694791
_XXPRIME_2 = 14029467366897019727
_XXPRIME_5 = 2870177450012600261


def python_hashed(run: Run, v: object, depth: int = 1) -> bool:
    """Whether hashing ``v`` or comparing it with ``==`` calls a Python ``__hash__``/``__eq__`` of an
    object of a Python class (``v``'s, or an item's of a tuple/frozenset ``v``, ``depth`` levels down)."""
    t = type(v)
    if t in _SCALARS:
        return False
    if t is tuple or t is frozenset:  # (its items' ``__hash__``, ``__eq__``)
        return depth > 0 and any(python_hashed(run, item, depth - 1) for item in v)
    if t in NATIVE_TYPES or run.type_of(v) is not t or hasattr(t, "__torch_function__") \
            or issubclass(t, weakref.ref):  # Note [A weak reference as a key]
        return False  # a stand-in, or a tensor (hashed by identity: Tensor.__hash__ is ``id``)
    return type(getattr(t, "__hash__", None)) is FunctionType or \
        type(getattr(t, "__eq__", None)) is FunctionType


# Note [A weak reference as a key]
# torch's ``WeakIdRef`` (the keys of ``WeakTensorKeyDictionary``: LoggingTensor's memo of tensor ids,
# torch's own bookkeeping) has a Python ``__eq__`` comparing its referents by identity. Interpreted, that
# ``a is b`` of the caller's tensors pinned each tensor argument by identity, and every call with fresh
# tensors traced again (LoggingTensor programs: 3 entries in 3 calls). A weak reference's lookup stays
# C's: what it compares is which object it refers to, not state a caller changes.


def hash_of(run: Run, v: object) -> int:
    """``hash(v)`` with a Python ``__hash__`` interpreted (CPython's ``slot_tp_hash``, ``tuplehash``).

    Raises:
        TypeError: as the native ``hash(v)`` does (an unhashable value, a ``__hash__`` returning no int).
    """
    t = type(v)
    if t in _SCALARS:
        return hash(v)
    if t is tuple:
        return tuple_hash(run, v) if python_hashed(run, v, _NESTING) else run.native(hash, (v,), {})
    f = getattr(t, "__hash__", None)
    if t in NATIVE_TYPES or run.type_of(v) is not t or type(f) is not FunctionType:
        return run.native(hash, (v,), {})  # (``__hash__ = None``: C's "unhashable type")
    return _reduced(run, call(run, f, (v,), None))


# Note [A stored key's hash, once per run]
# A dict or set keeps the hash it computed when a key was inserted and never asks the key again; an
# interpreted lookup or insertion needs that hash for each stored key it passes (Note [A hashed lookup,
# interpreted], hashed_lookup.py). Asked of the key's Python ``__hash__`` on every lookup, ``big[K(i)]``
# in a loop over a 500-key dict of frozen dataclass keys ran 500 interpreted ``__hash__`` calls per
# lookup (50 lookups: 0.76 s; 50 insertions: 1.8 s). The hash is asked once per run and container
# instead, and kept in ``Run.stored_hashes`` beside the hashes of the keys this run inserted: the value
# C stored, unless the program changed a key's state after inserting it before this run (where CPython
# too answers from the old hash). Its reads are the trace's the first time, guarded as before.
def stored_hash(run: Run, container: object, stored: object) -> int:
    """The hash the dict or set ``container`` holds for its key ``stored``: the one this run inserted it
    with or computed before, else ``hash_of`` (Note [A stored key's hash, once per run])."""
    known = run.stored_hashes.setdefault(id(container), (container, {}))[1]
    hit = known.get(id(stored))
    if hit is not None and hit[0] is stored:
        return hit[1]
    h = hash_of(run, stored)
    known[id(stored)] = (stored, h)
    return h


# Note [A stored key's hash, asked again]
# CPython never calls a stored key's ``__hash__`` to look a key up or insert one: it compares the hash it
# stored. jitcore, which cannot read that hash, asks the key's ``__hash__`` (once per run: the Note
# above). That extra call is unseen only where the ``__hash__`` writes nothing (Note [Only a dunder that
# writes nothing is rerun], reading_dunders.py); a ``__hash__`` counting its calls counted each stored
# key's call too (a dict of 5 such keys, a lookup and an ``in`` over 3 calls: 166 calls jitted, 6 eager;
# 17 against 7 in the bare interpreter). Where a stored key's class (or a class inside a stored tuple)
# has a ``__hash__`` that writes, the lookup or insertion is C's, which calls only the new key's hash:
# in the bare interpreter the program's own count; jitted, the watch sees Python code run by C and the
# call runs eagerly (Note [Python code a C call ran natively], jit/native_python.py).
def stored_hashes_repeatable(container: object) -> bool:
    """Whether asking each stored key of the dict or set ``container`` for its hash is unobservable (Note
    [A stored key's hash, asked again])."""
    return all(_hash_repeatable(t) for t in {type(k) for k in container} if t not in _SCALARS) \
        and all(_items_repeatable(k, _NESTING) for k in container if type(k) is tuple)


def _items_repeatable(items: tuple, depth: int) -> bool:
    return all(_items_repeatable(v, depth - 1) if type(v) is tuple else _hash_repeatable(type(v))
               for v in items) if depth >= 0 else True


def _hash_repeatable(t: type) -> bool:
    f = getattr(t, "__hash__", None)
    return type(f) is not FunctionType or reads_only(f.__code__, f.__globals__)


# Note [A Python __hash__'s result]
# ``slot_tp_hash`` (Objects/typeobject.c) takes what a Python ``__hash__`` returns: a value that is not an
# int (by ``PyLong_Check``: an int subclass, a bool, pass) raises ``TypeError: __hash__ method should
# return an integer``; an int is read as a ``Py_ssize_t`` (an int subclass's own ``__int__``/``__index__``
# are not called: ``int.__index__`` reads the value the same way), and one outside that range is hashed
# as an int is (``long_hash``: ``hash(int(result))``), so ``hash(x) == hash(y)`` where ``x.__hash__``
# returns ``hash(y)``; ``-1`` (C's error value) becomes ``-2``. A dynamic number of the jit's (a stand-in
# whose class the hooks' ``type_of`` says is int) gives its value through ``int()``, guarded.
def _reduced(run: Run, result: object) -> int:
    """What ``hash()`` makes of ``result``, a Python ``__hash__``'s return (Note [A Python __hash__'s
    result])."""
    if not issubclass(run.type_of(result), int):
        raise TypeError("__hash__ method should return an integer")
    value = int.__index__(result) if isinstance(result, int) else int(result)
    if not -_HASH_MAX - 1 <= value <= _HASH_MAX:
        value = hash(value)
    return -2 if value == -1 else value


# Note [A tuple's hash, interpreted]
# ``hash((cfg, 2))`` calls ``cfg``'s Python ``__hash__`` from C's ``tuplehash``: natively, unseen (the call
# ran eagerly: Note [Python code a C call ran natively], jit/native_python.py). The tuple's hash is
# computed here instead with CPython's own algorithm (Objects/tupleobject.c, 3.8+: an xxHash-like mix of
# each item's hash, then the length), from its items' hashes, each interpreted where it is a Python
# ``__hash__``. It is 64-bit only (``Py_uhash_t`` arithmetic modulo 2**64); where hashes are narrower the
# tuple is hashed natively. A frozenset needs nothing of the kind: its hash mixes the hashes its table
# stored when it was built (``frozenset_hash``), calling no item's ``__hash__``.
def tuple_hash(run: Run, items: tuple) -> int:
    """``hash(items)`` of a tuple, from its items' hashes (``hash_of``) as CPython's ``tuplehash`` mixes
    them (Note [A tuple's hash, interpreted])."""
    if _HASH_BITS != 64:
        return run.native(hash, (items,), {})
    acc = _XXPRIME_5
    for item in items:
        lane = hash_of(run, item) & _MASK
        acc = (acc + lane * _XXPRIME_2) & _MASK
        acc = ((acc << 31) | (acc >> 33)) & _MASK
        acc = (acc * _XXPRIME_1) & _MASK
    acc = (acc + (len(items) ^ (_XXPRIME_5 ^ 3527539))) & _MASK
    if acc == _MASK:
        return 1546275796
    return acc - (1 << 64) if acc > _HASH_MAX else acc


def hash_(*args: object) -> int:
    """hash() with the Python ``__hash__`` it calls interpreted (of the value, or of a tuple's items)."""
    run = current_run()
    if run is None or len(args) != 1 or not python_hashed(run, args[0], _NESTING):
        return hash(*args) if run is None else opaque(run, hash, args, None)
    return hash_of(run, args[0])
