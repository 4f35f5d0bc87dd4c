"""``pickle.dumps``/``pickle.dump`` inside a jitted function of an object of the caller's: C's pickler read
its state unseen, and a cached call returned the first call's bytes after the caller changed it (Note [The
Python pickler writes C's bytes], jitcore/interpreter/pickling.py; Note [Protocols 0 and 1],
reductions.py). Differential against eager; every case here failed before."""

from __future__ import annotations

import collections
import dataclasses
import io
import pickle
import types
import warnings

import pytest
import torch
from jit_helpers import assert_same, check_calls_around_a_change

import jitcore


class Plain:
    def __init__(self) -> None:
        self.x = 1
        self.items = [1, 2]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 1


class GetState:
    def __init__(self) -> None:
        self.v = 3

    def __getstate__(self) -> dict:
        return {"v2": self.v}


@dataclasses.dataclass
class Data:
    a: int = 1


def _checked(pickled, change) -> None:
    """``x * (len + checksum of pickled())`` around a change of the caller's object (jit_helpers)."""

    def read() -> int:
        data = pickled()
        return len(data) + sum(data)

    check_calls_around_a_change(read, change, make_x=lambda: torch.ones(2, dtype=torch.float64))


CHANGES = {
    "attribute": (Plain, lambda o: setattr(o, "x", "a longer value")),
    "list_item": (Plain, lambda o: o.items.append(3)),
    "new_attribute": (Plain, lambda o: setattr(o, "y", 2)),
    "slot_set": (Slotted, lambda o: setattr(o, "b", 2)),
    "getstate": (GetState, lambda o: setattr(o, "v", 12345)),
    "dataclass": (Data, lambda o: setattr(o, "a", 12345)),
}


@pytest.mark.parametrize(("name", "protocol"), [
    (name, protocol) for name in CHANGES for protocol in (0, 2, 4, 5)
    if not (name == "slot_set" and protocol == 0)  # (eagerly a TypeError: slots and no __getstate__)
])
def test_dumps_of_a_callers_object_reads_it_on_every_call(name, protocol) -> None:
    make, change = CHANGES[name]
    obj = make()
    _checked(lambda: pickle.dumps(obj, protocol=protocol), lambda: change(obj))


@pytest.mark.parametrize("holder", [
    lambda p: {"k": [p]},
    lambda p: collections.OrderedDict(a=p),
    lambda p: types.SimpleNamespace(a=p),
], ids=["dict_list", "OrderedDict", "namespace"])
def test_dumps_of_an_object_inside_a_container_reads_it(holder) -> None:
    inner = Plain()
    outer = holder(inner)
    _checked(lambda: pickle.dumps(outer), lambda: setattr(inner, "x", 999999))


def test_dump_to_a_file_reads_the_object() -> None:
    obj = Plain()

    def pickled() -> bytes:
        buf = io.BytesIO()
        pickle.dump(obj, buf)
        return buf.getvalue()

    _checked(pickled, lambda: setattr(obj, "x", "a longer value"))


def test_a_reduction_called_directly_reads_the_state() -> None:
    """``obj.__reduce_ex__(2)[2]``: the read of the instance dict inside the call was narrowed by the
    ``[2]`` after it, as if the program subscripted the dict (Note [A read inside a call the frame makes],
    jit/state_reads.py)."""
    obj = Plain()
    _checked(lambda: repr(obj.__reduce_ex__(2)[2]).encode(), lambda: setattr(obj, "y", 2))


@pytest.mark.parametrize("subclassed", [False, True], ids=["Pickler", "subclass"])
def test_a_c_picklers_dump_of_a_callers_object_runs_eagerly(subclassed) -> None:
    """``pickle.Pickler(f, 2).dump(obj)``: C's pickler read the object unseen (Note [A C pickler's dump of
    the program's objects], jitcore/jit/native_python.py); the call runs eagerly and gives eager's bytes.
    A graph of built-in values is still traced."""
    pickler_class = type("OwnPickler", (pickle.Pickler,), {}) if subclassed else pickle.Pickler
    obj = Plain()

    def pickled(value: object) -> bytes:
        buf = io.BytesIO()
        pickler_class(buf, 2).dump(value)
        return buf.getvalue()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * len(pickled(obj))

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the eager entry's warning)
        for step in range(4):
            if step == 2:
                obj.x = "a longer value"
            assert_same(jf(torch.ones(2)), f(torch.ones(2)))
    numbers = [1, 2]
    jf = jitcore.jit(lambda x: x * len(pickled(numbers)))
    for _ in range(2):
        assert_same(jf(torch.ones(2)), torch.ones(2) * len(pickled(numbers)))
    assert jitcore.cache_hits(jf) == 1
