"""Programs with Python side effects on the caller's objects that must not trace again on every call (issue
14: zero retraces over 100 calls): each runs eagerly and jitted on equal objects, every result and the
objects compared after the calls, and the number of traces counted."""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore
from jitcore.jit.closure_appends import closure_appended_parameters
from jitcore.jit.dataclass_arguments import field_appended_parameters
from jitcore.jit.helper_appends import helper_appended_parameters
from jitcore.jit.namespace_arguments import attribute_parameters


def run_both(fn: Callable[..., Any], state: Any, calls: int, *,
             change: Callable[[Any, int], None] | None = None) -> Any:
    """``fn(state, x)`` for ``calls`` inputs, eagerly on ``state`` and jitted on a deep copy of it (``change``
    applied to both before each call): each result and the state after equal; returns the jitted function."""
    jf, jit_state = jitcore.jit(fn), copy.deepcopy(state)
    torch.manual_seed(0)
    for i in range(calls):
        if change is not None:
            change(state, i)
            change(jit_state, i)
        x = torch.randn(3)
        assert_same(jf(jit_state, x), fn(state, x))
    assert_same(_view(jit_state), _view(state))
    return jf


def _view(obj: Any) -> Any:
    """``obj`` with each object of a Python class (a namespace too) as its class name and attributes."""
    if type(obj) is dict:
        return {k: _view(v) for k, v in obj.items()}
    if type(obj) in (list, tuple):
        return type(obj)(_view(v) for v in obj)
    if dataclasses.is_dataclass(obj):
        return type(obj).__name__, {f.name: _view(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "__dict__") and not isinstance(obj, torch.Tensor):
        return type(obj).__name__, _view(vars(obj))
    return obj


# --- a namespace argument used only through its attributes (Note [A namespace argument only used through
# its attributes], jitcore/jit/namespace_arguments.py)

def _log_on_a_namespace(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.log.append(x.sum())
    return x * 2


def _store_and_log(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.last = x.mean()
    s.log.append(x.sum())
    s.log.extend([x.max()])
    return x * s.scale


@pytest.mark.parametrize("fn", [_log_on_a_namespace, _store_and_log], ids=["append", "store_and_extend"])
def test_a_list_on_a_namespace_argument_appended_to_traces_once(fn) -> None:
    """Traced on every call before (the namespace's items guarded, its log's length too: 100 in 100)."""
    jf = run_both(fn, types.SimpleNamespace(log=[], scale=3.0, last=None), 100)
    assert jitcore.cache_misses(jf) == 1


def _repr_length(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.log.append(1)
    return x * len(repr(s))


def _helper_reads(s: types.SimpleNamespace) -> int:
    return len(repr(s))


def _passed_on(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.log.append(1)
    return x * _helper_reads(s)


def _compared(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    s.log.append(1)
    return x * (s == types.SimpleNamespace(log=s.log, a=3))


@pytest.mark.parametrize("fn", [_repr_length, _passed_on, _compared], ids=["repr", "passed_on", "eq"])
def test_a_namespace_argument_c_reads_keeps_its_items_guarded(fn) -> None:
    """A namespace the program hands to C (directly, through a helper, compared) is read as eagerly on every
    call, the caller's changes of its items included."""

    def change(s: types.SimpleNamespace, i: int) -> None:
        if i == 3:
            s.a = 3

    run_both(fn, types.SimpleNamespace(log=[], a=1), 6, change=change)


def test_a_namespace_reached_twice_is_read_as_eagerly() -> None:
    """The namespace passed also inside a list the program reads whole: its items are guarded there."""

    def f(s: types.SimpleNamespace, x: torch.Tensor, both: list) -> torch.Tensor:
        s.log.append(1)
        return x * len(repr(both))

    jf, s, js = jitcore.jit(f), types.SimpleNamespace(log=[], a=1), types.SimpleNamespace(log=[], a=1)
    for i in range(5):
        if i == 3:
            s.a = js.a = 12345
        x = torch.randn(2)
        assert_same(jf(js, x, [js]), f(s, x, [s]))
    assert s.log == js.log


# --- a list appended to, then measured in the same call (Note [A list's length read per call],
# jitcore/jit/appends.py): its length is a number read per call plus the call's appends


class Recorder:
    def __init__(self, v: list | None = None) -> None:
        self.v = [] if v is None else v

    def save(self, g: torch.Tensor) -> None:
        self.v.append(g.norm())


def _saved_then_counted(s: dict, x: torch.Tensor) -> int:
    s["rec"].save(x * 2)
    return len(s["rec"].v)


def _saved_then_scaled(s: dict, x: torch.Tensor) -> torch.Tensor:
    s["rec"].save(x)
    s["rec"].save(x + 1)
    return x * len(s["rec"].v) + len(s["other"].v)


@pytest.mark.parametrize("fn", [_saved_then_counted, _saved_then_scaled], ids=["returned", "computed"])
def test_a_list_appended_to_then_measured_through_an_item_traces_once(fn) -> None:
    """``len(s["rec"].v)`` after an append to it: its length was guarded by value (100 entries in 100)."""
    jf = run_both(fn, {"rec": Recorder(), "other": Recorder([1, 2])}, 100)
    assert jitcore.cache_misses(jf) == 1


def _measured_and_read(s: dict, x: torch.Tensor) -> torch.Tensor:
    s["rec"].save(x)
    return x * len(s["rec"].v) + s["rec"].v[0]


def test_a_list_measured_and_read_otherwise_is_read_as_eagerly() -> None:
    """The caller's list emptied and refilled between calls: the length and the item read are eager's."""

    def change(s: dict, i: int) -> None:
        if i in (3, 4):
            s["rec"].v[:] = [torch.tensor(float(i))] * i

    run_both(_measured_and_read, {"rec": Recorder()}, 8, change=change)


# --- a dataclass argument whose list fields are only appended to and measured (Note [A dataclass's list
# fields appended to], jitcore/jit/dataclass_arguments.py)


@dataclasses.dataclass
class TrainState:
    losses: list = dataclasses.field(default_factory=list)
    scale: float = 2.0

    def count(self) -> int:
        return len(self.losses)


@dataclasses.dataclass(frozen=True)
class FrozenLog:
    entries: list = dataclasses.field(default_factory=list)


def _logged(st: TrainState, x: torch.Tensor) -> torch.Tensor:
    st.losses.append(x.sum())
    return x * st.scale


def _logged_and_counted(st: TrainState, x: torch.Tensor) -> torch.Tensor:
    st.losses.append(x.sum())
    st.losses.extend([x.mean(), 1.5])
    return x * len(st.losses)


def _frozen_logged(st: FrozenLog, x: torch.Tensor) -> torch.Tensor:
    st.entries.append(x.max())
    return x + len(st.entries)


@pytest.mark.parametrize(("fn", "make"), [
    (_logged, TrainState), (_logged_and_counted, TrainState), (_frozen_logged, FrozenLog),
], ids=["appended", "measured", "frozen"])
def test_a_dataclass_argument_whose_list_is_appended_to_traces_once(fn, make) -> None:
    """Traced on every call before: the list field was bound as an argument list, its length guarded."""
    jf = run_both(fn, make(), 100)
    assert jitcore.cache_misses(jf) == 1


def _counted_by_a_method(st: TrainState, x: torch.Tensor) -> torch.Tensor:
    st.losses.append(1)
    return x * st.count()


def _appended_and_read(st: TrainState, x: torch.Tensor) -> torch.Tensor:
    st.losses.append(x.sum())
    return x * st.losses[0]


def _passed_on(st: TrainState, x: torch.Tensor) -> torch.Tensor:
    st.losses.append(1)
    return x * len(repr(st))


@pytest.mark.parametrize("fn", [_counted_by_a_method, _appended_and_read, _passed_on],
                         ids=["method", "item_read", "repr"])
def test_a_dataclass_argument_read_otherwise_is_read_as_eagerly(fn) -> None:
    """A method, an item read or C reading the dataclass: its list is as eagerly on every call."""

    def change(st: TrainState, i: int) -> None:
        if i == 3:
            st.losses[:] = [5.0] * 7

    run_both(fn, TrainState(), 6, change=change)


def test_the_same_dataclass_passed_twice_is_one_object() -> None:
    """What the program appends through one parameter, the other measures: one object, as eagerly."""

    def f(a: TrainState, b: TrainState, x: torch.Tensor) -> torch.Tensor:
        a.losses.append(x.sum())
        return x * len(b.losses)

    jf = jitcore.jit(f)
    for same in (True, False, True):
        st, jst = TrainState(), TrainState()
        other, jother = (st, jst) if same else (TrainState(), TrainState())
        for _ in range(3):
            x = torch.randn(2)
            assert_same(jf(jst, jother, x), f(st, other, x))
        assert_same(_view((jst, jother)), _view((st, other)))


# --- a list argument appended to from closures the function makes and only calls (Note [A list argument
# appended to from a closure], jitcore/jit/closure_appends.py)

def _through_a_lambda(log: list, x: torch.Tensor) -> torch.Tensor:
    f = lambda g: log.append(g.sum())  # noqa: E731 - the closure under test
    f(x * 2)
    return x


def _through_a_def(log: list, x: torch.Tensor) -> torch.Tensor:
    def record(g: torch.Tensor) -> None:
        log.extend([g.max(), 1.5])

    record(x)
    log.append(x.min())
    record(x + 1)
    return x + 1


@pytest.mark.parametrize("fn", [_through_a_lambda, _through_a_def], ids=["lambda", "def"])
def test_a_list_argument_appended_to_from_a_closure_traces_once(fn) -> None:
    """Traced on every call before: a parameter a closure captures was bound whole (100 in 100)."""
    jf = run_both(fn, [], 100)
    assert jitcore.cache_misses(jf) == 1


def _closure_measures(log: list, x: torch.Tensor) -> torch.Tensor:
    f = lambda g: log.append(g)  # noqa: E731
    f(2)
    n = lambda: len(log)  # noqa: E731
    return x * n()


def _closure_passed_on(log: list, x: torch.Tensor) -> torch.Tensor:
    f = lambda g: log.append(g)  # noqa: E731
    list(map(f, [1, 2]))
    return x * len(log)


@pytest.mark.parametrize("fn", [_closure_measures, _closure_passed_on], ids=["measured", "passed_on"])
def test_a_closure_that_reads_the_list_or_is_passed_on_sees_the_callers_list(fn) -> None:
    """A closure that measures the list, one handed to ``map``: the list is the caller's, as eagerly."""

    def change(log: list, i: int) -> None:
        if i == 3:
            log[:] = [7] * 5

    run_both(fn, [], 6, change=change)


# --- a closure handed to sorted/min/max as its key (Note [A closure handed to sorted as its key])

def _sorted_by_a_logging_key(log: list, x: torch.Tensor) -> torch.Tensor:
    order = sorted([3, 1, 2], key=lambda v: log.append(v) or -v)
    return x * order[0]


def _min_and_max_by_logging_keys(log: list, x: torch.Tensor) -> torch.Tensor:
    low = min(range(3), key=lambda i: log.append(("min", i)) or (i - 1) ** 2)
    high = max([0, 1, 2], key=lambda i: log.append(("max", i)) or -i)
    return x[low] - x[high]


@pytest.mark.parametrize("fn", [_sorted_by_a_logging_key, _min_and_max_by_logging_keys],
                         ids=["sorted", "min_max"])
def test_a_list_argument_appended_to_from_a_sort_key_traces_once(fn) -> None:
    """Traced on every call before (20 in 20): the closure was handed to ``sorted``, not stored in a local."""
    jf = run_both(fn, [], 20)
    assert jitcore.cache_misses(jf) == 1


def _appended_from_a_closure_then_measured(log: list, x: torch.Tensor) -> torch.Tensor:
    f = lambda g: log.append(g)  # noqa: E731
    f(1)
    order = sorted([2, 1], key=lambda v: log.append(v) or v)
    return x * len(log) + order[0]


def test_a_list_argument_appended_to_from_closures_and_measured() -> None:
    """``len(log)`` beside closures that append: the caller's length read per call plus the call's appends
    (20 traces in 20 before); the caller replacing the list's items between calls too."""

    def change(log: list, i: int) -> None:
        if i == 5:
            log[:] = [7] * 2

    jf = run_both(_appended_from_a_closure_then_measured, [], 20, change=change)
    assert jitcore.cache_misses(jf) == 1


def test_a_sort_key_closure_under_a_shadowed_sorted_binds_the_list_whole() -> None:
    """A module global named ``sorted`` is not the builtin: the closure could be kept, the list is read."""
    kept = []
    scope = {"sorted": lambda xs, key: kept.append(key) or list(xs), "__builtins__": __builtins__}
    fn = types.FunctionType(_sorted_by_a_logging_key.__code__, scope, "shadowed")
    assert closure_appended_parameters(_sorted_by_a_logging_key) == {"log"}
    assert closure_appended_parameters(fn) == frozenset()
    run_both(fn, [], 3)


def _pass(*args: Any) -> Any:
    return args


def _called(log, x):
    f = lambda g: log.append(g)  # noqa: E731
    return f(x)


def _handed_on(log, x):
    f = lambda g: log.append(g)  # noqa: E731
    return _pass(f, _pass(x))  # 3.11: the load of f is followed by the PUSH_NULL of the inner call


def _handed_on_first(log, x):
    f = lambda g: log.append(g)  # noqa: E731
    return _pass(_pass(x), f)  # 3.13: the load of f follows the PUSH_NULL of the outer call


def _decorated(log, x):
    @_pass
    def f(g):
        log.append(g)

    return x


def _a_generator(log, x):
    def f(g):
        log.append(g)
        yield g

    return next(f(x))


def _read_in_the_closure(log, x):
    f = lambda g: log.append(g) or log[0]  # noqa: E731
    return f(x)


@pytest.mark.parametrize(("fn", "expected"), [
    (_called, {"log"}), (_through_a_def, {"log"}), (_handed_on, set()), (_handed_on_first, set()),
    (_decorated, set()), (_a_generator, set()), (_read_in_the_closure, set()), (_closure_measures, set()),
    (_closure_passed_on, set()),
])
def test_which_closures_only_append_is_proved_from_the_bytecode(fn, expected) -> None:
    assert closure_appended_parameters(fn) == expected


# --- an attribute updated in place (``s.n += 1``) beside a list appended to (Note [An attribute updated in
# place], jitcore/jit/appends.py)


@dataclasses.dataclass
class CountedLog:
    n: int = 0
    log: list = dataclasses.field(default_factory=list)


def _counted_and_logged(s: Any, x: torch.Tensor) -> torch.Tensor:
    s.n += 1
    s.log.append(x.sum())
    return x * 2


def _counted_and_measured(s: Any, x: torch.Tensor) -> torch.Tensor:
    s.n += 1
    s.log.append(x.sum())
    return x * len(s.log)


def _counted_in_a_handler(s: Any, x: torch.Tensor) -> torch.Tensor:
    try:
        s.n += 1
        raise ValueError
    except ValueError:
        s.log.append(s.n)
    return x * 2


@pytest.mark.parametrize("fn", [_counted_and_logged, _counted_and_measured, _counted_in_a_handler],
                         ids=["appended", "measured", "in_a_handler"])
@pytest.mark.parametrize("make", [lambda: types.SimpleNamespace(n=0, log=[]), CountedLog],
                         ids=["namespace", "dataclass"])
def test_a_counter_beside_a_list_appended_to_traces_once(fn, make) -> None:
    """``s.n += 1`` made the parameter used otherwise than through attributes: its list's length was guarded,
    and every call traced again (100 in 100)."""
    jf = run_both(fn, make(), 100)
    assert jitcore.cache_misses(jf) == 1


def _counted_then_passed_on(s: Any, x: torch.Tensor) -> torch.Tensor:
    s.n += 1
    s.log.append(1)
    return x * len(repr(s))


@pytest.mark.parametrize("make", [lambda: types.SimpleNamespace(n=0, log=[]), CountedLog],
                         ids=["namespace", "dataclass"])
def test_a_counted_argument_c_reads_is_read_as_eagerly(make) -> None:
    """Updated in place and handed to C: its items are read as eagerly, the caller's changes included."""

    def change(s: Any, i: int) -> None:
        if i == 3:
            s.log[:] = [7] * 5

    run_both(_counted_then_passed_on, make(), 6, change=change)


def _updates(s, x):
    s.n += 1
    s.m -= x.sum() if x is not None else 0
    return s


def _copied_otherwise(s, t):
    t.n, s.n = s.n, t.n  # no COPY of a parameter into an update
    return s.a < s.b < s.c


@pytest.mark.parametrize(("fn", "expected"), [
    (_counted_and_logged, {"s"}), (_counted_in_a_handler, {"s"}), (_updates, set()),
    (_copied_otherwise, {"s", "t"}), (_counted_then_passed_on, set()),
])
def test_which_parameters_are_updated_only_through_attributes(fn, expected) -> None:
    assert attribute_parameters(fn) == expected


# --- a counter in a closure cell (``nonlocal n; n += 1``): found as a counter by the first pass, as an
# attribute's or a global's is (Effect.locations, jitcore/jit/effects.py)

def _make_counted(branch: bool) -> Callable[[list, torch.Tensor], torch.Tensor]:
    n = 0

    def f(log: list, x: torch.Tensor) -> torch.Tensor:
        nonlocal n
        n += 1
        log.append(n)
        if branch and n % 3 == 0:
            return x - n
        return x * n

    return f


@pytest.mark.parametrize("branch", [False, True], ids=["arithmetic", "branched_on"])
def test_a_nonlocal_counter_is_found_by_the_first_pass(branch: bool) -> None:
    """Before: the first trace pinned ``n == 0`` and a second trace made it dynamic (2 in 100); a branch on
    it is its outcome's entry (``n % 3 == 0``: two entries, eager's values)."""
    eager, jitted = _make_counted(branch), _make_counted(branch)
    jf = jitcore.jit(jitted)
    elog: list = []
    jlog: list = []
    for _ in range(100):
        x = torch.randn(3)
        assert_same(jf(jlog, x), eager(elog, x))
    assert jlog == elog
    assert jitcore.cache_misses(jf) == (2 if branch else 1)


# --- a list argument passed to a function of the module that only appends to it (Note [A list argument
# passed to a function that appends to it], jitcore/jit/helper_appends.py)

def _record(log: list, v: Any) -> None:
    log.append(v)


def _record_two(tag: str, log: list, v: Any) -> None:
    log.extend([tag, v])


def _record_and_read(log: list, v: Any) -> Any:
    log.append(v)
    return log[0]


def _through_a_helper(log: list, x: torch.Tensor) -> torch.Tensor:
    _record(log, x.sum())
    _record_two("max", log, x.max())
    log.append(x.min())
    return x * 2


def test_a_list_argument_passed_to_a_function_that_appends_traces_once() -> None:
    """Before: the list was passed on, bound whole, its length guarded: 100 traces in 100 calls."""
    jf = run_both(_through_a_helper, [], 100)
    assert jitcore.cache_misses(jf) == 1


def _through_a_reading_helper(log: list, x: torch.Tensor) -> torch.Tensor:
    _record(log, 1)
    return x * _record_and_read(log, 2)


def test_a_helper_that_reads_the_list_sees_the_callers_list() -> None:
    def change(log: list, i: int) -> None:
        if i == 3:
            log[:] = [7.0] * 5

    run_both(_through_a_reading_helper, [], 6, change=change)


def test_a_helper_replaced_between_calls_is_the_new_one() -> None:
    """The global is guarded where the pass loads it: a reading function put there is traced again."""
    global _record
    jf, jlog, elog = jitcore.jit(_through_a_helper), [], []
    original = _record
    try:
        for i in range(6):
            if i == 3:
                _record = lambda log, v: log.append(len(log))  # noqa: E731 - reads the list
            x = torch.randn(3)
            assert_same(jf(jlog, x), _through_a_helper(elog, x))
            assert_same(jlog, elog)
    finally:
        _record = original


def _keyword_call(log, x):
    _record(log=log, v=x)
    return x


def _computed_first(log, x):
    _record_two(str(x), log, x)
    return x


def _rebinds(log, x):  # only read, never run: it would replace the module's ``_record``
    global _record
    _record(log, x)
    _record = _record_and_read
    return x


def _passed_to_a_reader(log, x):
    _record_and_read(log, x)
    return x


def _nested_argument(log, x):
    _record(log, _record_and_read([], x))
    return x


def _made_from_the_list(log, x):
    _record(log * 1, x)  # the callee gets a new list made from the caller's items: ``log`` is read
    return x


def _an_item_of_the_list(log, x):
    _record(log[0], x)
    return x


def _concatenated(log, x):
    _record(log + [x], x)
    return x


@pytest.mark.parametrize(("fn", "expected"), [
    (_through_a_helper, {"log"}), (_through_a_reading_helper, set()), (_keyword_call, {"log"}),
    (_computed_first, {"log"}), (_rebinds, set()), (_passed_to_a_reader, set()), (_nested_argument, {"log"}),
    (_made_from_the_list, set()), (_an_item_of_the_list, set()), (_concatenated, set()),
])
def test_which_helpers_only_append_is_proved_from_the_bytecode(fn, expected) -> None:
    assert helper_appended_parameters(fn) == expected


# --- the class of an argument reached through ``type(self)`` or ``self.__class__`` (Note [The class of a
# caller's object], jitcore/jit/state_reads.py)

class _Counted:
    count = 0
    scale = 2.0

    def by_type(self) -> int:
        type(self).count += 1
        return type(self).count

    def by_dunder(self) -> int:
        self.__class__.count += 1
        return self.__class__.count


def _counted_by_type(s: _Counted, x: torch.Tensor) -> torch.Tensor:
    return x * s.by_type() + type(s).scale


def _counted_by_dunder(s: _Counted, x: torch.Tensor) -> torch.Tensor:
    return x * s.by_dunder() + s.__class__.scale


@pytest.mark.parametrize("fn", [_counted_by_type, _counted_by_dunder], ids=["type", "dunder_class"])
def test_a_class_attribute_written_through_type_of_an_argument(fn) -> None:
    """Before: the class had no path: ``count`` a constant of the trace and its write no effect (jit 1, 1, 1
    where eager counts 1, 2, 3), ``scale`` changed by the caller not seen."""
    jf, s = jitcore.jit(fn), _Counted()
    for i in range(30):
        if i == 10:
            _Counted.scale = 3.0
        _Counted.count, count = 5 * i, 5 * i
        x = torch.randn(3)
        expected = x * (count + 1) + _Counted.scale
        assert_same(jf(s, x), expected)
        assert _Counted.count == count + 1
    _Counted.scale = 2.0
    assert jitcore.cache_misses(jf) <= 2  # scale changed once


# --- a dict argument with a list only appended to and a counter at another key (Note [An item updated in
# place], jitcore/jit/appends.py)

def _history_counted(h: dict, x: torch.Tensor) -> torch.Tensor:
    h["loss"].append(x.sum())
    h["n"] += 1
    return x * h["scale"]


def _history_stored(h: dict, x: torch.Tensor) -> torch.Tensor:
    h["loss"].append(x.sum())
    h["n"] = h["n"] + 1
    h["last"] = x.max()
    return x + h["n"]


@pytest.mark.parametrize("fn", [_history_counted, _history_stored], ids=["augmented", "stored"])
def test_a_dict_argument_with_a_counter_beside_a_list_traces_once(fn) -> None:
    """Before: ``h["n"] += 1`` bound the dict whole, its list's length guarded: 100 traces in 100 calls."""
    jf = run_both(fn, {"loss": [], "n": 0, "scale": 2.0, "last": torch.tensor(0.0)}, 100)
    assert jitcore.cache_misses(jf) == 1


def test_a_dict_argument_counter_the_caller_changes_is_read_per_call() -> None:
    def change(h: dict, i: int) -> None:
        if i in (3, 5):
            h["n"], h["scale"] = 10 * i, float(i)
            h["loss"][:] = [1.0] * i

    run_both(_history_counted, {"loss": [], "n": 0, "scale": 2.0}, 8, change=change)


def _history_by_default(h: dict, x: torch.Tensor) -> torch.Tensor:
    h.setdefault("loss", []).append(x.sum())
    h.setdefault("max", []).extend([x.max(), 1.5])
    return x * h["scale"]


def test_a_list_set_by_default_on_a_dict_argument_traces_twice() -> None:
    """Note [A list set by default] (jitcore/jit/appends.py). Before: 100 traces in 100 calls; now the call
    that makes the keys, then one for every call after it."""
    jf = run_both(_history_by_default, {"scale": 2.0}, 100)
    assert jitcore.cache_misses(jf) == 2


def test_a_list_set_by_default_the_caller_changes_is_the_callers() -> None:
    def change(h: dict, i: int) -> None:
        if i == 3:
            h["loss"][:] = [7.0] * 3
        if i == 5:
            del h["max"]

    run_both(_history_by_default, {"scale": 2.0}, 8, change=change)


@dataclasses.dataclass(frozen=True)
class _FrozenStep:
    step: int = 0
    losses: list = dataclasses.field(default_factory=list)


def _frozen_counted(st: _FrozenStep, x: torch.Tensor) -> torch.Tensor:
    object.__setattr__(st, "step", st.step + 1)
    st.losses.append(x.sum())
    return x * st.step


def test_a_frozen_dataclass_counter_beside_a_list_traces_once() -> None:
    """Note [A frozen dataclass's field set] (jitcore/jit/dataclass_arguments.py). Before: 100 in 100."""
    jf = run_both(_frozen_counted, _FrozenStep(), 100)
    assert jitcore.cache_misses(jf) == 1


def _record_into_an_item(log: list, x: torch.Tensor) -> torch.Tensor:
    _record(log[0], x.sum())
    return x


def test_a_helper_given_an_item_of_the_list_appends_to_the_callers_item() -> None:
    """Note [An argument no later instruction reaches] (jitcore/jit/helper_appends.py). Before the fix: the
    list was bound as only appended to, the program's own list empty: ``log[0]`` raised IndexError."""

    def change(log: list, i: int) -> None:
        if i == 2:
            log[0] = []

    run_both(_record_into_an_item, [[]], 5, change=change)


def _set_on_an_item(st, x):
    object.__setattr__(st["step"], "step", 1)  # the parameter is subscripted, not the object set
    st.losses.append(x)
    return x


@pytest.mark.parametrize(("fn", "expected"), [(_frozen_counted, {"st"}), (_set_on_an_item, set())])
def test_which_fields_object_setattr_stores_is_proved_from_the_bytecode(fn, expected) -> None:
    assert set(field_appended_parameters(fn)) == expected
