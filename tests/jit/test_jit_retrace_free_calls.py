"""Programs that hand the caller's objects to calls (``object.__setattr__``, helpers called with keywords,
after computed arguments, methods, local functions) and must not trace again on every call (issue 14):
each runs eagerly and jitted on equal objects, every result and the objects compared after the calls, and
the number of traces counted (the helpers of test_jit_retrace_free_effects.py)."""

from __future__ import annotations

import array
import collections
import types
from typing import Any

import pytest
import torch
from jit_helpers import assert_same
from test_jit_retrace_free_effects import run_both

import jitcore
from jitcore.jit.helper_appends import helper_appended_parameters
from jitcore.jit.namespace_arguments import attribute_parameters

# --- ``object.__setattr__`` on a namespace argument (Note [A frozen dataclass's field set],
# jitcore/jit/appends.py; Note [A namespace argument only used through its attributes])


def _set_by_object(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    object.__setattr__(s, "step", s.step + 1)
    s.log.append(x.sum())
    return x * s.step


def test_a_namespace_counter_set_by_object_setattr_beside_a_list_traces_once() -> None:
    """Before: the namespace was handed to a call, its items guarded (the log's length): 100 in 100."""
    jf = run_both(_set_by_object, types.SimpleNamespace(step=0, log=[]), 100)
    assert jitcore.cache_misses(jf) == 1


def test_a_namespace_set_by_object_setattr_the_caller_changes_is_the_callers() -> None:
    def change(s: types.SimpleNamespace, i: int) -> None:
        if i == 2:
            s.log[:] = [7.0] * 3
        if i == 4:
            s.step = 10

    run_both(_set_by_object, types.SimpleNamespace(step=0, log=[]), 6, change=change)


def _set_with_itself(s, x):
    object.__setattr__(s, "me", s)  # the namespace is the value too: handed on
    return x


def _set_a_dunder(s, x):
    object.__setattr__(s, "__dict__", {})
    return x


def _set_by_name(s, name, x):
    object.__setattr__(s, name, x)  # a name the caller gives: any attribute
    return x


@pytest.mark.parametrize(("fn", "expected"), [
    (_set_by_object, {"s"}), (_set_with_itself, set()), (_set_a_dunder, set()), (_set_by_name, set()),
])
def test_which_namespaces_object_setattr_sets_is_proved_from_the_bytecode(fn: Any, expected: set) -> None:
    assert attribute_parameters(fn) == expected


# --- a list argument passed to a helper otherwise than positionally by a global name (Note [Helpers called
# otherwise than positionally by a global name], jitcore/jit/helper_appends.py)

def _record(log: list, v: Any) -> None:
    log.append(v)


def _record_two(a: Any, log: list, v: Any = None) -> None:
    log.extend([a, v])


def _record_and_read(log: list, v: Any) -> Any:
    log.append(v)
    return log[0]


def _same(v: Any) -> Any:
    return v


def _after_computed_arguments(log: list, x: torch.Tensor) -> torch.Tensor:
    _record_two(x.max(), log, _same(x.min()))
    log.append(1)
    return x * len(log)


def _by_keyword(log: list, x: torch.Tensor) -> torch.Tensor:
    _record(v=x.sum(), log=log)
    _record_two(x.max(), v=x.min(), log=log)
    return x * 2


def _local_helper(log: list, x: torch.Tensor) -> torch.Tensor:
    def note(log: list, v: Any) -> None:
        log.append(v)
        if v is None:
            raise RuntimeError("none")

    note(log, x.sum())
    try:
        note(log, None)
    except RuntimeError:
        log.append("caught")
    return x * 2


def _enclosed() -> Any:
    def note(log: list, v: Any) -> None:
        log.append(v)
        raise RuntimeError("always")

    def program(log: list, x: torch.Tensor) -> torch.Tensor:
        for i in range(2):
            try:
                note(log, i)
            except RuntimeError:
                log.append(x.sum())
        return x * 2

    return program


class _Logger:
    def __init__(self) -> None:
        self.calls = 0

    def record(self, log: list, v: Any) -> None:
        log.append(v)

    def step(self, log: list, x: torch.Tensor) -> torch.Tensor:
        self.record(log, x.sum())
        self.record(v=x.max(), log=log)
        return x * 2


@pytest.mark.parametrize("make", [
    lambda: _after_computed_arguments, lambda: _by_keyword, lambda: _local_helper, _enclosed,
    lambda: _Logger().step,
], ids=["computed_first", "keywords", "local_function", "enclosing_function", "method"])
def test_a_list_passed_to_a_helper_that_appends_traces_once(make: Any) -> None:
    """Before (/tmp/eff52-probes/helper_appends_probe.py f2, local_helpers.py): 100 traces in 100 calls
    (the list passed on, bound whole, its length guarded)."""
    jf = run_both(make(), [], 100)
    assert jitcore.cache_misses(jf) == 1


def _reader(log: list, v: Any) -> None:
    log.append(len(log))


def _rebindable() -> tuple[Any, Any]:
    """A program calling a free variable, and a function that rebinds it (``nonlocal``)."""
    note = _record

    def program(log: list, x: torch.Tensor) -> torch.Tensor:
        note(log, x.sum())
        return x * 2

    def rebind(fn: Any) -> None:
        nonlocal note
        note = fn

    return program, rebind


@pytest.mark.parametrize("replace", ["class", "instance", "cell"])
def test_a_helper_replaced_between_calls_is_the_new_one(replace: str) -> None:
    """A method replaced on the class, shadowed on the instance, a free variable rebound: the new function
    reads the list, and the calls after see the caller's list as eager does."""
    original = _Logger.record
    eager_logger, jit_logger = _Logger(), _Logger()
    (eager_program, eager_rebind), (program, rebind) = _rebindable(), _rebindable()
    eager_fn = eager_logger.step if replace != "cell" else eager_program
    jf = jitcore.jit(jit_logger.step if replace != "cell" else program)
    elog: list = []
    jlog: list = []
    try:
        for i in range(5):
            if i == 2 and replace == "class":
                _Logger.record = lambda self, log, v: _reader(log, v)
            if i == 2 and replace == "instance":
                eager_logger.record = jit_logger.record = lambda log, v: _reader(log, v)
            if i == 2 and replace == "cell":
                eager_rebind(_reader), rebind(_reader)
            x = torch.randn(3)
            assert_same(jf(jlog, x), eager_fn(elog, x))
            assert_same(jlog, elog)
    finally:
        _Logger.record = original


def _to_a_reader_by_keyword(log, x):
    _record_and_read(v=x, log=log)
    return x


def _keyword_to_varargs(log, x):
    _varargs(x, log=log)
    return x


def _varargs(*args: Any, **kwargs: Any) -> None:
    kwargs["log"].append(args)


def _method_of_another(log, x):
    x.record(log, x)
    return x


def _helper_stored_twice(log, x):
    note = _record
    note = _record_and_read
    note(log, x)
    return x


def _made_and_read(log, x):
    def note(log, v):
        return log[-1]

    note(log, x)
    return x


def _item_by_keyword(log, x):
    _record(v=x, log=log[0])
    return x


@pytest.mark.parametrize(("fn", "expected"), [
    (_after_computed_arguments, {"log"}), (_by_keyword, {"log"}), (_local_helper, {"log"}),
    (_enclosed(), {"log"}), (_Logger().step, {"log"}), (_to_a_reader_by_keyword, set()),
    (_keyword_to_varargs, set()), (_method_of_another, set()), (_helper_stored_twice, set()),
    (_made_and_read, set()), (_item_by_keyword, set()),
])
def test_which_helpers_only_append_is_proved_from_the_bytecode(fn: Any, expected: set) -> None:
    assert helper_appended_parameters(fn) == expected


# --- ``log += [v]`` on a list argument (Note [A list argument extended by +=], jitcore/jit/appends.py)


def _extended(log, x):
    log += [x.sum(), x.max()]
    return x * 2


def _extended_by_a_tuple_then_appended(log, x):
    log += (x.sum(),)
    log.append(x.min())
    return x + 1


def _extended_by_its_length(log, x):
    log += [len(log)]
    return x * 2


def _extended_by_itself(log, x):
    log += log
    log.append(x.sum())
    return x


def _extended_and_returned(log, x):
    log += [x.sum()]
    return log


def _extended_by_iadd(log, x):
    log.__iadd__([x.sum(), x.max()])  # Note [A list argument extended by __iadd__]
    return x * len(log)


def _iadd_kept(log, x):
    grown = log.__iadd__([x.sum()])  # the answer, the list itself, is read
    return x * len(grown)


def _other_extended(log, other, x):
    other += [x.sum()]
    log.append(other)
    return x


@pytest.mark.parametrize("fn", [_extended, _extended_by_a_tuple_then_appended, _extended_by_iadd])
def test_a_list_argument_extended_by_plus_equals_traces_once(fn: Any) -> None:
    """Before (/tmp/eff53-probes/wide.py "list += on an argument", /tmp/eff58-probes/why.py ``iadd``): the
    store after ``+=`` (the call of ``__iadd__``) bound the list whole, its length guarded: 100 in 100."""
    jf = run_both(fn, [], 100)
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("fn", [_extended_by_its_length, _extended_by_itself, _extended_by_iadd, _iadd_kept])
def test_a_list_argument_extended_by_what_it_holds_is_the_callers(fn: Any) -> None:
    def change(log: list, i: int) -> None:
        if i == 3:
            log[:] = [5.0]

    run_both(fn, [1.0], 6, change=change)


@pytest.mark.parametrize(("fn", "expected"), [
    (_extended, {"log"}), (_extended_by_a_tuple_then_appended, {"log"}), (_extended_by_its_length, {"log"}),
    (_extended_by_itself, set()), (_extended_and_returned, set()), (_other_extended, {"log"}),
    (_extended_by_iadd, {"log"}), (_iadd_kept, set()),
])
def test_which_lists_plus_equals_extends_is_proved_from_the_bytecode(fn: Any, expected: set) -> None:
    from jitcore.jit.appends import appended_parameters

    assert set(appended_parameters(fn)) == expected


# --- lists set by default at a computed key, a defaultdict of lists (Notes [A list set by default at a
# computed key], [A defaultdict of lists an argument], jitcore/jit/appends.py)


def _grouped(groups, x):
    groups.setdefault(str(x.shape[0]), []).append(x.sum())
    return x * 2


def _grouped_by_a_subscript(groups, x):
    groups.setdefault(x.shape[0] % 2, []).extend([x.min(), x.max()])
    return x + 1


def _grouped_by_its_size(groups, x):
    groups.setdefault(len(groups), []).append(x.sum())  # the key reads the dict: bound whole
    return x


def _grouped_and_read(groups, x):
    groups.setdefault(str(x.shape[0]), []).append(x.sum())
    return x * len(groups["3"])  # an item read at a constant key: only the constant keys count


def _history(history, x):
    history["loss"].append(x.sum())
    history["max"].append(x.max())
    return x * 2


def _half() -> list:
    return [0.5]


def _sized_runs(fn: Any, make: Any, sizes: list[int], change: Any = None) -> Any:
    eager_state, jit_state = make(), make()
    jf = jitcore.jit(fn)
    torch.manual_seed(0)
    for i, n in enumerate(sizes):
        if change is not None:
            change(eager_state, i)
            change(jit_state, i)
        x = torch.randn(n)
        assert_same(jf(jit_state, x), fn(eager_state, x))
        assert type(jit_state) is type(eager_state)
        assert list(jit_state) == list(eager_state)
        for key in eager_state:
            assert_same(jit_state[key], eager_state[key])
    return jf


@pytest.mark.parametrize("fn", [_grouped, _grouped_by_a_subscript])
def test_lists_set_by_default_at_a_computed_key_trace_once_the_key_is_there(fn: Any) -> None:
    """Before (/tmp/eff53-probes/wide.py "setdefault computed key"): the dict was bound whole, each list's
    length guarded: 20 in 20. Now the call that adds the key is an entry, and the one after it."""
    jf = _sized_runs(fn, dict, [3] * 20)
    assert jitcore.cache_misses(jf) == 2


def test_a_defaultdict_of_lists_argument_traces_once_its_keys_are_there() -> None:
    """Before (/tmp/eff53-probes/wide.py "defaultdict(list)"): bound whole, each list's length guarded: 20
    in 20. Now the call that adds the keys is an entry, and the one after them."""
    jf = _sized_runs(_history, lambda: collections.defaultdict(list), [3] * 20)
    assert jitcore.cache_misses(jf) == 2


@pytest.mark.parametrize(("fn", "make"), [
    (_grouped, dict), (_grouped_by_its_size, dict), (_grouped_and_read, dict),
    (_history, lambda: collections.defaultdict(list)),
])
def test_a_dict_of_lists_the_caller_changes_is_the_callers(fn: Any, make: Any) -> None:
    def change(table: dict, i: int) -> None:
        if i == 3:
            table.clear()
        if i == 5:
            for key in list(table):
                table[key] = [9.0]
        if i == 2 and isinstance(table, collections.defaultdict):
            table.default_factory = _half  # another factory: its lists begin with 0.5

    _sized_runs(fn, make, [3, 3, 4, 3, 4, 3, 3, 4])


@pytest.mark.parametrize(("fn", "expected"), [
    (_grouped, True), (_grouped_by_a_subscript, True), (_grouped_by_its_size, False),
    (_grouped_and_read, False),
])
def test_which_dicts_a_computed_key_appends_through_is_proved(fn: Any, expected: bool) -> None:
    from jitcore.jit.appends import item_appended_parameters

    assert ("groups" in item_appended_parameters(fn)) is expected


# --- a buffer argument only appended to and measured (Note [A buffer argument only appended to],
# jitcore/jit/measured_lists.py)


def _buffer_appended_and_measured(buf, x):
    buf.append(300)
    buf.extend([4, 5])
    return x * len(buf)


def _bytes_extended_and_measured(buf, x):
    buf.extend(b"ab")
    return x + len(buf)


def _floats_appended(buf, x):
    buf.append(2.5)
    return x * 2


BUFFERS = {
    "int-array": (_buffer_appended_and_measured, lambda: array.array("i", [1])),
    "bytearray": (_bytes_extended_and_measured, lambda: bytearray(b"z")),
    "float-array": (_floats_appended, lambda: array.array("d")),
}


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return "ok", fn(*args).tolist()
    except Exception as e:  # noqa: BLE001 (eager's exception is compared with jitted's)
        return type(e).__name__, str(e)


def _buffer_runs(fn: Any, make: Any, calls: int, change: Any = None) -> Any:
    eager_buffer, jit_buffer = make(), make()
    jf = jitcore.jit(fn)
    for i in range(calls):
        if change is not None:
            eager_buffer, jit_buffer = change(eager_buffer, i), change(jit_buffer, i)
        x = torch.arange(3.0) + i
        assert _outcome(jf, jit_buffer, x) == _outcome(fn, eager_buffer, x)
        assert type(jit_buffer) is type(eager_buffer) and jit_buffer == eager_buffer
    return jf


@pytest.mark.parametrize("kind", list(BUFFERS))
def test_a_buffer_argument_appended_to_and_measured_traces_once(kind: str) -> None:
    """Before (/tmp/eff58-probes/why.py ``arr``): an ``array.array`` or ``bytearray`` argument was bound
    whole, its length and items guarded: 20 in 20."""
    jf = _buffer_runs(*BUFFERS[kind], 20)
    assert jitcore.cache_misses(jf) == 1


def _other_buffer(buffer: Any, i: int) -> Any:
    if i in (2, 5):
        del buffer[:]  # emptied: its length read per call is 0 again
    if i == 3:
        return array.array("d", [1.5])  # the typecode is guarded: what ``append`` accepts and makes
    if i == 6:
        return array.array("b", [1])  # ``append(300)`` overflows a signed char, as eagerly
    if i == 8:
        return array.array("h", [7])
    return buffer


def test_a_buffer_argument_the_caller_changes_is_the_callers() -> None:
    jf = _buffer_runs(_buffer_appended_and_measured, lambda: array.array("i", [1]), 10, change=_other_buffer)
    assert jitcore.cache_misses(jf) <= 5


# --- lists set by default in a dict set by default (Note [Lists set by default in a dict set by default],
# jitcore/jit/appends.py)


def _nested_by_a_computed_key(stats, x, n):
    stats.setdefault("a", {}).setdefault(n % 3, []).append(n)
    return x * 2


def _nested_by_constant_keys(stats, x, n):
    stats.setdefault("loss", {}).setdefault("train", []).append(float(x.sum()))
    stats.setdefault("loss", {}).setdefault("val", []).extend([n, n])
    return x + 1


def _nested_and_read(stats, x, n):
    stats.setdefault("a", {}).setdefault(n % 3, []).append(n)
    return x * len(stats["a"])  # the dict at "a" read otherwise: bound whole


def _nested_runs(fn: Any, calls: int, change: Any = None) -> Any:
    eager_stats, jit_stats = {}, {}
    jf = jitcore.jit(fn)
    for n in range(calls):
        if change is not None:
            change(eager_stats, n)
            change(jit_stats, n)
        x = torch.arange(3.0) + n
        assert _outcome(jf, jit_stats, x, n) == _outcome(fn, eager_stats, x, n)
        assert repr(jit_stats) == repr(eager_stats)  # the keys' order, the lists' items, the types
    return jf


@pytest.mark.parametrize(("fn", "traces"), [
    (_nested_by_a_computed_key, 6),  # n == 0; keys ["a"] with inner keys [0], [0, 1]; then one per n % 3
    (_nested_by_constant_keys, 3),  # keys [], ["loss"] with ["train", "val"] after the first call
])
def test_lists_set_by_default_in_a_dict_set_by_default_grow_without_traces(fn: Any, traces: int) -> None:
    """Before (/tmp/eff58-probes/ddarg.py ``setdef_nested``): the dict argument was bound whole, each inner
    list's length guarded: 20 in 20."""
    jf = _nested_runs(fn, 20)
    assert jitcore.cache_misses(jf) <= traces


def _change_nested(stats: dict, n: int) -> None:
    if n == 4:
        stats["a"] = {1: [7], 5: []}  # another inner dict, with a key the program never sets
    if n == 7:
        stats["a"][2] = [8, 9]  # another inner list
    if n == 9:
        stats.clear()
    if n == 12:
        stats["a"] = [1]  # not a dict: ``setdefault`` raises AttributeError, as eagerly


@pytest.mark.parametrize("fn", [_nested_by_a_computed_key, _nested_and_read])
def test_lists_set_by_default_in_a_dict_the_caller_changes_are_the_callers(fn: Any) -> None:
    _nested_runs(fn, 14, change=_change_nested)


@pytest.mark.parametrize(("fn", "expected"), [
    (_nested_by_a_computed_key, True), (_nested_by_constant_keys, True), (_nested_and_read, False),
])
def test_which_dicts_nested_defaults_append_through_is_proved(fn: Any, expected: bool) -> None:
    from jitcore.jit.appends import NestedLists, item_appended_parameters

    keys = item_appended_parameters(fn).get("stats", frozenset())
    assert any(type(k) is NestedLists for k in keys) is expected
