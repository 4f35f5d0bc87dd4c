"""``__reduce__`` of C iterators the interpreter made over its own stand-ins (``map``, ``filter``, ``zip``,
``enumerate``, ``iter(fn, sentinel)``, a sequence's iterator, ``itertools``' iterators), with each stand-in
replaced by what it stands for.

Invariants:
- the C iterator is CPython's own (its type, its steps, its ``__reduce__``'s form); only the stand-ins in
  what that ``__reduce__`` returns (its arguments and its state, one level down) are replaced: an
  interpreted callable (``callbacks._Interpreted``) by the program's function, a sequence's items
  (``protocols._Items``) by the sequence, a generator stepping an iterator (``callbacks.native_iterable``)
  by that iterator (``chain``'s: the one it is stepping);
- ``object.__reduce_ex__`` of such an iterator (``copy.copy``, ``pickle``) gives the same (reductions.py).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import itertools
from collections.abc import Callable

from jitcore.interpreter.callbacks import stood_for_by_steps, stood_for_callable
from jitcore.interpreter.iterating_calls import stood_for_when_reached
from jitcore.interpreter.protocols import stood_for_items

__all__ = ["STAND_IN_HOLDERS", "reduce_lookasides", "without_stand_ins"]


# Note [A reduction shows what the program gave]
# The interpreter gives C stand-ins where C would call the program's Python natively: ``map(f, xs)`` is
# ``map(_Interpreted(f), xs)``, ``zip(it)`` over a Python iterator steps a generator that runs its
# ``__next__`` interpreted, ``iter(seq)`` of a ``__getitem__`` sequence iterates ``_Items(seq)``. Each
# stand-in pickles as what it stands for, but ``m.__reduce__()`` itself returned the stand-in: the program
# saw jitcore's objects (``(map, (<_Interpreted>, <list_iterator>))`` where eagerly ``(map, (<function f>,
# ...))``), and ``copy.copy(zip(It()))`` or pickling it held a generator ("cannot pickle 'generator'
# object" where eagerly it pickles). So the ``__reduce__`` of these C types, called by the program or by
# ``object.__reduce_ex__``, hands back what the program gave. The generators that step an iterator are
# known to what they step by a weak map (a finished one has no frame left to say it: ``zip`` over a Python
# iterator it exhausted, /tmp/cpy53-probes/p4_reduce_left.py). ``chain``'s iterables not reached yet stay
# ``_when_reached`` generators in its iterator over them (a tuple's, its state's first item): a new
# iterator over the program's iterables would pickle, but a shallow copy (``copy.copy``) shares chain's own
# with the original, and stepping one would no longer step the other (/tmp/cpy52-probes/p3c.py).
def without_stand_ins(reduced: object) -> object:
    """``reduced`` (a ``__reduce__`` result) with the interpreter's stand-ins in its arguments and state
    replaced by what they stand for (the Note above)."""
    if type(reduced) is not tuple or len(reduced) < 2:
        return reduced
    return (reduced[0], *(_replaced(part) for part in reduced[1:]))


def _replaced(part: object) -> object:
    if type(part) is tuple:
        return tuple(_stood_for(v) for v in part)
    return _stood_for(part)


def _stood_for(v: object) -> object:
    for stood_for in (stood_for_callable, stood_for_items, stood_for_by_steps, stood_for_when_reached):
        original = stood_for(v)
        if original is not v:
            return original
    return v


class _Indexed:
    def __getitem__(self, key: object) -> object:
        raise IndexError(key)


_ITERTOOLS = ("accumulate", "chain", "combinations", "combinations_with_replacement", "compress", "count",
              "cycle", "dropwhile", "filterfalse", "groupby", "islice", "permutations", "product", "starmap",
              "takewhile", "zip_longest")
STAND_IN_HOLDERS = frozenset((
    map, filter, zip, enumerate, reversed, type(iter(int, 0)), type(iter(_Indexed())),
    *(getattr(itertools, name) for name in _ITERTOOLS),
))


def _reducing(method: Callable) -> Callable:
    def reduce(self: object) -> object:
        return without_stand_ins(method(self))

    return reduce


def reduce_lookasides() -> dict[object, Callable]:
    """The lookasides of the ``__reduce__`` methods of ``STAND_IN_HOLDERS`` written in C."""
    return {vars(t)["__reduce__"]: _reducing(vars(t)["__reduce__"]) for t in STAND_IN_HOLDERS
            if "__reduce__" in vars(t)}
