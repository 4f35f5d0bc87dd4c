"""Objects a program makes and returns or stores are new on every call, as eagerly; the caller's objects
they hold are those very objects (Note [Objects the program makes, anew on every call],
jitcore/jit/call_copies.py).

Differential: each program runs several calls eagerly and jitted; after each call the caller changes
every container and object it got, and the next call's output must still equal eager's, with the
caller's objects inside it identical.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import gc
import itertools
import threading
import warnings
import weakref
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import jitcore

GLOBAL_LIST = [5]
GLOBAL_DICT = {"k": 1}


class Info:
    def __init__(self, t: torch.Tensor | None = None) -> None:
        self.t = t
        self.steps: list = []


def _described(value: Any) -> Any:
    """What a value is, compared across eager and jitted calls: tensors by value, the caller's objects by
    identity, everything else by type and contents."""
    if value is GLOBAL_LIST or value is GLOBAL_DICT:
        return ("caller's", id(value))
    if isinstance(value, torch.Tensor):
        return ("T", value.tolist())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_described(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(k, _described(v)) for k, v in value.items()])
    if isinstance(value, set):
        return ("set", sorted(value))
    if isinstance(value, Info):
        return ("Info", _described(vars(value)))
    return value


def _scribble(value: Any, seen: set[int] | None = None) -> None:
    """What a caller may do to what it got: change every container and object of the call's."""
    seen = set() if seen is None else seen
    if id(value) in seen or value is GLOBAL_LIST or value is GLOBAL_DICT:
        return
    seen.add(id(value))
    if isinstance(value, (list, tuple)):
        for v in list(value):
            _scribble(v, seen)
        if isinstance(value, list):
            value.append("scribbled")
    elif isinstance(value, dict):
        for v in list(value.values()):
            _scribble(v, seen)
        value["scribbled"] = True
    elif isinstance(value, set):
        value.add(-1)
    elif isinstance(value, Info):
        _scribble(vars(value), seen)


def _compare(fn, calls: int = 3) -> Any:
    jitted = jitcore.jit(fn)
    for i in range(calls):
        x = torch.arange(3.0) + i
        got, want = jitted(x), fn(x)
        assert _described(got) == _described(want), f"call {i}"
        _scribble(got)
        _scribble(want)
    assert jitcore.cache_misses(jitted) == 1
    return jitted


def test_a_returned_objects_list_is_its_own_on_every_call():
    def f(x):
        info = Info(x + 1)
        info.steps.append(1)
        return info

    _compare(f)


def test_a_returned_set_and_an_object_without_tensors_are_new_on_every_call():
    _compare(lambda x: (x * 2, {1, 2}, Info()))


def test_objects_stored_into_the_callers_object_are_new_on_every_call():
    class State:
        pass

    def f(x, s):
        s.seen = {1}
        s.info = Info()
        s.info.steps.append(2)
        return x + 1

    jitted = jitcore.jit(f)
    for i in range(3):
        s, e = State(), State()
        jitted(torch.ones(2) * i, s)
        f(torch.ones(2) * i, e)
        assert (s.seen, s.info.steps) == (e.seen, e.info.steps)
        s.seen.add(9)
        s.info.steps.append(9)
    assert jitcore.cache_misses(jitted) == 1


def test_the_callers_objects_inside_a_new_object_are_the_very_objects():
    def f(x):
        info = Info(x - 1)
        info.steps = [GLOBAL_LIST, []]
        info.table = GLOBAL_DICT
        return info

    jitted = _compare(f)
    out = jitted(torch.zeros(3))
    assert out.steps[0] is GLOBAL_LIST and out.table is GLOBAL_DICT


class Tagged(torch.Tensor):
    """A subclass without ``__torch_dispatch__`` carrying Python attributes."""


def test_a_subclass_outputs_attributes_keep_the_callers_objects_and_renew_the_programs():
    def f(x):
        out = (x + 1).as_subclass(Tagged)
        out.table = GLOBAL_DICT
        out.notes = ["made"]
        return out

    jitted = jitcore.jit(f)
    for i in range(3):
        out, want = jitted(torch.ones(2) * i), f(torch.ones(2) * i)
        assert type(out) is Tagged and torch.equal(out, want)
        assert out.table is GLOBAL_DICT and out.notes == want.notes == ["made"]
        out.notes.append("scribbled")
    assert jitcore.cache_misses(jitted) == 1


