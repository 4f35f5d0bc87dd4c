"""C builtins that call Python back, given callables and iterables: replaced so that what they call
is interpreted (``map``, ``filter``, ``sorted``/``min``/``max``/``list.sort`` keys, ``functools.reduce``,
``contextvars.Context.run``, ``iter``/``next``, the iteration of ``enumerate``, ``zip``, ``list``,
``tuple``, ``sorted``, ``min``/``max``, ``sum``, ``any``/``all`` (their items' truth too),
``set``/``frozenset``, and the ``__len__``/``__abs__``/``__format__``/``__reversed__``/``__index__`` that
``len``/``abs``/``format``/``reversed``/``hex``/``oct``/``bin``/``range`` call: Note [C builtins over a
Python object's dunders]).

Invariants (those of jitcore/interpreter/lookasides.py, whose table lists these):
- each gives the same result and raises the same exceptions as the builtin it replaces; lazy builtins
  (map, filter, enumerate, zip) stay lazy and keep their types (what they call is wrapped, not the
  builtin);
- an iterable with a Python ``__iter__`` (a ``ModuleList``, a user's container) is iterated through
  the interpreter (``native_iterable``), as the ``for`` statement iterates it: the module a
  ``ModuleList`` yields under ``enumerate(self.layers)`` is the one ``for layer in self.layers``
  gives, reached through its path (its parameters named inputs of the trace, not captured tensors).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import contextvars
import functools
import operator
import weakref
from collections.abc import Iterator
from types import BuiltinFunctionType, FunctionType, GeneratorType, ModuleType

from jitcore.interpreter.calls import NATIVE_CALLABLES, call, looked_up
from jitcore.interpreter.hashed_inserts import keyed_iterable_call
from jitcore.interpreter.protocols import (
    EXHAUSTED,
    NATIVE_ITERATORS,
    NATIVE_TYPES,
    binary,
    get_iter,
    has_python_index,
    index,
    is_python_sequence,
    iter_with_callers_error,
    length,
    next_value,
    sequence_items,
    to_format,
    truth,
)
from jitcore.interpreter.run import Run, current_run

__all__ = ["STEPPED", "abs_", "active_run", "all_", "any_", "bin_", "context_run", "enumerate_", "filter_",
           "format_", "frozenset_", "hex_", "iter_", "len_", "list_", "list_sort", "map_", "max_", "min_",
           "native_iterable", "native_iterator", "next_", "number_", "oct_", "range_", "reduce_", "reversed_",
           "set_", "sorted_", "sum_", "through", "tuple_", "with_length_hint", "zip_"]


def active_run() -> Run:
    """The run a lookaside was called from (a lookaside runs only inside a run)."""
    run = current_run()
    assert run is not None, "a lookaside runs only inside a run"
    return run


class _Interpreted:
    """``fn`` made callable from C (``map``, ``sorted``'s key, ``iter(fn, sentinel)``) so that its Python
    code is interpreted by ``run``; pickled as ``fn`` itself (a pickled ``map`` or callable iterator
    holds the user's function, as eagerly)."""

    __slots__ = ("fn", "run")

    def __init__(self, run: Run, fn: object) -> None:
        self.run, self.fn = run, fn

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.run.call(self.fn, *args, **kwargs)

    def __reduce__(self) -> tuple:
        return _same, (self.fn,)


def _same(fn: object) -> object:
    return fn


def stood_for_callable(v: object) -> object:
    """The program's callable ``v`` stands for where it is an ``_Interpreted``, else ``v``."""
    return v.fn if type(v) is _Interpreted else v


# Note [A module's builtin with a lookaside, called by C]
# A C callable is handed to C unchanged: it has no Python code to interpret. One that is a module's
# function with a lookaside (``operator.index``, ``len``) is the exception: the lookaside runs the
# Python dunder it calls interpreted, where the native function ran it natively and saw what the hooks
# had made of the object's state (``sorted(objs, key=operator.index)`` over objects whose ``__index__``
# returns a number the jit made dynamic raised "__index__ returned non-int"). It goes through
# ``_Interpreted`` as a Python callable does. A bound method (``map(gen.throw, ...)``) stays native:
# its ``__self__`` is the object it acts on, and its lookasides are about that object's frames, which C
# enters as CPython does.
def through(run: Run, fn: object) -> object:
    """``fn`` made callable from C so that its Python code is interpreted by ``run`` (Note [A module's
    builtin with a lookaside, called by C])."""
    if fn is None:
        return fn
    if type(fn) in NATIVE_CALLABLES:
        if type(fn) is BuiltinFunctionType and type(fn.__self__) is ModuleType and _has_lookaside(run, fn):
            return _Interpreted(run, fn)
        return fn
    return _Interpreted(run, fn)


def _has_lookaside(run: Run, fn: object) -> bool:
    try:
        return fn in run.lookasides
    except TypeError:  # an unhashable callable
        return False


def map_(fn: object, /, *iterables: object) -> map:
    """map() whose function is interpreted, over ``iterables`` as the ``for`` statement iterates them."""
    run = active_run()
    return map(through(run, fn), *(native_iterable(run, it) for it in iterables))


def filter_(fn: object, iterable: object, /) -> filter:
    """filter() whose predicate is interpreted, over its iterable as the ``for`` statement iterates it."""
    run = active_run()
    return filter(through(run, fn), native_iterable(run, iterable))


def sorted_(iterable: object, /, *, key: object = None, reverse: bool = False) -> list:
    """sorted() whose key is interpreted."""
    run = active_run()
    return run.native(sorted, (with_length_hint(iterable),), {"key": through(run, key), "reverse": reverse})


def min_(*args: object, **kwargs: object) -> object:
    """min() whose key is interpreted, over its one iterable as the ``for`` statement iterates it."""
    if "key" in kwargs:
        kwargs["key"] = through(active_run(), kwargs["key"])
    return active_run().native(min, _one_iterable(args), kwargs)


def max_(*args: object, **kwargs: object) -> object:
    """max() whose key is interpreted, over its one iterable as the ``for`` statement iterates it."""
    if "key" in kwargs:
        kwargs["key"] = through(active_run(), kwargs["key"])
    return active_run().native(max, _one_iterable(args), kwargs)


# Note [C builtins over a Python object's dunders]
# A C builtin given an object whose ``__len__``, ``__abs__`` or ``__iter__`` is Python calls it natively:
# under no hooks, the same answer. Under the jit's hooks the reads inside are unseen, so what they read
# of the caller's state was neither bound nor guarded: ``len(box)`` (``return len(self.items)``),
# ``sum(box)``, ``set(box)``, ``[*box]``, ``max(box)``, ``any(box)``, ``abs(box)`` were constants of the
# trace, and every cached call returned the first call's answer for another box (a wrong answer). These
# builtins run the dunder interpreted (``protocols.length``) or step the iterable through the interpreter
# (``native_iterable``); anything else (a wrong argument count) goes to the builtin for its own error.
# conversions.py does so for more conversions (``bool``, ``complex``, ``round``, ``divmod``, ``pow``,
# ``bytes``, ``dict`` of a mapping, ``**``), iterating_calls.py for more C functions that iterate an
# argument (``list.extend``, ``str.join``, ``itertools``), and protocols.py for a sequence iterated by its
# ``__getitem__`` (Note [The sequence protocol, interpreted]).
def _one_iterable(args: tuple) -> tuple:
    return (native_iterable(active_run(), args[0]),) if len(args) == 1 else args


def len_(*args: object) -> int:
    """len() with a Python ``__len__`` interpreted."""
    return length(active_run(), args[0]) if len(args) == 1 else len(*args)


def abs_(*args: object) -> object:
    """abs() with a Python ``__abs__`` interpreted."""
    if len(args) == 1 and type(args[0]) not in NATIVE_TYPES:
        looked_up(active_run(), args[0], type(args[0]), "__abs__")
        f = getattr(type(args[0]), "__abs__", None)
        if _is_python(f):
            return call(active_run(), f, (args[0],), None)
    return abs(*args)


def number_(cls: type, value: object) -> object:
    """What ``value``'s Python ``__int__``/``__float__`` (``cls``'s dunder) returns, interpreted;
    ``NotImplemented`` where the type has no Python one (the caller converts it with the builtin)."""
    if type(value) not in NATIVE_TYPES:
        looked_up(active_run(), value, type(value), f"__{cls.__name__}__", "__index__")
        f = getattr(type(value), f"__{cls.__name__}__", None)
        if _is_python(f):
            return call(active_run(), f, (value,), None)
    return NotImplemented


def sum_(*args: object, **kwargs: object) -> object:
    """sum() over its iterable as the ``for`` statement iterates it; an item's Python ``__add__``/
    ``__radd__`` interpreted (``sum(fractions)``: ``0 + Fraction`` is ``Fraction.__radd__``), the runs of
    Python's own numbers between such items summed by the builtin (its float summation)."""
    if not 1 <= len(args) <= 2 or set(kwargs) - {"start"} or len(args) == 2 and kwargs:
        return sum(*args, **kwargs)  # the builtin's own error
    run = active_run()
    total = args[1] if len(args) == 2 else kwargs.get("start", 0)
    if isinstance(total, (str, bytes, bytearray)):
        return sum(*args, **kwargs)  # (its own TypeError)
    numbers: list = []
    for item in native_iterable(run, args[0]):
        if type(item) in _SUMMED and type(total) in _SUMMED:
            numbers.append(item)
            continue
        if numbers:
            total, numbers = sum(numbers, total), []
        total = binary(run, total, item, "__add__", "__radd__", "+", operator.add)
    return sum(numbers, total) if numbers else total


_SUMMED = frozenset((int, float, complex, bool))


def any_(*args: object) -> bool:
    """any() over its iterable as the ``for`` statement iterates it (stopping at the first true item),
    an item's Python ``__bool__``/``__len__`` interpreted."""
    if len(args) != 1:
        return any(*args)  # the builtin's own error
    run = active_run()
    return any(truth(run, item) for item in native_iterable(run, args[0]))


def all_(*args: object) -> bool:
    """all() over its iterable as the ``for`` statement iterates it (stopping at the first false item),
    an item's Python ``__bool__``/``__len__`` interpreted."""
    if len(args) != 1:
        return all(*args)
    run = active_run()
    return all(truth(run, item) for item in native_iterable(run, args[0]))


def format_(*args: object) -> str:
    """format() with a Python ``__format__`` interpreted."""
    if len(args) in (1, 2) and (len(args) == 1 or type(args[1]) is str):
        return to_format(active_run(), args[0], args[1] if len(args) == 2 else "")
    return format(*args)


def _indexed(builtin: object) -> object:
    def convert(*args: object) -> object:
        run = active_run()
        return builtin(*(index(run, a) if has_python_index(run, a) else a for a in args))

    convert.__name__ = f"{builtin.__name__}_"
    convert.__doc__ = f"{builtin.__name__}() with its arguments' Python ``__index__`` interpreted."
    return convert


hex_, oct_, bin_, range_ = (_indexed(b) for b in (hex, oct, bin, range))


def reversed_(*args: object) -> object:
    """reversed() with a Python ``__reversed__`` interpreted, or of a sequence with a Python ``__len__``
    and ``__getitem__`` (Note [The sequence protocol, interpreted], protocols.py)."""
    if len(args) == 1 and type(args[0]) not in NATIVE_TYPES:
        t = type(args[0])
        looked_up(active_run(), args[0], t, "__reversed__", "__len__", "__getitem__")
        f = getattr(t, "__reversed__", None)
        if _is_python(f):
            return call(active_run(), f, (args[0],), None)
        if f is None and not hasattr(t, "__reversed__") and _is_python(getattr(t, "__len__", None)) \
                and _is_python(getattr(t, "__getitem__", None)) and not isinstance(args[0], dict):
            return reversed(sequence_items(active_run(), args[0]))
    return reversed(*args)


def set_(*args: object, **kwargs: object) -> set:
    """set() of its iterable as the ``for`` statement iterates it, its items' Python ``__hash__``/``__eq__``
    interpreted first (Note [A keyed C call, interpreted first], hashed_inserts.py)."""
    if len(args) != 1 or kwargs:
        return active_run().native(set, args, kwargs)
    return keyed_iterable_call(active_run(), set, _one_iterable(args)[0])


def frozenset_(*args: object, **kwargs: object) -> frozenset:
    """frozenset() of its iterable as the ``for`` statement iterates it, its items' Python
    ``__hash__``/``__eq__`` interpreted first."""
    if len(args) != 1 or kwargs:
        return active_run().native(frozenset, args, kwargs)
    return keyed_iterable_call(active_run(), frozenset, _one_iterable(args)[0])


def list_sort(self: list, /, *, key: object = None, reverse: bool = False) -> None:
    """list.sort() whose key is interpreted."""
    run = active_run()
    return run.native(list.sort, (self,), {"key": through(run, key), "reverse": reverse})


def reduce_(fn: object, *args: object) -> object:
    """functools.reduce() whose function is interpreted, over its iterable as ``for`` steps it."""
    run = active_run()
    if args:  # Note [A TypeError of iter() replaced by the caller's] (protocols.py)
        message = "reduce() arg 2 must support iteration"
        args = (iter_with_callers_error(native_iterable, run, args[0], message), *args[1:])
    return functools.reduce(through(run, fn), *args)


def context_run(context: contextvars.Context, fn: object, /, *args: object, **kwargs: object) -> object:
    """``Context.run()`` whose function is interpreted: its frame's caller is the calling frame, so what it
    raises is chained to the caller's handled exception, as the thread's ``exc_info`` chains it natively."""
    return context.run(through(active_run(), fn), *args, **kwargs)


def iter_(*args: object) -> object:
    """iter() with a Python __iter__ (or the callable of iter(fn, sentinel)) interpreted."""
    if not 1 <= len(args) <= 2:
        raise TypeError(f"iter expected {'at least 1 argument' if not args else 'at most 2 arguments'}, "
                        f"got {len(args)}")
    obj, sentinel = args[0], args[1:]
    run = active_run()
    if sentinel:
        if not callable(obj):  # CPython's own error (its wording changes between versions)
            return iter(obj, *sentinel)
        return iter(through(run, obj), *sentinel)
    return get_iter(run, obj)


def next_(it: object, /, *default: object) -> object:
    """next() with a Python __next__ interpreted."""
    f = getattr(type(it), "__next__", None)
    if type(f) is FunctionType and len(default) <= 1:
        try:
            return call(active_run(), f, (it,), None)
        except StopIteration:
            if default:
                return default[0]
            raise
    return next(it, *default)


def native_iterable(run: Run, obj: object) -> object:
    """``obj`` as a C function may iterate it: where its ``__iter__`` (or its iterator's ``__next__``)
    is Python, an iterator whose steps are interpreted; ``obj`` itself otherwise."""
    t = type(obj)
    if t in NATIVE_TYPES or t in NATIVE_ITERATORS:  # most calls: no attribute lookups on the type
        return obj
    if is_python_sequence(obj):  # Note [The sequence protocol, interpreted] (protocols.py)
        return get_iter(run, obj)
    if not _is_python(getattr(t, "__iter__", None)) and not _is_python(getattr(t, "__next__", None)):
        return obj
    it = get_iter(run, obj)
    t = type(it)
    if _is_python(getattr(t, "__next__", None)):
        steps = _interpreted_steps(run, it)
    elif t in _FORWARDING_ITERATORS or _is_python(getattr(t, "__iter__", None)):
        steps = _native_steps(it)
    else:
        return it
    STEPPED[steps] = it  # Note [A reduction shows what the program gave] (stand_in_reductions.py)
    return steps


def native_iterator(run: Run, obj: object) -> Iterator[object]:
    """``iter(native_iterable(run, obj))``: the iterator a C caller's ``PyObject_GetIter`` gets."""
    return iter(native_iterable(run, obj))


def _is_python(f: object) -> bool:
    return type(f) is FunctionType


# Note [An iterator whose __iter__ is not itself]: the C builtin given ``native_iterable``'s result calls
# ``iter()`` on it again, which an iterator answers with itself, except a weakref proxy (its ``__iter__``
# is its referent's: a proxy to a non-iterator would raise "'function' object is not iterable" where
# eagerly its ``__next__`` raises "Weakref proxy referenced a non-iterator") and a class whose Python
# ``__iter__`` returns something else. Those are stepped by a generator, as the builtin steps the iterator
# ``__iter__`` gave (test_weakref.ReferencesTestCase.test_proxy_bad_next).
_FORWARDING_ITERATORS = frozenset((weakref.ProxyType, weakref.CallableProxyType))


def _native_steps(it: object) -> Iterator[object]:
    while (value := next(it, EXHAUSTED)) is not EXHAUSTED:
        yield value


# generator -> the iterator it steps, for the generators ``native_iterable`` made (a finished one has no
# frame left to say it)
STEPPED: weakref.WeakKeyDictionary[Iterator[object], object] = weakref.WeakKeyDictionary()


def stood_for_by_steps(v: object) -> object:
    """The iterator ``v`` steps where it is a generator ``native_iterable`` made, else ``v`` (Note [A
    reduction shows what the program gave], stand_in_reductions.py)."""
    if type(v) is not GeneratorType or v.gi_code not in _STEPPING_CODES:
        return v
    return STEPPED.get(v, v)


def _interpreted_steps(run: Run, it: object) -> Iterator[object]:
    while (value := next_value(run, it)) is not EXHAUSTED:
        yield value


_STEPPING_CODES = (_native_steps.__code__, _interpreted_steps.__code__)


def enumerate_(*args: object, **kwargs: object) -> enumerate:
    """enumerate() over its iterable as the ``for`` statement iterates it (bad arguments: the builtin's
    own error)."""
    run = active_run()
    if args:
        args = (native_iterable(run, args[0]), *args[1:])
    elif "iterable" in kwargs:
        kwargs["iterable"] = native_iterable(run, kwargs["iterable"])
    return enumerate(*args, **kwargs)


def zip_(*iterables: object, **kwargs: object) -> zip:
    """zip() over ``iterables`` as the ``for`` statement iterates them."""
    run = active_run()
    return zip(*(native_iterable(run, it) for it in iterables), **kwargs)


def list_(*args: object, **kwargs: object) -> list:
    """list() of its iterable as the ``for`` statement iterates it."""
    if len(args) == 1 and not kwargs:
        args = (with_length_hint(args[0]),)
    return list(*args, **kwargs)


def tuple_(*args: object, **kwargs: object) -> tuple:
    """tuple() of its iterable as the ``for`` statement iterates it."""
    if len(args) == 1 and not kwargs:
        args = (with_length_hint(args[0]),)
    return tuple(*args, **kwargs)


def with_length_hint(iterable: object) -> object:
    """``native_iterable``, then the iterable's length hint asked as ``list()``/``tuple()`` ask it, after
    taking its iterator (``__len__``, else ``__length_hint__``: a size to allocate, its value unused)."""
    it = native_iterable(active_run(), iterable)
    if it is not iterable:
        operator.length_hint(iterable)
    return it
