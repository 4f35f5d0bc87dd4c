"""Python side effects on containers of state (lists, dicts, deques, OrderedDicts; jitcore/jit/appends.py,
dict_reads.py, effects.py): what a program appends, measures, sets and reorders, replayed on every call
without a retrace where eager's result does not depend on the old contents.

Differential: each program runs a sequence of calls eagerly and under jitcore on twin copies of its
state; every result and every piece of state is compared after every call (split from
test_jit_side_effects.py).
"""

from __future__ import annotations

import collections
import functools

import pytest
import torch
from jit_helpers import assert_same, assert_same_state

import jitcore


def test_appending_to_a_list_does_not_retrace():
    """``losses.append(loss.item())`` on an attribute or a closure's list: the read only looks
    ``append`` up, so the list's contents are not guarded; the appends are replayed onto the list
    each call finds."""

    class Trainer:
        def __init__(self):
            self.history = []

    def program(trainer, losses):
        def f(x):
            loss = (x * 2).sum()
            trainer.history.append(loss.detach())
            losses.append(loss.item())
            losses.extend([1, 2])
            return loss
        return f

    jitted, eager = Trainer(), Trainer()
    jit_losses, eager_losses = [], []
    jf = jitcore.jit(program(jitted, jit_losses))
    for i in range(20):
        x = torch.full((3,), float(i))
        assert_same(jf(x), program(eager, eager_losses)(x))
    assert_same_state(jitted.history, eager.history)
    assert jit_losses == eager_losses
    assert jitcore.cache_misses(jf) == 1


def test_the_length_of_a_list_of_state_is_read_per_call():
    """``len(self.history)`` after appending to it (Note [A list's length read per call]): the length
    is a number read on every call plus the appends made before the read, so the calls share one entry
    per outcome of the branch on it (before, the length was guarded: every call traced again). The
    caller's own changes between calls (clearing the list) are seen as eagerly."""

    class Trainer:
        def __init__(self):
            self.history = []

    def program(trainer, log):
        def f(x):
            trainer.history.append(x.sum())
            log.extend([1, 2])
            y = x * len(trainer.history) - len(log)
            if len(log) > 6:
                y = y / 2
            return y
        return f

    jitted, eager = Trainer(), Trainer()
    jit_log, eager_log = [], []
    jf = jitcore.jit(program(jitted, jit_log))
    for i in range(8):
        if i == 5:
            jitted.history.clear()
            eager.history.clear()
        x = torch.full((3,), float(i))
        assert_same(jf(x), program(eager, eager_log)(x))
    assert_same_state(jitted.history, eager.history)
    assert jit_log == eager_log
    assert jitcore.cache_misses(jf) == 2  # len(log) > 6 false, then true


def test_the_length_of_a_list_reached_through_attributes_is_read_per_call():
    """``len(self.log.losses)``: a list read through two attribute reads, measured as one read through
    one (before, its length was guarded: every call traced again)."""

    class Log:
        def __init__(self):
            self.losses = []

    class Trainer:
        def __init__(self):
            self.log = Log()

        def step(self, x):
            self.log.losses.append(x.sum())
            return x * len(self.log.losses)

    traced, eager = Trainer(), Trainer()
    jf = jitcore.jit(traced.step)
    for i in range(4):
        x = torch.full((2,), float(i))
        assert_same(jf(x), eager.step(x))
    assert_same_state(traced.log.losses, eager.log.losses)
    assert jitcore.cache_misses(jf) == 1


def test_a_length_the_program_needs_as_a_value_is_guarded():
    """``range(len(hist))`` needs the length itself: it is guarded by value, so each length is an
    entry, with eager's values."""
    hist: list = []

    def f(x):
        hist.append(1)
        return sum(x * i for i in range(len(hist)))

    jf = jitcore.jit(f)
    eager_hist: list = []
    for i in range(3):
        x = torch.full((2,), float(i + 1))
        expected = sum(x * k for k in range(len(eager_hist) + 1))
        eager_hist.append(1)
        assert_same(jf(x), expected)
    assert jitcore.cache_misses(jf) == 3


