"""Python semantics under ``jitcore.jit``'s hooks, not only under the bare interpreter: the builtins the jit
replaces (``super``, ``type``, ``print``) and the lifetime of objects made while tracing behave as
CPython's. Each program runs eagerly and jitted; the results (values, exceptions, side effects) match.

These were found by running CPython's own regression tests through ``jitcore.jit`` instead of
``interpret`` (test_super, test_scope, test_contextlib); each test here fails before its fix.
"""

from __future__ import annotations

import contextlib
import gc
import io
import warnings
from typing import Any

import torch

import jitcore


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return type(error), str(error)


def test_super_with_other_argument_lists_raises_as_cpython() -> None:
    """``super(a, b, c)``, ``super(cls)`` and ``super(type=...)`` are the builtin's, with its errors
    (the jit's ``super`` unpacked two arguments: ``ValueError: too many values to unpack``)."""

    def f(x: torch.Tensor) -> tuple:
        out: list = []
        for args in ((int, int, int), (int,), ()):
            out.append(_outcome(lambda a=args: type(super(*a)).__name__))
        out.append(_outcome(lambda: super(type=int)))
        return x + 1, out

    x = torch.ones(2)
    expected = f(x)
    got = jitcore.jit(f)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] == expected[1]
    assert expected[1][0] == (TypeError, "super() expected at most 2 arguments, got 3")


class _Counted:
    alive = 0

    def __init__(self) -> None:
        _Counted.alive += 1

    def __del__(self) -> None:
        _Counted.alive -= 1


def test_objects_held_by_functions_made_while_tracing_are_freed_as_eagerly() -> None:
    """An inner function made per iteration, closing over an object, is freed when the iteration ends,
    so the object's ``__del__`` runs there as eagerly (the pass's cache of resolved callables held every
    function it called: CPython's test_scope.testLeaks)."""

    def f(x: torch.Tensor) -> tuple:
        start = _Counted.alive

        def one() -> None:
            held = _Counted()

            def inner() -> _Counted:
                return held

            inner()

        for _ in range(5):
            one()
        gc.collect()
        return x * 2, _Counted.alive - start

    x = torch.ones(2)
    assert f(x)[1] == 0
    out, alive = jitcore.jit(f)(x)
    torch.testing.assert_close(out, x * 2)
    assert alive == 0


class _ComputedClass:
    """An object whose ``__class__`` is computed with a side effect (as torch.distributed.reduce_op's
    deprecation warning): ``type(obj)`` never reads it."""

    reads = 0

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: PLE0307 - the point of the test
        _ComputedClass.reads += 1
        warnings.warn("__class__ read", UserWarning, stacklevel=2)
        return int


def test_type_of_an_object_does_not_read_its_class_attribute() -> None:
    """``type(obj)`` in the program answers the object's class without reading ``obj.__class__`` (the
    jit's ``type`` asked ``isinstance(obj, Proxy)``, which reads it: iterating ``gc.get_objects()`` in a
    jitted function warned about torch.distributed's deprecated ``reduce_op``)."""

    def f(x: torch.Tensor) -> tuple:
        obj = _ComputedClass()
        return x + 1, type(obj) is _ComputedClass

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = f(torch.ones(1))
        got = jitcore.jit(f)(torch.ones(1))
    assert got[1] is expected[1] is True
    assert _ComputedClass.reads == 0


def test_print_under_a_redirect_the_function_makes_goes_where_it_points() -> None:
    """``with contextlib.redirect_stdout(...)`` inside the function: the prints in it reach the redirect's
    target, as eagerly (recorded as prints to ``sys.stdout``, they were replayed after the call, to the
    caller's stdout). A target the caller passes is written on every call; one made inside the
    function makes the call run eagerly."""

    def made_inside(x: torch.Tensor) -> tuple:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            print("hello", 3)
        return x + 1, buf.getvalue()

    def passed(x: torch.Tensor, out: io.StringIO) -> torch.Tensor:
        with contextlib.redirect_stdout(out):
            print("to the argument", tuple(x.shape))
        print("after the redirect")
        return x * 2

    terminal = io.StringIO()
    with contextlib.redirect_stdout(terminal), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager entry's warning
        jitted = jitcore.jit(made_inside)
        for _ in range(2):
            got = jitted(torch.ones(1))
            assert got[1] == made_inside(torch.ones(1))[1] == "hello 3\n"
        assert terminal.getvalue() == ""

        eager_sink, jit_sink = io.StringIO(), io.StringIO()
        jpassed = jitcore.jit(passed)
        for _ in range(3):
            torch.testing.assert_close(jpassed(torch.ones(2), jit_sink), passed(torch.ones(2), eager_sink))
    assert jit_sink.getvalue() == eager_sink.getvalue() == "to the argument (2,)\n" * 3
    assert terminal.getvalue() == "after the redirect\n" * 6
    assert jitcore.cache_misses(jpassed) == 1


def test_class_keyword_arguments_reach_init_subclass() -> None:
    """``class A(Base, middle=3)`` and ``type("B", (Base,), {}, middle=4)`` inside the function: the
    keywords go to ``__init_subclass__`` (the jit's ``type`` took none: CPython's test_subclassinit)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        class Base:
            def __init_subclass__(cls, middle: int = 0, **kwargs: Any) -> None:
                super().__init_subclass__(**kwargs)
                cls.middle = middle

        class A(Base, middle=3):
            pass

        b = type("B", (Base,), {}, middle=4)
        return x + A.middle * b.middle

    torch.testing.assert_close(jitcore.jit(f)(torch.ones(2)), f(torch.ones(2)))


def test_a_dynamic_number_with_complex_fraction_and_decimal_operands() -> None:
    """A dynamic number times ``1j``, plus a ``Fraction``, compared with ``0j``: computed on its value, as
    eagerly (``unsupported operand type(s) for *: 'int' and 'complex'``: CPython's test_richcmp); the
    value is then guarded, so another number is another entry."""
    import decimal
    import fractions

    def f(x: torch.Tensor, n: int) -> tuple:
        z = n * 1j + 1j * n
        return x * abs(z), n + fractions.Fraction(1, 3), decimal.Decimal(2) * n, n == 0j, (n * 1.0) != 2j

    jitted = jitcore.jit(f, dynamic_numbers=("n",))
    for n in (0, 3, 3, 5):
        got, expected = jitted(torch.ones(2), n), f(torch.ones(2), n)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    assert jitcore.cache_misses(jitted) == 3


def test_round_and_pow_take_their_keywords() -> None:
    """``round(number=x, ndigits=1)`` and ``pow(base=2, exp=5)``: the jit's replacements of ``round``,
    ``pow``, ``abs`` and ``divmod`` (for NumPy values) took positional arguments only (CPython's
    test_builtin.test_round); a keyword the builtin refuses gives the builtin's error."""

    def f(x: torch.Tensor) -> tuple:
        calls = (lambda: round(number=2.567, ndigits=1), lambda: round(number=3.7),
                 lambda: pow(base=2, exp=5), lambda: pow(2, exp=5, mod=3), lambda: pow(2, mod=3),
                 lambda: round(x=1))
        return x + 1, [_outcome(call) for call in calls]

    got, expected = jitcore.jit(f)(torch.ones(1)), f(torch.ones(1))
    assert got[1] == expected[1]
    assert expected[1][:4] == [2.6, 4, 32, 2]
