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
    pass's class (Note [A class the program made]): such a call runs eagerly, or makes the class again
    where ``type`` alone makes it (jit/made_classes.py, tests/jit/test_jit_made_classes.py)."""

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


# Closures over objects the program made (Note [A closure over a call's objects], jit/outputs.py): made again
# per cached call over new cells whose contents go through the call's memo, no longer an eager entry.
class _Box:
    cb: Any = None


def _a_counter(x, box):
    count = [0]

    def g(step):
        count[0] += step
        return count[0]

    return g, x + 1


def _a_closure_sharing_its_list_with_the_output(x, box):
    acc: list = []
    return (lambda v: acc.append(v)), x + 1, acc


def _a_closure_stored_into_the_argument(x, box):
    seen: dict = {}
    box.cb = lambda k: (seen.setdefault(k, len(seen)), len(seen))[1]
    return box.cb, x + 1


def _a_closure_stored_into_a_global(x, box):
    acc: set = set()
    STORE.append(lambda v: (acc.add(v), len(acc))[1])
    return STORE[-1], x + 1


def _a_decorator_made_inside(x, box):
    def counted(fn):
        calls: list = []

        @functools.wraps(fn)
        def wrapper(v):
            calls.append(v)
            return fn(v) + len(calls)

        wrapper.calls = calls
        return wrapper

    @counted
    def h(v):
        return v * 10

    h(0)
    return h, x + 1


def _a_partial_over_a_made_list(x, box):
    acc: list = []

    def add(store, v):
        store.append(v)
        return len(store)

    return functools.partial(add, acc), x + 1, acc


def _closures_over_one_cell_and_an_object_holding_one(x, box):
    o = types.SimpleNamespace(items=[])
    push = lambda v: o.items.append(v)  # noqa: E731
    o.size = lambda: len(o.items)
    return push, x + 1, o


def _use(out: tuple, box: _Box) -> list:
    """Call the closure a call returned twice, then look at the other outputs and at what it shares."""
    made, rest = out[0], out[2:]
    seen = [made(1), made(2), getattr(made, "calls", None), made is box.cb]
    seen.append(STORE[-1] is made if STORE else None)
    for other in rest:
        if isinstance(other, types.SimpleNamespace):
            seen += [other.size(), other.items]
        elif isinstance(other, list):
            seen += [list(other), isinstance(made, functools.partial) and made.args[0] is other]
            other.append("caller")
    return seen


@pytest.mark.parametrize("program", [
    _a_counter, _a_closure_sharing_its_list_with_the_output, _a_closure_stored_into_the_argument,
    _a_closure_stored_into_a_global, _a_decorator_made_inside, _a_partial_over_a_made_list,
    _closures_over_one_cell_and_an_object_holding_one,
])
def test_a_closure_over_objects_the_program_made_is_made_again_per_cached_call(program):
    """``count = [0]; def g(): count[0] += 1; ...; return g``: eagerly each call makes a new list and a new
    closure over it. The closure was refused (an eager entry on every call); made again per cached call over
    new cells, its state starts afresh each call, goes on across the caller's calls of it, and the objects
    it shares with the other outputs (``acc``, ``o.items``, the argument's attribute) are one object."""

    def calls(fn: Any) -> list:
        STORE.clear()
        box, got, previous = _Box(), [], []
        for i in range(4):
            out = fn(torch.ones(2) * i, box)
            got.append((_use(out, box), any(out[0] is p for p in previous), out[1].tolist()))
            previous.append(out[0])
        return got

    jitted = jitcore.jit(program)
    assert calls(jitted) == calls(program)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def test_a_closure_over_the_callers_list_stays_an_eager_entry():
    """A closure over an argument's list binds the list whole (guarded by its contents): made again per call
    it traced on every call, so it stays an eager entry, one for all contents (Note [A closure over a call's
    objects])."""

    def f(x, log):
        return (lambda v: log.append(v)), x + 1

    def calls(fn: Any) -> list:
        log: list = []
        for i in range(4):
            fn(torch.ones(2) * i, log)[0](i)
        return log

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert calls(jitted) == calls(f)
    assert jitcore.cache_misses(jitted) == 1


# Functions over values the program computed (Note [A closure over traced values], jit/outputs.py).
def _a_closure_over_a_computed_tensor_and_its_setter(x):
    c = x * 2

    def get():
        return c

    def put(v):
        nonlocal c
        c = v

    return get, put, x + 1


def _a_recursive_closure_over_a_computed_tensor(x):
    c = x * 3

    def walk(k):
        return c if k == 0 else walk(k - 1) + 1

    return walk, None, x + 1


def _a_closure_over_a_list_it_also_returns(x):
    acc = [x * 2]
    return (lambda: acc), acc, x + 1


def _a_function_with_a_computed_default_and_attribute(x):
    def g(t=x * 2, *, k=x + 3):
        return t + k

    g.total = x.sum()
    return g, None, x + 1


def _a_decorator_over_a_computed_scale(x):
    scale = x.sum()

    def scaled(fn):
        return lambda v: fn(v) * scale

    @scaled
    def h(v):
        return v + 1

    return h, None, x + 1


def _a_closure_over_the_input_tensor(x):
    return (lambda: x), None, x + 1


def _use_traced(out: tuple, x: torch.Tensor) -> list:
    made, other = out[0], out[1]
    if callable(other):  # a setter sharing the getter's cell
        first = made().tolist()
        other(torch.full((1,), -1.0))
        return [first, made().tolist()]
    if isinstance(other, list):
        return [made() is other, other[0].tolist()]
    result = made(2) if made.__code__.co_argcount == 1 and made.__defaults__ is None else made()
    seen = [type(result).__name__, result is x, result.tolist()]
    if hasattr(made, "total"):
        seen += [made.total.item(), type(made.__defaults__[0]).__name__]
    return seen


@pytest.mark.parametrize("program", [
    _a_closure_over_a_computed_tensor_and_its_setter, _a_recursive_closure_over_a_computed_tensor,
    _a_closure_over_a_list_it_also_returns, _a_function_with_a_computed_default_and_attribute,
    _a_decorator_over_a_computed_scale, _a_closure_over_the_input_tensor,
])
def test_a_function_over_values_the_program_computed_is_made_again_over_each_calls_values(program):
    """``c = x * 2; return lambda: c``: refused (an eager entry); a computed default or attribute (``def
    g(t=x * 2)``) reached the caller as the pass's TensorProxy. Each cached call now makes the function again
    over this call's tensors, sharing cells and the objects it returns beside it, as eagerly."""

    def calls(fn: Any) -> list:
        got, previous = [], []
        for i in range(4):
            x = torch.ones(2) * i
            out = fn(x)
            got.append((_use_traced(out, x), any(out[0] is p for p in previous), out[2].tolist()))
            previous.append(out[0])
        return got

    jitted = jitcore.jit(program)
    assert calls(jitted) == calls(program)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def test_a_closure_over_a_computed_tensor_carries_its_gradient():
    """The closure's tensor is the computation's output: a backward through it reaches the caller's leaf."""

    def f(x):
        w = x * 2
        return lambda: w.sin()

    def grads(fn: Any) -> list:
        got = []
        for i in range(3):
            x = torch.full((2,), float(i), requires_grad=True)
            fn(x)().sum().backward()
            got.append(x.grad.tolist())
        return got

    jitted = jitcore.jit(f)
    assert grads(jitted) == grads(f)
    assert jitted.fallback_reason is None


def test_a_function_reaching_itself_through_an_object_over_a_tensor_runs_eagerly():
    """``o.cb = lambda: o.t`` with ``o.t`` computed: the object would be rebuilt inside its own rebuild."""

    def f(x):
        o = types.SimpleNamespace(t=x * 2)
        o.cb = lambda: o.t
        return o

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(3):
            o = jitted(torch.ones(2) * i)
            assert o.cb() is o.t and o.t.tolist() == [2.0 * i] * 2