def test_an_object_no_copy_can_make_again_runs_eagerly():
    def f(x):
        info = Info()
        info.lock = threading.Lock()
        return x + 1, info

    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="cannot make anew"):
        got = jitted(torch.ones(2))
    assert torch.equal(got[0], torch.ones(2) + 1) and type(got[1].lock) is type(threading.Lock())
    assert got[1] is not jitted(torch.ones(2))[1]


_LEAVES = st.sampled_from(["tensor", "global_list", "global_dict", "int", "set", "empty_list"])


def _recipes() -> st.SearchStrategy:
    return st.recursive(
        _LEAVES,
        lambda inner: st.one_of(
            st.tuples(st.just("list"), st.lists(inner, max_size=3)),
            st.tuples(st.just("tuple"), st.lists(inner, max_size=3)),
            st.tuples(st.just("dict"), st.lists(inner, max_size=3)),
            st.tuples(st.just("info"), st.lists(inner, max_size=2)),
        ),
        max_leaves=8,
    )


def _built(recipe: Any, x: torch.Tensor) -> Any:
    if recipe == "tensor":
        return x * 2
    if recipe == "global_list":
        return GLOBAL_LIST
    if recipe == "global_dict":
        return GLOBAL_DICT
    if recipe == "int":
        return 7
    if recipe == "set":
        return {3, 4}
    if recipe == "empty_list":
        return []
    kind, parts = recipe
    items = [_built(p, x) for p in parts]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    if kind == "dict":
        return {f"k{i}": v for i, v in enumerate(items)}
    info = Info(items[0] if items else None)
    info.steps = items[1:]
    return info


@settings(max_examples=40, deadline=None)
@given(_recipes())
def test_any_nesting_of_new_and_caller_objects_is_eagers_on_every_call(recipe):
    def f(x):
        return _built(recipe, x)

    _compare(f)


def test_objects_made_in_one_call_hold_one_another_as_eagerly():
    """``self.obj = Obj(); self.fs = WeakSet([self.obj])`` (test_weakset's setUp): a WeakSet's deep copy
    kept the pass's weak references, so a call's ``s.fs`` did not hold its ``s.obj``; and one object
    stored and returned is one object (Note [One call's copies share their objects], jit/call_copies.py)."""

    class State:
        pass

    def f(x, s):
        s.obj = Info()
        s.fs = weakref.WeakSet([s.obj])
        s.pair = [s.obj, Info()]
        return x + 1, s.obj, s.obj.steps

    jitted = jitcore.jit(f)
    seen = []
    for _ in range(3):
        s = State()
        out = jitted(torch.ones(2), s)
        assert len(s.fs) == 1 and s.obj in s.fs and s.pair[0] is s.obj and s.pair[1] is not s.obj
        assert out[1] is s.obj and out[2] is s.obj.steps and torch.equal(out[0], torch.ones(2) + 1)
        assert all(s.obj is not old() for old in seen)  # not an earlier call's
        seen.append(weakref.ref(s.obj))
        del s.obj, s.pair, out
        gc.collect()
        assert len(s.fs) == 0  # the call's object was held only by what the caller dropped, as eagerly
    assert jitcore.cache_misses(jitted) == 1


class Node:
    def __init__(self, name: str) -> None:
        self.name = name


def _weak_program(x: torch.Tensor, keep: list) -> tuple:
    a, b = Node("a"), Node("b")
    keys = weakref.WeakKeyDictionary({a: [1], keep[0]: [2]})
    values = weakref.WeakValueDictionary({"a": a, "kept": keep[0]})
    b.parent = weakref.ref(a)
    b.dead = weakref.ref(Node("gone"))
    return x * 2, a, b, keys, values


def _weak_described(out: tuple, keep: list) -> tuple:
    _, a, b, keys, values = out
    return (b.parent() is a, b.dead() is None, sorted((k.name, v) for k, v in keys.items()),
            keys[keep[0]] == [2], values["a"] is a, values["kept"] is keep[0], len(keys), len(values))