def test_a_list_argument_only_appended_to_does_not_retrace():
    """``log.append(float(loss))`` on a list the caller passes: the function's bytecode only looks
    ``append``/``extend`` up on the parameter (jitcore/jit/appends.py), so its length and contents are
    not guarded, and the appends reach the caller's list on every call. A parameter the function also
    reads (``seen[-1]``) keeps its guards."""

    def step(w, x, log, seen):
        loss = (w * x).sum()
        log.append(float(loss))
        log.extend([loss.item() * 2, "tag"])
        seen.append(seen[-1] + 1 if seen else 0)
        return loss

    jf = jitcore.jit(step)
    w = torch.randn(4)
    eager_log, jit_log = [], []
    for i in range(5):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        assert_same(jf(w, x, jit_log, []), step(w, x, eager_log, []))
        assert jit_log == eager_log
    assert jitcore.cache_misses(jf) == 1

    eager_seen, jit_seen = [], []
    for i in range(3):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        assert_same(jf(w, x, jit_log, jit_seen), step(w, x, eager_log, eager_seen))
        assert jit_seen == eager_seen and jit_log == eager_log
    assert jitcore.cache_misses(jf) == 3  # the read list: one entry per length (0 was cached)


def test_the_length_of_a_list_argument_is_read_per_call():
    """``seen.append(len(seen))`` and ``x * len(seen)`` on a list the caller passes: ``len()`` of it is
    the caller's list's length, read per call, plus the appends made before (jitcore/jit/appends.py
    ``MeasuredLists.bind_argument``), so the calls share one entry per outcome of the branch on it
    (before, each length was an entry). A global named ``len`` is not the builtin: that function
    keeps its guards."""

    def step(x, seen):
        seen.append(len(seen))
        if len(seen) > 3:
            x = x + 1
        return x * len(seen)

    jf = jitcore.jit(step)
    jit_seen, eager_seen = [], []
    for i in range(7):
        if i == 5:  # the caller's own change between calls
            jit_seen.clear()
            eager_seen.clear()
        x = torch.full((2,), float(i))
        assert_same(jf(x, jit_seen), step(x, eager_seen))
        assert jit_seen == eager_seen
    assert jitcore.cache_misses(jf) == 2  # len(seen) > 3 false, then true

    namespace = {"len": lambda value: 2}
    exec("def measured(x, seen):\n    seen.append(1)\n    return x * len(seen)\n", namespace)
    jm, m_seen = jitcore.jit(namespace["measured"]), []
    for _ in range(3):
        assert_same(jm(torch.ones(2), m_seen), torch.full((2,), 2.0))
    assert m_seen == [1, 1, 1]


def test_a_default_list_only_appended_to_does_not_retrace():
    """``def step(x, log=[])``: the default gathers across calls, as eagerly; it was guarded by its
    contents, so every call (a longer list) traced again. A default the function also reads keeps its
    guards, and a default the caller replaces is seen."""

    def make():
        def step(x, log=[], *, marks=[]):  # noqa: B006 - the mutable default is the point
            loss = (x * 2).sum()
            log.append(loss.item())
            marks.extend(["step"])
            return loss

        def counted(x, seen=[]):  # noqa: B006
            seen.append(len(seen))
            return x * len(seen)

        return step, counted

    (eager, eager_counted), (traced, traced_counted) = make(), make()
    jf, jcounted = jitcore.jit(traced), jitcore.jit(traced_counted)
    for i in range(4):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        assert_same(jf(x), eager(x))
        assert_same(jcounted(x), eager_counted(x))
    assert traced.__defaults__ == eager.__defaults__ and traced.__kwdefaults__ == eager.__kwdefaults__
    assert traced_counted.__defaults__ == eager_counted.__defaults__
    assert jitcore.cache_misses(jf) == 1
    assert jitcore.cache_misses(jcounted) == 1  # its length is read per call
    traced.__defaults__ = eager.__defaults__ = ([],)
    assert_same(jf(x), eager(x))
    assert traced.__defaults__ == eager.__defaults__


