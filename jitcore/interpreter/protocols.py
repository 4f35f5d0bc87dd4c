"""The object protocols behind operators, truth, iteration, subscripts and conversions, run the CPython way
(attribute access is in attributes.py).

Every protocol has a fast path for built-in values (ints, lists, ...) and otherwise emulates CPython's
algorithm so that the Python methods involved (``__add__``/``__radd__``, ``__bool__``, ``__next__``,
``__getitem__``, ...) are called through ``calls.call`` -- i.e. interpreted, and visible to lookasides.

Invariants:
- Only "runs no Python code" decisions are cached. A stale entry (a class changed after it was seen) makes
  a Python method run natively -- same result, only untraced -- never a different result.
- When both operands of an operator are native, the native operator is applied: identical semantics.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import collections
import operator
import sys
import warnings
from types import BuiltinMethodType, FunctionType, MethodType, MethodWrapperType
from typing import TYPE_CHECKING

from jitcore.interpreter.attributes import claims_a_class, stood_for_owner
from jitcore.interpreter.calls import call, looked_up

if TYPE_CHECKING:
    from collections.abc import Callable

    from jitcore.interpreter.run import Run

__all__ = [
    "BINARY_OPS",
    "EXHAUSTED",
    "HASHED_CONTAINERS",
    "NATIVE_BINARY",
    "NATIVE_COMPARANDS",
    "NATIVE_ITERATORS",
    "NATIVE_OPERANDS",
    "NATIVE_TYPES",
    "binary",
    "binary_op",
    "compare_op",
    "contains",
    "delete_item",
    "get_item",
    "get_iter",
    "has_python_index",
    "index",
    "is_python_sequence",
    "iter_with_callers_error",
    "length",
    "next_value",
    "sequence_items",
    "set_item",
    "ssize_index",
    "to_format",
    "to_repr",
    "to_str",
    "truth",
    "unary_op",
]

EXHAUSTED = object()

NATIVE_TYPES = frozenset({
    int, float, complex, bool, str, bytes, bytearray, list, tuple, dict, set, frozenset, type(None), range,
    slice, type(...), type(NotImplemented), memoryview,
})
# Containers that find a key by its hash (and identity first): ``Hooks.item_key`` may stand in for the key.
HASHED_CONTAINERS = (dict, set, frozenset, type({}.keys()))
# (not other subclasses, whose methods may differ: an OrderedDict's and a defaultdict's ``in`` is dict's)
_HASHED_EXACT = frozenset((*HASHED_CONTAINERS, collections.OrderedDict, collections.defaultdict))
# Left operands whose binary operators run natively when the right one is native too: not ``str``,
# whose ``%`` goes through ``hooks.format_percent`` when a run sets it, nor the bytes templates, whose
# ``%`` formats a tuple's items through their dunders (``binary_op``), nor ``set``, whose in-place operators
# are calls the run sees (Note [A set changed in place is a call]).
NATIVE_OPERANDS = NATIVE_TYPES - {str, bytes, bytearray, set}
# Operands whose comparison calls no dunder of another object: not containers (their items' ``__eq__``,
# ``__lt__``, ``__hash__``), which ``compare_op`` compares through ``Run.native``
NATIVE_COMPARANDS = NATIVE_TYPES - {list, tuple, dict, set, frozenset}
# Right operands of ``%`` that hold no other object
_SCALARS = NATIVE_COMPARANDS
_PERCENT = (operator.mod, operator.imod)
NATIVE_ITERATORS = frozenset(type(x) for x in (
    (i for i in ()),
    iter([]), iter(()), iter(range(0)), iter({}), iter({}.values()), iter({}.items()), iter(""), iter(set()),
    enumerate([]), zip(), map(len, []), filter(None, []), reversed([]), iter(b""),
))

# (name, reflected name, symbol, native function), indexed by BINARY_OP's argument (dis._nb_ops order).
_NB = [
    ("add", operator.add, operator.iadd, "+"),
    ("and", operator.and_, operator.iand, "&"),
    ("floordiv", operator.floordiv, operator.ifloordiv, "//"),
    ("lshift", operator.lshift, operator.ilshift, "<<"),
    ("matmul", operator.matmul, operator.imatmul, "@"),
    ("mul", operator.mul, operator.imul, "*"),
    ("mod", operator.mod, operator.imod, "%"),
    ("or", operator.or_, operator.ior, "|"),
    ("pow", operator.pow, operator.ipow, "**"),
    ("rshift", operator.rshift, operator.irshift, ">>"),
    ("sub", operator.sub, operator.isub, "-"),
    ("truediv", operator.truediv, operator.itruediv, "/"),
    ("xor", operator.xor, operator.ixor, "^"),
]
BINARY_OPS: list[tuple] = []
NATIVE_BINARY: list = []  # BINARY_OP argument -> the native operator function
for _name, _fn, _ifn, _sym in _NB:
    BINARY_OPS.append((f"__{_name}__", f"__r{_name}__", None, _sym, _fn))
for _name, _fn, _ifn, _sym in _NB:
    BINARY_OPS.append((f"__{_name}__", f"__r{_name}__", f"__i{_name}__", _sym + "=", _ifn))
NATIVE_BINARY.extend(entry[4] for entry in BINARY_OPS)

_COMPARE = {
    "<": ("__lt__", "__gt__", operator.lt), "<=": ("__le__", "__ge__", operator.le),
    "==": ("__eq__", "__eq__", operator.eq), "!=": ("__ne__", "__ne__", operator.ne),
    ">": ("__gt__", "__lt__", operator.gt), ">=": ("__ge__", "__le__", operator.ge),
}


def _is_py(f: object) -> bool:
    return type(f) is FunctionType


def _looked_up(run: Run, v: object, t: type, *names: str) -> None:
    if run.hooks.on_type_lookup is not None and t not in NATIVE_TYPES:
        looked_up(run, v, t, *names)


def _looked_aside(run: Run, f: object) -> bool:
    """Whether the (C) slot function ``f`` has a lookaside: then the protocol is emulated so it is used."""
    if f is None:
        return False
    try:
        return f in run.lookasides
    except (TypeError, ValueError):  # unhashable
        return False


# ---------------------------------------------------------------------------------------------- operators

_BOUND_METHODS = (MethodWrapperType, BuiltinMethodType, MethodType)
# ``+`` and ``*`` of builtin sequences are their sequence slots (sq_concat, sq_repeat), which CPython
# tries only after the numeric slots of both operands: ``"ab" + UserString`` reaches the right
# operand's ``__radd__`` first, where calling ``str.__add__`` first would raise TypeError.
_SEQUENCE_SLOTS = frozenset(
    getattr(t, name) for t in (str, bytes, bytearray, list, tuple) for name in ("__add__", "__mul__")
)


def _slot(t: type, name: str) -> object:
    """``name`` as instances of ``t`` find it (CPython's ``_PyType_Lookup``, t's MRO only), not a method
    of t's metaclass that ``getattr(t, name)`` also finds (``type.__or__`` for ``None | List[int]``)."""
    f = getattr(t, name, None)
    if type(f) in _BOUND_METHODS and f.__self__ is t and not any(name in vars(k) for k in t.__mro__):
        return None
    return f


