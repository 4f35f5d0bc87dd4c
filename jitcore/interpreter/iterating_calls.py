"""C functions and methods that iterate an argument (``list.extend``, ``str.join``, the set operations,
``collections.deque``, ``itertools``' iterators, ``math.fsum``/``prod``, ...), replaced so that the
argument is stepped as the ``for`` statement steps it: a Python ``__iter__``/``__next__``/``__getitem__``
of it interpreted (Note [C builtins over a Python object's dunders], callbacks.py); the functions
``itertools`` calls (``groupby``'s key, ``takewhile``'s predicate, ...) are interpreted too.

Invariants (those of jitcore/interpreter/lookasides.py, whose table lists these):
- the replaced callable itself still runs, through the run's opaque call (the hooks see the call the
  program made), with each iterated argument that has Python iteration replaced by ``native_iterable``'s
  iterator; lazy iterators stay lazy (the argument's steps are interpreted when C asks for them);
- any other argument, and an argument of a builtin type, reaches C as it is.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import array
import collections
import itertools
import math
from collections.abc import Callable, Iterator
from types import FunctionType, GeneratorType

from jitcore.interpreter.callbacks import (
    active_run,
    native_iterable,
    stood_for_by_steps,
    through,
    with_length_hint,
)
from jitcore.interpreter.calls import opaque
from jitcore.interpreter.hashed_inserts import keyed_iterable_call
from jitcore.interpreter.protocols import (
    NATIVE_ITERATORS,
    NATIVE_TYPES,
    is_python_sequence,
    iter_with_callers_error,
)

__all__ = ["iterating_lookasides"]

_SET_UPDATE = set.update
_ALL = range(0, 1 << 16)  # every positional argument is iterated
_REST = range(1, 1 << 16)  # every one but a method's ``self``

# callable -> the positions of the arguments it iterates (a method's ``self`` is position 0)
_ITERATED: dict[object, tuple[int, ...] | range] = {
    list.extend: (1,),
    bytearray.extend: (1,),
    str.join: (1,),
    bytes.join: (1,),
    bytearray.join: (1,),
    **{getattr(set, name): _REST for name in (
        "update", "union", "intersection", "difference", "symmetric_difference", "intersection_update",
        "difference_update", "symmetric_difference_update", "issubset", "issuperset", "isdisjoint")},
    **{getattr(frozenset, name): _REST for name in (
        "union", "intersection", "difference", "symmetric_difference", "issubset", "issuperset",
        "isdisjoint")},
    collections.deque: (0,),
    collections.deque.extend: (1,),
    collections.deque.extendleft: (1,),
    math.fsum: (0,),
    math.prod: (0,),
    array.array.extend: (1,),
    itertools.chain: _ALL,  # (each taken when chain reaches it: _LAZY)
    itertools.chain.from_iterable: (0,),
    itertools.zip_longest: _ALL,
    itertools.product: _ALL,
    **{getattr(itertools, name): (0,) for name in (
        "islice", "cycle", "accumulate", "permutations", "combinations", "combinations_with_replacement",
        "groupby")},
    # (not pairwise, whose iterable's __next__ may reenter it, nor tee, stepped from other threads: a
    # generator stepping the iterable cannot be reentered, and steps it on the run's thread)
    itertools.compress: (0, 1),
    **{getattr(itertools, name): (1,) for name in ("dropwhile", "takewhile", "filterfalse", "starmap")},
}
if hasattr(collections, "_count_elements"):  # Counter.update's C helper (mapping, iterable)
    _ITERATED[collections._count_elements] = (1,)  # noqa: SLF001


# joins take their items into a list before they join them (PySequence_Fast): a list of the items the
# hooks see (the jit's text made from numbers among them is made into its characters there, as for a list)
_JOINS = frozenset((str.join, bytes.join, bytearray.join))


# callable -> the positions (and keywords) of the functions it calls: interpreted (``through``); a class
# given as one answers as the program's calls of it do (``groupby(data, type)`` over the jit's numbers: the
# class each stands for, not the proxy's own)
_CALLED: dict[object, tuple[tuple[int, ...], str | None]] = {
    itertools.groupby: ((1,), "key"),
    itertools.accumulate: ((1,), "func"),
    **{getattr(itertools, name): ((0,), None)
       for name in ("dropwhile", "takewhile", "filterfalse", "starmap")},
}


def _stepping(fn: object, positions: tuple[int, ...] | range) -> Callable:
    called, keyword = _CALLED.get(fn, ((), None))

    def call(*args: object, **kwargs: object) -> object:
        run = active_run()
        args = tuple(_stepped(run, fn, a) if i in positions else through(run, a) if i in called else a
                     for i, a in enumerate(args))
        if keyword in kwargs:
            kwargs[keyword] = through(run, kwargs[keyword])
        if fn is _SET_UPDATE and len(args) == 2 and not kwargs and isinstance(args[0], set):
            # its keys' Python ``__hash__``/``__eq__`` interpreted first: Note [A keyed C call, interpreted
            # first] (hashed_inserts.py)
            return keyed_iterable_call(run, fn, args[1], through_opaque=True, receiver=args[0])
        return opaque(run, fn, args, kwargs)

    call.__name__ = f"{getattr(fn, '__name__', 'call')}_"
    call.__doc__ = f"{getattr(fn, '__qualname__', fn)}() over its iterables as ``for`` steps them."
    return call


# extends that ask the length hint first (its __len__/__length_hint__, natively: a size to allocate)
_HINTED = frozenset((list.extend, bytearray.extend))


# callables that take an iterable's iterator only when they reach it, not when called
_LAZY = frozenset((itertools.chain,))


def _stepped(run: object, fn: object, iterable: object) -> object:
    if fn in _LAZY:
        return _when_reached(run, iterable) if _steps_python(iterable) \
            else iterable
    if fn in _JOINS:
        return _joined(run, fn, iterable)
    return with_length_hint(iterable) if fn in _HINTED else native_iterable(run, iterable)


def _joined(run: object, fn: object, iterable: object) -> object:
    """What a join gets: a list of the items, or the iterable as it is where C steps it.

    A bytearray a misbehaving iterator resizes mid-join raises BufferError, as eagerly: a native iterable
    is C's to step. PySequence_Fast replaces the TypeError of ``iter()`` by "can only join an iterable"
    (Note [A TypeError of iter() replaced by the caller's], protocols.py)."""
    it = iter_with_callers_error(native_iterable, run, iterable, _NOT_JOINABLE)
    if it is iterable and (fn is not str.join or type(it) in (list, tuple)):
        return it
    # (str.join: the jit's text items, a map() of them, made into a list the hooks see)
    return list(iter_with_callers_error(_iter, run, it, _NOT_JOINABLE))


_NOT_JOINABLE = "can only join an iterable"


def _iter(run: object, iterable: object) -> object:
    return iter(iterable)


def _steps_python(iterable: object) -> bool:
    t = type(iterable)
    return t not in NATIVE_TYPES and t not in NATIVE_ITERATORS and (
        is_python_sequence(iterable) or type(getattr(t, "__iter__", None)) is FunctionType
        or type(getattr(t, "__next__", None)) is FunctionType)


def _when_reached(run: object, iterable: object) -> Iterator[object]:
    yield from native_iterable(run, iterable)


def stood_for_when_reached(v: object) -> object:
    """The iterator a ``_when_reached`` generator ``v`` is stepping (``chain``'s active one), else ``v``
    (Note [A reduction shows what the program gave], stand_in_reductions.py)."""
    if type(v) is not GeneratorType or v.gi_code is not _WHEN_REACHED or v.gi_yieldfrom is None:
        return v
    return stood_for_by_steps(v.gi_yieldfrom)


_WHEN_REACHED = _when_reached.__code__


def iterating_lookasides() -> dict[object, Callable]:
    """The lookasides of the C callables that iterate an argument."""
    return {fn: _stepping(fn, positions) for fn, positions in _ITERATED.items()}