def test_weak_references_and_containers_point_at_the_calls_own_objects():
    """A ``weakref.ref``, ``WeakKeyDictionary`` and ``WeakValueDictionary`` the program made refer to
    this call's objects (the caller's as themselves), and die with them, as eagerly."""
    keep = [Node("kept")]
    jitted = jitcore.jit(_weak_program)
    for i in range(3):
        x = torch.ones(2) * i
        got, want = jitted(x, keep), _weak_program(x, keep)
        assert _weak_described(got, keep) == _weak_described(want, keep) == (
            True, True, [("a", [1]), ("kept", [2])], True, True, True, 2, 2)
        assert torch.equal(got[0], want[0])
        got[3][got[1]].append("scribbled")  # the next call's dictionary is its own
        keys, values, parent = got[3], got[4], got[2].parent
        del got, want
        gc.collect()
        assert (len(keys), len(values), parent()) == (1, 1, None)  # only the caller's object is left
    assert jitcore.cache_misses(jitted) == 1


def test_a_finalizer_the_program_registers_runs_once_per_call_as_eagerly():
    log: list = []

    def f(x):
        node = Node("n")
        weakref.finalize(node, log.append, "finalized")
        return x + 1, node

    for fn in (f, jitcore.jit(f)):
        log.clear()
        for _ in range(3):
            out = fn(torch.ones(2))
            del out
            gc.collect()
        assert log == ["finalized"] * 3, fn


def test_a_dict_keyed_by_objects_the_program_made_holds_the_calls_own_keys():
    def f(x):
        items = [Node(c) for c in "ab"]
        return x - 1, items, dict.fromkeys(items, 0)

    jitted = jitcore.jit(f)
    seen: list = []
    for _ in range(3):
        _, items, table = jitted(torch.ones(2))
        assert list(table) == items and all(k is i for k, i in zip(table, items))
        assert not any(old() is items[0] for old in seen)  # not an earlier call's
        seen.append(weakref.ref(items[0]))
    assert jitcore.cache_misses(jitted) == 1


class CopiesItself:
    copies = 0

    def __init__(self) -> None:
        self.steps: list = []

    def __deepcopy__(self, memo: dict) -> CopiesItself:
        CopiesItself.copies += 1  # a side effect eager never has: nothing copies in the program
        made = CopiesItself()
        made.steps = list(self.steps)
        return made


def test_an_object_that_copies_itself_is_never_copied_nor_shared():
    """Copying it would run its own ``__deepcopy__`` (eager never does); sharing it hands one object to
    every call: the call runs eagerly (JC-T001)."""

    def f(x):
        return x + 1, CopiesItself()

    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="would run its own __deepcopy__"):
        first = jitted(torch.ones(2))
    second = jitted(torch.ones(2))
    assert first[1] is not second[1] and CopiesItself.copies == 0


KEYS_SET: list = []


class LoggedDict(dict):
    def __setitem__(self, key: Any, value: Any) -> None:
        KEYS_SET.append(key)
        super().__setitem__(key, value)


class LoggedList(list):
    def append(self, value: Any) -> None:
        KEYS_SET.append(value)
        super().append(value)


class LoggedSet(set):
    def __init__(self, items: Any = ()) -> None:
        KEYS_SET.append("init")
        super().__init__(items)


class WithState:
    def __init__(self) -> None:
        self.steps = [1]

    def __setstate__(self, state: dict) -> None:
        KEYS_SET.append("setstate")
        self.__dict__.update(state)


@pytest.mark.parametrize("make", [
    lambda: LoggedDict(a=1),  # dict(a=1) runs no __setitem__; a copy sets each item
    lambda: LoggedList([1, 2]),  # list.__init__ runs no append; a copy appends
    lambda: LoggedSet("ab"),
    WithState,
], ids=["dict_setitem", "list_append", "set_init", "setstate"])
def test_an_object_whose_copy_would_run_the_programs_code_runs_eagerly(make):
    """Note [A copy runs no code of the program's]: a per-call copy of a dict subclass set each item
    through the program's ``__setitem__`` (a log eager leaves at its own entries grew on every call)."""

    def f(x):
        return x + 1, make()

    KEYS_SET.clear()
    eager = [f(torch.ones(2))[1] for _ in range(3)]
    expected = list(KEYS_SET)
    KEYS_SET.clear()
    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="would run its own"):
        got = [jitted(torch.ones(2))[1] for _ in range(3)]
    contents = [vars(v) if isinstance(v, WithState) else v for v in (*got, *eager)]
    assert KEYS_SET == expected and contents[:3] == contents[3:] and got[0] is not got[1]


