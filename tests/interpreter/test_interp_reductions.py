"""``object.__reduce_ex__`` run with its Python interpreted (jitcore/interpreter/reductions.py): ``copy``,
``deepcopy`` and ``pickle`` of Python classes give C's results and errors, natively and interpreted."""

from __future__ import annotations

import copy
import os
import pickle
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check

from jitcore.interpreter import Hooks, interpret


class Plain:
    def __init__(self, a: int) -> None:
        self.a = a
        self.items = [a, {"k": a}]


class Mapped:
    """A configuration class in the way of transformers': names mapped by a Python ``__getattribute__``."""

    attribute_map = {"width": "hidden"}

    def __init__(self) -> None:
        self.hidden = 8
        self.name = "m"

    def __getattribute__(self, name: str) -> object:
        if name != "attribute_map" and name in super().__getattribute__("attribute_map"):
            name = super().__getattribute__("attribute_map")[name]
        return super().__getattribute__(name)


class Slotted:
    __slots__ = ("x", "y", "__weakref__")

    def __init__(self) -> None:
        self.x = 1  # y left unset


class SlottedWithDict(Slotted):
    def __init__(self) -> None:
        super().__init__()
        self.z = 3


class Empty:
    pass


class WithState(Plain):
    def __getstate__(self) -> dict:
        return {"a": self.a * 10}


class WithNewArgs:
    def __new__(cls, n: int) -> WithNewArgs:
        self = super().__new__(cls)
        self.n = n
        return self

    def __getnewargs__(self) -> tuple:
        return (self.n,)


class WithNewArgsEx(WithNewArgs):
    def __new__(cls, n: int, *, tag: str = "") -> WithNewArgsEx:
        self = super().__new__(cls, n)
        self.tag = tag
        return self

    def __getnewargs_ex__(self) -> tuple:
        return (self.n,), {"tag": self.tag}


class WithEmptyKwargs(WithNewArgs):
    def __getnewargs_ex__(self) -> tuple:
        return (self.n,), {}


class WithReduce(Plain):
    def __reduce__(self) -> tuple:
        return (Plain, (self.a + 1,))


class BadNewArgs(WithNewArgs):
    def __getnewargs__(self) -> list:
        return [self.n]


class BadNewArgsEx(WithNewArgs):
    def __getnewargs_ex__(self) -> tuple:
        return ((self.n,),)


class BadNewArgsExItems(WithNewArgs):
    def __getnewargs_ex__(self) -> tuple:
        return [self.n], {}


class Listed(list):
    def __init__(self) -> None:
        super().__init__([1, 2])
        self.note = "n"


def _views(obj: object) -> tuple:
    state = obj.__dict__ if hasattr(obj, "__dict__") else None
    names = [name for name in getattr(type(obj), "__slots__", ()) if name != "__weakref__"]
    slots = tuple(getattr(obj, name, None) for name in names)
    return type(obj).__name__, state, slots


@pytest.mark.parametrize("make", [lambda: Plain(2), Mapped, Slotted, SlottedWithDict, Empty,
                                  lambda: WithState(3), lambda: WithNewArgs(4),
                                  lambda: WithNewArgsEx(5, tag="t"), lambda: WithEmptyKwargs(6),
                                  lambda: WithReduce(7), Listed],
                         ids=["plain", "mapped", "slotted", "slotted_dict", "empty", "getstate", "newargs",
                              "newargs_ex", "empty_kwargs", "reduce", "list_subclass"])
def test_copies_and_pickles_match_c(make) -> None:
    def f() -> list:
        obj = make()
        out = [_views(copy.copy(obj)), _views(copy.deepcopy(obj))]
        for protocol in (0, 1, 2, 4, 5):
            try:
                out.append(pickle.dumps(obj, protocol))
            except Exception as e:  # noqa: BLE001 - the error is compared
                out.append((type(e).__name__, str(e)))
        reduced = obj.__reduce_ex__(4)
        out.append((reduced[0].__name__, reduced[1][0].__name__ if reduced[1] else None, reduced[1][1:],
                    reduced[2], reduced[3:]) if not isinstance(obj, list) else len(reduced))
        return out

    check(f)


@pytest.mark.parametrize("cls", [BadNewArgs, BadNewArgsEx, BadNewArgsExItems])
def test_bad_new_arguments_raise_as_c(cls) -> None:
    def f() -> object:
        return copy.deepcopy(cls(1))

    check(f)


def test_python_the_reduction_calls_is_interpreted() -> None:
    """The Python ``__getattribute__`` C would call natively is interpreted: the run's load hook sees the
    reads it makes (natively it saw none of them)."""
    seen: list[str] = []

    def on_load_attr(frame: object, obj: object, name: str, value: object) -> object:
        if isinstance(obj, Mapped):
            seen.append(name)
        return value

    def f() -> int:
        return copy.deepcopy(Mapped()).width

    assert interpret(f, Hooks(on_load_attr=on_load_attr))() == 8
    assert "__reduce__" in seen and "__getstate__" in seen and "__dict__" in seen


