"""Numbers held in state that change between calls (Note [Numbers that change between calls become
dynamic], jitcore/jit/numbers.py): a learning rate a scheduler steps outside the jitted training
step, a module's temperature, a global's factor. Pinned by value, each new value was one more trace;
after one change the path is a dynamic number, read by the prologue on every call. Each program runs
eagerly and jitted on equal inputs, call after call; results and state are compared on every call."""

from __future__ import annotations

import copy
import dataclasses
import operator
import pickle
import types

import pytest
import torch

import jitcore
from tests.jit.jit_helpers import assert_same, training_step

OPTIMIZERS = {
    "SGD-momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "AdamW-foreach": lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True),
}
SCHEDULERS = {
    "LambdaLR": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1 / (s + 1)),
    "CosineAnnealingLR": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10),
    # cycles Adam's ``betas`` too: a tuple of numbers, item by item
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=20),
}


def _setup(optimizer: str, scheduler: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    opt = OPTIMIZERS[optimizer](model.parameters())
    return model, opt, SCHEDULERS[scheduler](opt)


_step = training_step(lambda model, x: model(x).square().mean())


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_scheduler_stepped_outside_the_jitted_step(optimizer, scheduler):
    """Before: an entry per step (10 misses in 10 steps); the state's lr (and betas) now an input."""
    (eager_model, eager_opt, eager_sched), (model, opt, sched) = _setup(optimizer, scheduler), \
        _setup(optimizer, scheduler)
    jitted = jitcore.jit(_step)
    for i in range(10):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(model, opt, x), _step(eager_model, eager_opt, x))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
        sched.step()
        eager_sched.step()
    assert jitcore.cache_misses(jitted) <= 2, jitcore.miss_reasons(jitted)[-1]


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.temperature = 1.0
        self.keep = 2

    def forward(self, x):
        y = (self.lin(x) / self.temperature).softmax(-1)
        return y[:, : self.keep] if self.keep < 4 else y * 2


def test_a_module_attribute_annealed_between_calls():
    torch.manual_seed(0)
    module = _Scaled()
    jitted = jitcore.jit(module)
    x = torch.randn(3, 4)
    for i in range(8):
        module.temperature = 1.0 + 0.1 * i
        assert_same(jitted(x), module(x))
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)[-1]
    # a number the program needs the value of (a slice bound, a branch) is still checked by value
    for keep in (3, 4, 2):
        module.keep = keep
        assert_same(jitted(x), module(x))


FACTORS = {"alpha": 0.5}


def _scale(x):
    return x * FACTORS["alpha"] + 1 if FACTORS["alpha"] < 2 else x - FACTORS["alpha"]


def test_a_global_number_changed_between_calls():
    jitted = jitcore.jit(_scale)
    x = torch.randn(5)
    for alpha in (0.5, 0.75, 1.0, 1.5, 3.0, 4.0, 0.25, float("nan"), 0.5):
        FACTORS["alpha"] = alpha
        assert_same(jitted(x), _scale(x))
    FACTORS["alpha"] = 2  # an int where a float was traced: another entry, not a float's trace
    assert_same(jitted(x), _scale(x))
    assert jitted(x).dtype == _scale(x).dtype
    FACTORS["alpha"] = 0.5
    assert jitcore.cache_misses(jitted) <= 5, jitcore.miss_reasons(jitted)[-1]


def test_a_number_to_an_in_place_foreach_op_stays_a_name():
    """``torch._foreach_mul_(tensors, factor)`` returns nothing; its ``Scalar`` still takes a value
    (before: the factor was pinned, an entry per value)."""
    state = {"factor": 0.9}

    def decay(tensors):
        torch._foreach_mul_(tensors, state["factor"])
        return [t.sum() for t in tensors]

    jitted = jitcore.jit(decay)
    for factor in (0.9, 0.8, 0.7, 0.6):
        state["factor"] = factor
        a = [torch.arange(3.0), torch.ones(2)]
        b = [t.clone() for t in a]
        assert_same(jitted(a), decay(b))
        assert_same(a, b)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)[-1]


# Note [Counters bound where they are held] (jitcore/jit/held_counters.py): a number the program reads and
# writes back in a global container, read natively by C code too. Before, the native read was a
# constant of the trace while the subscript's read was a dynamic number: every cached call answered the
# first call's sum (a wrong answer).
NATIVE_READS = {
    "sum_of_values": lambda state: sum(state["d"].values()),
    "items": lambda state: [v for _k, v in state["d"].items()][0],
    "iteration": lambda state: sum(v for v in state["l"]),
    "max": lambda state: max(state["l"]),
    "unpacked_dict": lambda state: {**state["d"]}["a"],
    "compared_dict": lambda state: float(state["d"] == {"a": 3, "b": 2}),
    "copied_list": lambda state: list(state["l"])[0],
    "star_args": lambda state: (lambda a, _b: a)(*state["l"]),
    "sorted": lambda state: sorted(state["l"])[-1],
    "text": lambda state: len(str(state["d"])) + len(f"{state['l']}"),
    "deepcopy": lambda state: copy.deepcopy(state)["d"]["a"],
    "pickle": lambda state: pickle.loads(pickle.dumps(state["l"]))[0],
}


