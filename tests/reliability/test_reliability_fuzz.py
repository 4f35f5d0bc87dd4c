"""Long sequences of calls, changing one thing at a time, each compared with eager: zero wrong answers.

A *world* is a jitted function and everything it reads: its arguments (tensor shape, dtype,
requires_grad; numbers including -0.0, NaN, inf, huge ints and bools; strings; list lengths; dict
keys), a global, a closure cell, a module attribute, an object attribute, a helper function and a
method that can be replaced, a mutable default argument, an ``nn.Module`` whose parameter can be
replaced, and the implicit state of the calling thread (grad mode, inference mode, default dtype,
autocast). The function is jitted twice, with its number argument specialized and declared dynamic,
next to a program where the dynamic number mostly stays symbolic. Each step changes one of these, then calls
eager and the jitted function on identical
inputs and compares value, dtype, shape, requires_grad, inference-ness, and the exception raised.

Profiles: by default a few hundred calls (fast enough for CI). The heavy profile runs about 10,000
calls:

    JITCORE_FUZZ_PROFILE=heavy python -m pytest tests/reliability/test_reliability_fuzz.py

(documented in docs/user-guide.md, "Reliability testing").
"""

from __future__ import annotations

import contextlib
import math
import os
import types
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import outcome, same_outcome
from torch import nn

import jitcore

HEAVY = os.environ.get("JITCORE_FUZZ_PROFILE") == "heavy"
# (examples, steps per example): default ~ 12 x 12 calls; heavy ~ 400 x 25 = 10,000 calls.
EXAMPLES, STEPS = (400, 25) if HEAVY else (12, 12)

# --- the state a world's function reads ---------------------------------------------------------------
CFG = types.ModuleType("reliability_cfg")  # a module whose attribute is read
CFG.offset = 1.0
SCALE = 2.0  # a global


class Holder:
    def __init__(self) -> None:
        self.gain = 1.0
        self.tensors = [torch.ones(2), torch.full((2,), 2.0)]  # read by iteration (no hook)
        self.weights = [0.5] * 300  # a long list of numbers, summed

    def bump(self, y):
        return y + 1


HOLDER = Holder()


def helper(y, k=[0.5]):  # noqa: B006 - the helper's mutable default is under test
    return y * sum(k)


def _replacement_helper(y):
    return y * 0.25


def _replacement_bump(self, y):
    return y - 1


def make_world():
    """A fresh function over the shared state, and a setter for its closure cell."""
    factor = 1.5

    def set_factor(value):
        nonlocal factor
        factor = value

    def fn(x, n, mode, xs, d, extra=[1.0]):  # noqa: B006 - the mutable default is under test
        y = x * SCALE + CFG.offset
        y = y * factor * HOLDER.gain
        if mode == "add":
            y = y + n
        else:
            y = y * n
        for t in xs:
            y = y + t.sum()
        y = y + sum(t.sum() * factor for t in xs)  # a generator made while tracing reads the cell
        for k, v in d.items():
            y = y + v * len(repr(k))
        y = y + sum(extra) + helper(y) + HOLDER.bump(y) + sum(HOLDER.weights)
        for t in HOLDER.tensors:
            y = y + t.sum()
        if not x.is_contiguous():
            y = y - 1
        z = torch.ones(2, 1)  # a factory: default dtype and device matter
        out = (y @ y.transpose(0, 1)) if y.dim() == 2 else y * y
        return (
            out,
            z * 2,
            math.copysign(1.0, n) if type(n) is float else repr(n)[:20],
            repr(sorted(d, key=repr)),
        )

    return fn, set_factor


def number_program(x, n, mode):
    """Jitted with ``dynamic_numbers=("n",)``: in mode "mul" n stays symbolic (arithmetic, torch
    operands); in mode "add" a comparison specializes it."""
    y = x * n + (n - 1) * 2
    if mode == "mul":
        y = y * n
    elif n == n and n > 0:  # a comparison: specializes n (NaN takes the other branch)
        y = y - 1
    return y, -n, n / 4 if type(n) is float else n // 3


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.extra = nn.Identity()
        self.gain = 1.0

    def forward(self, x):
        y = self.lin(x) * self.gain + self.extra(x)
        return y.relu() if self.training else y.tanh()


