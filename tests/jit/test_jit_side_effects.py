"""Python side effects (jitcore/jit/effects.py) and outputs of any structure (jitcore/jit/outputs.py); side
effects on containers of state are in test_jit_state_containers.py.

Differential: each program runs a sequence of calls eagerly and under jitcore on twin copies of its
state; every result and every piece of state is compared after every call.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as torch_pytree
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same, assert_same_state

import jitcore
from jitcore.jit.api import JittedFunction
from jitcore.jit.outputs import escaped


class Box:
    def __init__(self):
        self.count = 0
        self.items = []


def test_arguments_are_mutated_as_eagerly():
    def f(x, acc, table, box):
        acc.append(x * 2)
        table["last"] = x + 1
        table.setdefault("first", x)
        box.items.append(x.sum())
        box.latest = x.mean()
        return x * 3

    state = ([], {}, Box())
    twin = copy.deepcopy(state)
    jf = jitcore.jit(f)
    for i in range(4):
        x = torch.full((3,), float(i))
        assert_same(jf(x, *state), f(x, *twin))
        assert_same_state(state, twin)


COUNTER = {"calls": 0}
LOG: list = []


def test_globals_and_closures():
    history = []

    def f(x):
        COUNTER["calls"] += 1
        LOG.append(x.max())
        history.append(x.min())
        return x + 1

    jf = jitcore.jit(f)
    COUNTER["calls"] = 0
    LOG.clear()
    for i in range(3):
        assert_same(jf(torch.full((2,), float(i))), torch.full((2,), float(i + 1)))
    assert COUNTER["calls"] == 3 and len(LOG) == 3 and len(history) == 3
    assert all(type(t) is torch.Tensor for t in (*LOG, *history))
    assert [t.item() for t in history] == [0.0, 1.0, 2.0]


def test_global_and_nonlocal_stores():
    step = 0

    def make():
        def f(x):
            nonlocal step
            step = step + 1
            global LAST
            LAST = x * 2
            return x

        return f

    jf = jitcore.jit(make())
    jf(torch.ones(2))
    assert step == 1 and type(LAST) is torch.Tensor  # noqa: F821 - set by the jitted function
    assert_same(LAST, torch.full((2,), 2.0))  # noqa: F821


def test_module_state_written_in_forward():
    class Tracker(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_buffer("running", torch.zeros(3))
            self.seen = []

        def forward(self, x):
            y = self.lin(x)
            self.running = self.running * 0.9 + y.detach().mean(0) * 0.1
            self.seen.append(y.shape[0])
            self.last_output = y.detach()
            return y

    torch.manual_seed(0)
    eager = Tracker()
    jitted_model = copy.deepcopy(eager)
    jm = jitcore.jit(jitted_model)
    for i in range(3):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jm(x), eager(x))
        assert_same(jitted_model.running, eager.running)
        assert_same(jitted_model.last_output, eager.last_output)
        assert jitted_model.seen == eager.seen


def test_objects_made_inside_and_stored_are_new_each_call():
    registry: dict = {}

    @dataclasses.dataclass
    class Record:
        value: torch.Tensor
        tag: str

    def f(x):
        registry[len(registry)] = Record(x * 2, "r")
        return x

    jf = jitcore.jit(f)
    jf(torch.ones(1))
    jf(torch.ones(1) * 3)
    values = [r.value.item() for r in registry.values()]
    assert values == [2.0, 6.0] and registry[0] is not registry[1]


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


class Holder:
    def __init__(self, t):
        self.t = t


class Registered:
    def __init__(self, a, b):
        self.a, self.b = a, b


torch_pytree.register_pytree_node(
    Registered, lambda r: ([r.a, r.b], None), lambda children, _ctx: Registered(*children),
)
Named = collections.namedtuple("Named", "x y")


class Ordered(collections.OrderedDict):
    pass


@pytest.mark.parametrize("build", [
    lambda a, b: Pair(a + 1, b * 2),
    lambda a, b: Holder(a * b),
    lambda a, b: Registered(a, b - 1),
    lambda a, b: Named(a, [b, {"z": a + b}]),
    lambda a, b: Ordered(p=a, q=b),
    lambda a, b: {"nested": (Pair(a, b), [Holder(b)])},
], ids=["dataclass", "object", "pytree", "namedtuple", "dict-subclass", "nested"])
def test_outputs_of_any_structure(build):
    jf = jitcore.jit(build)
    for _ in range(2):
        a, b = torch.randn(2), torch.randn(2)
        got, expected = jf(a, b), build(a, b)
        assert escaped(got) is None
        assert type(got) is type(expected)
        assert_same_state(got, expected)
    assert jf(a, b) is not jf(a, b)


def test_slots_and_deques_are_replayed():
    class Slotted:
        __slots__ = ("t",)

    holder = Slotted()
    holder.t = None

    def f(x, log):
        holder.t = x * 2
        return x

    jf = jitcore.jit(f)
    jf(torch.ones(2), [])
    assert_same(holder.t, torch.full((2,), 2.0))
    jf(torch.full((2,), 3.0), [])
    assert_same(holder.t, torch.full((2,), 6.0))

    queue = collections.deque([None], maxlen=2)

    def g(x):
        queue.append(x * 2)  # replayed onto the call's deque: a tensor of each call's values
        return x

    jg = jitcore.jit(g)
    for value in (1.0, 2.0, 3.0):
        jg(torch.full((2,), value))
    assert len(queue) == 2 and type(queue[0]) is torch.Tensor
    assert_same(list(queue), [torch.full((2,), 4.0), torch.full((2,), 6.0)])


def test_the_suite_checks_every_call_for_escapes():
    assert JittedFunction.__call__.__name__ == "_checked_call"  # tests/conftest.py
    assert escaped([{"a": (Holder(object()),)}]) is None


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(-2, 2), st.booleans()), min_size=1, max_size=6))
def test_side_effects_and_reads_over_call_sequences(calls):
    def f(x, state):
        if x.sum() > 0:
            state["pos"].append(x * 2)
        else:
            state["neg"] = state.get("neg", 0) + 1
        state["last"] = x
        return x.abs()

    eager_state = {"pos": []}
    jit_state = {"pos": []}
    jf = jitcore.jit(f)
    for value, negate in calls:
        x = torch.full((2,), -value if negate else value)
        assert_same(jf(x.clone(), jit_state), f(x.clone(), eager_state))
        assert_same_state(jit_state, eager_state)


def test_read_modify_write_counters_do_not_retrace():
    counter = [0]
    totals = {"sum": 0.0}

    class Stepper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.steps = 0

        def forward(self, x):
            self.steps += 1
            counter[0] += 1
            totals["sum"] = totals["sum"] + 0.5
            return self.lin(x) * 2

    model = Stepper()
    jm = jitcore.jit(model)
    for _ in range(100):
        jm(torch.ones(2))
    assert model.steps == 100 and counter == [100] and totals == {"sum": 50.0}
    assert jitcore.cache_misses(jm) == 1


@pytest.mark.parametrize("scale", [
    lambda n: round(n / 3, 1),
    lambda n: round(n * 0.75),
    lambda n: sum([n, 0.5, n * 2]),
    lambda n: sum((n / 2, n), 1.5),
])
def test_counters_rounded_or_summed_do_not_retrace(scale: Callable[[Any], Any]) -> None:
    """``round(n, k)`` and ``sum`` of a counter are recorded; they read its value (a new entry per
    step) before."""

    def make(state):
        def f(x):
            state["n"] += 1
            return x * scale(state["n"])

        return f

    mine, twin = {"n": 0}, {"n": 0}
    jf, eager = jitcore.jit(make(mine)), make(twin)
    for i in range(6):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
    assert mine == twin
    assert jitcore.cache_misses(jf) == 1


class Patience:
    def __init__(self) -> None:
        self.wait = 0
        self.state = {"bad": 0}


@pytest.mark.parametrize("form", ["store", "setattr", "update", "setdefault"])
def test_a_counter_reset_to_the_value_it_held_when_traced_is_reset_on_every_call(form: str):
    """``self.wait = 0`` on the improving path, traced while ``wait`` was 0: the write stored the very
    object the counter held, so the entry replayed nothing, and a later call that found ``wait == 2``
    kept 2 where eager resets it (a wrong answer; Note [Writes of the same object])."""

    def f(x, patience, improved):
        if improved and form == "store":
            patience.wait = 0
            patience.state["bad"] = 0
        elif improved and form == "setattr":
            setattr(patience, "wait", 0)  # noqa: B010 - the builtin's write is what is tested
            patience.state.__setitem__("bad", 0)
        elif improved:
            patience.wait = 0
            if form == "update":
                patience.state.update({"bad": 0})
            else:
                patience.state.pop("bad")
                patience.state.setdefault("bad", 0)
        else:
            patience.wait += 1
            patience.state["bad"] = patience.state["bad"] + 1
        return x * 2

    mine, twin = Patience(), Patience()
    jf = jitcore.jit(f)
    for improved in (True, False, False, True, False, True, True, False, False, False, True):
        assert_same(jf(torch.ones(2), mine, improved), f(torch.ones(2), twin, improved))
        assert (mine.wait, mine.state) == (twin.wait, twin.state)
    if form == "store":  # (the C methods read the dict natively: its contents are guarded by value)
        assert jitcore.cache_misses(jf) <= 4


@pytest.mark.parametrize("form", ["item", "attribute", "setattr", "list", "tuple_store", "global"])
def test_a_counter_read_after_the_program_reset_it_is_the_reset_value(form: str):
    """Early stopping: ``st["bad"] = 0`` on the improving path, then ``st["stop"] = st["bad"] >= 3``.
    Traced while ``bad`` was 0, the read after the reset found the very object the call started with
    (the cached small int 0) and was bound to the call's counter: a later call that reset a counter of
    4 computed ``4 >= 3`` and stopped where eager does not (a wrong answer; Note [Writes of the same
    object], jit/effects.py)."""
    patience = Patience()
    patience.state["stop"] = False
    counts = [0]

    def f(x, improved):
        if improved:
            if form == "item":
                patience.state["bad"] = 0
            elif form == "attribute":
                patience.wait = 0
            elif form == "setattr":
                setattr(patience, "wait", 0)  # noqa: B010 - the builtin's write is what is tested
            elif form == "list":
                counts[0] = 0
            elif form == "tuple_store":
                patience.state["best"], patience.state["bad"] = 1.0, 0
            else:
                GLOBAL_PATIENCE["bad"] = 0
        elif form in ("item", "tuple_store"):
            patience.state["bad"] += 1
        elif form == "list":
            counts[0] += 1
        elif form == "global":
            GLOBAL_PATIENCE["bad"] += 1
        else:
            patience.wait += 1
        if form in ("item", "tuple_store"):
            patience.state["stop"] = patience.state["bad"] >= 3
        elif form == "list":
            counts.append(counts[0] >= 3)
        elif form == "global":
            GLOBAL_PATIENCE["stop"] = GLOBAL_PATIENCE["bad"] >= 3
        else:
            patience.stop = patience.wait >= 3
        return x * 2

    def states():
        return (patience.wait, getattr(patience, "stop", None), dict(patience.state), list(counts),
                dict(GLOBAL_PATIENCE))

    calls = (True, False, False, False, False, True, False, True)
    GLOBAL_PATIENCE.clear()
    GLOBAL_PATIENCE["bad"] = 0
    eager = []
    for improved in calls:
        eager.append((f(torch.ones(2), improved), states()))
    patience.__init__()
    patience.state["stop"] = False
    vars(patience).pop("stop", None)
    counts[:] = [0]
    GLOBAL_PATIENCE.clear()
    GLOBAL_PATIENCE["bad"] = 0
    jf = jitcore.jit(f)
    for i, (improved, (expected, expected_state)) in enumerate(zip(calls, eager)):
        got = jf(torch.ones(2), improved)
        assert_same(got, expected)
        assert states() == expected_state, i
    if form != "list":  # (a list of the stops appended: its contents are guarded, an entry per call)
        assert jitcore.cache_misses(jf) <= 3


GLOBAL_PATIENCE = {"bad": 0}


def test_reduce_lr_on_plateau_in_a_jitted_training_step():
    """ReduceLROnPlateau resets ``num_bad_epochs`` to 0 when the loss improves: rates, counters and
    losses equal eager's over 20 steps."""

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return model, opt, torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)

    def step(model, opt, scheduler, x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        scheduler.step(loss.item())
        return loss.detach()

    eager, jitted, jstep = make(), make(), jitcore.jit(step)
    generator = torch.Generator().manual_seed(1)
    for i in range(20):
        x, y = torch.randn(8, 4, generator=generator), torch.full((8, 1), float(i % 3))
        assert_same(jstep(*jitted, x, y), step(*eager, x, y))
        assert jitted[1].param_groups[0]["lr"] == eager[1].param_groups[0]["lr"]
        assert jitted[2].num_bad_epochs == eager[2].num_bad_epochs


def test_a_counter_read_twice_is_one_computation_input():
    """SGD reads ``group['lr']`` once per parameter: one input per path, not one per read."""
    rates, twin = {"lr": 0.5}, {"lr": 0.5}

    def make(state):
        def f(x):
            y = x * state["lr"] + state["lr"]
            state["lr"] = state["lr"] * 0.5
            return y

        return f

    jf, eager = jitcore.jit(make(rates)), make(twin)
    for i in range(4):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
        assert rates == twin
    assert jitcore.cache_misses(jf) == 1
    assert [a.name for a in jitcore.last_traces(jf)[0].args] == ["x", "lr"]


def test_a_counter_used_for_control_flow_is_still_exact():
    state = {"n": 0}

    def f(x):
        state["n"] += 1
        if state["n"] % 2:  # branching on it pins its value: each parity is its own entry
            return x + 1
        return x - 1

    twin = {"n": 0}

    def g(x):
        twin["n"] += 1
        return x + 1 if twin["n"] % 2 else x - 1

    jf = jitcore.jit(f)
    for _ in range(6):
        assert_same(jf(torch.zeros(1)), g(torch.zeros(1)))
    assert state == twin
    assert jitcore.cache_misses(jf) <= 3  # Note [Predicate guards]: one entry per parity, not per value


def test_library_modules_that_rewrite_their_own_state():
    # nn.LSTM rebuilds its _flat_weights list when its parameters' identities change (a trace sees
    # proxies): the store is replayed with the real parameters, never left holding traced values.
    torch.manual_seed(0)
    eager = torch.nn.LSTM(4, 8, batch_first=True)
    jitted_model = copy.deepcopy(eager)
    jm = jitcore.jit(jitted_model)
    for seed in range(3):
        x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed))
        got, expected = jm(x), eager(x)
        assert_same(got[0], expected[0])
        assert all(type(w) is torch.nn.Parameter for w in jitted_model._flat_weights)
        assert all(a is b for a, b in zip(jitted_model._flat_weights, jitted_model.parameters()))


