"""Functions and classes a program makes and returns or stores are new on every call, as eagerly
(jitcore/jit/made_functions.py): a function is made again per cached call, a class runs the call eagerly.

Differential: each program runs several calls eagerly and jitted; after each call the caller sets an
attribute on what it got and calls it, and the next call must see what eager's sees (a new object).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import functools
import types
import warnings
from typing import Any

import pytest
import torch

import jitcore

STORE: list = []


def _a_function(x):
    def g():
        return 1

    return g, x + 1


def _a_lambda(x):
    return (lambda: 2), x + 1


def _a_function_with_a_list_default(x):
    def g(acc=[]):  # noqa: B006 - eagerly a new list per call of x's program
        acc.append(1)
        return len(acc)

    return g, x + 1


def _a_closure_over_a_number(x):
    n = 5

    def g():
        return n

    return g, x + 1


def _a_recursive_function(x):
    def g(k=3):
        return 0 if k == 0 else 1 + g(k - 1)

    return g, x + 1


def _a_wrapped_function(x):
    def g():
        return 4

    @functools.wraps(g)
    def w():
        return g() + 1

    return w, x + 1


def _a_partial_over_a_function(x):
    def g(a, b=0):
        return a + b

    return functools.partial(g, 1), x + 1


def _a_function_stored_in_a_global(x):
    def g():
        return 6

    STORE.append(g)
    return g, x + 1


def _a_namespace_holding_a_function(x):
    return types.SimpleNamespace(cb=lambda: 7), x + 1


def _seen(out: Any) -> list:
    """What the caller sees of a call's function (or the function inside what it got); it then sets an
    attribute on the function and calls it."""
    made = out[0]
    function = made.func if isinstance(made, functools.partial) else getattr(made, "cb", made)
    seen = [getattr(function, "hits", 0), (made if callable(made) else function)()]
    function.hits = seen[0] + 1
    return seen


@pytest.mark.parametrize("program", [
    _a_function, _a_lambda, _a_function_with_a_list_default, _a_closure_over_a_number, _a_recursive_function,
    _a_wrapped_function, _a_partial_over_a_function, _a_function_stored_in_a_global,
    _a_namespace_holding_a_function,
])
def test_a_function_the_program_made_is_new_on_every_call(program):
    """``def g(): ...; return g``: cached calls handed on the pass's function, so the attribute the caller
    set on one call's showed in the next call's, a list default grew across calls, and a stored function
    was one object in the global three times (Note [A function the program made])."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, previous = [], []
        for i in range(3):
            out = fn(torch.ones(2) * i)
            got.append((_seen(out), any(out[0] is p for p in previous), out[1].tolist()))
            previous.append(out[0])
        if program is _a_function_stored_in_a_global:
            got.append((len(STORE), len({id(g) for g in STORE}), STORE[-1] is previous[-1]))
        return got

    jitted = jitcore.jit(program)
    assert calls(jitted) == calls(program)
    assert jitcore.cache_misses(jitted) == 1


def test_functions_sharing_a_cell_share_this_calls_cell():
    """Two functions over one ``nonlocal`` are made again over one new cell per call, as eagerly."""

    def f(x):
        c = 0

        def get():
            return c

        def bump():
            nonlocal c
            c += 1

        return get, bump, x + 1

    def calls(fn: Any) -> list:
        got = []
        for _ in range(3):
            get, bump, _y = fn(torch.ones(2))
            bump()
            got.append((get(), get.__closure__[0] is bump.__closure__[0]))
        return got

    jitted = jitcore.jit(f)
    assert calls(jitted) == calls(f) == [(1, True)] * 3
    assert jitcore.cache_misses(jitted) == 1


def test_a_function_returned_and_stored_at_its_own_key_is_one_function():
    """``d[g] = ...; return g``: the key the call stores at is the function it returns, one per call."""

    def f(x, table):
        g = lambda: 1  # noqa: E731
        table[g] = x + 1
        return g, g

    jitted = jitcore.jit(f)
    table: dict = {}
    for i in range(3):
        g, again = jitted(torch.ones(2) * i, table)
        assert g is again and g in table and torch.equal(table[g], torch.ones(2) * i + 1)
    assert len(table) == 3