# --- one world's mutable state -------------------------------------------------------------------------
DEFAULTS = {
    "shape": (2, 3), "dtype": torch.float32, "requires_grad": False, "number": 1, "mode": "add",
    "list_len": 1, "keys": ("a",), "grad": True, "inference": False, "default_dtype": torch.float32,
    "autocast": None, "layout": "contiguous",
}

CHANGES = {
    "shape": [(2, 3), (3, 3), (3,), (1, 1), (0, 3)],
    "dtype": [torch.float32, torch.float64, torch.bfloat16, torch.int64],
    "layout": ["contiguous", "transposed"],
    "requires_grad": [False, True],
    "number": [1, 2, True, 1.0, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), 2**70, 10**5000, -3],
    "mode": ["add", "mul"],
    "list_len": [0, 1, 2, 3],
    "keys": [("a",), ("a", "b"), ("b",), (1,), (True,), (1.0,), ()],
    "grad": [True, False],
    "inference": [False, True],
    "default_dtype": [torch.float32, torch.float64],
    "autocast": [None, torch.bfloat16, torch.float16],
    # persistent state (applied by World.change):
    "global": [2.0, 3.0, -0.0, 2],
    "module_attr": [1.0, 0.5, 1],
    "cell": [1.5, 2.5, float("nan")],
    "object_attr": [1.0, 2.0],
    "helper": ["original", "replacement"],
    "helper_default": [[0.5], [0.5, 1.0], [-0.0]],
    "method": ["original", "replacement"],
    "instance_method": [None, "shadow"],
    "code": ["original", "replacement"],
    "default": [[1.0], [1.0, 2.0], [], [-0.0]],
    "parameter": ["keep", "replace", "mutate"],
    "net_gain": [1.0, 3.0],
    "training": [True, False],
    "submodule": ["identity", "tanh", "linear"],
    "forward_hook": [None, "double"],
    "tensor_list": ["original", "replace_element", "append"],
    "long_list": [0.5, 0.25],
}