def test_a_value_the_program_wrote_is_read_back_as_written():
    """``s.x = 5; y = s.x``: the read is the program's own value, not the state the call found
    (it was bound to the call's ``s.x`` and returned t * 0, t * 1, ... before)."""

    class S:
        pass

    eager, jitted = S(), S()

    def program(s):
        def f(t):
            s.x = 5
            s.items = {"k": t.sum().item()}
            return t * s.x + s.items["k"]
        return f

    jf = jitcore.jit(program(jitted))
    for i in range(4):
        eager.x = jitted.x = i
        t = torch.full((2,), float(i))
        assert_same(jf(t), program(eager)(t))
        assert jitted.x == eager.x == 5


def test_in_place_operators_on_state_tensors_are_recorded():
    """``step += 1`` on a tensor held by a dict keyed by an object (an optimizer's state) runs
    ``Tensor.__iadd__``, a C slot: it is recorded, once per call (it ran untraced and then twice
    on the tracing call before)."""
    key = object()
    eager_state = {key: {"step": torch.tensor(0.0)}}
    jit_state = {key: {"step": torch.tensor(0.0)}}

    def program(state):
        def f(x):
            steps = [state[key]["step"]]
            for s in steps:
                s += 1
            return x * steps[0].item()
        return f

    jf = jitcore.jit(program(jit_state))
    for i in range(4):
        x = torch.full((2,), float(i))
        assert_same(jf(x), program(eager_state)(x))
        assert_same(jit_state[key]["step"], eager_state[key]["step"])


