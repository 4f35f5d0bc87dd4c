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


class _Anything:
    """A callable whose ``__getattr__`` answers every missing name (as mocks and attribute proxies do),
    logging the names asked."""

    def __init__(self, log: list) -> None:
        self.log = log

    def __getattr__(self, name: str) -> int:
        self.log.append(name)
        return 7

    def __call__(self, *args: Any) -> tuple:
        return args


def test_calling_an_object_whose_getattr_answers_everything() -> None:
    """``c(1)`` where ``c``'s class has ``__getattr__``: eagerly nothing is read from ``c``; the jit asked
    it for ``__code__`` and ``_torchdynamo_orig_callable`` (and got ``7``: ``AttributeError: 'int' object
    has no attribute 'co_filename'``, the call failed)."""

    def f(x: torch.Tensor, c: _Anything) -> tuple:
        return x + 1, c(1, 2), c.missing

    eager_log: list = []
    jit_log: list = []
    expected = f(torch.ones(1), _Anything(eager_log))
    jitted = jitcore.jit(f)
    for _ in range(2):
        got = jitted(torch.ones(1), _Anything(jit_log))
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] == ((1, 2), 7)
    assert eager_log == ["missing"]
    assert "__code__" not in jit_log and "_torchdynamo_orig_callable" not in jit_log


def test_calling_a_weak_reference_to_a_writable_memoryview() -> None:
    """``wr()`` for ``wr = weakref.ref(memoryview(bytearray(...)))``: the jit's tables of callables hashed
    ``wr``, which hashes its referent: ``ValueError: cannot hash writable memoryview object`` (CPython's
    test_memoryview test_weakref)."""
    import weakref

    def f(x: torch.Tensor) -> tuple:
        m = memoryview(bytearray(b"abc"))
        wr = weakref.ref(m)
        return x + 1, wr() is m, wr().tobytes()

    got, expected = jitcore.jit(f)(torch.ones(1)), f(torch.ones(1))
    assert got[1:] == expected[1:] == (True, b"abc")


def test_containers_that_hold_themselves() -> None:
    """A list inside itself made into text (``[[...]]``), and a dict holding itself returned or stored:
    the jit recursed without end through them (RecursionError from its text and tree walks, optree's
    flattening, and a walk of 3 ** 64 steps for ``d[0] = d[1] = d[2] = d``: pprint's test_knotted).
    Text is made as eagerly; a returned or stored one makes the call run eagerly (an eager entry)."""

    class State:
        pass

    def text(x: torch.Tensor) -> tuple:
        a: list = []
        a.append(a)
        return x + 1, repr(a), str([a, 1]), f"{a}"

    def made(x: torch.Tensor, state: State) -> tuple:
        d: dict = {}
        d[0] = d[1] = d[2] = d
        state.d = d
        return x + 1, d

    got, expected = jitcore.jit(text)(torch.ones(1)), text(torch.ones(1))
    assert got[1:] == expected[1:] == ("[[...]]", "[[[...]], 1]", "[[...]]")
    jitted = jitcore.jit(made)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager entry's warning
        for _ in range(2):
            state = State()
            out, d = jitted(torch.ones(1), state)
            torch.testing.assert_close(out, torch.ones(1) + 1)
            assert d[0] is d[2] is d and state.d is d


def test_a_list_stored_in_two_places_stays_one_list() -> None:
    """``s.b = [x * 2]; s.a = [0, s.b]``: on every call (the first and cached ones) ``s.a[1] is s.b``, as
    eagerly; each place got its own copy, so a later ``s.b.append`` did not show in ``s.a`` (pprint's
    test_knotted ties its knot in ``setUp``)."""

    class State:
        pass

    def setup(x: torch.Tensor, s: State) -> None:
        s.b = [x * 2]
        s.a = [0, s.b, {"b": s.b}]
        s.c = s.a

    jitted = jitcore.jit(setup)
    for fn in (setup, jitted, jitted, jitted):
        s = State()
        fn(torch.ones(1), s)
        assert s.a[1] is s.b and s.a[2]["b"] is s.b and s.c is s.a
        torch.testing.assert_close(s.b[0], torch.ones(1) * 2)
    assert jitcore.cache_misses(jitted) == 1


def test_a_dynamic_number_as_a_float_methods_receiver_and_its_text_read_back() -> None:
    """``float.hex(n)`` and ``float(format(n, ".1f"))`` of a dynamic number: values to C code (the
    receiver of a method descriptor was handed over as the proxy: ``descriptor 'hex' for 'float' objects
    doesn't apply to a 'NumberProxy' object``; ``float()`` of text made from it: ``float() argument must
    be a string or a real number, not 'TextProxy'``: CPython's test_float with ``random.random()``)."""

    def f(x: torch.Tensor, n: float) -> tuple:
        return x * n, float.hex(n), float(format(n, ".1f")), int(format(int(n), "d"), 16)

    jitted = jitcore.jit(f, dynamic_numbers=("n",))
    for n in (1.5, 2.25, 1.5):
        got, expected = jitted(torch.ones(2), n), f(torch.ones(2), n)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]


