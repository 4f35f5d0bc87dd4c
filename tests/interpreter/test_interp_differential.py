"""Programs run natively and through ``interpret`` must agree (value, exception, stdout, side effects)."""

# The programs exercise odd constructs on purpose (unused targets, constant comparisons, exec, ...).
# ruff: noqa: F841, RUF059, PLR1708, RUF012, PLR0133, B018, C417, S102

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_closures_and_nonlocal():
    def make():
        count = 0

        def inc(k=1):
            nonlocal count
            count += k
            return count

        return inc

    def f():
        inc = make()
        inc()
        inc(5)
        fs = [lambda i=i: i * i for i in range(4)]
        return inc(), [g() for g in fs]

    check(f)


def test_star_args_kwonly_posonly_and_defaults():
    def g(a, b=2, /, c=3, *args, d, e=5, **kw):
        return a, b, c, args, d, e, sorted(kw.items())

    def f():
        return [g(1, d=4), g(1, 2, 3, 4, 5, d=6, z=7), g(*[1, 2], d=1, q=2)]

    check(f)
    check(lambda: g(1))
    check(lambda: g(1, 2, b=3, d=4))
    check(lambda: g(a=1, d=2))


def test_unpacking():
    def f(xs):
        a, *b, c = xs
        (d, e), f_ = (1, 2), 3
        x, y = "ab"
        first, *rest = range(5)
        return a, b, c, d, e, f_, x, y, first, rest, [*xs, *b], {"a": 1, "b": 2}

    check(f, [1, 2, 3, 4])
    check(lambda: f([1]))

    def too_many():
        a, b = [1, 2, 3]

    check(too_many)

    def not_iterable():
        a, b = 5

    check(not_iterable)


def test_generators_send_throw_close_yield_from():
    def inner():
        got = yield 1
        try:
            yield got
        except KeyError as e:
            yield ("caught", e.args)
        return "inner-done"

    def outer():
        result = yield from inner()
        yield result

    def f():
        g = outer()
        out = [next(g), g.send("x"), g.throw(KeyError("k")), next(g)]
        g2 = outer()
        next(g2)
        g2.close()
        out.append(list(outer()))
        out.append(sum(i * i for i in range(10)))
        return out

    check(f)


def test_generator_close_ignored_and_stopiteration_conversion():
    def stubborn():
        try:
            yield 1
        except GeneratorExit:
            yield 2

    def f():
        g = stubborn()
        next(g)
        g.close()

    check(f)

    def raises_stop():
        yield 1
        raise StopIteration("x")

    check(lambda: list(raises_stop()))


def test_async_coroutines_and_async_generators():
    async def co(n):
        await asyncio.sleep(0)
        return n * 2

    async def agen(n):
        for i in range(n):
            yield i
            await asyncio.sleep(0)

    class Ctx:
        async def __aenter__(self):
            return "entered"

        async def __aexit__(self, *exc):
            return False

    async def main():
        values = await asyncio.gather(co(1), co(2))
        items = [x async for x in agen(3)]
        async with Ctx() as c:
            pass
        return values, items, c

    check(lambda: asyncio.run(main()))

    def manual():
        c = co(21)
        try:
            c.send(None)
            c.send(None)
        except StopIteration as e:
            return e.value

    check(manual)


def test_class_bodies_metaclasses_and_super():
    def f():
        class Meta(type):
            def __new__(mcs, name, bases, ns, **kw):
                ns["tag"] = kw.get("tag", "none")
                return super().__new__(mcs, name, bases, ns)

            def __call__(cls, *args):
                inst = super().__call__(*args)
                inst.via_meta = True
                return inst

        class Base(metaclass=Meta, tag="t"):
            x = [i for i in range(3)]

            def __init__(self, v):
                self.v = v

            def describe(self):
                return f"Base({self.v})"

            def __init_subclass__(cls, **kw):
                cls.sub = True

        class Child(Base):
            def describe(self):
                return "Child:" + super().describe()

        c = Child(3)
        return c.describe(), c.via_meta, Child.tag, Child.sub, Base.x, type(c).__name__, Child.__qualname__

    check(f)


def test_descriptors_properties_getattr():
    def f():
        class Upper:
            def __set_name__(self, owner, name):
                self.name = "_" + name

            def __get__(self, obj, objtype=None):
                return self if obj is None else getattr(obj, self.name).upper()

            def __set__(self, obj, value):
                setattr(obj, self.name, value)

        class C:
            name = Upper()

            def __init__(self):
                self._p = 1
                self.name = "abc"

            @property
            def p(self):
                return self._p * 10

            @p.setter
            def p(self, v):
                self._p = v

            @functools.cached_property
            def expensive(self):
                print("computing")
                return 42

            def __getattr__(self, item):
                return f"missing:{item}"

        c = C()
        c.p = 5
        return c.name, c.p, c.expensive, c.expensive, c.other, c.x, hasattr(c, "y")

    check(f)