class _SteppedByNext:
    """A Python iterator: C's zip/enumerate/filter/chain step it through the interpreter's generator."""

    def __init__(self) -> None:
        self.i = 0

    def __iter__(self) -> _SteppedByNext:
        return self

    def __next__(self) -> int:
        self.i += 1
        if self.i > 3:
            raise StopIteration
        return self.i


class _Indexed:
    def __getitem__(self, i: int) -> int:
        if i > 2:
            raise IndexError(i)
        return i


def _doubled(v: int) -> int:
    return 2 * v


def test_a_c_iterators_reduction_shows_what_the_program_gave() -> None:
    """``it.__reduce__()``, ``copy.copy``, ``copy.deepcopy`` and a pickle round trip of ``map``, ``filter``,
    ``zip``, ``enumerate``, ``iter(fn, sentinel)``, a sequence's iterator and ``itertools``' iterators hold
    the program's function, sequence and iterator, as eagerly (Note [A reduction shows what the program
    gave]): they held jitcore's ``_Interpreted``, ``_Items`` and stepping generators, so a copy or pickle
    of a ``zip`` over a Python iterator raised "cannot pickle 'generator' object" (/tmp/cpy52-probes/p3b.py,
    p3c.py)."""

    def f() -> list[object]:
        import copy
        import itertools
        import pickle

        def shape(v: object) -> object:
            if isinstance(v, tuple):
                return tuple(shape(x) for x in v)
            return v if isinstance(v, (int, str, type(None))) else type(v).__name__

        makers = (lambda: zip(_SteppedByNext(), [1, 2]), lambda: map(_doubled, [1, 2]),
                  lambda: map(lambda v: v, [1]), lambda: iter(_Indexed()),
                  lambda: enumerate(_SteppedByNext()), lambda: filter(_doubled, _SteppedByNext()),
                  lambda: iter(_SteppedByNext().__next__, 3), lambda: itertools.islice(_SteppedByNext(), 2),
                  lambda: itertools.chain(_SteppedByNext(), [5]),
                  lambda: itertools.takewhile(_doubled, [1, 2]))
        out: list[object] = []
        for make in makers:
            it = make()
            next(it)
            out.append(shape(it.__reduce__()))
            for how in (copy.copy, copy.deepcopy, lambda v: pickle.loads(pickle.dumps(v))):
                try:
                    c = how(it)
                    out.append((type(c).__name__, list(c)))
                except Exception as e:
                    out.append((type(e).__name__, str(e)))
            out.append(list(it))
        return out

    check(f)


def test_a_finished_c_iterators_reduction_shows_the_iterator_it_stepped() -> None:
    """The reduction of a ``zip``, ``map``, ``enumerate`` or ``filter`` that stepped a Python iterator to its
    end holds that iterator, as eagerly: the generator stepping it had no frame left to say what it stepped,
    so ``__reduce__`` showed a generator and ``copy.deepcopy`` or a pickle round trip raised "cannot pickle
    'generator' object" (Note [A reduction shows what the program gave];
    /tmp/cpy53-probes/p4_reduce_left.py)."""

    def f() -> list[object]:
        import copy
        import pickle

        makers = (lambda: zip([1, 2], _SteppedByNext()), lambda: map(abs, _SteppedByNext()),
                  lambda: enumerate(_SteppedByNext()), lambda: filter(None, _SteppedByNext()))
        out: list[object] = []
        for make in makers:
            it = make()
            out.append(list(it))
            reduced = it.__reduce__()
            out.append([type(part).__name__ for part in reduced[1]])
            for how in (copy.copy, copy.deepcopy, lambda v: pickle.loads(pickle.dumps(v))):
                try:
                    out.append(list(how(it)))
                except Exception as e:
                    out.append((type(e).__name__, str(e)))
        return out

    check(f)


class _ReduceIsNone:
    __reduce__ = None


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_a_reduce_set_to_none_is_called_as_c_calls_it(protocol: int) -> None:
    """A class whose ``__reduce__`` is None overrides ``object.__reduce__``: C calls it and raises
    "'NoneType' object is not callable" (pickle, copy, ``__reduce_ex__``); the interpreter's reduction took
    None for no ``__reduce__`` and reduced the object (3.13's test_pickle
    PyPicklingErrorTests.test_reduce_None; /tmp/cpy52-probes/p11b.py)."""

    def f() -> list[object]:
        out: list[object] = []
        for how in (lambda: pickle._dumps(_ReduceIsNone(), protocol),
                    lambda: pickle.dumps(_ReduceIsNone(), protocol), lambda: copy.copy(_ReduceIsNone()),
                    lambda: _ReduceIsNone().__reduce_ex__(protocol)):
            try:
                out.append(how() is not None)
            except Exception as e:
                out.append((type(e).__name__, str(e)))
        return out

    check(f)