class _Ordered:
    def __init__(self) -> None:
        self.n, self.log = 0, []


def test_an_attribute_deleted_and_set_again_goes_last_as_eagerly() -> None:
    """``del o.n; o.n = v`` moves ``n`` to the end of ``vars(o)``. Before: the entry replayed the store
    alone, and the caller's object kept ``n`` first (eager ['log', 'n'], jit ['n', 'log']:
    /tmp/eff53-probes/del_set_order.py)."""

    def f(o: _Ordered, x: torch.Tensor) -> torch.Tensor:
        del o.n
        o.n = 5
        return x * o.n

    mine, twin = _Ordered(), _Ordered()
    jf = jitcore.jit(f)
    for i in range(4):
        if i == 2:
            mine.__dict__ = {"n": 1, "log": []}
            twin.__dict__ = {"n": 1, "log": []}
        x = torch.randn(2)
        assert_same(jf(mine, x), f(twin, x))
        assert list(vars(mine).items()) == list(vars(twin).items())
    assert jitcore.cache_misses(jf) == 1


# --- Note [A function's attributes written] (jitcore/jit/code_kinds.py)


def _memo_in_attributes(fn: Any) -> Any:
    def wrapper(n: int) -> Any:
        if n not in wrapper.seen:
            wrapper.seen[n] = fn(n)
            wrapper.misses += 1
        return wrapper.seen[n]

    wrapper.seen = {}
    wrapper.misses = 0
    return wrapper


