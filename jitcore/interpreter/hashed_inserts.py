"""A C call that hashes keys of the program's classes into a dict or set (a set or dict display, ``set(xs)``,
``d[k] = v``, ``s.add(k)``, ``d.pop(k)``, ...), made after the Python ``__hash__``/``__eq__`` it calls have
run interpreted.

Invariants:
- before the C call, each key's Python ``__hash__`` is called interpreted (``hash_of``), then, in the
  container's order and the keys' order, the ``==`` of each stored key (or key inserted before it by the
  same call) of an equal hash with the key, until one is true: the calls CPython's insertion or removal
  makes, with their reads seen (Note [A keyed C call, interpreted first]);
- the C call then runs as before (``Run.native``, or ``opaque`` for a method the program called: the jit's
  watch and its notes of writes), and the watch lets C rerun only the Python ``__hash__``/``__eq__`` of an
  object whose dunders ran interpreted for this call and whose own code only reads (``rerun_allowed``:
  Note [Only a dunder that writes nothing is rerun]); other Python code C starts still stops the call
  (it runs eagerly);
- a call whose keys are all built-in values (or the hooks' stand-ins, tensors), or made in a run whose
  hooks watch no C call (``Hooks.native_call`` None: the bare interpreter), is the C call alone, which
  runs the dunders natively once, as CPython does.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING

from jitcore.interpreter.calls import opaque
from jitcore.interpreter.hashed_lookup import keys_equal
from jitcore.interpreter.hashes import hash_of, python_hashed, stored_hashes_repeatable
from jitcore.interpreter.protocols import NATIVE_COMPARANDS
from jitcore.interpreter.reading_dunders import reads_only
from jitcore.interpreter.run import current_run

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["keyed_call", "keyed_iterable_call", "keyed_lookasides", "python_keyed", "rerun_allowed"]

_DUNDERS = ("__hash__", "__eq__")
_ORDERED = collections.OrderedDict
# iterables whose items C takes with the hashes they store (or that hold no object of a Python class)
_STORED_HASHES = (set, frozenset, dict, range, str, bytes, bytearray)


class _Reruns(threading.local):
    def __init__(self) -> None:
        self.ids: frozenset[int] = frozenset()


_RERUNS = _Reruns()


# Note [A keyed C call, interpreted first]
# Building a set or dict of the program's objects (a frozen dataclass's generated ``__hash__`` and
# ``__eq__`` are the program's code), or storing, adding, popping or discarding one, calls those dunders
# from C: natively, unseen, so the call ran eagerly (Note [Python code a C call ran natively],
# jit/native_python.py). A C dict or set cannot be given a hash it does not compute itself, so the
# dunders run twice: first interpreted, as CPython's insertion would call them (each key's hash, then
# ``stored == key`` for each stored key of that hash in insertion order until one is true, a key
# inserted earlier by the same call being a stored key for the next), so what they read is the trace's,
# guarded; then natively by the C call itself, which the watch allows for exactly the objects whose
# dunders ran interpreted. The native rerun reads the same state and answers the same (nothing ran in
# between); a ``__hash__``/``__eq__`` that writes state (a call counter) writes twice while tracing
# (left, docs/user-guide.md). A stored key's hash is the one C stored where this run inserted the key
# (``Run.stored_hashes``), else its ``__hash__`` interpreted, as a lookup does (Note [A hashed lookup,
# interpreted], hashed_lookup.py). The other choice, building the container through CPython's
# known-hash C API by ctypes, would not rerun anything but ties jitcore to private C functions.
def python_keyed(run: Run, keys: Iterable) -> bool:
    """Whether inserting or removing one of ``keys`` calls a Python ``__hash__``/``__eq__`` of the key
    (a built-in key finding a stored key of the program's is left to C: Note [A lookup by a built-in key
    is C's], hashed_lookup.py)."""
    return any(type(k) not in NATIVE_COMPARANDS and python_hashed(run, k) for k in keys)


def keyed_call(run: Run, fn: Callable, args: tuple, *, container: Iterable | None = None, keys: Iterable,
               insert: bool, through_opaque: bool = False) -> object:
    """``fn(*args)``, a C call that inserts (``insert``) or looks up and removes ``keys`` in ``container``
    (None: the dict or set the call builds and returns), with the Python ``__hash__``/``__eq__`` it calls
    interpreted first (Note [A keyed C call, interpreted first]); called through ``opaque`` (the hooks' C
    call of the program's) where ``through_opaque``, else ``Run.native``."""
    keys = list(keys)
    # C runs the dunders alone where no watch is kept (as eagerly), and where a stored key's ``__hash__``
    # writes (Note [A stored key's hash, asked again], hashes.py)
    if run.hooks.native_call is None or not python_keyed(run, keys) or (
            container is not None and not stored_hashes_repeatable(container)):
        return opaque(run, fn, args, None) if through_opaque else run.native(fn, args, {})
    if container is None:
        known: dict[int, tuple[object, int]] = {}
    else:
        known = run.stored_hashes.setdefault(id(container), (container, {}))[1]
    ids = _interpret_slots(run, () if container is None else container, keys, insert, known)
    previous = _RERUNS.ids
    _RERUNS.ids = previous | ids
    try:
        result = opaque(run, fn, args, None) if through_opaque else run.native(fn, args, {})
    finally:
        _RERUNS.ids = previous
    if container is None and type(result) in (set, frozenset, dict):
        run.stored_hashes[id(result)] = (result, known)
    return result


def _interpret_slots(run: Run, container: Iterable, keys: list, insert: bool,
                     known: dict[int, tuple[object, int]]) -> frozenset[int]:
    """Call interpreted the ``__hash__`` and ``__eq__`` CPython calls to insert (or find) ``keys`` in
    ``container``, whose stored keys' hashes are ``known`` where this run inserted them (the keys
    inserted are added); the ids of the objects whose dunders ran."""
    by_hash: dict[int, list] = {}
    for stored in list(container):  # (an ``__eq__`` may change the container)
        hit = known.get(id(stored))
        if hit is None or hit[0] is not stored:  # Note [A stored key's hash, once per run] (hashes.py)
            hit = known[id(stored)] = (stored, hash_of(run, stored))
        by_hash.setdefault(hit[1], []).append(stored)
    ran: set[int] = set()
    for key in keys:
        h = hash_of(run, key)
        _add_ids(ran, key)
        same = by_hash.setdefault(h, [])
        found = False
        for stored in same:
            if stored is key:
                found = True
                break
            _add_ids(ran, stored)
            if keys_equal(run, stored, key):
                found = True
                break
        if not found and insert:
            same.append(key)
            known[id(key)] = (key, h)
    return frozenset(ran)


def _add_ids(ids: set[int], v: object) -> None:
    """Add the id of ``v``, and of the items of a tuple ``v`` (whose hash and ``==`` C makes from its
    items': Note [Tuple keys compared item by item], hashed_lookup.py), to ``ids``."""
    ids.add(id(v))
    if type(v) is tuple:
        for item in v:
            _add_ids(ids, item)


def rerun_allowed(frame: FrameType) -> bool:
    """Whether ``frame``, started by C, is the ``__hash__`` or ``__eq__`` of an object whose dunders ran
    interpreted for the C call running now (Note [A keyed C call, interpreted first])."""
    ids = _RERUNS.ids
    code = frame.f_code
    if not ids or not code.co_argcount:
        return False
    first = frame.f_locals.get(code.co_varnames[0])
    if id(first) not in ids:
        return False
    t = type(first)
    if not any(getattr(getattr(t, name, None), "__code__", None) is code for name in _DUNDERS):
        return False
    return reads_only(code, frame.f_globals)  # Note [Only a dunder that writes nothing is rerun]


def keyed_iterable_call(run: Run, fn: Callable, iterable: object, rest: tuple = (),
                        kwargs: dict | None = None, *, pairs: bool = False, through_opaque: bool = False,
                        receiver: Iterable | None = None) -> object:
    """``fn(iterable, *rest, **kwargs)`` (``fn(receiver, iterable, ...)``: a method updating the dict or set
    ``receiver``), a C call building or updating a dict or set from ``iterable``'s items (``pairs``: from
    its (key, value) pairs), keyed as ``keyed_call`` keys. An iterable of another kind than a list or a
    tuple is stepped through first (C would step it all the same before returning)."""
    t = type(iterable)
    first = () if receiver is None else (receiver,)
    if kwargs or t in _STORED_HASHES:
        return opaque(run, fn, (*first, iterable, *rest), kwargs) if through_opaque else \
            run.native(fn, (*first, iterable, *rest), kwargs or {})
    items = iterable if t is list or t is tuple else list(iterable)
    keys = [p[0] for p in items if type(p) in (tuple, list) and len(p) == 2] if pairs else items
    return keyed_call(run, fn, (*first, items, *rest), container=receiver, keys=keys, insert=True,
                      through_opaque=through_opaque)


def keyed_lookasides() -> dict[object, Callable]:
    """``{set.add: ..., dict.__setitem__: ..., ...}``: the C methods of a dict or set that insert or remove
    one key, made by ``keyed_call`` (Note [A keyed C call, interpreted first])."""

    def method(fn: Callable, arity: int, insert: bool) -> Callable:
        def keyed(*args: object, **kwargs: object) -> object:
            run = current_run()
            if run is None or kwargs or len(args) not in arity:  # (the method's own error)
                return fn(*args, **kwargs) if run is None else opaque(run, fn, args, kwargs)
            return keyed_call(run, fn, args, container=args[0], keys=(args[1],), insert=insert,
                              through_opaque=True)

        keyed.__name__ = keyed.__qualname__ = f"{fn.__name__}_"
        keyed.__doc__ = f"{fn.__qualname__}() with the key's Python dunders interpreted first."
        return keyed

    return {
        set.add: method(set.add, (2,), True), set.discard: method(set.discard, (2,), False),
        set.remove: method(set.remove, (2,), False), dict.__setitem__: method(dict.__setitem__, (3,), True),
        dict.__delitem__: method(dict.__delitem__, (2,), False), dict.pop: method(dict.pop, (2, 3), False),
        dict.setdefault: method(dict.setdefault, (2, 3), True),
        _ORDERED.__setitem__: method(_ORDERED.__setitem__, (3,), True),
        _ORDERED.__delitem__: method(_ORDERED.__delitem__, (2,), False),
    }