def binary_op(run: Run, op: int, a: object, b: object) -> object:
    """``a <op> b`` for BINARY_OP argument ``op`` (in-place forms included)."""
    ta, tb = type(a), type(b)
    name, rname, iname, symbol, native = BINARY_OPS[op]
    if ta is str and (native is operator.mod or native is operator.imod) \
            and run.hooks.format_percent is not None:
        text = run.hooks.format_percent(a, b)
        if text is not NotImplemented:
            return text
    if ta is set and iname is not None and tb in (set, frozenset):  # Note [A set changed in place is a call]
        return call(run, _slot(ta, iname), (a, b), None)
    if ta in NATIVE_TYPES and tb in NATIVE_TYPES:
        # (``%`` formats a tuple's or a dict's items: their dunders, natively)
        return native(a, b) if tb in _SCALARS or native not in _PERCENT else run.native(native, (a, b), {})
    if iname is not None:
        _looked_up(run, a, ta, iname)
        f = _slot(ta, iname)
        if f is None and hasattr(ta, iname):  # ``__iadd__ = None`` blocks the fallback, as in CPython
            call(run, f, (a, b), None)
        if _is_py(f):
            result = call(run, f, (a, b), None)
            if result is not NotImplemented:
                return result
        elif f is not None and not (
            _looked_aside(run, f) or _is_py(_slot(ta, name)) or _is_py(_slot(tb, rname))
        ):
            return native(a, b)
        elif f is not None:  # through its lookaside, if any (a C ``Tensor.__iadd__``: a recorded add_)
            result = call(run, f, (a, b), None)
            if result is not NotImplemented:
                return result
        if f is None:  # no in-place method: the native in-place operator is the binary one
            return binary(run, a, b, name, rname, symbol, native)
        return binary(run, a, b, name, rname, symbol, BINARY_OPS[op - 13][4], inplace_tried=True)
    return binary(run, a, b, name, rname, symbol, native)


