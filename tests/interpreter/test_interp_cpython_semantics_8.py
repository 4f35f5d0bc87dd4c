"""Semantics found different by the differential probes of issue 14 (2026-12-06, cpy50), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys
import typing
import warnings
from typing import ClassVar

import torch

import jitcore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _inplace(op: str):
    """A function ``(a, b) -> a`` running ``a <op> b`` (an in-place operator statement), returning ``a``."""
    namespace: dict = {}
    exec(f"def run(a, b):\n    a {op} b\n    return a\n", namespace)
    return namespace["run"]


_INPLACE = ["+=", "-=", "*=", "@=", "/=", "//=", "%=", "**=", "<<=", ">>=", "&=", "^=", "|="]
_RUNS = [_inplace(op) for op in _INPLACE]


def test_an_unsupported_in_place_operator_is_named_in_the_error() -> None:
    """``a += b`` that neither operand supports raises TypeError "unsupported operand type(s) for +="
    (CPython's PyNumber_InPlaceAdd), also where ``a`` has no ``__iadd__`` or one returning NotImplemented
    (Note [An in-place operator's error names it]). Interpreted, the message named the binary operator ("for
    +", "for ** or pow()") in all of them (/tmp/cpy50-probes/inplace2.snip: 13 of 13 operators differed)."""

    def f() -> list[str]:
        class Plain:
            pass

        class Declines:
            def __iadd__(self, other):
                return NotImplemented

            def __ipow__(self, other):
                return NotImplemented

            def __isub__(self, other):
                return NotImplemented

            def __sub__(self, other):
                return NotImplemented

        class DeclinesToo:
            def __rsub__(self, other):
                return NotImplemented

            def __radd__(self, other):
                return NotImplemented

        out = []
        cases = [(run, Plain(), 1) for run in _RUNS] + [
            (_RUNS[0], 1, Plain()), (_RUNS[7], 2, Plain()), (_RUNS[0], Plain(), [1]),
            (_RUNS[0], Declines(), 1),
            (_RUNS[7], Declines(), 2), (_RUNS[1], Declines(), DeclinesToo()), (_RUNS[0], 1, DeclinesToo()),
            (_RUNS[2], Declines(), 1.5),
        ]
        for run, a, b in cases:
            try:
                run(a, b)
                out.append("no error")
            except TypeError as e:
                out.append(str(e))
        return out

    out = check(f)
    assert out[0] == "unsupported operand type(s) for +=: 'Plain' and 'int'"
    assert all(" or pow()" not in text for text in out)


def test_an_in_place_operator_declined_falls_back_to_the_binary_protocol() -> None:
    """After ``__iadd__`` returned NotImplemented, ``a += b`` is ``a + b`` by the binary protocol: the left
    operand's C slot (an int or list subclass), the right operand's Python ``__radd__``, the sequence slots
    with their own errors; a repeat count by ``__index__`` for a tuple or str (no in-place method), values
    and errors as CPython's. Before, the error of ``Int(1) += "s"`` named "+" (the rest guards the fallback
    the fix changed: the protocol runs slot by slot, C slots included, after a declined ``__iadd__``)."""

    def f() -> list[object]:
        log = []

        class Int(int):
            def __iadd__(self, other):
                log.append("Int.iadd")
                return NotImplemented

        class List(list):
            def __iadd__(self, other):
                log.append("List.iadd")
                return NotImplemented

        class Text(str):
            def __iadd__(self, other):
                return NotImplemented

        class Declines:
            def __iadd__(self, other):
                log.append("iadd")
                return NotImplemented

        class Right:
            def __radd__(self, other):
                log.append("radd")
                return "right"

        class Two:
            def __index__(self):
                return 2

        out: list[object] = []
        for run, a, b in [(_RUNS[0], Int(3), 1), (_RUNS[0], List([1]), [2]), (_RUNS[0], Text("x"), "y"),
                          (_RUNS[0], Declines(), Right())]:
            out.append(_value_of(run, a, b))
        for a, b in [(List([1]), 1), (Text("x"), 1), (Int(1), "s")]:
            try:
                a += b
            except TypeError as e:
                out.append(str(e))
        t, s = (1,), "ab"
        t *= Two()
        s *= Two()
        return out + [t, s, log]

    check(f)



def _value_of(run, a: object, b: object) -> tuple[object, str]:
    """What ``run(a, b)`` leaves in ``a``, and its type's name."""
    result = run(a, b)
    return result, type(result).__name__


def test_what_cannot_be_pickled_is_refused_in_cs_words() -> None:
    """``pickle.dumps`` of a graph reaching a Python class's instance runs the Python pickler interpreted;
    where it refuses (a local class, a bad ``__reduce__`` result) the program sees C's exception: its type
    and text, the version's own (Note [C's words for what cannot be pickled]), and its context where it is
    raised inside a handler. Interpreted, it was the Python pickler's PicklingError ("it's not found as",
    "must return string or tuple"): 6 of 9 probes differed (/tmp/cpy50-probes/pk.snip)."""

    def f() -> list[object]:
        import io
        import pickle

        class Local:
            pass

        class BadReduce:
            def __reduce__(self):
                return 5

        class ShortReduce:
            def __reduce__(self):
                return (len,)

        class ArgsNotTuple:
            def __reduce__(self):
                return (len, 5)

        class Raises:
            def __reduce__(self):
                raise ValueError("mine")

        out: list[object] = []
        for obj in (Local(), [Local()], BadReduce(), ShortReduce(), ArgsNotTuple(), Raises()):
            for protocol in (0, 2, 5):
                try:
                    pickle.dumps(obj, protocol)
                except Exception as e:
                    out.append((type(e).__name__, str(e), e.__context__))
        try:
            pickle.dump(Local(), io.BytesIO(), protocol=4)
        except Exception as e:
            out.append((type(e).__name__, str(e)))
        try:
            raise KeyError("handled")
        except KeyError:
            try:
                pickle.dumps(Local())
            except Exception as e:
                out.append((type(e).__name__, repr(e.__context__)))
        return out

    out = check(f)
    assert out[0][0] == "AttributeError" and "local object" in out[0][1]


class _Point(typing.NamedTuple):
    x: int
    y: int = 0


class _Doubled(_Point):
    """A namedtuple whose ``__new__`` changes the fields it is given."""

    def __new__(cls, x: int) -> _Doubled:
        return super().__new__(cls, x * 2, -x)


class _Counted(_Point):
    """A namedtuple whose ``__init__`` counts the objects made."""

    made: ClassVar[list[int]] = []

    def __init__(self, *args: object) -> None:
        _Counted.made.append(self.x)


def test_a_returned_namedtuple_whose_class_makes_it_otherwise_is_the_one_eager_returns() -> None:
    """A namedtuple the jitted function returns is made again per call from its printed literal; for a
    subclass whose ``__new__`` or ``__init__`` is the program's, the literal called the class
    (``_Doubled(4, -2)``), ran that code again on the fields it had made and returned ``_Doubled(x=8, y=-4)``
    where eager returns ``_Doubled(x=4, y=-2)``, and counted objects eager did not make (Note [A namedtuple
    literal that runs no user code]; /tmp/cpy50-probes/nt_jit.py); with two fields given to a one-argument
    ``__new__`` the computation raised and the call ran eagerly (JC-I002). A plain namedtuple is still printed
    as its class called."""

    def f(x: torch.Tensor) -> tuple:
        return x + 1, _Doubled(2), _Counted(3, 4), _Point(5)

    jitted = jitcore.jit(f)
    for _ in range(2):
        _Counted.made.clear()
        eager = f(torch.ones(2))
        made_eagerly = list(_Counted.made)
        _Counted.made.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = jitted(torch.ones(2))
        assert [str(w.message) for w in caught] == []  # (before: the computation raised, it ran eagerly)
        assert [type(v) for v in out] == [type(v) for v in eager]
        assert out[1:] == eager[1:] == (_Doubled(2), (3, 4), (5, 0))
        assert torch.equal(out[0], eager[0])
        assert _Counted.made == made_eagerly == [3]
    text = str(jitcore.last_traces(jitted)[-1])
    assert "_Point(5, 0)" in text
