"""An OrderedDict, a dict or list subclass's instance and a namespace (``types.SimpleNamespace``,
``argparse.Namespace``) of the caller's, whose items C reads past the hooks (``repr``, ``==``,
``copy.copy``, ``dict(...)``, the items iterator): a cached call gives eager's answer after the caller
changes an item (Note [Items C reads natively], jitcore/jit/state_kinds.py). Differential against eager;
each read failed before (the cached call returned the first call's answer)."""

from __future__ import annotations

import argparse
import array
import collections
import copy
import math
import types
from typing import Any

import pytest
import torch
from jit_helpers import assert_same, check_calls_around_a_change, six_calls

import jitcore


class Settings(dict):
    """A dict subclass adding no reading method of its own."""


class Items(list):
    pass


def _loop_sum(d: dict) -> float:
    total = 0
    for _, v in d.items():
        total += v
    return total


@pytest.mark.parametrize("read", [
    lambda ns: "5" in repr(ns),
    lambda ns: ns == type(ns)(a=5, b="b"),
    lambda ns: copy.copy(ns).a,
    lambda ns: _loop_sum({k: v for k, v in ns.__dict__.items() if k == "a"}),
    lambda ns: sum(v for v in ns.__dict__.values() if type(v) is int),
], ids=["repr", "eq", "copy", "dict_items", "dict_values"])
@pytest.mark.parametrize("kind", [types.SimpleNamespace, argparse.Namespace],
                         ids=["SimpleNamespace", "argparse"])
def test_a_namespace_of_the_callers_is_read_on_every_call(read, kind) -> None:
    ns = kind(a=1, b="b")
    check_calls_around_a_change(lambda: read(ns), lambda: setattr(ns, "a", 5))


@pytest.mark.parametrize("read", [
    lambda d: "5" in repr(d),
    lambda d: d == {"a": 5},
    lambda d: copy.copy(d)["a"],
    lambda d: dict(d)["a"],
    lambda d: sum(d.values()),
    _loop_sum,
], ids=["repr", "eq", "copy", "dict", "values", "items_loop"])
@pytest.mark.parametrize("kind", [collections.OrderedDict, Settings], ids=["OrderedDict", "dict_subclass"])
def test_a_dict_of_the_callers_read_in_c_is_read_on_every_call(read, kind) -> None:
    d = kind(a=1)
    check_calls_around_a_change(lambda: read(d), lambda: d.__setitem__("a", 5))


@pytest.mark.parametrize("read", [
    lambda items: len(repr(items)),
    lambda items: sum(items),
    lambda items: copy.copy(items)[0],
], ids=["repr", "sum", "copy"])
def test_a_list_subclass_of_the_callers_is_read_on_every_call(read) -> None:
    items = Items([1, 2])
    check_calls_around_a_change(lambda: read(items), lambda: items.__setitem__(0, 50))


def test_a_namespace_inside_a_dict_is_read_on_every_call() -> None:
    """``repr`` of a plain dict holding a namespace reads the namespace's dict in C too."""
    nested = {"k": types.SimpleNamespace(a=1), "od": [collections.OrderedDict(b=2)]}

    def change() -> None:
        nested["k"].a = 12345
        nested["od"][0]["b"] = 678

    check_calls_around_a_change(lambda: len(repr(nested)), change)


def test_a_counter_in_a_namespace_still_traces_once() -> None:
    """The namespace's items guarded by value: a number the program reads and writes back is still a
    dynamic number (one entry for any count), and the writes are eager's."""
    ns = types.SimpleNamespace(step=0, scale=2.0)

    def f(x: torch.Tensor) -> torch.Tensor:
        ns.step += 1
        return x * ns.scale

    jf = jitcore.jit(f)
    for _ in range(6):
        x = torch.randn(2)
        assert_same(jf(x), x * 2.0)
    assert ns.step == 6
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize(("make", "read", "change"), [
    (lambda: bytearray(b"ab"), len, lambda b: b.extend(b"cd")),
    (lambda: bytearray(b"ab"), lambda b: sum(bytes(b)), lambda b: b.__setitem__(0, 5)),
    (lambda: array.array("d", [1.0, 2.0]), sum, lambda a: a.__setitem__(0, 50.0)),
    (lambda: array.array("i", [1, 2]), lambda a: a.tolist()[0], lambda a: a.__setitem__(0, 50)),
], ids=["bytearray_len", "bytearray_bytes", "array_sum", "array_tolist"])
def test_a_buffer_of_the_callers_is_read_on_every_call(make, read, change) -> None:
    """A ``bytearray`` or ``array.array`` of state, read whole in C (Note [Items C reads natively])."""
    buffer = make()
    check_calls_around_a_change(lambda: read(buffer), lambda: change(buffer))


def test_a_buffer_the_program_extends_is_read_as_eagerly() -> None:
    """The program's own appends to a caller's buffer: each call reads what the one before left (the first
    call's length was returned by every cached call, and the appends were lost)."""

    def program(buf: bytearray, values: array.array):
        def f(x: torch.Tensor) -> torch.Tensor:
            buf.extend(b"c")
            values.append(1.0)
            return x * (len(buf) + sum(values))

        return f

    jit_state = (bytearray(b"ab"), array.array("d", [1.0, 2.0]))
    eager_state = (bytearray(b"ab"), array.array("d", [1.0, 2.0]))
    jf, f = jitcore.jit(program(*jit_state)), program(*eager_state)
    for _ in range(4):
        x = torch.ones(2)
        assert_same(jf(x), f(x))
    assert jit_state == eager_state


