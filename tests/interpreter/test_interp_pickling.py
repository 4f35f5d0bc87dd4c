"""``pickle.dumps``/``pickle.dump`` and ``object.__reduce_ex__``/``object.__getstate__`` with their reads
interpreted (jitcore/interpreter/pickling.py, reductions.py): C's bytes and errors, natively and
interpreted, for every protocol; the reads of a Python object's state reach the run's load hook."""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import pickle
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check

from jitcore.interpreter import Hooks, interpret


class Plain:
    def __init__(self) -> None:
        self.x = 1
        self.items = [1, 2.5, "s", None, b"b", (1, 2)]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a = 1


class Both:
    __slots__ = ("a", "__dict__")

    def __init__(self) -> None:
        self.a = 1
        self.q = 2


class GetState:
    def __init__(self) -> None:
        self.v = 3

    def __getstate__(self) -> dict:
        return {"v2": self.v}


class Reduced:
    def __init__(self, n: int) -> None:
        self.n = n

    def __reduce__(self) -> tuple:
        return (Reduced, (self.n,))


class NewArgs:
    def __new__(cls, n: int) -> NewArgs:
        obj = super().__new__(cls)
        obj.n = n
        return obj

    def __getnewargs__(self) -> tuple:
        return (self.n,)


@dataclasses.dataclass
class Data:
    a: int = 1
    b: list = dataclasses.field(default_factory=lambda: [1, 2])


class Settings(dict):
    pass


def _recursive() -> Plain:
    p = Plain()
    p.me = p
    return p


OBJECTS = {
    "plain": Plain, "slots": Slotted, "slots_and_dict": Both, "getstate": GetState,
    "reduce": lambda: Reduced(5), "newargs": lambda: NewArgs(4), "dataclass": Data,
    "dict_subclass": lambda: Settings(a=Plain()), "nested": lambda: [Plain(), {"a": Plain()}, (Plain(),)],
    "recursive": _recursive, "ordered": lambda: collections.OrderedDict(a=Plain()),
    "namespace": lambda: types.SimpleNamespace(a=Plain()), "shared": lambda: [Plain()] * 2,
    "long": lambda: [Plain(), "x" * 70000, list(range(300))],
}


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("make", list(OBJECTS.values()), ids=list(OBJECTS))
def test_dumps_matches_c(make, protocol) -> None:
    check(lambda: pickle.dumps(make(), protocol=protocol))


@pytest.mark.parametrize("call", [
    lambda: pickle.dumps(Plain(), 2, fix_imports=False),
    lambda: pickle.dumps(Plain(), protocol=7),
    lambda: pickle.dumps(Plain(), bogus=1),
    lambda: pickle.dumps(),
    lambda: pickle.dumps(lambda: 1),
    lambda: Plain().__reduce_ex__(1)[2],
    lambda: Slotted().__getstate__(),
    lambda: Both().__getstate__(),
    lambda: Plain().__getstate__(),
], ids=["fix_imports", "bad_protocol", "bad_keyword", "no_object", "lambda", "reduce_ex_1", "getstate_slots",
        "getstate_both", "getstate"])
def test_calls_and_errors_match_c(call) -> None:
    check(call)


def test_dump_writes_c_bytes() -> None:
    def f() -> bytes:
        buf = io.BytesIO()
        pickle.dump(Plain(), buf, 4)
        return buf.getvalue()

    check(f)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_the_reads_of_the_state_reach_the_load_hook(protocol) -> None:
    seen: list[str] = []

    def on_load_attr(frame: object, obj: object, name: str, value: object) -> object:
        if type(obj) is Plain:
            seen.append(name)
        return value

    def f() -> bytes:
        return pickle.dumps(Plain(), protocol=protocol)

    assert interpret(f, Hooks(on_load_attr=on_load_attr))() == f()
    assert "__dict__" in seen


def test_a_protocol_given_by_its_index_is_cs() -> None:
    """``pickle.dumps(obj, protocol=P)``/``pickle.dump`` with ``P`` an object whose ``__index__`` gives the
    protocol pickle as C pickles, ``__index__`` asked once (Note [A protocol given by its __index__]):
    the Python pickler compared ``P`` with ints and raised "'<' not supported between instances of 'P' and
    'int'" where C pickles (/tmp/cpy52-probes/p1b.py)."""

    def f() -> list[object]:
        asked: list[int] = []

        class P:
            def __init__(self, n: object) -> None:
                self.n = n

            def __index__(self) -> object:
                asked.append(self.n)
                if self.n == "raise":
                    raise KeyError("no index")
                return self.n

        out: list[object] = []
        for n in (0, 1, 2, 4, 5, -1, 99, 2**70, "raise", 2.5):
            for obj in (Plain(), [1, "built-in values"]):
                buf = io.BytesIO()
                calls = ((pickle.dumps, (obj,), {"protocol": P(n)}), (pickle.dumps, (obj, P(n)), {}),
                         (pickle.dump, (obj, buf, P(n)), {}))
                for fn, args, kwargs in calls:
                    try:
                        out.append(fn(*args, **kwargs))
                    except Exception as e:
                        out.append((type(e).__name__, str(e)))
                out.append(buf.getvalue())
        out.append(asked)
        return out

    check(f)


