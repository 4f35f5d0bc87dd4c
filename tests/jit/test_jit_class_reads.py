"""jitcore's own type checks of the program's objects do not read ``obj.__class__``.

``isinstance(obj, C)`` falls back on ``obj.__class__`` when ``type(obj)`` is not a subclass of ``C``,
through the class's ``__getattribute__``. The jit's checks of the values it meets (binding arguments,
snapshots of state, output mapping, its own lookasides) used ``isinstance`` on the program's objects, so
a class that logs or refuses attribute reads saw ``__class__`` read several times where eager reads
nothing (CPython's test_descr: test_module_subclasses, test_special_method_lookup). The jit asks
``type(obj)`` instead. (Objects the caller passes are still read for their state: ``obj.__dict__``, by
the pass and by the prologue of every call; and objects returned are taken apart: such a class sees
those reads.)
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any

import pytest
import torch

import jitcore

LOG: list[tuple[str, ...]] = []


class Logged:
    """Logs every attribute read through ``__getattribute__`` and every write and delete."""

    def __getattribute__(self, name: str) -> Any:
        LOG.append(("getattr", name))
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        LOG.append(("setattr", name))
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        LOG.append(("delattr", name))
        object.__delattr__(self, name)

    def __floor__(self) -> int:
        return 3



class LoggedModule(types.ModuleType):
    def __getattribute__(self, name: str) -> Any:
        LOG.append(("getattr", name))
        return types.ModuleType.__getattribute__(self, name)


def made_inside(x: torch.Tensor) -> Any:
    module = LoggedModule("m")
    module.value = 3
    obj = Logged()
    obj.bar = module.value
    return x + obj.bar, math.floor(obj)


def _log_of(fn: Any, *args: Any) -> tuple[Any, list]:
    LOG.clear()
    out = fn(*args)
    return out, list(LOG)


def test_attribute_reads_the_program_makes_are_all_its_class_sees() -> None:
    x = torch.ones(2)
    want, want_log = _log_of(made_inside, x)
    jitted = jitcore.jit(made_inside)
    for _ in range(2):
        got, got_log = _log_of(jitted, x)
        assert got_log == want_log
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert sys.modules.get("m") is None


def _class_property_reads(x: torch.Tensor) -> tuple[list, torch.Tensor]:
    """How many times a ``__class__`` property runs for each of a few reads of an object (test_inspect's
    TestGetattrStatic.test_class_as_property)."""
    import inspect

    reads: list[int] = []

    class Base:
        __slots__ = ("s",)
        foo = 3

        def hello(self) -> str:
            return "base"

    class Something(Base):
        __slots__ = ("__dict__",)

        @property
        def __class__(self) -> type:  # noqa: PLR6301 - a property computing the class is the case
            reads.append(1)
            return object

        def hello(self) -> str:
            return super().hello()

    obj = Something()
    obj.s = 4
    out = []
    for step in (lambda: inspect.getattr_static(obj, "foo"), lambda: isinstance(obj, int),
                 lambda: isinstance(obj, Base), obj.hello, lambda: Base.s.__get__(obj),
                 lambda: super(Something, obj).hello(), lambda: isinstance(obj, (str, bytes))):
        before = len(reads)
        out.append((step(), len(reads) - before))
    return out, x + 1


def test_a_class_computed_by_a_property_is_read_as_eagerly() -> None:
    """The jit's ``isinstance``, ``super`` and slot lookasides asked ``isinstance(obj, Proxy)`` of the
    program's object, which runs a ``__class__`` property where ``type(obj)`` does not match: one to two
    reads more than eagerly for each (``inspect.getattr_static`` read it, where eagerly it never does)."""
    x = torch.ones(2)
    eager = _class_property_reads(x)
    jitted = jitcore.jit(_class_property_reads)(x)
    assert jitted[0] == eager[0]
    torch.testing.assert_close(jitted[1], eager[1])


class ModuleComputed:
    """Answers its instances' module with a property: ``ModuleComputed.__module__`` is the property."""

    def __init__(self) -> None:
        self.v = 2

    @property
    def __module__(self) -> str:  # noqa: PLR6301 - a property in the class's __module__ is the case
        return "somewhere"


def _takes(x: torch.Tensor, obj: ModuleComputed) -> torch.Tensor:
    return x * obj.v


def _returns(x: torch.Tensor) -> tuple[torch.Tensor, ModuleComputed]:
    obj = ModuleComputed()
    obj.v = 3
    return x + 1, obj


def _copies(x: torch.Tensor, obj: ModuleComputed) -> torch.Tensor:
    import copy

    return x * copy.copy(obj).v + copy.deepcopy(obj).v


def _holds(x: torch.Tensor, obj: ModuleComputed) -> list[Any]:
    return [x * 2, obj]


@pytest.mark.parametrize("fn", [_takes, _returns, _copies, _holds])
def test_a_class_whose_module_is_a_property_is_taken_as_eagerly(fn: Any) -> None:
    """A class binding ``__module__`` to a property has that property as its ``__module__``: the jit's
    ``(kind.__module__ or "").startswith(...)`` raised AttributeError for every call taking, copying or
    returning its instance (Note [A class's __module__ that is no name], jit/code_kinds.py)."""
    x, obj = torch.ones(2), ModuleComputed()
    args = (x,) if fn is _returns else (x, obj)
    want = fn(*args)
    jitted = jitcore.jit(fn)
    for _ in range(2):
        got = jitted(*args)
        assert type(got) is type(want) and len(got) == len(want)
        torch.testing.assert_close(got[0], want[0])
        if fn is _holds:
            assert got[1] is obj
        if fn is _returns:
            assert type(got[1]) is ModuleComputed and got[1].v == 3