# Note [A set changed in place is a call]
# ``s |= t`` (``-=``, ``&=``, ``^=``) of two sets ran natively, unseen by the run's hooks: a tracer that
# replays a set's changes in the order they were made (jitcore/jit/set_ops.py) saw the set changed by
# no call. It is the call of ``set.__ior__`` (...) the run makes, as any C method the program calls.


# Note [An in-place operator's error names it]
# CPython's ``a += b`` is PyNumber_InPlaceAdd: ``a.__iadd__`` if any, then the binary protocol, and its
# TypeError names the in-place operator (``unsupported operand type(s) for +=``), also where ``a`` has
# no ``__iadd__`` or one that returned NotImplemented. Without an in-place method, the native in-place
# operator is the binary one with that message (``operator.iadd``). With one already called (Python, or
# a C method through its lookaside) it must not be called again, so the binary protocol runs here, slot
# by slot, C slots included (they answer NotImplemented), and the TypeError is raised here; only the
# sequence slots (concatenation, repetition raise their own TypeError) still run natively.


_REPEAT = ("*", "*=")  # the operators that repeat a sequence (``t *= n`` of a tuple reaches binary())


def binary(run: Run, a: object, b: object, name: str, rname: str, symbol: str, native, *,
           inplace_tried: bool = False) -> object:
    """``native(a, b)`` by the binary operator protocol (``a.name(b)``, else ``b.rname(a)``; the right
    operand first where its type is a subclass that overrides it), Python dunders interpreted; ``symbol``
    names the operator in the TypeError where neither operand supports it. ``inplace_tried``: ``a``'s
    in-place method returned NotImplemented (Note [An in-place operator's error names it])."""
    ta, tb = type(a), type(b)
    _looked_up(run, a, ta, name)
    _looked_up(run, b, tb, rname)
    lf = _slot(ta, name)
    rf = _slot(tb, rname) if tb is not ta else None
    if not _is_py(lf) and not _is_py(rf) and not _looked_aside(run, lf) and not _looked_aside(run, rf) and (
            not inplace_tried or lf in _SEQUENCE_SLOTS):
        if symbol in _REPEAT and isinstance(a, _REPEATED) and has_python_index(run, b):
            # a repeat count (Note [A stand-in's number is given to C as its value])
            b = ssize_index(run, b, OverflowError)
        elif symbol in _REPEAT and isinstance(b, _REPEATED) and has_python_index(run, a):
            a = ssize_index(run, a, OverflowError)
        return run.native(native, (a, b), {})  # (``"%s" % obj``: C calls obj's dunders)
    if rf is not None and (issubclass(tb, ta) and rf is not _slot(ta, rname) or lf in _SEQUENCE_SLOTS):
        result = call(run, rf, (b, a), None)
        if result is not NotImplemented:
            return result
        rf = None
    if lf is not None:
        result = call(run, lf, (a, b), None)
        if result is not NotImplemented:
            return result
    if rf is not None:
        result = call(run, rf, (b, a), None)
        if result is not NotImplemented:
            return result
    na, nb = run.type_of(a).__name__, run.type_of(b).__name__  # a stand-in is named as what it stands for
    if symbol == "**":
        raise TypeError(f"unsupported operand type(s) for ** or pow(): '{na}' and '{nb}'")
    raise TypeError(f"unsupported operand type(s) for {symbol}: '{na}' and '{nb}'")


# Note [A stand-in's comparison is its class's]
# A stand-in (a tensor proxy) keeps ``__eq__``/``__hash__`` of its own class (jitcore's tables compare
# and hash it by identity), so the ``__eq__`` a tensor subclass defines in Python (``self is other``,
# or a tolerance check returning a bool) is not on the proxy's class: ``x == y`` found the proxy's
# recording ``eq`` and returned a tensor where eager returned the user's answer. A comparison asks the
# class the operand stands for first (``run.type_of``): its Python method wins, as on the real class.
def _comparison_slot(run: Run, obj: object, t: type, name: str) -> object:
    """The rich-comparison method ``name`` that ``obj`` (of type ``t``) answers with: the Python method
    of the class a stand-in stands for, else ``t``'s."""
    f = getattr(t, name, None)
    if run.type_of is type:  # the bare interpreter: nothing stands for another class
        return f
    stood_for = run.type_of(obj)
    if stood_for is not t:
        user = getattr(stood_for, name, None)
        if _is_py(user):
            return user
    return f