def test_appended_parameters_are_proved_from_the_bytecode():
    from jitcore.jit.appends import appended_parameters

    def only(a, b, *, c):
        a.append(1)
        b.extend([2])
        c.append(a)  # a is stored into c: c is only appended to, a escapes
        return None

    def escapes(a, b, c, d):
        a.append(1)
        b.append(1)
        c.append(1)
        d.append(1)
        print(a)  # passed on
        b = []  # noqa: F841 - rebound
        return (lambda: c)()  # captured by a closure

    def reads_locals(a):
        a.append(1)
        return locals()

    def measures(a, b, c, d):
        a.append(len(a))  # measured by the builtin len: only its length is read
        n = len(b)
        print(len(c), c)  # c itself is passed on
        return n + len(d[0:1])  # a slice of d is measured, not d

    assert appended_parameters(only) == {"b", "c"}
    assert appended_parameters(escapes) == {"d"}
    assert appended_parameters(reads_locals) == frozenset()
    assert appended_parameters(measures) == {"a", "b"}


def test_a_jitted_bound_method_reads_and_writes_its_object():
    """``jitcore.jit(obj.method)``: the object's attributes are state read through ``self`` (a
    changed attribute is a miss, not the traced value) and what the method writes into it is
    performed on it after every call (a tensor stored there was once left as a traced value)."""

    class Trainer:
        def __init__(self):
            self.scale = 2.0
            self.history = []

        def step(self, x):
            loss = (x * self.scale).sum()
            self.history.append(loss.detach())
            self.last = loss.detach() * 2
            return loss

    jitted, eager = Trainer(), Trainer()
    step = jitcore.jit(jitted.step)
    for i in range(4):
        if i == 2:
            jitted.scale = eager.scale = 3.0
        x = torch.full((3,), float(i))
        assert_same(step(x), eager.step(x))
        assert_same_state(jitted, eager)
    assert jitcore.cache_misses(step) == 2


def test_jitted_callable_objects_and_partials_read_their_state():
    """``jitcore.jit(obj)`` of a callable object and of a ``functools.partial`` (of a function with a
    mutable keyword, or of a bound method): a changed attribute, list item or keyword is a miss."""

    class Scaler:
        def __init__(self):
            self.scale = 2.0

        def __call__(self, x):
            return x * self.scale

        def shifted(self, x, shift):
            return x * self.scale + shift

    def scaled(x, scale):
        return x * scale[0]

    obj, factors = Scaler(), [2.0]
    programs = [obj, functools.partial(scaled, scale=factors), functools.partial(obj.shifted, shift=1.0)]
    x = torch.ones(3)
    for program in programs:
        jitted = jitcore.jit(program)
        obj.scale, factors[0] = 2.0, 2.0
        assert_same(jitted(x), program(x))
        obj.scale, factors[0] = 3.0, 3.0
        assert_same(jitted(x), program(x))
        assert jitcore.cache_misses(jitted) == 2


def test_a_list_read_after_the_program_appended_to_it():
    """The same list read again after an append: its guards are on the contents the call started
    with (guarding what the program made of it would match the next call's list, wrongly)."""
    jit_items, eager_items = [], []

    def program(items):
        def f(x):
            items.append(1)
            return x * len(items) + sum(items)
        return f

    jf = jitcore.jit(program(jit_items))
    for _ in range(5):
        assert_same(jf(torch.ones(2)), program(eager_items)(torch.ones(2)))
    assert jit_items == eager_items


def test_appending_to_a_list_inside_a_dict_of_state_does_not_retrace():
    """``self.log["losses"].append(...)``, ``self.log["n"] += 1`` and a ``defaultdict(list)`` history:
    each read of the dict only subscripts it with a constant (jitcore/jit/appends.py), so it is
    guarded by its type and that key, not item by item, and the list only appended to by its type."""

    class Trainer:
        def __init__(self):
            self.log = {"losses": [], "n": 0, "name": "run"}
            self.history = collections.defaultdict(list)

    def step(trainer, x):
        loss = (x * 2).sum()
        trainer.log["losses"].append(loss.item())
        trainer.log["n"] += 1
        trainer.history["loss"].append(loss.detach())
        return loss * trainer.log["n"]

    jitted, eager = Trainer(), Trainer()
    jf = jitcore.jit(step)
    for i in range(8):
        x = torch.full((3,), float(i))
        assert_same(jf(jitted, x), step(eager, x))
        assert jitted.log == eager.log
        assert_same_state(jitted.history, eager.history)
    assert jitcore.cache_misses(jf) == 2  # the history's key: absent on the first call, then present