@dataclasses.dataclass(slots=True)
class Slotted:
    steps: list


def test_methods_the_standard_library_wrote_are_not_the_programs():
    """A dataclass with ``slots=True`` has ``__getstate__``/``__setstate__`` written by dataclasses: made
    anew per call, no eager entry."""

    def f(x):
        return x + 1, Slotted([1])

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, second = jitted(torch.ones(2))[1], jitted(torch.ones(2))[1]
    assert first == second == Slotted([1]) and first is not second and first.steps is not second.steps


def test_a_finalizer_on_a_class_the_output_names_is_left_alone():
    """Note [Finalizers on what a copy keeps]: torch.compile watches classes with finalizers (their
    arguments reach its guard managers, which no copy can make). Such a finalizer on a class in a returned
    list was taken as the program's: detached, and copied on every call (which raised)."""
    lock = threading.Lock()  # what deepcopy refuses, as dynamo's guard managers
    watcher = weakref.finalize(int, lambda held: None, lock)  # as torch.compile's on int

    def f(x):
        return x + 1, [type(1), 1]  # noqa: UP003 - a class reached through no path

    jitted = jitcore.jit(f)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no eager entry: the finalizer is not the program's to copy
            for _ in range(3):
                out = jitted(torch.ones(2))
                assert out[1] == [int, 1]
        assert watcher.alive and jitted.fallback_reason is None
    finally:
        watcher.detach()


def _made_kinds(kind: str, n: int) -> Any:
    if kind == "array":
        return array.array("i", [n, 2])
    if kind == "frozenset":
        return frozenset({n, 2})
    if kind == "memoryview":
        return memoryview(bytearray(b"ab"))
    if kind == "count":
        return itertools.count(n)
    if kind == "chain":
        return itertools.chain([1], [n, 4])
    return itertools.islice([1, 2, n, 4], 3)


def _changed_by_the_caller(value: Any) -> Any:
    """What the caller reads of what it got (consuming an iterator), then changes (an array, a view)."""
    if isinstance(value, array.array):
        seen = value.tolist()
        value.append(7)
    elif isinstance(value, memoryview):
        seen = value.tobytes()
        value[0] = 0
    elif isinstance(value, frozenset):
        seen = sorted(value)
    else:
        seen = list(itertools.islice(value, 3))
    return seen


@pytest.mark.parametrize("kind", ["array", "frozenset", "memoryview", "count", "chain", "islice"])
def test_c_objects_the_program_makes_are_new_on_every_call(kind):
    """An ``array.array``, a ``frozenset``, a ``memoryview`` and ``itertools``' iterators the program made
    were the pass's object on every cached call: the caller's append showed in the next call's array, an
    iterator the first caller consumed was handed on empty (``itertools.chain``: [] from the second call)."""

    def f(x, n):
        return _made_kinds(kind, n), x + 1

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a memoryview or an iterator: the call runs eagerly
        got = [jitted(torch.ones(2) * i, 5)[0] for i in range(3)]
    want = [f(torch.ones(2) * i, 5)[0] for i in range(3)]
    assert [_changed_by_the_caller(v) for v in got] == [_changed_by_the_caller(v) for v in want]
    assert len({id(v) for v in got}) == 3


class Holder:
    def __init__(self, items: Any) -> None:
        self.items = items


class Config:
    def __init__(self, k: int) -> None:
        self.k = k


def _holds_list(x, acc, other):
    o = Holder(acc)
    o.items.append(x + 1)
    return o


def _holds_dict(x, acc, other):
    o = Holder(acc)
    o.t = x * 2
    return o


def _holds_untraced(x, acc, other):
    return Holder(acc), x + 1


def _holds_config(x, acc, other):
    return Holder(other), x + 1


def _stores_one_into_another(x, acc, other):
    acc.append(other)
    return x + 1


def _stores_a_list_holding_it(x, acc, other):
    acc.append([other, 1])
    return x + 1


@pytest.mark.parametrize("program", [_holds_list, _holds_dict, _holds_untraced, _holds_config,
                                     _stores_one_into_another, _stores_a_list_holding_it])