def compare_op(run: Run, symbol: str, a: object, b: object) -> object:
    """``a <symbol> b`` for a rich comparison (reflection and the ``==`` identity fallback included)."""
    ta, tb = type(a), type(b)
    name, rname, native = _COMPARE[symbol]
    if ta in NATIVE_TYPES and tb in NATIVE_TYPES:  # (containers compare their items: natively)
        return native(a, b) if ta in NATIVE_COMPARANDS else run.native(native, (a, b), {})
    _looked_up(run, a, ta, name)
    _looked_up(run, b, tb, rname)
    lf = _comparison_slot(run, a, ta, name)
    rf = _comparison_slot(run, b, tb, rname)
    if not _is_py(lf) and not _is_py(rf) and not _looked_aside(run, lf) and not _looked_aside(run, rf):
        return run.native(native, (a, b), {})
    reflected_done = False
    if ta is not tb and issubclass(tb, ta) and rf is not None:
        reflected_done = True
        result = call(run, rf, (b, a), None)
        if result is not NotImplemented:
            return result
    if lf is not None:
        result = call(run, lf, (a, b), None)
        if result is not NotImplemented:
            return result
    if not reflected_done and rf is not None:
        result = call(run, rf, (b, a), None)
        if result is not NotImplemented:
            return result
    if symbol == "==":
        return a is b
    if symbol == "!=":
        return a is not b
    raise TypeError(
        f"'{symbol}' not supported between instances of '{run.type_of(a).__name__}' "
        f"and '{run.type_of(b).__name__}'"
    )


NATIVE_COMPARE = {symbol: native for symbol, (_, _, native) in _COMPARE.items()}

_UNARY = {"__neg__": operator.neg, "__pos__": operator.pos, "__invert__": operator.invert}


def unary_op(run: Run, name: str, v: object) -> object:
    """``-v``, ``+v`` or ``~v`` (by dunder name)."""
    t = type(v)
    if t not in NATIVE_TYPES:
        _looked_up(run, v, t, name)
        f = getattr(t, name, None)
        if _is_py(f) or _looked_aside(run, f):
            return call(run, f, (v,), None)
    return _UNARY[name](v)


def truth(run: Run, v: object) -> bool:
    """``bool(v)`` with a Python ``__bool__``/``__len__`` interpreted."""
    t = type(v)
    if t in NATIVE_TYPES:
        return bool(v)
    _looked_up(run, v, t, "__bool__", "__len__")
    f = getattr(t, "__bool__", None)
    if _is_py(f):
        result = call(run, f, (v,), None)
        if type(result) is bool:
            return result
        if run.type_of(result) is not bool:
            raise TypeError(f"__bool__ should return bool, returned {type(result).__name__}")
        return bool(result)  # a stand-in's truth (Note [A stand-in's number is given to C as its value])
    if f is None and not hasattr(t, "__bool__"):  # (``__bool__ = None`` refuses truth: bool(v) raises)
        f = getattr(t, "__len__", None)
        if _is_py(f):
            return length(run, v) != 0
    return bool(v)


_MAX_SSIZE = sys.maxsize


def length(run: Run, v: object) -> int:
    """``len(v)`` with a Python ``__len__`` interpreted."""
    t = type(v)
    if t not in NATIVE_TYPES:
        _looked_up(run, v, t, "__len__")
        f = getattr(t, "__len__", None)
        if _is_py(f):
            result = operator.index(call(run, f, (v,), None))
            if result < 0:
                raise ValueError("__len__() should return >= 0")
            if result > _MAX_SSIZE:  # (CPython's length is a Py_ssize_t: a bigger one is not truncated)
                raise OverflowError("cannot fit 'int' into an index-sized integer")
            return result
    return len(v)