def _memo_program(counter: bool) -> tuple:
    squared = _memo_in_attributes(lambda n: n * n)

    def program(log: list, x: torch.Tensor) -> torch.Tensor:
        if counter:
            log.append(len(log))
        return x * squared(len(log) % 3 if counter else x.shape[0] % 3) + squared.misses

    return program, squared


@pytest.mark.parametrize("counter", [False, True], ids=["one pass", "two passes"])
def test_a_memo_in_a_functions_attributes_counts_as_eagerly(counter: bool) -> None:
    """Before (/tmp/eff54-probes/memo_attr.py): the wrapper's attribute writes were not snapshotted: each
    pass made them for good (a call traced twice counted a miss twice) and no cached call made them: eager
    ``misses`` 1, 2, 3 and answers 2, 6, 3; jit 2, 4, 5 and 3, 8, 5."""
    runs = []
    for jit in (False, True):
        program, squared = _memo_program(counter)
        run = jitcore.jit(program) if jit else program
        log: list = []
        seen = []
        for n in [1, 2, 3, 1, 2, 4, 3]:
            if not counter:
                log.append(n)
            out = run(log, torch.ones(n))
            seen.append((out.tolist(), dict(squared.seen), squared.misses))
        runs.append(seen)
    assert runs[1] == runs[0]