def test_setdefault_lists_of_state_do_not_retrace():
    """``groups.setdefault(k, []).append(v)`` then ``len(groups[k])``, and Lightning's
    ``self.logged.setdefault(key, []).append(value)``: the dict is read at a computed key (Note [A dict
    read at a computed key], jitcore/jit/appends.py), so it is guarded by its keys, not item by item;
    the list only appended to by its type, and its length is read per call. Before, every call traced
    again (24 misses in 24 calls). The caller's own changes between calls (a list cleared, replaced by
    a longer one, a key deleted) are seen as eagerly."""

    class Trainer:
        def __init__(self):
            self.logged = {}

        def log(self, key, value):
            self.logged.setdefault(key, []).append(value)

    def program(groups, trainer):
        def f(x, k):
            groups.setdefault(k, []).append(x.sum().item())
            trainer.log(k, len(groups[k]))
            trainer.log("total", x.mean().item())
            return x * len(groups[k]) + len(trainer.logged["total"])
        return f

    def change(i, groups, trainer):
        if i == 9:
            groups["x"].clear()
        if i == 13:
            groups["y"] = [0.5] * 7
        if i == 17:
            del groups["x"]
            trainer.logged["total"] = [1.0, 2.0]

    jit_state, eager_state = ({}, Trainer()), ({}, Trainer())
    jf = jitcore.jit(program(*jit_state))
    eager = program(*eager_state)
    for i in range(24):
        change(i, *jit_state)
        change(i, *eager_state)
        x, k = torch.full((3,), float(i)), "xy"[i % 2]
        assert_same(jf(x, k), eager(x, k))
        assert_same_state(jit_state[0], eager_state[0])
        assert_same_state(jit_state[1].logged, eager_state[1].logged)
    # one entry per (keys in order, k): ([], x), ([x], y), ([x, y], x), ([x, y], y), then after the
    # deletion ([y], y), ([y], x), ([y, x], y), ([y, x], x)
    assert jitcore.cache_misses(jf) == 8, jitcore.miss_reasons(jf)[-1]


@pytest.mark.parametrize("reach", ["appended", "past"])
def test_an_item_the_program_appended_is_read_back_per_call(reach: str):
    """``seen.append(v); y = x * seen[-1]`` (Note [An item the program appended, read back],
    jitcore/jit/appends.py): the item read is the program's own, so the list is guarded by its type,
    not its contents (before, every call traced again: 12 misses in 12 calls). ``seen[-2]`` after one
    append reads the call's own last item: the list is bound whole, as before. The caller replaces the
    list's contents between calls."""

    def program(seen):
        def f(x):
            seen.append(x.sum().item())
            if reach == "past":
                return x * seen[-2] if len(seen) > 1 else x
            seen.append(len(seen))
            return x * seen[-2] + seen[-1]
        return f

    traced, eager = [], []
    jf, ef = jitcore.jit(program(traced)), program(eager)
    for i in range(12):
        if i == 6:
            traced[:], eager[:] = [9.0], [9.0]
        x = torch.full((2,), float(i))
        assert_same(jf(x), ef(x))
        assert traced == eager
    assert jitcore.cache_misses(jf) == (1 if reach == "appended" else 12), jitcore.miss_reasons(jf)[-1]