class World:
    def __init__(self) -> None:
        self.fn, self.set_factor = make_world()
        self.jfn = jitcore.jit(self.fn)
        self.jfn_dynamic = jitcore.jit(self.fn, dynamic_numbers=("n",))
        self.jnumber = jitcore.jit(number_program, dynamic_numbers=("n",))
        self.net = Net()
        self.jnet = jitcore.jit(self.net)
        self.state = dict(DEFAULTS)
        self.hooks: list = []

    def change(self, kind: str, value) -> None:
        global SCALE
        if kind in DEFAULTS:
            self.state[kind] = value
        elif kind == "global":
            SCALE = value
        elif kind == "module_attr":
            CFG.offset = value
        elif kind == "cell":
            self.set_factor(value)
        elif kind == "object_attr":
            HOLDER.gain = value
        elif kind == "helper":
            globals()["helper"] = _replacement_helper if value == "replacement" else _original_helper
        elif kind == "helper_default":
            _original_helper.__defaults__[0][:] = value
        elif kind == "instance_method":
            if value is None:
                HOLDER.__dict__.pop("bump", None)
            else:
                HOLDER.bump = lambda y: y * 3  # an instance attribute shadowing the method
        elif kind == "code":
            _original_helper.__code__ = (
                _replacement_helper_code if value == "replacement" else _original_helper_code
            )
        elif kind == "method":
            Holder.bump = _replacement_bump if value == "replacement" else _original_bump
        elif kind == "default":
            self.fn.__defaults__[0][:] = value  # mutated in place, not replaced
        elif kind == "parameter":
            if value == "replace":
                self.net.lin.weight = nn.Parameter(torch.randn(3, 3))
            elif value == "mutate":
                with torch.no_grad():
                    self.net.lin.weight.mul_(1.5)
        elif kind == "net_gain":
            self.net.gain = value
        elif kind == "training":
            self.net.train(value)
        elif kind == "submodule":
            self.net.extra = {"identity": nn.Identity(), "tanh": nn.Tanh(), "linear": nn.Linear(3, 3)}[value]
        elif kind == "forward_hook":
            for handle in self.hooks:
                handle.remove()
            self.hooks = [] if value is None else [self.net.lin.register_forward_hook(lambda m, i, o: o * 2)]
        elif kind == "tensor_list":
            HOLDER.tensors = [torch.ones(2), torch.full((2,), 2.0)]
            if value == "replace_element":
                HOLDER.tensors[0] = torch.full((2,), 7.0)
            elif value == "append":
                HOLDER.tensors.append(torch.full((2,), 3.0))
        elif kind == "long_list":
            HOLDER.weights[123] = value  # one element of a long list, in place
        else:
            raise AssertionError(kind)

    def inputs(self):
        s = self.state
        x = torch.linspace(-2, 2, math.prod(s["shape"])).reshape(s["shape"]).to(s["dtype"])
        if s["layout"] == "transposed" and x.dim() == 2:
            x = x.T.contiguous().T  # same shape, other strides
        if s["requires_grad"] and x.is_floating_point():
            x.requires_grad_()
        xs = [torch.full((2,), float(i + 1)) for i in range(s["list_len"])]
        d = {k: torch.tensor(float(i + 1)) for i, k in enumerate(s["keys"])}
        return (x, s["number"], s["mode"], xs, d)

    @contextlib.contextmanager
    def implicit_state(self):
        s = self.state
        previous = torch.get_default_dtype()
        torch.set_default_dtype(s["default_dtype"])
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.set_grad_enabled(s["grad"]))
                if s["inference"]:
                    stack.enter_context(torch.inference_mode())
                if s["autocast"] is not None:
                    stack.enter_context(torch.autocast("cpu", dtype=s["autocast"]))
                yield
        finally:
            torch.set_default_dtype(previous)

    def step(self, where: str) -> None:
        with self.implicit_state():
            expected = outcome(self.fn, *self.inputs())
            actual = outcome(self.jfn, *self.inputs())
            same_outcome(actual, expected, where)
            same_outcome(outcome(self.jfn_dynamic, *self.inputs()), expected, where + " (dynamic n)")
            x, n, mode = self.inputs()[:3]
            same_outcome(
                outcome(self.jnumber, x, n, mode),
                outcome(number_program, x, n, mode),
                where + " (number program)",
            )
            x = torch.linspace(-1, 1, 6).reshape(2, 3)
            same_outcome(outcome(self.jnet, x), outcome(self.net, x), where + " (module)")


_original_helper = helper
_original_bump = Holder.bump
_original_helper_code = helper.__code__
_replacement_helper_code = (lambda y, k=None: y * 2.0).__code__


@pytest.fixture(autouse=True)
def _restore_shared_state():
    global SCALE
    saved = (SCALE, CFG.offset, HOLDER.gain, torch.get_default_dtype())
    yield
    SCALE, CFG.offset, HOLDER.gain = saved[:3]
    torch.set_default_dtype(saved[3])
    _restore_shared_state_now()


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cache-limit warnings of long sequences
        yield


@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_each_kind_of_change_round_trips(kind: str) -> None:
    """Every value of one kind, then back again in reverse: every call (hit or miss) equals eager."""
    world = World()
    values = CHANGES[kind]
    for i, value in enumerate(values + values[::-1] + values[:1]):
        world.change(kind, value)
        world.step(f"{kind}={_label(value)} (step {i})")