# --- Note [A set put back element by element] (jitcore/jit/object_states.py)


def _adds_its_size(s: set, x: torch.Tensor) -> torch.Tensor:
    s.add(str(len(s)))
    return x * 2


def _adds_a_multiple(s: set, x: torch.Tensor) -> torch.Tensor:
    s.add(len(s) * 37)
    return x - 1


@pytest.mark.parametrize("fn", [_adds_its_size, _adds_a_multiple])
def test_a_set_argument_iterates_in_eagers_order(fn: Any) -> None:
    """Before (/tmp/eff54-probes/set_order2.py): the pass's writes were undone with clear() and update(),
    a new table: the replayed add gave eager's elements in another order from the first resize on. (Two
    adds in one call are replayed in the set's order, not the program's: still another order.)"""
    eager, jitted = set(), set()
    jf = jitcore.jit(fn)
    for _ in range(20):
        x = torch.randn(2)
        assert_same(jf(jitted, x), fn(eager, x))
        assert list(jitted) == list(eager)


# --- Note [A set's table put back exactly] (jitcore/jit/set_tables.py) and Note [A set's changes in program
# order] (jitcore/jit/effects.py)


def _adds_two(s: set, x: torch.Tensor) -> torch.Tensor:
    n = len(s)
    s.add(n * 8)
    s.add(n * 8 + 64)  # the same slot of a small table: the second probes on
    return x * 2


