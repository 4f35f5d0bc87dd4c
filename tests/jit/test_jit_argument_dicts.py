"""A dict argument whose lists the function only appends to (jitcore/jit/appends.py, Note [A dict of
lists an argument]): ``history["loss"].append(loss.item())`` in a training step.

Differential: each program runs eagerly and jitted on twin dicts over several calls; outputs and the
caller's dict (every list's items) are compared after every call, and the number of cache entries says
whether the lists' growth made a call trace again.
"""

from __future__ import annotations

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _calls(fn, make_args, calls: int = 5) -> jitcore.jit:
    jitted = jitcore.jit(fn)
    eager_history = {"loss": [], "norm": [], "lr": 0.5}
    jit_history = {"loss": [], "norm": [], "lr": 0.5}
    for i in range(calls):
        args = make_args(i)
        assert_same(jitted(*args, jit_history), fn(*args, eager_history))
        assert jit_history == eager_history
    return jitted


def test_a_history_dict_does_not_retrace():
    def step(w, x, history):
        loss = (w * x).sum()
        history["loss"].append(loss.item())
        history["norm"].extend([float(x.norm()), "tag"])
        return loss * 2

    w = torch.randn(4)
    jitted = _calls(step, lambda i: (w, torch.randn(4, generator=torch.Generator().manual_seed(i))))
    assert jitcore.cache_misses(jitted) == 1


def test_a_dict_whose_other_items_are_read_guards_those_items():
    """``history["lr"]`` read beside the appends: that item is bound as an argument's (a new lr is a new
    entry), the appended list by its type only (it was bound whole before: one entry per call), and the
    values are eager's."""
    def step(w, x, history):
        loss = (w * x).sum() * history["lr"]
        history["loss"].append(loss.item())
        return loss

    w = torch.randn(4)
    jitted = jitcore.jit(step)
    eager, jit = {"loss": [], "lr": 0.5}, {"loss": [], "lr": 0.5}
    for i in range(4):
        if i == 3:
            eager["lr"] = jit["lr"] = 0.25
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(w, x, jit), step(w, x, eager))
        assert jit == eager
    assert jitcore.cache_misses(jitted) == 2


def test_a_key_the_caller_adds_makes_a_new_entry():
    def step(x, history):
        history["loss"].append(float(x.sum()))
        return x + 1

    jitted = jitcore.jit(step)
    eager, jit = {"loss": []}, {"loss": []}
    for i in range(4):
        if i == 2:
            eager["extra"], jit["extra"] = [1], [1]
        x = torch.full((2,), float(i))
        assert_same(jitted(x, jit), step(x, eager))
        assert jit == eager
    assert jitcore.cache_misses(jitted) == 2


HISTORY: dict = {"loss": []}


def test_a_list_also_read_through_a_global():
    """The caller's list reached through the argument and through a global: read whole there, the
    later pass binds it whole (Note [Containers reached twice]); the values are eager's."""
    def step(x, history):
        history["loss"].append(float(x.sum()))
        return x * len(HISTORY["loss"])

    jitted = jitcore.jit(step)
    expected = []
    for i in range(4):
        x = torch.full((2,), float(i))
        got = jitted(x, HISTORY)
        expected.append(float(x.sum()))
        assert_same(got, x * len(expected))
        assert HISTORY["loss"] == expected


def test_a_training_step_with_a_history_dict():
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), {"loss": [], "grad_norm": []}

    def step(model, opt, x, y, history):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        history["grad_norm"].append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        history["loss"].append(loss.item())
        return loss.detach()

    (me, oe, he), (mj, oj, hj) = make(), make()
    jitted = jitcore.jit(step)
    for i in range(6):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)
        assert_same(jitted(mj, oj, x, y, hj), step(me, oe, x, y, he))
        assert hj == he
    assert jitcore.cache_misses(jitted) <= 2  # no gradients yet; gradients


def test_the_same_dict_passed_twice_is_one_object():
    """One parameter only appends through the dict, the other measures the list: one object, as eagerly
    (they were two copies, and the length read missed the append: a wrong answer). Distinct dicts later
    are a new entry."""
    def appended_first(a, b, x):
        a["log"].append(x.sum())
        return x * len(b["log"])

    def measured_first(b, a, x):
        a["log"].append(x.sum())
        return x * len(b["log"])

    for fn in (appended_first, measured_first):
        jitted = jitcore.jit(fn)
        for i in range(4):
            eager, jit = {"log": [1.0] * i}, {"log": [1.0] * i}
            second_e, second_j = (eager, jit) if i < 2 else ({"log": []}, {"log": []})
            x = torch.full((2,), float(i))
            assert_same(jitted(jit, second_j, x), fn(eager, second_e, x))
            assert_same(jit, eager)
            assert_same(second_j, second_e)


class _Key:
    pass


def _at_a_made_key(x, table):
    k = _Key()
    table[k] = x + 1
    return k


def _at_a_made_function(x, table):
    k = lambda: 1  # noqa: E731
    table[k] = x + 1
    return k


def _at_a_tuple_holding_a_made_key(x, table):
    k = (_Key(), 1)
    table[k] = x + 1
    return k


def _at_constant_keys(x, table):
    table["a"] = x + 1  # there already: keeps its place, takes the value
    table["b"] = x * 2
    return x


@pytest.mark.parametrize("program", [_at_a_made_key, _at_a_made_function, _at_a_tuple_holding_a_made_key,
                                     _at_constant_keys])
def test_a_dict_argument_only_stored_into_traces_once(program):
    """``table[k] = x + 1`` on a dict argument whose every use is a store: its keys were guarded, and a
    table gaining a key per call traced on every call (Note [A dict argument only stored into],
    jitcore/jit/appends.py); each call stores at its own key, the one it returns, as eagerly."""

    def calls(fn) -> list:
        table: dict = {"a": 0, "z": 9}
        got = []
        for i in range(4):
            out = fn(torch.ones(2) * i, table)
            keys = [k if type(k) is str else ("this call's", k is out or k == out) for k in table]
            got.append((keys, [v.tolist() if isinstance(v, torch.Tensor) else v for v in table.values()]))
        return got

    jitted = jitcore.jit(program)
    assert calls(jitted) == calls(program)
    assert jitcore.cache_misses(jitted) == 1


def _metric_by_name(metrics, x, i):  # a name chosen per call
    metrics[("loss", "norm")[i % 2]].append(float(x.sum()))
    return x * 2


def _bucket_by_number(metrics, x, i):  # a key computed from a dynamic number
    metrics[i % 3].extend((i, "a"))
    return x + 1


@pytest.mark.parametrize(("program", "make", "traces"), [
    (_metric_by_name, lambda: __import__("collections").defaultdict(list), 4),  # keys [], [loss], both
    (_bucket_by_number, lambda: {0: [], 1: [7], 2: []}, 4),  # i == 0 a constant, then one entry per i % 3
])
def test_a_list_at_a_computed_key_appended_to_does_not_retrace(program, make, traces):
    """Note [A list at a computed key appended to] (jitcore/jit/appends.py): the dict argument was bound
    whole, each list's length guarded: 20 traces in 20 calls before."""
    jitted, eager_metrics, jit_metrics = jitcore.jit(program), make(), make()
    for i in range(20):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(jit_metrics, x, i), program(eager_metrics, x, i))
        assert jit_metrics == eager_metrics and list(jit_metrics) == list(eager_metrics)
        assert type(jit_metrics) is type(eager_metrics)
    assert jitcore.cache_misses(jitted) == traces, jitcore.miss_reasons(jitted)[-1]