_STEP = st.sampled_from(sorted(CHANGES)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(CHANGES[k])))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_STEP, min_size=1, max_size=STEPS))
def test_sequences_of_changes_never_give_a_wrong_answer(steps) -> None:
    world = World()
    try:
        for i, (kind, value) in enumerate(steps):
            world.change(kind, value)
            world.step(f"step {i}: {kind}={_label(value)}")
    finally:
        _restore_shared_state_now()


def _label(value) -> str:
    return f"<int of {value.bit_length()} bits>" if type(value) is int and value > 2**64 else repr(value)


def _restore_shared_state_now() -> None:
    global SCALE
    SCALE, CFG.offset, HOLDER.gain = 2.0, 1.0, 1.0
    globals()["helper"] = _original_helper
    _original_helper.__code__ = _original_helper_code
    _original_helper.__defaults__[0][:] = [0.5]
    Holder.bump = _original_bump
    HOLDER.__dict__.pop("bump", None)
    HOLDER.tensors = [torch.ones(2), torch.full((2,), 2.0)]
    HOLDER.weights = [0.5] * 300


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(3, 3, bias=False)
        self.dec = nn.Linear(3, 3, bias=False)

    def forward(self, x):
        y = self.dec(self.enc(x))
        return y * 2 if self.enc.weight is self.dec.weight else y  # identity decides


def test_aliased_tensors_are_guarded_both_ways() -> None:
    """One tensor passed (or reached) twice vs two tensors: traced either way first, never reused
    for the other (in-place ops and ``is`` checks depend on it)."""

    def f(x, y):
        x.add_(1)
        return y * 2, x is y

    jf = jitcore.jit(f)
    for aliased in (True, False, True, False, False, True):
        a, b = torch.ones(2), torch.full((2,), 5.0)
        a2, b2 = a.clone(), b.clone()
        expected = outcome(f, a, a if aliased else b)
        actual = outcome(jf, a2, a2 if aliased else b2)
        same_outcome(actual, expected, f"aliased={aliased}")
    net = Tied()
    jnet = jitcore.jit(net)
    x = torch.ones(2, 3)
    with torch.no_grad():
        for tie in (False, True, False, True):
            net.dec.weight = net.enc.weight if tie else nn.Parameter(torch.randn(3, 3))
            same_outcome(outcome(jnet, x), outcome(net, x), f"tied={tie}")


def _inner_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y + 1, y, x * 3


def _inner_enable_grad(x):
    with torch.enable_grad():
        return x * 2


def _inner_set_grad_enabled(x):
    torch.set_grad_enabled(False)
    try:
        return x * 2
    finally:
        torch.set_grad_enabled(True)