def test_the_callers_objects_a_made_object_holds_are_this_calls(program):
    """Eagerly ``Holder(acc).items is acc``, the list this call passes; a made object held the pass's copy
    of the first call's list (``o.items`` was [] while the caller's list got the append), an argument
    object held was the first call's, and an argument list stored into another was a copy of it
    (Note [The objects this call passes], jitcore/jit/call_copies.py)."""

    def where(out: Any, acc: Any, other: Any) -> list[bool]:
        made = out[0] if isinstance(out, tuple) else out
        if isinstance(made, Holder):
            return [made.items is acc, made.items is other]
        return [acc[-1] is other, isinstance(acc[-1], list) and acc[-1][0] is other]

    jitted = jitcore.jit(program)
    for i in range(3):
        x = torch.ones(2) * i
        other = Config(1) if program is _holds_config else [5]  # another object, alike, on each call
        mine, eager = ([], []) if program is not _holds_dict else ({}, {})
        got, want = jitted(x, mine, other), program(x, eager, other)
        assert where(got, mine, other) == where(want, eager, other), f"call {i}"
        assert repr(mine) == repr(eager)
    assert jitcore.cache_misses(jitted) == 1


GLOBAL_STORE: list = []


class Box:
    pass


def _into_list(x, store):
    o = Info(x + 1)
    store.append(o)
    return o


def _into_dict(x, store):
    o = Info(x + 1)
    store["k"] = o
    return o


def _into_global(x, store):
    o = Info(x + 1)
    GLOBAL_STORE.append(o)
    return o


def _into_attribute(x, store):
    o = Info(x * 2)
    store.last = o
    return o


def _a_list_stored_and_returned(x, store):
    made = [x + 1]
    store.append(made)
    return made


def _a_dict_stored_and_returned(x, store):
    made = {"a": x + 1}
    store.append(made)
    return made


def _stored_twice(x, store):
    o = Info(x + 1)
    store.append(o)
    store.append(o)
    return x


def _returned_twice(x, store):
    o = Info(x + 1)
    store.append(o)
    return o, o


def _held_by_what_is_stored(x, store):
    o = Info(x + 1)
    store.append(Info(o))
    return o


def _identities(out: Any, store: Any) -> list[Any]:
    """Which of the objects the caller got are one object."""
    if isinstance(store, Box):
        stored = [store.last]
    elif isinstance(store, dict):
        stored = list(store.values())
    else:
        stored = list(store) + GLOBAL_STORE
    stored += [s.t for s in stored if isinstance(s, Info) and isinstance(s.t, Info)]
    got = list(out) if isinstance(out, tuple) else [out]
    return [[a is b for b in stored + got] for a in stored + got]


@pytest.mark.parametrize("program", [_into_list, _into_dict, _into_global, _into_attribute,
                                     _a_list_stored_and_returned, _a_dict_stored_and_returned, _stored_twice,
                                     _returned_twice, _held_by_what_is_stored])
def test_an_object_returned_and_stored_is_one_object(program):
    """Eagerly ``ret is store[-1]``: an object holding tensors that the program returns and stores (into an
    argument, a global, an attribute) is one object; a cached call made one for the output and another for
    each place it was stored, so what the caller did to one did not show in the other."""
    jitted = jitcore.jit(program)
    for i in range(3):
        x = torch.ones(2) * i
        results = []
        for fn in (program, jitted):
            GLOBAL_STORE.clear()
            store = Box() if program is _into_attribute else {} if program is _into_dict else []
            out = fn(x, store)
            results.append((_identities(out, store), repr(_described(out))))
        assert results[1] == results[0], f"call {i}"
    assert jitcore.cache_misses(jitted) == 1


GLOBAL_TABLE: dict = {}


def _keyed_in_a_global(x, table):
    key = Info()
    GLOBAL_TABLE[key] = x + 1
    return key


def _keyed_in_an_argument(x, table):
    key = Info()
    table[key] = x * 2
    return key, x + 1


def _keyed_by_a_tuple(x, table):
    key = Info()
    table[(key, 1)] = x - 1
    return key