def contains(run: Run, container: object, item: object) -> bool:
    """``item in container``: its Python ``__contains__``, else its iteration (a Python ``__iter__``,
    ``__next__`` or ``__getitem__``) and each item's ``==`` interpreted; a dict's or set's lookup with the
    Python ``__hash__``/``__eq__`` it calls interpreted (Note [A hashed lookup, interpreted])."""
    t = type(container)
    if t in _HASHED_EXACT:
        if type(item) in NATIVE_COMPARANDS:  # Note [A lookup by a built-in key is C's] (hashed_lookup.py)
            return item in container
        from jitcore.interpreter import hashed_lookup  # (it builds on this module)
        if hashed_lookup.needs_python(run, container, item):
            return hashed_lookup.find(run, container, item) is not hashed_lookup.ABSENT
        return item in container
    if t not in NATIVE_TYPES:
        _looked_up(run, container, t, "__contains__", "__iter__", "__getitem__")
        f = getattr(t, "__contains__", None)
        if _is_py(f):
            return truth(run, call(run, f, (container, item), None))
        if f is None and not hasattr(t, "__contains__") and _python_iteration(t):
            it = iter_with_callers_error(get_iter, run, container,
                                         f"argument of type '{t.__name__}' is not iterable")
            while (value := next_value(run, it)) is not EXHAUSTED:
                if value is item or truth(run, compare_op(run, "==", value, item)):
                    return True
            return False
    elif (t is list or t is tuple) and (_python_eq(run, item) or any(_python_eq(run, v) for v in container)):
        return _sequence_contains(run, container, item)
    return item in container


# Note [A list searched by Python __eq__]
# ``item in seq`` of a list or tuple compares each element with ``item`` in C (``list_contains``: the
# element first, identity first). Where an element or the item has a Python ``__eq__`` (``5 in objs``,
# an ``__eq__`` reading ``self.v``), C ran it natively, past the hooks: what it read was never guarded,
# and a cached call gave the traced answer after the caller changed an element's attribute. Such a
# search is made here, element by element as C makes it, with each ``==`` interpreted. Elements that
# stand for another class (the jit's stand-ins for tensors) and Python's own values are left to C.
def _python_eq(run: Run, v: object) -> bool:
    t = type(v)
    return t not in NATIVE_TYPES and _is_py(getattr(t, "__eq__", None)) and run.type_of(v) is t


def _sequence_contains(run: Run, seq: list | tuple, item: object) -> bool:
    """``item in seq`` as CPython's ``list_contains``/``tuplecontains`` makes it, each ``==`` interpreted
    (Note [A list searched by Python __eq__])."""
    i = 0
    while i < len(seq):  # (an ``__eq__`` may change the list: C reads its length each time too)
        value = seq[i]
        if value is item or truth(run, compare_op(run, "==", value, item)):
            return True
        i += 1
    return False


def _python_iteration(t: type) -> bool:
    f = getattr(t, "__iter__", None)
    return _is_py(f) or (f is None and not hasattr(t, "__iter__") and _is_py(getattr(t, "__getitem__", None)))


# ---------------------------------------------------------------------------------------------- iteration

def get_iter(run: Run, v: object) -> object:
    """``iter(v)`` with a Python ``__iter__`` interpreted; an object with no ``__iter__`` but a Python
    ``__getitem__`` gets CPython's sequence iterator over ``sequence_items(run, v)`` (Note [The sequence
    protocol, interpreted])."""
    t = type(v)
    if t not in NATIVE_TYPES:
        _looked_up(run, v, t, "__iter__", "__getitem__")
        f = getattr(t, "__iter__", None)
        if _is_py(f):
            it = call(run, f, (v,), None)
            if not hasattr(type(it), "__next__"):
                raise TypeError(f"iter() returned non-iterator of type '{type(it).__name__}'")
            return it
        if is_python_sequence(v):
            return iter(sequence_items(run, v))
    return iter(v)


def iter_with_callers_error(get: Callable[[Run, object], object], run: Run, v: object,
                            message: str) -> object:
    """``get(run, v)`` (``get_iter`` or ``callbacks.native_iterable``) for a C caller of ``PyObject_GetIter``
    that replaces the TypeError it raises by TypeError(message).

    Note [A TypeError of iter() replaced by the caller's]: several C callers clear the TypeError of
    ``PyObject_GetIter`` (``v`` not iterable, its Python ``__iter__`` raising one or returning a
    non-iterator) and raise their own: ``str``/``bytes``/``bytearray.join`` (PySequence_Fast's "can only
    join an iterable"), ``bytes()``/``bytearray()`` ("cannot convert 'C' object to bytes"),
    ``functools.reduce`` ("reduce() arg 2 must support iteration") and ``in`` over a class without
    ``__contains__`` (_PySequence_IterSearch's "argument of type 'C' is not iterable"). The replaced error is
    discarded (PyErr_Format), so the new one is not chained to it; any other exception propagates as it is,
    and one raised later, by a step of the iterator, is not replaced."""
    try:
        return get(run, v)
    except TypeError:
        pass  # discarded, as C clears it: what follows is not chained to it
    raise TypeError(message)