def test_operators_reflected_and_inplace_fallback():
    def f():
        class V:
            def __init__(self, x):
                self.x = x

            def __add__(self, o):
                return V(self.x + (o.x if isinstance(o, V) else o))

            def __radd__(self, o):
                return V(o + self.x + 1000)

            def __eq__(self, o):
                return isinstance(o, V) and o.x == self.x

            def __lt__(self, o):
                return self.x < o.x

            def __repr__(self):
                return f"V({self.x})"

            __hash__ = None

        class W(V):
            def __radd__(self, o):
                return "W-first"

        v = V(1)
        v += 2
        w = W(5)
        return v, 1 + v, V(1) + w, V(2) == V(2), V(1) != V(2), sorted([V(3), V(1)]), -5 + V(0).x

    check(f)

    def unsupported():
        class A:
            pass

        return A() + 1

    check(unsupported)
    check(lambda: 1 < "a")


def test_with_and_exceptions():
    def f():
        log = []

        class M:
            def __init__(self, swallow):
                self.swallow = swallow

            def __enter__(self):
                log.append("enter")
                return self

            def __exit__(self, t, v, tb):
                log.append(("exit", t.__name__ if t else None))
                return self.swallow

        with M(True):
            raise ValueError("swallowed")
        try:
            with M(False):
                raise KeyError("kept")
        except KeyError as e:
            log.append(e.args)
        try:
            try:
                1 / 0
            finally:
                log.append("finally")
        except ZeroDivisionError:
            log.append("zde")
        return log

    check(f)

    def chained():
        try:
            try:
                {}["k"]
            except KeyError:
                raise ValueError("v")  # noqa: B904 - the implicit __context__ is what is compared
        except ValueError as e:
            return type(e.__context__).__name__, e.__suppress_context__

    check(chained)

    def cause():
        try:
            raise ValueError("a") from KeyError("b")
        except ValueError:
            raise TypeError("c") from None

    check(cause)


def test_exception_groups_except_star():
    def f():
        log = []
        try:
            try:
                raise ExceptionGroup("eg", [ValueError(1), TypeError(2), ValueError(3)])
            except* ValueError as eg:
                log.append(("values", [e.args for e in eg.exceptions]))
        except* TypeError as eg:
            log.append(("types", [e.args for e in eg.exceptions]))
        return log

    check(f)

    def naked():
        seen = []
        try:
            raise KeyError("x")
        except* KeyError as eg:
            seen.append((type(eg).__name__, eg.exceptions))
        return seen

    check(naked)


def test_match_statement():
    @dataclasses.dataclass
    class Point:
        x: int
        y: int

    def describe(v):
        match v:
            case 0 | 1:
                return "small"
            case [a, b, *rest]:
                return ("seq", a, b, rest)
            case {"k": value, **others}:
                return ("map", value, others)
            case Point(x=0, y=y):
                return ("on y", y)
            case Point(x, y) if x == y:
                return ("diag", x)
            case str() as s:
                return ("str", s)
            case _:
                return "other"

    for value in [0, [1, 2, 3], {"k": 1, "j": 2}, Point(0, 4), Point(2, 2), "s", 3.5]:
        check(describe, value)


def test_fstrings_and_formatting():
    def f(x):
        class F:
            def __format__(self, spec):
                return f"<{spec}>"

            def __repr__(self):
                return "F!"

        return f"{x!r:>6}|{x:.2f}|{F():abc}|{F()!r}|{x=}"

    check(f, 3.14159)


def test_comprehensions_and_builtin_callbacks():
    def f(xs):
        return (
            [x * 2 for x in xs if x % 2],
            {x: x * x for x in xs},
            {x % 3 for x in xs},
            list(map(lambda v: v + 1, xs)),
            list(filter(lambda v: v > 2, xs)),
            sorted(xs, key=lambda v: -v),
            max(xs, key=lambda v: v % 3),
            functools.reduce(lambda a, b: a * b, xs, 1),
            functools.partial(lambda a, b: a - b, 10)(3),
        )

    check(f, [3, 1, 4, 1, 5])


def test_enum_and_dataclass_and_isinstance():
    def f():
        class Color(enum.Enum):
            RED = 1
            GREEN = 2

        @dataclasses.dataclass(frozen=True, order=True)
        class P:
            a: int
            b: str = "x"

        p = P(1)
        return Color(2), Color["RED"], p, p < P(2), dataclasses.asdict(p), isinstance(p, P)

    check(f)


def test_globals_locals_eval_exec():
    def f():
        a = 1
        b = [2]
        loc = locals()
        exec("c = a + 1", globals(), loc)
        return sorted(loc), eval("a + b[0]"), loc["c"]

    check(f)


def test_print_and_side_effects():
    def f(xs, d):
        print("hello", len(xs))
        xs.append(4)
        d["k"] = "v"
        del xs[0]

    check(f, [1, 2, 3], {})


def test_unbound_local_and_name_errors():
    def f():
        if False:
            x = 1
        return x

    check(f)
    check(lambda: undefined_name)  # noqa: F821

    def g():
        del y  # noqa: F821
        y = 1

    check(g)


@pytest.mark.parametrize("n", [0, 1, 5, 12])
def test_recursion(n):
    def fib(k):
        return k if k < 2 else fib(k - 1) + fib(k - 2)

    check(fib, n)


def test_program_replacing_builtins_does_not_break_the_interpreter():
    import builtins

    def f():
        old = builtins.len
        try:
            builtins.len = functools.lru_cache(4)(len)
            return [len("abcdef"[:i]) for i in range(5)]
        finally:
            builtins.len = old

    check(f)