@pytest.mark.parametrize("kind", [collections.OrderedDict, Settings], ids=["OrderedDict", "dict_subclass"])
def test_an_item_read_by_a_constant_key_guards_that_item_only(kind) -> None:
    """``od["lr"]`` alone reads one item: a caller's counter in another item, changed before every call, does
    not make every call a new entry (10 misses in 10 calls once the items were guarded whole), as for a
    plain dict; a whole read in the same program still guards every item."""
    d = kind(step=0, lr=0.5)
    jf = jitcore.jit(lambda x: x * d["lr"])
    for _ in range(10):
        d["step"] += 1
        x = torch.randn(2)
        assert_same(jf(x), x * 0.5)
    assert jitcore.cache_misses(jf) == 1

    def whole(x: torch.Tensor) -> torch.Tensor:
        return x * d["lr"] + len(repr(d))

    check_calls_around_a_change(lambda: whole(torch.ones(1)).item(), lambda: d.__setitem__("step", 12345))


_BUFFER_PROGRAMS = {  # name: (the global's first value, the body, a change the caller makes before call 3)
    "bytearray_extend": ("bytearray(b'ab')", "BUF.extend(b'c')", None),
    "bytearray_append": ("bytearray(b'ab')", "BUF.append(7)", None),
    "array_append": ("array.array('d', [1.0])", "BUF.append(1.5)", None),
    "array_extend_nan": ("array.array('d', [math.nan])", "BUF.extend([math.nan, 2.0])", None),
    "caller_clears": ("bytearray(b'ab')", "BUF.extend(b'c')", "BUF.clear()"),
    "caller_replaces": ("array.array('d', [1.0])", "BUF.append(2)", "BUF = array.array('d', [5.0, 6.0])"),
}
_BUFFER_READS = {  # the same, reading the buffer too: its items are guarded as they were when the call began
    "extend_then_len": ("bytearray(b'ab')", "BUF.extend(b'c'); y = x * len(BUF)", None),
    "append_then_sum": ("array.array('i', [1, 2])", "BUF.append(3); y = x * sum(BUF)", None),
    "extend_by_itself": ("bytearray(b'ab')", "BUF.extend(BUF)", None),
    "extend_by_its_length": ("bytearray(b'ab')", "BUF.extend(bytes([len(BUF)]))", None),
    "append_what_it_pops": ("array.array('i', range(8))", "BUF.append(BUF.pop(0))", None),
    "typecode_changed": ("array.array('d', [1.0])", "BUF.append(2)", "BUF = array.array('i', [1])"),
}


def _run_buffer_program(first: str, body: str, change: str | None, jit: bool) -> tuple[list, list, Any]:
    """Six calls of a program over a global buffer ``BUF``: the results, the buffer after, the callable."""
    namespace = {"array": array, "math": math}
    source = f"BUF = {first}\ndef f(x):\n    y = x * 2\n    {body}\n    return y\n"
    results, fn = six_calls(source, namespace, change, jit)
    return results, namespace["BUF"].tobytes() if type(namespace["BUF"]) is array.array \
        else bytes(namespace["BUF"]), fn


def _check_buffer_program(program: tuple, misses: int) -> None:
    expected, expected_state, _ = _run_buffer_program(*program, jit=False)
    actual, state, jf = _run_buffer_program(*program, jit=True)
    for a, b in zip(actual, expected):
        assert_same(a, b)
    assert state == expected_state
    assert jitcore.cache_misses(jf) == misses


@pytest.mark.parametrize("name", list(_BUFFER_PROGRAMS))
def test_a_buffer_the_program_only_appends_to_takes_one_entry(name) -> None:
    """A ``bytearray``/``array.array`` of state whose every load only looks ``append``/``extend`` up on it:
    its type is guarded, not its growing items, and the appends are replayed onto the buffer each call
    finds (Note [A buffer only appended to], jit/appends.py). Each traced again on every call before."""
    _check_buffer_program(_BUFFER_PROGRAMS[name], misses=1)


@pytest.mark.parametrize("name", list(_BUFFER_READS))
def test_a_buffer_the_program_appends_to_and_reads_is_read_as_eagerly(name) -> None:
    """A load of the buffer that reads it guards its items as the call began, even after a load that only
    appended to it (the items were left unguarded: a cached call gave the first call's ``len``)."""
    misses = 2 if name == "typecode_changed" else 6
    _check_buffer_program(_BUFFER_READS[name], misses=misses)


@pytest.mark.parametrize("read", [
    lambda mp: len(repr(mp)),
    lambda mp: dict(mp)["a"],
    lambda mp: float(mp == {"a": 1}),
    lambda mp: sum(mp.values()),
], ids=["repr", "dict", "eq", "values"])
def test_a_mapping_proxy_of_the_callers_is_read_on_every_call(read) -> None:
    """A ``types.MappingProxyType`` of state: C reads the mapping it views (Note [Items C reads
    natively])."""
    mapping = {"a": 1}
    proxy = types.MappingProxyType(mapping)
    check_calls_around_a_change(lambda: read(proxy), lambda: mapping.__setitem__("a", 12345))