# Note [The sequence protocol, interpreted]
# An object with no ``__iter__`` but a ``__getitem__`` is iterable: CPython's sequence iterator asks
# ``seq[0]``, ``seq[1]``, ... until IndexError or StopIteration, and ``reversed(seq)`` asks ``len(seq)``
# and then the items backwards. Those calls are made by C, natively: under the jit's hooks what a Python
# ``__getitem__``/``__len__`` read of the caller's state was an unguarded constant (``for x in seq``,
# ``list(seq)``, ``sorted(seq)`` over a caller's sequence gave the first call's items on every cached
# call). The iterator is still CPython's own (its type, ``__length_hint__``, ``__reduce__`` and
# ``__setstate__`` are the builtin's), made over a stand-in whose ``__getitem__``/``__len__`` run the
# sequence's interpreted; the stand-in pickles and copies as the sequence itself.
class _Items:
    """``seq`` as C indexes it, its Python ``__getitem__`` interpreted by ``run``."""

    __slots__ = ("run", "seq")

    def __init__(self, run: Run, seq: object) -> None:
        self.run, self.seq = run, seq

    def __getitem__(self, key: object) -> object:
        return self.run.call(type(self.seq).__getitem__, self.seq, key)

    def __reduce__(self) -> tuple:
        return _sequence_of, (self.seq,)


class _SizedItems(_Items):
    """``_Items`` of a sequence with a Python ``__len__`` (interpreted too)."""

    __slots__ = ()

    def __len__(self) -> int:
        return self.run.call(len, self.seq)


def _sequence_of(seq: object) -> object:
    return seq


def stood_for_items(v: object) -> object:
    """The sequence ``v`` stands for where it is an ``_Items``, else ``v``."""
    return v.seq if type(v) in (_Items, _SizedItems) else v


def is_python_sequence(v: object) -> bool:
    """Whether C iterates ``v`` by the sequence protocol over a Python ``__getitem__``."""
    t = type(v)
    return t not in NATIVE_TYPES and not hasattr(t, "__iter__") and _is_py(getattr(t, "__getitem__", None))


def sequence_items(run: Run, seq: object) -> _Items:
    """``seq`` (an ``is_python_sequence``) as C may index it and take its length, its Python
    ``__getitem__``/``__len__`` interpreted (Note [The sequence protocol, interpreted])."""
    return _SizedItems(run, seq) if _is_py(getattr(type(seq), "__len__", None)) else _Items(run, seq)


def next_value(run: Run, it: object) -> object:
    """``next(it)``, or ``EXHAUSTED`` when it is exhausted."""
    t = type(it)
    if t not in NATIVE_ITERATORS:
        _looked_up(run, it, t, "__next__")
        f = getattr(t, "__next__", None)
        if _is_py(f):
            try:
                return call(run, f, (it,), None)
            except StopIteration:
                return EXHAUSTED
        elif f is None:
            raise TypeError(f"'{t.__name__}' object is not an iterator")
    return next(it, EXHAUSTED)


# ---------------------------------------------------------------------------------------------- subscripts

# Note [A stand-in's number is given to C as its value]
# C code that needs a number from an object calls the object's ``__index__``/``__bool__`` itself, natively:
# a program's ``__index__`` that returns what its object holds (``self.ind``, a dynamic number the jit stands
# in for) handed the stand-in to C, which refused it ("__index__ returned non-int (type NumberProxy)":
# ``seq[o:]``, CPython's test_index). Where the interpreter performs the protocol itself (a built-in
# sequence's index or slice bounds, ``operator.index``, truth) it calls that method interpreted, as CPython
# calls it, checks the result's class as CPython does (a stand-in answers the class it stands for) and gives
# C the result's own value (``operator.index``/``bool`` of it: the jit's number is specialized there, so no
# traced number reaches C).
# (not memoryview: it checks that it is not released before it asks for the index, gh-92888)
_SEQUENCES = (list, tuple, str, bytes, bytearray, range)
_REPEATED = (list, tuple, str, bytes, bytearray)  # sequences with a repeat count (sq_repeat)


