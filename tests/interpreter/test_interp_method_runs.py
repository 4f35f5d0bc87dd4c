"""The fused runs of small methods (attribute operands, attribute stores, ``return f(...)``) behave as
CPython: values, the operators and attribute protocols of user types, exceptions and where their tracebacks
point (line and columns)."""

from __future__ import annotations

import sys
import traceback

import pytest
from hypothesis import given
from hypothesis import strategies as st
from interp_helpers import check

from jitcore.interpreter import interpret
from jitcore.interpreter.instructions import decode


class Vec:
    def __init__(self, x, y):
        self.x = x  # LOAD_FAST+LOAD_FAST+STORE_ATTR (3.11), two stores as one run (3.13)
        self.y = y

    def scaled(self, k):
        return Vec(self.x * k, self.y * k)  # LOAD_FAST+LOAD_ATTR+LOAD_FAST+BINARY_OP, CALL+RETURN_VALUE

    def __add__(self, other):
        return Vec(self.x + other.x, self.y + other.y)  # LOAD_FAST+LOAD_ATTR+LOAD_FAST+LOAD_ATTR+BINARY_OP

    def dot(self, other):
        return self.x * other.x + self.y * other.y

    def __repr__(self):
        return f"Vec({self.x!r}, {self.y!r})"


class Meters:
    """A user number: the binary operations of the runs go through its dunders."""

    def __init__(self, v):
        self.v = v

    def __add__(self, other):
        return Meters(self.v + (other.v if isinstance(other, Meters) else other))

    def __radd__(self, other):
        return Meters(other + self.v)

    def __mul__(self, k):
        if isinstance(k, str):
            raise TypeError("no meters of text")
        return Meters(self.v * k)

    def __repr__(self):
        return f"Meters({self.v!r})"


class Computed(Vec):
    """Attributes answered by a property and by __getattr__ (the runs' non-native attribute path)."""

    @property
    def x(self):
        return self.__dict__["_x"] * 2

    @x.setter
    def x(self, value):
        self.__dict__["_x"] = value

    def __getattr__(self, name):
        if name == "z":
            return 100
        raise AttributeError(f"no {name}")


class Guarded:
    """A __setattr__ that refuses some values: the attribute stores' non-native path and its errors."""

    def __init__(self, a, b):
        self.a = a
        self.b = b  # raises for a negative b: located at this store

    def __setattr__(self, name, value):
        if isinstance(value, int) and value < 0:
            raise ValueError(f"{name} < 0")
        object.__setattr__(self, name, value)


def methods(items, k):
    acc = Vec(0, 0)
    for a, b in items:
        acc = acc + Vec(a, b).scaled(k)
    return acc, acc.dot(Vec(k, 1))


_EXPECTED = {
    "scaled": {"LOAD_GLOBAL+LOAD_FAST+LOAD_ATTR+LOAD_FAST+BINARY_OP",
               "LOAD_FAST+LOAD_ATTR+LOAD_FAST+BINARY_OP", "CALL+RETURN_VALUE"},
    "__add__": {"LOAD_GLOBAL+LOAD_FAST+LOAD_ATTR+LOAD_FAST+LOAD_ATTR+BINARY_OP",
                "LOAD_FAST+LOAD_ATTR+LOAD_FAST+LOAD_ATTR+BINARY_OP", "CALL+RETURN_VALUE"},
    "__init__": ({"LOAD_FAST+LOAD_FAST+STORE_ATTR"} if sys.version_info < (3, 13)
                 else {"LOAD_FAST_LOAD_FAST+STORE_ATTR+LOAD_FAST_LOAD_FAST+STORE_ATTR"}),
}


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_the_method_shapes_are_fused(name) -> None:
    names = {inst.opname for inst in decode(getattr(Vec, name).__code__).fused}
    assert _EXPECTED[name] <= names


numbers = st.one_of(st.integers(-20, 20), st.floats(allow_nan=False, allow_infinity=False, width=16),
                    st.builds(Meters, st.integers(-5, 5)))


@given(st.lists(st.tuples(numbers, numbers), max_size=6), st.one_of(st.integers(-3, 3), st.just("s")))
def test_methods_match_cpython(items, k) -> None:
    check(methods, items, k)