def _inner_autocast(a, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.mm(a, b)
    return y, torch.mm(a, b)


def _inner_seed(x):
    torch.manual_seed(1234)
    return x + torch.rand(x.shape)


def _inner_default_dtype(x):
    torch.set_default_dtype(torch.float64)
    try:
        return x + torch.ones(x.shape)
    finally:
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize(
    "fn",
    [
        _inner_no_grad,
        _inner_enable_grad,
        _inner_set_grad_enabled,
        _inner_autocast,
        _inner_seed,
        _inner_default_dtype,
    ],
)
def test_state_changed_inside_the_function_is_replayed(fn) -> None:
    """Grad mode, autocast, the RNG seed and the default dtype changed inside the function: every
    cached call changes them at the same points, and leaves the thread's state as eager does."""
    jf = jitcore.jit(fn)
    for grad in (True, False, True):
        requires_grad = fn not in (_inner_seed, _inner_default_dtype)  # with grad: the test below
        args = (torch.ones(2, 2, requires_grad=True), torch.ones(2, 2)) if fn is _inner_autocast else (
            torch.ones(2, requires_grad=requires_grad),)
        with torch.set_grad_enabled(grad):
            expected = outcome(fn, *args)
            after_eager = (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
        with torch.set_grad_enabled(grad):
            actual = outcome(jf, *args)
            after_jit = (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"))
        same_outcome(actual, expected, f"grad={grad}")
        assert after_jit == after_eager


@pytest.mark.parametrize("fn", [_inner_seed, _inner_default_dtype])
def test_state_changed_inside_a_function_with_grad_inputs(fn) -> None:
    jf = jitcore.jit(fn)
    x = torch.ones(2, requires_grad=True)
    for _ in range(2):
        same_outcome(outcome(jf, x), outcome(fn, x))


def test_inference_mode_inside_the_function_is_traced() -> None:
    """Entered and left at the same points of the computation (tests/jit/test_jit_inference_mode.py):
    the output is an inference tensor, the caller's thread leaves inference mode, a cached call too."""

    def f(x):
        with torch.inference_mode():
            return x * 2

    jf = jitcore.jit(f, fullgraph=True)
    for _ in range(2):
        out = jf(torch.ones(2))
        assert out.is_inference() and torch.equal(out, f(torch.ones(2)))
        assert not torch.is_inference_mode_enabled()
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1)


class _Bag:
    pass


@pytest.mark.parametrize(
    "name",
    ["getattr_default", "hasattr", "vars", "dict_get", "setattr_later", "try_attribute"],
)
def test_observed_absence_and_instance_dicts_are_guarded(name: str) -> None:
    bag = _Bag()
    bag.v = 1.0

    def tried(x):
        try:
            return x * bag.k
        except AttributeError:
            return x

    programs = {
        "getattr_default": lambda x: x * getattr(bag, "k", 2.0),
        "hasattr": lambda x: x * 3 if hasattr(bag, "k") else x,
        "vars": lambda x: x * vars(bag)["v"] + len(vars(bag)),
        "dict_get": lambda x: x * bag.__dict__.get("k", 5.0),
        "setattr_later": lambda x: x * bag.v,
        "try_attribute": tried,
    }
    fn = programs[name]
    jf = jitcore.jit(fn)
    x = torch.ones(2)
    for change in (None, ("k", 7.0), ("v", 2.0), ("k", None), ("k", 7.0)):
        if change is not None:
            key, value = change
            if value is None:
                delattr(bag, key)
            else:
                setattr(bag, key, value)
        same_outcome(outcome(jf, x), outcome(fn, x), f"after {change}")


def test_module_wide_hooks_registered_later_are_seen() -> None:
    net = nn.Linear(3, 3)
    jnet = jitcore.jit(net)
    x = torch.ones(2, 3)
    with torch.no_grad():
        same_outcome(outcome(jnet, x), outcome(net, x))
        handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out * 0)
        try:
            same_outcome(outcome(jnet, x), outcome(net, x), "with a global forward hook")
        finally:
            handle.remove()
        same_outcome(outcome(jnet, x), outcome(net, x), "hook removed")


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.inner(x) * self.scale


@pytest.mark.parametrize(
    "change",
    [
        "shadow_submodule",
        "replace_submodule",
        "plain_attribute",
        "new_attribute",
        "modules_dict",
        "delete_scale",
    ],
)
def test_module_dicts_read_by_torch_are_guarded_where_it_matters(change: str) -> None:
    """A user module's ``__dict__`` read by torch's ``Module.__getattr__`` is guarded by its keys; every
    value the call relied on is guarded where it is read (docs/user-guide.md, "What is guarded")."""
    m = _Outer()
    jm = jitcore.jit(m)
    x = torch.randn(2, 3)
    same_outcome(outcome(jm, x), outcome(m, x))
    if change == "shadow_submodule":  # bypasses Module.__setattr__: an instance attribute now wins
        m.__dict__["inner"] = nn.Identity()
    elif change == "replace_submodule":
        m.inner = nn.Linear(3, 3)
    elif change == "plain_attribute":
        m.scale = 3.0
    elif change == "new_attribute":
        m.unused = 1
    elif change == "modules_dict":
        m._modules["inner"] = nn.Tanh()
    elif change == "delete_scale":
        del m.scale
    same_outcome(outcome(jm, x), outcome(m, x))