class _Registered:
    subclasses: list = []

    def __init_subclass__(cls) -> None:
        _Registered.subclasses.append(cls.__name__)


def _a_class(x):
    class C:
        count = 0

    return C, x + 1


def _a_class_by_type(x):
    return type("T", (), {"k": 1}), x + 1


def _a_namedtuple_class(x):
    return collections.namedtuple("P", "a b"), x + 1


def _an_instance_of_a_class(x):
    class C:
        pass

    return C(), x + 1


def _a_namedtuple_instance(x):
    return collections.namedtuple("P", "a b")(1, 2), x + 1


def _a_dataclass(x):
    @dataclasses.dataclass
    class D:
        a: int = 1

    return D, x + 1


def _a_registered_subclass(x):
    class Sub(_Registered):
        pass

    return Sub, x + 1


@pytest.mark.parametrize("program", [
    _a_class, _a_class_by_type, _a_namedtuple_class, _an_instance_of_a_class, _a_namedtuple_instance,
    _a_dataclass, _a_registered_subclass,
])
def test_a_class_the_program_made_is_new_on_every_call(program):
    """``class C: ...; return C`` (``type(...)``, ``namedtuple``, an instance of one): eagerly each call
    makes a new class, running ``__init_subclass__`` and decorators again; the cached calls handed on the
    pass's class (Note [A class the program made]): such a call runs eagerly."""

    def calls(fn: Any) -> list:
        _Registered.subclasses.clear()
        got, previous = [], []
        for i in range(3):
            made = fn(torch.ones(2) * i)[0]
            cls = made if isinstance(made, type) else type(made)
            got.append((getattr(cls, "hits", 0), any(cls is p for p in previous)))
            cls.hits = got[-1][0] + 1
            previous.append(cls)
        return [*got, list(_Registered.subclasses)]

    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the call runs eagerly, and says so
        assert calls(jitted) == calls(program)


class _RegisteredAbstract(abc.ABC):  # noqa: B024 - a metaclass of Python code, no abstract method
    subclasses: list = []

    def __init_subclass__(cls) -> None:
        _RegisteredAbstract.subclasses.append(cls.__name__)


@pytest.mark.parametrize("base", [_Registered, _RegisteredAbstract], ids=["type", "abc_meta"])
def test_a_class_whose_base_runs_the_programs_init_subclass_registers_once_per_call(base: type):
    """C runs a base's ``__init_subclass__`` natively: its write was no effect the pass saw, so cached
    calls never registered the class (1 in 3 calls), even when the class never leaves the program (Note
    [Class code C runs natively]); such a call runs eagerly. ``abc.ABCMeta.__new__`` (interpreted) calls
    ``type.__new__``, which did the same."""

    def f(x):
        class Sub(base):
            pass

        return x + 1

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in (f, jitted):
            base.subclasses.clear()
            for i in range(3):
                assert torch.equal(fn(torch.ones(2) * i), torch.ones(2) * i + 1)
            assert base.subclasses == ["Sub"] * 3


class _ReturnsItsName(type):
    """A metaclass whose ``__new__`` returns no class (test_subclassinit's test_set_name_metaclass)."""

    def __new__(mcs, name: str, bases: tuple, ns: dict) -> Any:
        super().__new__(mcs, name, bases, ns)
        return (name, len(bases))


def test_a_class_statement_whose_metaclass_returns_no_class_binds_what_it_returned():
    """``class A(metaclass=M)`` binds whatever ``M.__new__`` returned (a tuple here, an int, a plain
    object): it is no class the program made, and noting it as one raised ``TypeError: cannot create
    weak reference to 'tuple' object``."""

    def f(x):
        class A(metaclass=_ReturnsItsName):
            pass

        return x + A[1], A

    jitted = jitcore.jit(f)
    for i in range(3):
        x = torch.ones(2) * i
        (want, want_a), (got, got_a) = f(x), jitted(x)
        assert torch.equal(got, want) and got_a == want_a == ("A", 0)