def _adds_two_and_discards(s: set, x: torch.Tensor) -> torch.Tensor:
    n = len(s)
    s.add(n * 16 + 3)
    s.add(n * 16 + 131)
    s.discard((n // 2) * 16 + 3)
    return x + 1


def _discards_then_adds_back(s: set, x: torch.Tensor) -> torch.Tensor:
    s.discard(0)
    s.add(0)
    s.add(len(s) * 8)
    return x - 1


def _grows_a_big_table(s: set, x: torch.Tensor) -> torch.Tensor:
    n = len(s)
    s.add(n * 8)
    s.add(n * 8 + 1)
    s.discard(n * 4)  # the pass resizes a table past the small one now and then (the old one freed)
    return x * 2


def test_a_set_whose_table_the_pass_resizes_iterates_in_eagers_order() -> None:
    eager, jitted = set(range(0, 200, 3)), set(range(0, 200, 3))
    jf = jitcore.jit(_grows_a_big_table)
    for i in range(40):
        x = torch.randn(2)
        assert_same(jf(jitted, x), _grows_a_big_table(eager, x))
        assert list(jitted) == list(eager), i


SEEN: set = set()


def _adds_numbers_to_state(x: torch.Tensor, n: int) -> torch.Tensor:
    SEEN.add(n * 8)  # only added to: each call's number replayed (Note [An element only added])
    SEEN.add(n * 8 + 64)
    return x * 3


def _updates_from_a_list(s: set, x: torch.Tensor) -> torch.Tensor:
    n = len(s)
    s.update([n * 8, n * 8 + 64, n * 8 + 128])  # added one by one, as C does
    return x * 2


@pytest.mark.parametrize("fn", [_adds_two, _adds_two_and_discards, _discards_then_adds_back,
                                _updates_from_a_list])
def test_a_set_changed_several_times_in_a_call_iterates_in_eagers_order(fn: Any) -> None:
    """Several adds, or a discard, in one call: before, the pass's adds were undone by discards (dummy
    slots, which CPython never fills again), and the diff replayed the added elements in the set's order:
    the set iterated in another order than eager's within a few calls (/tmp/eff55-probes/set_order3.py)."""
    eager, jitted = {0}, {0}
    jf = jitcore.jit(fn)
    for _ in range(30):
        x = torch.randn(2)
        assert_same(jf(jitted, x), fn(eager, x))
        assert list(jitted) == list(eager)


def test_a_set_of_state_only_added_to_iterates_in_eagers_order() -> None:
    runs = []
    for run in (_adds_numbers_to_state, jitcore.jit(_adds_numbers_to_state)):
        SEEN.clear()
        orders = []
        for n in [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]:
            run(torch.ones(2), n)
            orders.append(list(SEEN))
        runs.append(orders)
    assert runs[1] == runs[0]