@pytest.mark.parametrize("use", ["appended", "measured"])
def test_a_default_list_of_a_forward_hook_only_appended_to(use: str):
    """``register_forward_hook(lambda m, i, o, log=log: log.append(...))``: the hook is reached through
    the module's hook dict, and its default list was bound whole with the function's defaults, so
    every call traced again (8 misses in 8 calls). The hook's bytecode proves the list only appended
    to: it is guarded by its type (Note [A default list of a function of state], jit/appends.py). A
    hook that measures it (``len(log)``) reads it: bound whole, as before. The caller clears the list
    between calls."""

    def program():
        torch.manual_seed(0)
        lin, log = torch.nn.Linear(3, 2), []
        if use == "appended":
            lin.register_forward_hook(lambda m, i, o, log=log: log.append(o.sum().item()))
        else:
            lin.register_forward_hook(lambda m, i, o, log=log: log.append(len(log) * o.sum().item()))
        return (lambda x: lin(x) * 2), log

    (jf, traced), (ef, eager) = program(), program()
    jf = jitcore.jit(jf)
    for i in range(8):
        if i == 5:
            traced.clear()
            eager.clear()
        x = torch.full((4, 3), float(i))
        assert_same(jf(x), ef(x))
        assert traced == eager
    # measured: the list of floats guarded by its contents, an entry per call but call 5's (empty again)
    assert jitcore.cache_misses(jf) == (1 if use == "appended" else 7), jitcore.miss_reasons(jf)[-1]


def test_a_dict_of_state_read_whole_after_the_program_changed_it():
    """After ``d["losses"].append`` the program reads the list's length and iterates the dict: those
    reads are guarded with the contents the call started with, so each call that starts otherwise is
    another entry, never a stale one."""

    def program(log):
        def f(x):
            log["losses"].append(x.sum().item())
            log["seen"] = True
            n = len(log["losses"])
            return x * n + sum(len(v) for v in log.values() if isinstance(v, list))
        return f

    jit_log, eager_log = {"losses": []}, {"losses": []}
    jf = jitcore.jit(program(jit_log))
    for i in range(4):
        x = torch.full((2,), float(i))
        assert_same(jf(x), program(eager_log)(x))
        assert jit_log == eager_log
    assert jitcore.cache_misses(jf) == 4  # the program reads the length: one entry per length


def test_a_dict_written_through_zip_with_dynamic_numbers():
    """A read-modify-write number makes ``lr`` dynamic; ``zip(groups, values)`` hands C code the
    values, and must still hand it the program's own dicts (it handed copies: the write was lost)."""

    class Holder:
        pass

    def program(o):
        def f():
            o.epoch += 1
            values = [g["lr"] * 0.5 for g in o.groups]
            for g, v in zip(o.groups, values):
                g["lr"] = v
            return [g["lr"] for g in o.groups]
        return f

    jitted, eager = Holder(), Holder()
    for h in (jitted, eager):
        h.groups, h.epoch = [{"lr": 0.1}, {"lr": 1.0}], 0
    jf = jitcore.jit(program(jitted))
    for _ in range(4):
        assert jf() == program(eager)()
        assert jitted.groups == eager.groups and jitted.epoch == eager.epoch


def _counted_with_get(state):
    def f(x):
        state["m"] = state.get("m", 0) + 1
        return x * state["m"]

    return f


def _counted_with_pop(state):
    def f(x):
        v = state.pop("m", 0)
        state["m"] = v + 1
        return x * v

    return f


def _counted_with_setdefault(state):
    def f(x):
        state.setdefault("m", 0)
        state["m"] += 1
        return x * state["m"]

    return f


def _counter_updated_with_a_list(state):
    counts = state.setdefault("counts", collections.Counter())

    def f(x):
        counts["n"] += 1
        counts.update(["m"])  # Counter's C helper reads the count past every hook
        return x * counts["n"] + counts["m"]

    return f


def _counter_updated_with_a_dict(state):
    counts = state.setdefault("counts", collections.Counter(a=1))

    def f(x):
        counts.update({"a": 2})  # library code reads counts["a"] with self.get
        return x * counts["a"]

    return f


@pytest.mark.parametrize("make, entries", [
    (_counted_with_get, 2), (_counted_with_pop, 2), (_counted_with_setdefault, 2),  # first: no "m" yet
    (_counter_updated_with_a_list, None), (_counter_updated_with_a_dict, None),
])
def test_numbers_of_state_read_past_the_subscript_hook(make, entries):
    """Note [Counters read natively]: a count read by a dict method or by library code and written
    back is computed from the value each call finds (the cached write was a constant: state drifted
    from eager's on every hit)."""
    eager_state, jit_state = {}, {}
    eager, jf = make(eager_state), jitcore.jit(make(jit_state))
    for i in range(5):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
        assert jit_state == eager_state
    if entries is not None:  # read through the hook: a dynamic number, one entry for every count
        assert jitcore.cache_misses(jf) == entries