def test_user_attributes_in_the_runs() -> None:
    def f(a, b):
        p, q = Computed(a, b), Computed(b, a)
        return p + q, p.scaled(3), p.x * q.z, p.dot(q)

    check(f, 1, 2)
    check(f, Meters(1), 2)


def _traceback_positions(fn, *args):
    """(function, line, first column, last column) of each traceback entry below the caller, natively and
    interpreted."""
    out = []
    for f in (fn, interpret(fn)):
        try:
            f(*args)
        except Exception as e:  # noqa: BLE001 - compared
            tb = traceback.extract_tb(e.__traceback__)[1:]
            out.append([(s.name, s.lineno, s.colno, s.end_colno) for s in tb])
        else:
            out.append(None)
    return out


@pytest.mark.parametrize(
    ("args", "error"),
    [((Vec(1, 2), "s"), TypeError),  # the operation of the left attribute run
     ((Vec(1, 2), None), TypeError),
     ((Vec(1, [2]), 3), None)],
)
def test_errors_of_attribute_operands_point_at_their_instruction(args, error) -> None:
    def scaled(v, k):
        return v.scaled(k)

    check(scaled, *args)
    native, interpreted = _traceback_positions(scaled, *args)
    assert native == interpreted


@pytest.mark.parametrize("other", [Vec(1, 2), Meters(1), Computed(1, 2)])
def test_a_missing_attribute_in_either_operand(other) -> None:
    def add(v, w):
        return v + w  # __add__: other.x missing, or found through a property

    check(add, Vec(3, 4), other)
    native, interpreted = _traceback_positions(add, Vec(3, 4), other)
    assert native == interpreted

    def reversed_missing(w):
        return w.dot(Vec(1, 1))  # self.x missing: the first attribute of the run

    check(reversed_missing, other)
    native, interpreted = _traceback_positions(reversed_missing, other)
    assert native == interpreted


@pytest.mark.parametrize("b", [2, -2])
def test_attribute_stores_with_a_user_setattr(b) -> None:
    def make(a, b):
        g = Guarded(a, b)
        return g.a, g.b

    check(make, 1, b)
    check(make, -1, b)  # the first store raises
    native, interpreted = _traceback_positions(make, 1, b)
    assert native == interpreted


def test_attribute_stores_on_slots_and_frozen_objects() -> None:
    class Slotted:
        __slots__ = ("x",)

        def __init__(self, x, y):
            self.x = x
            self.y = y  # AttributeError: no slot y

    def make(x, y):
        return Slotted(x, y).x

    check(make, 1, 2)
    native, interpreted = _traceback_positions(make, 1, 2)
    assert native == interpreted


def test_return_of_a_call() -> None:
    def inner(x):
        return 10 // x

    def outer(x):
        return inner(x)  # CALL+RETURN_VALUE: the call raises at its own line

    def gen(x):
        yield 1
        return inner(x)  # a generator's ``return f()``: StopIteration carries the value

    def drive(x):
        g = gen(x)
        out = [next(g)]
        try:
            next(g)
        except StopIteration as stop:
            out.append(stop.value)
        return out

    for x in (2, 0):
        check(outer, x)
        check(drive, x)
        native, interpreted = _traceback_positions(outer, x)
        assert native == interpreted

    def countdown(n):
        if n == 0:
            return "done"
        return countdown(n - 1)

    check(countdown, 50)


def _double(x):
    return x * 2


def _calls_a_global(n, m):
    return _double(n - 1) + _double(n * m)  # LOAD_GLOBAL + a superinstruction for each first argument


def _calls_a_missing_global(n):
    return _no_such_function(n - 1)  # noqa: F821 - NameError at the LOAD_GLOBAL of the run


def test_a_global_called_with_a_computed_first_argument() -> None:
    names = {inst.opname for inst in decode(_calls_a_global.__code__).fused}
    assert {"LOAD_GLOBAL+LOAD_FAST+LOAD_CONST+BINARY_OP"} <= names
    for args in [(3, 4), (2.5, -1), (Meters(2), 3), (Meters(2), "s"), ("s", 2)]:  # the last two: TypeErrors
        check(_calls_a_global, *args)
        native, interpreted = _traceback_positions(_calls_a_global, *args)
        assert native == interpreted
    check(_calls_a_missing_global, 1)
    native, interpreted = _traceback_positions(_calls_a_missing_global, 1)
    assert native == interpreted