def _counting_program(read):
    state = {"d": {"a": 1, "b": 2}, "l": [1, 2]}
    namespace = {"state": state, "read": read}
    exec("def f(x):\n    s = read(state)\n    state['d']['a'] += 1\n    state['l'][0] += 3\n"  # noqa: S102
         "    return x * s\n", namespace)
    return namespace["f"], state


@pytest.mark.parametrize("read", list(NATIVE_READS))
def test_a_counter_read_by_c_code_counts_like_eager(read):
    f, eager_state = _counting_program(NATIVE_READS[read])
    g, state = _counting_program(NATIVE_READS[read])
    jitted = jitcore.jit(g)
    for _ in range(5):
        assert_same(jitted(torch.ones(2)), f(torch.ones(2)))
        assert state == eager_state
    if read not in ("text", "pickle"):  # text and bytes of the numbers hold their values: an entry per value
        assert jitcore.cache_hits(jitted) >= 1, jitcore.miss_reasons(jitted)[-1]


def test_a_learning_rate_the_step_computes_is_not_an_entry_per_step():
    """nanoGPT's loop: ``lr = get_lr(it)`` written into every param group inside the jitted step. The
    optimizer reads the number the step wrote; the group's old value is read by nothing, and was
    guarded by value (an entry per step). The schedule's branches are predicate guards."""
    import math

    def get_lr(it):
        if it < 3:
            return 0.1 * (it + 1) / 3
        return 0.001 + 0.5 * (1.0 + math.cos(math.pi * min(1.0, (it - 3) / 10))) * 0.099

    def step(model, opt, it, x):
        lr = get_lr(it)
        for group in opt.param_groups:
            group["lr"] = lr
        return _step(model, opt, x)

    (eager_model, eager_opt, _), (model, opt, _) = _setup("Adam", "LambdaLR"), _setup("Adam", "LambdaLR")
    jitted = jitcore.jit(step)
    for it in range(12):
        x = torch.randn(8, 3, generator=torch.Generator().manual_seed(it))
        assert_same(jitted(model, opt, it, x), step(eager_model, eager_opt, it, x))
        assert opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"]
        for p, q in zip(model.parameters(), eager_model.parameters()):
            assert_same(p.detach(), q.detach())
    assert jitcore.cache_misses(jitted) <= 4, jitcore.miss_reasons(jitted)[-1]


def test_a_deepcopy_of_state_holding_a_dynamic_number():
    """``copy.deepcopy`` of a dict holding a number the program wrote: ``id(d)`` was the id of a copy of
    the dict made for the call, reused later, and deepcopy's memo broke (AttributeError where eager
    copies)."""
    def make():
        state = {"a": 1, "b": [2]}

        def f(x):
            state["a"] += 1
            snapshot = copy.deepcopy(state)
            return x * snapshot["a"] + snapshot["b"][0]
        return f, state

    (f, eager_state), (g, state) = make(), make()
    jitted = jitcore.jit(g)
    for _ in range(4):
        assert_same(jitted(torch.ones(2)), f(torch.ones(2)))
        assert state == eager_state
    assert jitcore.cache_hits(jitted) >= 2, jitcore.miss_reasons(jitted)[-1]


# Note [A tuple of counters] (jit/numbers.py): a tuple of numbers the program reads and writes back,
# held in a dict or list, read by C code too. The holder was guarded by its contents (a counter one level
# down did not count as held), so every call traced again (12 misses in 12 calls).
TUPLE_READS = {
    "get": lambda st: sum(st.get("t")),
    "values": lambda st: [v for v in st.values()][0][0],
    "items": lambda st: [v for _k, v in st.items()][0][1],
    "unpacked_dict": lambda st: {**st}["t"][0],
    "copy": lambda st: copy.copy(st)["t"][1],
    "deepcopy": lambda st: copy.deepcopy(st)["t"][0],
    "compared": lambda st: float(st["t"] == (3, 0.625)),
}


def _tuple_counting_program(read, holder):
    state = {"t": (1, 2.5)}
    obj = type("State", (), {})()
    obj.t = (1, 2.5)

    def f(x):
        if holder == "dict":
            s = read(state)
            a, b = state["t"]
            state["t"] = (a + 1, b * 0.5)
        else:
            s = read(vars(obj))
            a, b = obj.t
            obj.t = (a + 1, b * 0.5)
        return x * s

    return f, (lambda: dict(state)) if holder == "dict" else (lambda: dict(vars(obj)))