@pytest.mark.parametrize("change", ["append", "append_read", "popleft", "rotate"])
def test_a_deque_of_state(change):
    """A deque (a replay buffer, a window of recent losses) changes as eagerly on every call: appends
    (past maxlen they drop from the left) replay onto the call's deque, other changes replace its
    contents, and what the program reads from it is guarded (it was neither: the first call's append
    was never replayed, and len() stayed the traced one)."""

    def make(window):
        def f(x):
            if change == "append":
                window.append(1)
            elif change == "append_read":
                window.append(float(x.sum()))
            elif change == "popleft":
                window.append(2)
                window.popleft()
            else:
                window.rotate(1)
            return x * len(window) + window[0]

        return f

    eager_window = collections.deque([5, 6], maxlen=3)
    jit_window = collections.deque([5, 6], maxlen=3)
    eager, jf = make(eager_window), jitcore.jit(make(jit_window))
    for i in range(5):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
        assert list(jit_window) == list(eager_window)


def test_class_attribute_counters_do_not_retrace():
    """``Cls.calls += 1`` is state like ``self.steps += 1``: a class's own attributes are snapshotted and
    their writes replayed (each call retraced before: the value was guarded and the write left by the
    trace itself)."""

    def make():
        class Registry:
            calls = 0
            scale = 1.0

        def f(x):
            Registry.calls += 1
            Registry.scale = Registry.scale * 0.5
            y = x * Registry.calls + Registry.scale  # read back: the program's own values
            if not hasattr(Registry, "seen"):
                Registry.seen = True
            return y

        return Registry, f

    (jit_cls, jf), (eager_cls, eager) = make(), make()
    jf = jitcore.jit(jf)
    for i in range(20):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
        for name in ("calls", "scale", "seen"):
            assert getattr(jit_cls, name) == getattr(eager_cls, name)
    assert jitcore.cache_misses(jf) == 2  # without Registry.seen, then with it


def test_counters_read_with_dict_get_do_not_retrace():
    """The second ``d.get`` saw the first counter's new value inside ``d`` and pinned it (``dict.get``'s
    receiver was handed to C code as a value): every call retraced."""
    counts, twin = {"a": 0}, {"a": 0}

    def make(state):
        def f(x):
            state["a"] = state.get("a", 0) + 1
            state["b"] = state.get("b", 0) + 2
            return x + state["a"]

        return f

    jf, eager = jitcore.jit(make(counts)), make(twin)
    for i in range(6):
        assert_same(jf(torch.full((2,), float(i))), eager(torch.full((2,), float(i))))
        assert counts == twin
    assert jitcore.cache_misses(jf) == 2  # without the key "b", then with it


def test_a_path_object_in_state_is_read_and_restored_through_its_slots() -> None:
    """On 3.13 ``pathlib.PurePath`` has a property ``_raw_path`` over a base class's slot of that name:
    the snapshot of a reached ``Path`` reads and restores each slot through its member descriptor (the
    property has no setter: every program reaching a global or captured Path raised there)."""
    import pathlib

    where = pathlib.Path("/tmp/checkpoints/run.pt")

    def f(x):
        return x * len(where.name) + len(where.parts)

    jf = jitcore.jit(f)
    for _ in range(4):
        torch.testing.assert_close(jf(torch.ones(2)), f(torch.ones(2)))
    assert jitcore.cache_misses(jf) == 2  # the second call finds the parts pathlib caches in its slots