REDUCER_CALLS: list[object] = []


class RaisesInReduceEx:
    def __reduce_ex__(self, protocol: int) -> object:
        REDUCER_CALLS.append(("reduce_ex", protocol))
        raise pickle.PicklingError("refused by the program")


class ReducesToALocal:
    def __reduce__(self) -> object:
        REDUCER_CALLS.append("reduce")

        def local() -> None:
            pass

        return (local, ())


class StateHoldsALambda:
    def __getstate__(self) -> object:
        REDUCER_CALLS.append("getstate")
        return {"f": lambda: 1}


class ReducesToMalformed:
    def __init__(self, result: object) -> None:
        self.result = result

    def __reduce_ex__(self, protocol: int) -> object:
        REDUCER_CALLS.append(("malformed", protocol))
        return self.result


class ReducesToAName:
    """A reducer giving a global name, with a ``repr`` of its own (the refusals show it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce_ex__(self, protocol: int) -> object:
        REDUCER_CALLS.append(("name", protocol))
        return self.name

    def __repr__(self) -> str:
        REDUCER_CALLS.append(("repr",))
        return "ReducesToAName()"


class FromNoModule(ReducesToAName):
    pass


FromNoModule.__module__ = "no_module_of_that_name"


class Holder:
    def __init__(self, o: object) -> None:
        self.o = o


class ModuleAsked(ReducesToAName):
    """A reducer giving a name, whose ``__module__`` read runs code (C's ``whichmodule`` reads it)."""

    @property
    def __module__(self) -> str:
        REDUCER_CALLS.append(("module",))
        return __name__


class ShownByItsClass(type):
    def __repr__(cls) -> str:
        REDUCER_CALLS.append(("class repr",))
        return "<a class>"


def _local_class() -> type:
    class Local(metaclass=ShownByItsClass):
        pass

    return Local


class Renamed(metaclass=ShownByItsClass):
    pass


Renamed.__qualname__ = "NotInTheModule"


def test_a_refusal_runs_each_reducer_once() -> None:
    """Where pickling is refused, each ``__reduce__``/``__reduce_ex__``/``__getstate__`` of the graph ran
    once, as natively, and a PicklingError a reducer raises is that very exception (Note [C's words for
    what cannot be pickled]): C, asked for its words on the whole graph, ran them a second time
    (/tmp/cpy52-probes/p2b.py, p2c.py; an empty ``__newobj__`` argument list was the Python pickler's
    IndexError; a global name not found, or found another object, ran the reducer and the object's
    ``__repr__`` twice: /tmp/cpy53-probes/p3b_named.py). A name with a ``<locals>`` part C refuses before
    it reads the object's ``__module__`` or ``repr``, which ran interpreted, and a class not found had its
    metaclass ``__repr__`` run twice (Note [A local name refused first], /tmp/cpy54-probes/p1_local_names.py).
    The classes are the module's: a local class is refused before its instance is reduced."""

    def f() -> list[object]:
        out: list[object] = []
        import copyreg

        makers = [RaisesInReduceEx, ReducesToALocal, StateHoldsALambda]
        for result in (5, (), (len,), (len, 5), (5, ()), (len, (), None, None, None, None, None),
                       (copyreg.__newobj__, ()), (copyreg.__newobj__, (int,))):
            makers.append(lambda result=result: ReducesToMalformed(result))
        for name in ("nope", "Holder", "a.b", "pickle"):  # not found, another object, a dotted name, a module
            makers += [lambda name=name: ReducesToAName(name), lambda name=name: FromNoModule(name)]
        for name in ("f.<locals>.g", "a.<locals>", "nope"):  # C refuses a local name before reading more
            makers += [lambda name=name: ReducesToAName(name), lambda name=name: ModuleAsked(name)]
        makers += [_local_class, lambda: Renamed]  # a class's name: local, or not found
        for make in makers:
            for protocol in (0, 2, 5):
                error = None
                try:
                    pickle.dumps(Holder(make()), protocol=protocol)
                except Exception as e:
                    error = e
                out.append((type(error).__name__, str(error), list(REDUCER_CALLS)))
                REDUCER_CALLS.clear()
        return out

    check(f)


def test_a_graph_holding_weak_proxies_pickles_as_c() -> None:
    """``pickle.dumps`` of a graph holding a ``weakref.proxy`` to a dict or list raises C's error: the walk
    deciding who pickles it took the proxy for a dict (its ``__class__`` says dict) and raised "descriptor
    'keys' for 'dict' objects doesn't apply to a 'weakref.ProxyType' object" (3.13's test_pickle
    InMemoryPickleTests.test_newobj_proxies)."""

    def f() -> list[object]:
        import weakref

        class D(dict):
            pass

        class L(list):
            pass

        out: list[object] = []
        d, items = D(a=1), L([1, 2])
        for target in (d, items):
            for protocol in (0, 2, 5):
                try:
                    out.append(pickle.dumps([weakref.proxy(target)], protocol))
                except Exception as e:
                    out.append((type(e).__name__, str(e)))
        return out

    check(f)