@pytest.mark.parametrize("holder", ["dict", "attribute"])
@pytest.mark.parametrize("read", list(TUPLE_READS))
def test_a_tuple_of_counters_read_by_c_code_is_one_entry(read, holder):
    f, eager_state = _tuple_counting_program(TUPLE_READS[read], holder)
    g, state = _tuple_counting_program(TUPLE_READS[read], holder)
    jitted = jitcore.jit(g)
    for _ in range(8):
        assert_same(jitted(torch.ones(2)), f(torch.ones(2)))
        assert state() == eager_state()
    assert jitcore.cache_misses(jitted) <= 2, jitcore.miss_reasons(jitted)[-1]


@pytest.mark.parametrize("kind", ["Counter", "defaultdict"])
def test_a_counter_per_key_the_call_passes(kind):
    """``counts[k] += 1`` for a key the call passes: the walk of a Counter guarded the counts of the keys
    the call did not read by value (dict's held counters were bound in place, a Counter's were not), so
    every call traced again (24 misses in 24 calls); now an entry per key and per new key set."""
    import collections

    def make():
        counts = collections.Counter() if kind == "Counter" else collections.defaultdict(int)

        def f(x, k):
            counts[k] += 1
            counts["total"] += x.numel()
            return x * counts[k]
        return f, counts

    (f, eager_counts), (g, counts) = make(), make()
    jitted = jitcore.jit(g)
    for i in range(24):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(x, "abc"[i % 3]), f(x, "abc"[i % 3]))
        assert counts == eager_counts and type(counts) is type(eager_counts)
    assert jitcore.cache_misses(jitted) <= 10, jitcore.miss_reasons(jitted)[-1]


@dataclasses.dataclass(frozen=True)
class _Config:
    step: int
    lr: float = 0.5


NEW_OBJECTS = {
    "dataclasses.replace-frozen": lambda cfg: dataclasses.replace(cfg, step=cfg.step + 1),
    "frozen-constructor": lambda cfg: _Config(cfg.step + 1, cfg.lr),
    "SimpleNamespace": lambda cfg: types.SimpleNamespace(step=cfg.step + 1, lr=cfg.lr),
}


@pytest.mark.parametrize("make", list(NEW_OBJECTS))
def test_a_number_stored_into_a_new_object_stays_a_name(make):
    """Note [Numbers stored into new objects], jitcore/jit/numbers.py: a frozen dataclass made again with
    the step counted on (``dataclasses.replace``) specialized the dynamic step where its ``__init__``
    handed the half-built object to ``object.__setattr__``: an entry per call (10 misses in 10 calls),
    SimpleNamespace's constructor alike; now one entry more once the step changed. A branch on the step
    still guards it."""
    def f(x, cfg):
        out = NEW_OBJECTS[make](cfg)
        return (x * out.lr if out.step % 4 else x - 1), out

    jitted = jitcore.jit(f)
    cfg = eager_cfg = _Config(0)
    for _ in range(10):
        (y, cfg), (expected, eager_cfg) = jitted(torch.ones(2), cfg), f(torch.ones(2), eager_cfg)
        assert_same(y, expected)
        assert cfg == eager_cfg and type(cfg.step) is int
        cfg = _Config(cfg.step, cfg.lr)
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)[-1]


# --- ``operator.setitem``/``delitem`` of a caller's dict or list (Note [An item set by operator.setitem],
# jitcore/jit/numbers.py)

def _set_by_operator(s: dict, x: torch.Tensor) -> torch.Tensor:
    operator.setitem(s, "k", s.get("k", 0) + 1)
    return x * s["k"]


def _set_a_constant_by_operator(s: dict, x: torch.Tensor) -> torch.Tensor:
    operator.setitem(s, "k", 5)
    return x * s["k"]


def _set_an_item_of_a_list(s: list, x: torch.Tensor) -> torch.Tensor:
    operator.setitem(s, 0, s[0] + 1)
    operator.delitem(s, slice(1, None))
    return x * s[0]


def _merged_by_operator(s: dict, x: torch.Tensor) -> torch.Tensor:
    operator.ior(s, {"k": s.get("k", 0) + 1})
    return x * s["k"]


@pytest.mark.parametrize(("fn", "make"), [
    (_set_by_operator, dict), (_set_a_constant_by_operator, lambda: {"k": 1}),
    (_set_an_item_of_a_list, lambda: [0, 1]), (_merged_by_operator, dict),
], ids=["counter", "constant", "list", "ior"])
def test_an_item_set_by_operator_setitem_is_the_callers(fn, make) -> None:
    """Before: once the item was a dynamic number, C wrote into a copy of the dict made to hand it the
    numbers' values: the store was lost and the read gave the old value (a counter: eager 1, 2, 3, ...,
    jit 1, 1, 1, ...; a constant store: the caller's dict never got it)."""
    mine, twin = make(), make()
    jf = jitcore.jit(fn)
    for i in range(8):
        x = torch.full((2,), float(i))
        if i == 5:
            mine.clear() if type(mine) is dict else mine.__setitem__(0, 10)
            twin.clear() if type(twin) is dict else twin.__setitem__(0, 10)
        assert_same(jf(mine, x), fn(twin, x))
        assert mine == twin
    assert jitcore.cache_misses(jf) <= 3