def has_python_index(run: Run, v: object) -> bool:
    """Whether CPython asks ``v``'s Python ``__index__`` for its index (an int subclass is its own)."""
    t = type(v)
    if t not in NATIVE_TYPES:
        _looked_up(run, v, t, "__index__")
    return t not in NATIVE_TYPES and not isinstance(v, int) and run.type_of(v) is t \
        and _is_py(getattr(t, "__index__", None))


def index(run: Run, v: object) -> int:
    """``operator.index(v)`` (CPython's ``PyNumber_Index``) with a Python ``__index__`` interpreted."""
    if not has_python_index(run, v):
        return operator.index(v)
    result = call(run, type(v).__index__, (v,), None)
    if type(result) is int:
        return result
    if not issubclass(run.type_of(result), int):
        raise TypeError(f"__index__ returned non-int (type {type(result).__name__})")
    if isinstance(result, int):  # (Issue #17576's warning, as PyNumber_Index gives it)
        warnings.warn(f"__index__ returned non-int (type {type(result).__name__}).  The ability to return an "
                      "instance of a strict subclass of int is deprecated, and may be removed in a future "
                      "version of Python.", DeprecationWarning, stacklevel=1)
    return operator.index(result)  # Note [A stand-in's number is given to C as its value]


def ssize_index(run: Run, v: object, error: type[Exception]) -> int:
    """CPython's ``PyNumber_AsSsize_t(v, error)`` with a Python ``__index__`` interpreted.

    Note [An index too large names its own type]: C converts a repeat count, a subscript or a size with
    ``__index__`` and refuses one past ``Py_ssize_t`` with "cannot fit 'I' into an index-sized integer",
    naming the type of the object it was given (``Py_TYPE(item)->tp_name``, a Python class's bare name).
    Handing C the int ``__index__`` returned made it name 'int'; the check is made here, with the
    exception C's caller asks for (IndexError for a subscript, OverflowError for a count or a size)."""
    result = index(run, v)
    if not -sys.maxsize - 1 <= result <= sys.maxsize:
        raise error(f"cannot fit '{type(v).__name__}' into an index-sized integer")
    return result


def _sequence_key(run: Run, key: object) -> object:
    """The key a built-in sequence is subscripted with, a Python ``__index__`` of it (or of a slice's
    step, start and stop, in CPython's order) called interpreted."""
    if type(key) is slice:
        step, start, stop = key.step, key.start, key.stop
        if has_python_index(run, step) or has_python_index(run, start) or has_python_index(run, stop):
            step = index(run, step) if has_python_index(run, step) else step
            start = index(run, start) if has_python_index(run, start) else start
            stop = index(run, stop) if has_python_index(run, stop) else stop
            return slice(start, stop, step)
        return key
    return ssize_index(run, key, IndexError) if has_python_index(run, key) else key


def get_item(run: Run, container: object, key: object) -> object:
    """``container[key]`` with a Python ``__getitem__`` / ``__class_getitem__`` interpreted."""
    t = type(container)
    if t is dict or t is collections.OrderedDict:  # (an OrderedDict's ``[]`` is dict's)
        if type(key) in NATIVE_COMPARANDS:  # Note [A lookup by a built-in key is C's] (hashed_lookup.py)
            return container[key]
        from jitcore.interpreter import hashed_lookup  # (it builds on this module)
        if hashed_lookup.needs_python(run, container, key):  # Note [A hashed lookup, interpreted]
            found = hashed_lookup.find(run, container, key)
            if found is hashed_lookup.ABSENT:
                raise KeyError(key)
            return hashed_lookup.dict_item(container, found)
        return container[key]
    if t in NATIVE_TYPES:
        if type(key) is not int and isinstance(container, _SEQUENCES):
            key = _sequence_key(run, key)
        return container[key]
    _looked_up(run, container, t, "__getitem__")
    f = getattr(t, "__getitem__", None)
    if _is_py(f) or _looked_aside(run, f):
        return call(run, f, (container, key), None)
    if f is None and isinstance(container, type):
        cg = getattr(container, "__class_getitem__", None)
        if cg is not None and _is_py(getattr(cg, "__func__", None)):
            return call(run, cg, (key,), None)
    if type(key) is not int and isinstance(container, _SEQUENCES):
        key = _sequence_key(run, key)
    return container[key]


