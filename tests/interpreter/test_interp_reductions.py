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