def test_dict_methods_and_trees_read_a_dict_as_eagerly() -> None:
    """``d.setdefault(k, v)`` hashes ``k`` once and compares once (the jit's lookaside looked the key up,
    then called the method: twice, CPython's test_dict test_setdefault_atomic); an OrderedDict emptied
    by ``dict.clear`` (its key list left behind) is an argument of a C call without jitcore calling its
    own ``values()`` (``KeyError: 'spam'``, test_ordered_dict test_dict_clear)."""
    import collections

    class Hashed:
        def __init__(self) -> None:
            self.hashes = self.compares = 0

        def __hash__(self) -> int:
            self.hashes += 1
            return 42

        def __eq__(self, other: object) -> bool:
            self.compares += 1
            return self is other

    def f(x: torch.Tensor) -> tuple:
        one, two = Hashed(), Hashed()
        d = {one: 5}
        d.setdefault(two, [])
        d.setdefault(one, [])
        od = collections.OrderedDict(spam=1, ham=2)
        dict.clear(od)
        return x + 1, (one.hashes, two.hashes, one.compares + two.compares), repr(od), d.get(two), d.pop(two)

    got, expected = jitcore.jit(f)(torch.ones(1)), f(torch.ones(1))
    assert got[1:] == expected[1:]
    assert expected[1] == (2, 1, 1)


SCALE = 2


def test_globals_of_a_namespace_the_program_makes_are_no_state() -> None:
    """A function ``exec`` defines in a dict the program makes (``g = {}; exec(src, g)``) and whose
    ``global`` it increments: that dict was held as the caller's state, each pass found a new counter
    in it and traced again without end (RecursionError). Each call makes its own dict: nothing to guard.
    A namespace the caller passes, and the module's globals read by a function made inside, stay guarded."""
    source = "gv = 1\ndef bump():\n    global gv\n    gv += 1\n    return gv * S"

    def made_inside(x: torch.Tensor) -> tuple:
        g = {"S": 3}
        exec(source, g)
        return x * g["bump"](), g["bump"](), (lambda: SCALE)()

    def passed_in(x: torch.Tensor, ns: dict) -> torch.Tensor:
        exec("def k():\n    return S", ns)
        return x * ns["k"]()

    global SCALE
    jitted = jitcore.jit(made_inside)
    for _ in range(3):
        got, expected = jitted(torch.ones(2)), made_inside(torch.ones(2))
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]
    SCALE = 5
    try:
        assert jitted(torch.ones(2))[2] == 5
    finally:
        SCALE = 2
    jitted_passed = jitcore.jit(passed_in)
    for s in (2, 2, 7):
        torch.testing.assert_close(jitted_passed(torch.ones(2), {"S": s}), torch.ones(2) * s)


class _Index:
    def __index__(self) -> Any:
        return self.ind


class _Numbers:
    def __int__(self) -> Any:
        return self.ind

    def __float__(self) -> Any:
        return self.ind / 2

    def __bool__(self) -> Any:
        return self.ind > 6

    def __hash__(self) -> Any:
        return self.ind


def test_an_objects_dynamic_number_reaches_c_code_as_its_value() -> None:
    """An object holding a dynamic number (``o.ind = n``) whose ``__index__``/``__int__``/``__float__``/
    ``__bool__``/``__hash__`` returns it, asked for a number by C code or by the interpreter's protocols
    (a sequence's slice or index, ``[0] * o``, ``range(o)``, ``operator.index``, ``bool``, ``hash``, ``int``,
    ``float``), raised ``TypeError: __index__ returned non-int (type NumberProxy)`` (CPython's test_index
    ``test_slice_bug7532``). The method runs interpreted where the interpreter runs the protocol (Note [A
    stand-in's number is given to C as its value]); C code is handed the object with its numbers' values
    (Note [Objects handed to C hold values]). A second value of the number gives its own results."""
    import operator

    seq = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]

    def f(x: torch.Tensor, n: int) -> tuple:
        o, p = _Index(), _Numbers()
        o.ind = int((n - 1) * 1.5)
        p.ind = n + 1
        out = [seq[o:], seq[:o], seq[o], tuple(seq)[o], "abcdefghijklm"[o:], seq[slice(None, o, 2)], [0] * o,
               list(range(o)), operator.index(o), bool(p), 1 if p else 2, hash(p), int(p), float(p)]
        return x * o.ind, out

    x = torch.ones(2)
    jitted = jitcore.jit(f, dynamic_numbers=True)
    for n in (5, 7, 6):
        expected = f(x, n)
        got = jitted(x, n)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1] == expected[1]
        assert [type(v) for v in got[1]] == [type(v) for v in expected[1]]


_LITERALS = {"a": 1}
_FUNCTIONS = {"len": len, "print": print}


def test_a_container_written_back_over_itself_stays_the_same_object() -> None:
    """``real = g[k]; g[k] = {...}; g[k] = real`` (test.support's ``swap_item`` of a module's
    ``__builtins__``, CPython's test_dynamic) left a copy of the dict there after a jitted call: the
    module's functions no longer saw ``builtins.len = ...`` (Note [A container of the caller's stored
    back])."""

    def f(x: torch.Tensor) -> torch.Tensor:
        g = globals()
        for name in ("_LITERALS", "_FUNCTIONS"):
            real = g[name]
            g[name] = {"len": lambda v: 7}
            g[name] = real
        return x + 1

    before = (_LITERALS, _FUNCTIONS)
    jitted = jitcore.jit(f)
    for _ in range(2):
        torch.testing.assert_close(jitted(torch.ones(2)), f(torch.ones(2)))
        assert globals()["_LITERALS"] is before[0]
        assert globals()["_FUNCTIONS"] is before[1]


def test_a_module_subclass_with_its_own_dict_attribute() -> None:
    """A module subclass whose ``__dict__`` is a property (CPython's test_descr ``test_dir``) raised
    ``AttributeError: 'str' object has no attribute 'get'`` inside jitcore when the program read one of its
    attributes (Note [A module's own namespace])."""
    import types

    class M(types.ModuleType):
        __dict__ = property(lambda self: "Not a dict!")

    def f(x: torch.Tensor) -> tuple:
        m = M("m")
        m.b = 2
        return x * m.b, m.__dict__, _outcome(dir, m)

    x = torch.ones(2)
    expected, got = f(x), jitcore.jit(f)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1:] == expected[1:]