def set_item(run: Run, container: object, key: object, value: object) -> None:
    """``container[key] = value``."""
    t = type(container)
    if t not in NATIVE_TYPES:
        _looked_up(run, container, t, "__setitem__")
        f = getattr(t, "__setitem__", None)
        if _is_py(f) or _looked_aside(run, f):
            call(run, f, (container, key, value), None)
            return
    if type(key) is not int and isinstance(container, _SEQUENCES):
        key = _sequence_key(run, key)
    if type(key) in NATIVE_COMPARANDS or not isinstance(container, HASHED_CONTAINERS):
        container[key] = value
    else:  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
        from jitcore.interpreter.hashed_inserts import keyed_call  # (it builds on this module)
        keyed_call(run, operator.setitem, (container, key, value), container=container, keys=(key,),
                   insert=True)


def delete_item(run: Run, container: object, key: object) -> None:
    """``del container[key]``."""
    t = type(container)
    if t not in NATIVE_TYPES:
        _looked_up(run, container, t, "__delitem__")
        f = getattr(t, "__delitem__", None)
        if _is_py(f):
            call(run, f, (container, key), None)
            return
    if type(key) is not int and isinstance(container, _SEQUENCES):
        key = _sequence_key(run, key)
    if type(key) in NATIVE_COMPARANDS or not isinstance(container, HASHED_CONTAINERS):
        del container[key]
    else:  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
        from jitcore.interpreter.hashed_inserts import keyed_call  # (it builds on this module)
        keyed_call(run, operator.delitem, (container, key), container=container, keys=(key,), insert=False)


# ---------------------------------------------------------------------------------------------- conversions

def _convert(run: Run, v: object, name: str, native, kind: str) -> str:
    t = type(v)
    if t is not str and t not in NATIVE_TYPES:
        _looked_up(run, v, t, name)
        f = _stood_for_method(run, v, t, name)
        if _is_py(f):
            result = call(run, f, (v,), None)
            if not issubclass(run.type_of(result), str):  # a stand-in for text (the jit's) answers str
                raise TypeError(f"{name} returned non-{kind} (type {type(result).__name__})")
            return result
        return call(run, native, (v,), None)  # as a call of the program's (hooks see ``str(x)``)
    return native(v) if t in NATIVE_COMPARANDS else run.native(native, (v,), {})  # (a container's items)


def _stood_for_method(run: Run, v: object, t: type, name: str) -> object:
    """``type(v).name``; for a stand-in whose stood-for class defines ``name`` itself (a tensor
    subclass's own ``__repr__`` while tracing), the stood-for class's, as ``repr(v)`` finds it eagerly
    (Note [Names a stand-in shares with the class it stands for], attributes.py)."""
    if run.type_of is not type and claims_a_class(t):
        owner = stood_for_owner(t, run.type_of(v), name)
        if owner is not None:
            return vars(owner)[name]
    return getattr(t, name, None)


def to_str(run: Run, v: object) -> str:
    """``str(v)`` (``object.__str__`` is ``repr(v)``: a Python ``__repr__`` interpreted)."""
    t = type(v)
    if t not in NATIVE_TYPES:
        _looked_up(run, v, t, "__str__", "__repr__")
    if t not in NATIVE_TYPES and getattr(t, "__str__", None) is _OBJECT_STR and \
            _is_py(getattr(t, "__repr__", None)):
        return to_repr(run, v)
    return _convert(run, v, "__str__", str, "string")


_OBJECT_STR = object.__str__


def to_repr(run: Run, v: object) -> str:
    """``repr(v)``."""
    return _convert(run, v, "__repr__", repr, "string")


def to_format(run: Run, v: object, spec: str) -> str:
    """``format(v, spec)``."""
    t = type(v)
    if t is not str and t not in NATIVE_TYPES:
        _looked_up(run, v, t, "__format__", "__str__", "__repr__")
        f = getattr(t, "__format__", None)
        if _is_py(f):
            result = call(run, f, (v, spec), None)
            if not issubclass(run.type_of(result), str):  # a stand-in for text (the jit's) answers str
                raise TypeError(f"__format__ must return a str, not {type(result).__name__}")
            return result
        if f is _OBJECT_FORMAT and spec == "" and (_is_py(getattr(t, "__str__", None))
                                                   or _is_py(getattr(t, "__repr__", None))):
            return to_str(run, v)  # object.__format__(v, ""): str(v), its Python __str__ interpreted
    return format(v, spec) if t in NATIVE_COMPARANDS else run.native(format, (v, spec), {})


_OBJECT_FORMAT = object.__format__