@pytest.mark.parametrize("program", [_keyed_in_a_global, _keyed_in_an_argument, _keyed_by_a_tuple])
def test_an_item_stored_at_a_key_the_program_made_is_at_this_calls_key(program):
    """Eagerly each call stores at its own new key, the one it returns; a cached call stored at the pass's
    key (one item after three calls, no returned key in the table: Note [A key the program made],
    jitcore/jit/effects.py)."""

    def run(fn: Any) -> list[Any]:
        GLOBAL_TABLE.clear()
        seen = []
        for i in range(3):
            table: dict = {}  # a new one per call (a table that grows is guarded: a new entry per call)
            key = fn(torch.ones(2) * i, table)
            key = key[0] if isinstance(key, tuple) else key
            found = GLOBAL_TABLE if program is _keyed_in_a_global else table
            value = found.get(key, found.get((key, 1)))
            seen.append((len(found), None if value is None else value.tolist()))
        return seen

    jitted = jitcore.jit(program)
    assert run(jitted) == run(program)
    assert jitcore.cache_misses(jitted) == 1


def test_a_tuple_returned_and_stored_is_one_tuple_of_one_list():
    """A tuple of a list and a dict the program made, stored and returned: the list the caller changes
    through the output is the stored one (a cached call made the tuple twice, each with its own list)."""

    def f(x, store):
        made = ([x + 1], {"k": x})
        store.append(made)
        return made

    jitted = jitcore.jit(f)
    for i in range(3):
        seen = []
        for fn in (f, jitted):
            store: list = []
            out = fn(torch.ones(2) * i, store)
            out[0].append("changed")
            kept = store[0]
            seen.append((out is kept, out[0] is kept[0], out[1] is kept[1], repr(_described(store))))
        assert seen[1] == seen[0], f"call {i}"
    assert jitcore.cache_misses(jitted) == 1


def _a_list_of_the_input(x, store):
    made = [x, x + 1]
    store.append(made)
    return made


def _a_list_in_a_list_of_the_input(x, store):
    made = [[x]]
    store.append(made)
    return made[0]


@pytest.mark.parametrize("program", [_a_list_of_the_input, _a_list_in_a_list_of_the_input])
def test_a_list_holding_the_callers_tensor_returned_and_stored_is_one_list(program):
    """A list the program made that holds the tensor the caller passed was made again for the stored value
    around the caller's tensor (a copy of the list), and was not the returned one (eagerly it is); the
    caller's tensor in both is the caller's own."""
    jitted = jitcore.jit(program)
    for i in range(3):
        seen = []
        for fn in (program, jitted):
            x = torch.ones(2) * i
            store: list = []
            out = fn(x, store)
            kept = store[0] if program is _a_list_of_the_input else store[0][0]
            seen.append((out is kept, out[0] is x, repr(_described(out))))
        assert seen[1] == seen[0], f"call {i}"
    assert jitcore.cache_misses(jitted) == 1


def test_a_subclass_tensor_returned_and_stored_is_one_tensor():
    """A tensor of a subclass without ``__torch_dispatch__`` the program made, returned and stored: each
    place got the computation's tensor given the class again, two tensors (eagerly ``out is log[-1]``)."""

    def f(x, log):
        out = (x + 1).as_subclass(Tagged)
        log.append(out)
        return out

    jitted = jitcore.jit(f)
    for i in range(3):
        log: list = []
        out = jitted(torch.ones(2) * i, log)
        assert out is log[-1] and type(out) is Tagged and torch.equal(out, torch.ones(2) * i + 1)
    assert jitcore.cache_misses(jitted) == 1


class Counting:
    def __init__(self) -> None:
        self.n = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


def _a_method_of_a_made_object(x):
    return Counting().bump, x + 1


def _a_partial_over_a_made_lists_append(x):
    made: list = []
    return functools.partial(made.append), made, x + 1


@pytest.mark.parametrize("program", [_a_method_of_a_made_object, _a_partial_over_a_made_lists_append])
def test_a_method_bound_to_a_made_object_is_bound_to_this_calls(program):
    """A bound method (Python or C) of an object the program made was the pass's, bound to the pass's
    object: the caller's calls of it counted on across calls, and appends went into the pass's list
    (Note [A method of an object the program made], jitcore/jit/call_copies.py)."""

    def use(out: tuple, i: int) -> Any:
        if program is _a_method_of_a_made_object:
            return out[0](), out[0]()
        out[0](i)
        return list(out[1])

    jitted = jitcore.jit(program)
    for i in range(3):
        assert use(jitted(torch.ones(2)), i) == use(program(torch.ones(2)), i), f"call {i}"
    assert jitcore.cache_misses(jitted) == 1