@pytest.mark.parametrize("change", ["add", "move_to_end", "pop", "hook"])
def test_an_ordered_dict_the_program_changes_stays_whole(change: str) -> None:
    """An OrderedDict of state changed by the program (a forward hook registered and removed inside,
    as transformers' output capturing does) is restored after tracing through its own methods:
    ``dict.clear``/``dict.update`` on it left its key list behind, and iterating it (every later eager
    call of the model, which runs its hooks) raised KeyError (Note [Restoring an OrderedDict])."""

    def program(x: torch.Tensor, od: collections.OrderedDict, model: torch.nn.Module) -> torch.Tensor:
        if change == "add":
            od["c"] = 3
        elif change == "move_to_end":
            od.move_to_end("a")
        elif change == "pop":
            od["a"] = od.pop("a") + 1  # to the end, with a new value
        else:
            handle = model.register_forward_hook(lambda m, args, out: out * 2)
            x = model(x)
            handle.remove()
        return x + len(od)

    def state() -> tuple:
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 2)
        model.register_forward_hook(lambda m, args, out: out + 1)
        return collections.OrderedDict(a=1, b=2), model

    eager_od, eager_model = state()
    od, model = state()
    jitted = jitcore.jit(program)
    for i in range(3):
        x = torch.randn(3, 2, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(x, od, model), program(x, eager_od, eager_model))
        assert list(od.items()) == list(eager_od.items())
        assert len(list(model._forward_hooks.values())) == len(list(eager_model._forward_hooks.values()))
        assert_same(model(x), eager_model(x))


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict], ids=["dict", "OrderedDict"])
def test_a_key_popped_and_set_again_moves_to_the_end(kind: type) -> None:
    """``d[k] = d.pop(k) + 1`` (an LRU-style bump): the value is read through the pop on every call (an
    OrderedDict's own ``pop`` was native: its value a constant, the second call wrote 2 where eager
    writes 3) and the key order is replayed (dicts are ordered: ``a`` moves behind ``b``)."""

    def program(x: torch.Tensor, d: dict) -> torch.Tensor:
        d["a"] = d.pop("a") + 1
        return x * d["a"]

    eager, state = kind(a=1, b=2), kind(a=1, b=2)
    jitted = jitcore.jit(program)
    for _ in range(3):
        assert_same(jitted(torch.ones(2), state), program(torch.ones(2), eager))
        assert list(state.items()) == list(eager.items())
    # a dict (or OrderedDict) argument's keys are guarded in their order: ['a', 'b'] on the first call,
    # ['b', 'a'] after
    assert jitcore.cache_misses(jitted) == 2


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict], ids=["dict", "OrderedDict"])
def test_a_dict_only_reordered_is_put_back_after_a_pass(kind: type) -> None:
    """The snapshot a tracing pass restores puts a dict whose keys were only reordered (same keys, same
    values) back in its first order, so a second pass of the same call starts from the call's dict."""
    from jitcore.jit.effects import StateSnapshots
    from jitcore.prologue import Path, Root

    d = kind(a=1, b=2, c=3)
    snapshots = StateSnapshots()
    snapshots.take(d, Path(Root("bound", "d", d)))
    value = d.pop("a")
    d["a"] = value
    assert list(d) == ["b", "c", "a"]
    snapshots.restore()
    assert list(d.items()) == [("a", 1), ("b", 2), ("c", 3)]


def test_a_counter_counting_keys_of_two_paths_takes_an_entry_per_key_set_and_path():
    """``c[str(x.dtype)] += 1`` on a global-like ``Counter`` with int and float inputs in turn: the
    count a call adds at a new key is a counter from the next pass on (Note [A count a Counter gains],
    jitcore/jit/effects.py). Before, the pass on the other dtype guarded that count by value though it
    never read it, and missed once more when it changed (5 entries for 4: the key sets [], 2 and 3
    keys, each dtype once the keys settle)."""

    def program(c):
        def f(x):
            c[str(x.dtype)] += 1
            c["n"] += x.numel()
            return x + len(c)
        return f

    jitted, eager = collections.Counter(), collections.Counter()
    jf, ef = jitcore.jit(program(jitted)), program(eager)
    for i in range(20):
        x = torch.randn(3) if i % 2 else torch.arange(3)
        assert_same(jf(x), ef(x))
        assert type(jitted) is collections.Counter and list(jitted.items()) == list(eager.items())
    assert jitcore.cache_misses(jf) == 4
