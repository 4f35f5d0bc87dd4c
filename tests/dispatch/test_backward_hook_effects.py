"""The Python effects of a tensor subclass's code that a backward runs happen on every backward, as eagerly.

``out.backward()`` of a cached call runs the grad transform's backward trace (aten ops on plain tensors),
where eager runs the class's ``__torch_dispatch__`` for each backward op: its counters and logs advanced
for the forward's ops only (``mul`` 3 times in 3 calls where eager counts 9, ``cos`` never). The writes
that code makes are recorded while the backward is derived and performed after each run of it, a counter
from the value it holds then (Note [Effects of a backward's hooks], jitcore/transforms/jit_hook.py).
Each test runs the same calls eagerly and jitted and compares the state after each call and backward,
the gradients (values and types) and the cache hits.
"""

from __future__ import annotations

import collections
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

import jitcore

COUNTS: collections.Counter[str] = collections.Counter()
PER_OP: dict[str, int] = {}
LOG: list[str] = []


class Counted(torch.Tensor):
    """A wrapper whose dispatch counts ops in a Counter, a plain dict and on its class, and logs them."""

    calls = 0

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Counted:
        return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
            cls, elem.shape, dtype=elem.dtype, requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, _ctx: Any, *_sizes: Any) -> Counted:
        return Counted(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        COUNTS[str(func)] += 1
        PER_OP[func.__name__] = PER_OP.get(func.__name__, 0) + 1
        LOG.append(func.__name__)
        cls.calls += 1
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs or {}))
        return tree_map(lambda t: Counted(t) if isinstance(t, torch.Tensor) else t, out)


class Logged(torch.Tensor):
    """A wrapper whose dispatch only appends to a log and counts on its class (no per-op dict, whose new
    keys make the next call trace again: Note [Counters read natively])."""

    calls = 0

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Logged:
        return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
            cls, elem.shape, dtype=elem.dtype, requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, _ctx: Any, *_sizes: Any) -> Logged:
        return Logged(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        LOG.append(func.__name__)
        cls.calls += 1
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs or {}))
        return tree_map(lambda t: Logged(t) if isinstance(t, torch.Tensor) else t, out)


class Checking(Logged):
    """Compares the counter it advances: an effect no formula holds (the call runs eagerly)."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls += 1
        if cls.calls % 4 == 0:
            LOG.append("fourth")
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs or {}))
        return tree_map(lambda t: Checking(t) if isinstance(t, torch.Tensor) else t, out)


def _unwrap(t: Any) -> Any:
    return t.elem if isinstance(t, (Counted, Logged)) else t


def _reset() -> None:
    COUNTS.clear()
    PER_OP.clear()
    LOG.clear()
    Counted.calls = Logged.calls = Checking.calls = 0


def _state() -> tuple:
    return dict(COUNTS), dict(PER_OP), list(LOG), Counted.calls, Logged.calls, Checking.calls


def _grad(t: torch.Tensor) -> tuple[type, torch.Tensor]:
    g = t.grad
    return type(g), (g.elem if isinstance(g, (Counted, Logged)) else g).detach().clone()


def _compare(f: Callable, step: Callable[[Callable, int], Any], calls: int = 4) -> Any:
    """Runs ``step(fn, i)`` for ``calls`` calls with ``fn`` eager, then jitted; the state after each step
    and what each step returns must be equal. Returns the jitted function."""
    runs = []
    jitted = jitcore.jit(f)
    for fn in (f, jitted):
        _reset()
        runs.append([(step(fn, i), _state()) for i in range(calls)])
    for (eager_out, eager_state), (jit_out, jit_state) in zip(*runs):
        assert jit_state == eager_state
        for (eager_type, eager_value), (jit_type, jit_value) in zip(eager_out, jit_out):
            assert jit_type is eager_type
            torch.testing.assert_close(jit_value, eager_value)
    return jitted


def _sin_sum(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sin().sum()


@pytest.mark.parametrize("cls", [Counted, Logged])
def test_a_backward_outside_runs_the_effects_of_its_hooks_on_every_call(cls: type) -> None:
    """bwdlog.py: eager counts ``mul`` 9 times in 3 calls, ``cos`` and ``expand`` 3; jitcore counted
    ``mul`` 3 times and no ``cos``/``expand``: the cached backward ran plain aten ops only."""

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = cls(torch.randn(4)), torch.randn(4, requires_grad=True)
        fn(x, w).backward()
        return [_grad(w)]

    jitted = _compare(_sin_sum, step)
    assert COUNTS["aten.cos.default"] == 4 if cls is Counted else LOG.count("cos.default") == 4
    if cls is Logged:  # one entry: the backward's writes are replayed, not traced again
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def test_a_counter_advances_from_the_value_it_holds_when_the_backward_runs() -> None:
    """Two forwards, then one backward through both: each run of the backward advances the counters from
    what they hold then (a value computed at the forward would count the backward once)."""

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = Counted(torch.randn(3)), torch.randn(3, requires_grad=True)
        (fn(x, w) + fn(x, w)).backward()
        return [_grad(w)]

    _compare(_sin_sum, step, calls=3)


def test_a_backward_run_twice_runs_its_hooks_twice() -> None:
    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = Logged(torch.randn(3)), torch.randn(3, requires_grad=True)
        out = fn(x, w)
        out.backward(retain_graph=True)
        out.backward()
        return [_grad(w)]

    _compare(_sin_sum, step, calls=3)


def test_a_subclass_input_that_requires_grad_logs_its_backward_ops() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).exp().mean()

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x = Counted(torch.randn(2, 3).requires_grad_())
        w = torch.randn(2, 3, requires_grad=True)
        fn(x, w).backward()
        return [_grad(x), _grad(w)]

    _compare(f, step, calls=3)


def test_a_hook_that_compares_the_counter_it_writes_runs_eagerly_with_a_warning() -> None:
    """No formula holds ``if cls.calls % 4 == 0: LOG.append(...)``: the call runs eagerly (JC-J002)."""

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = Checking(torch.randn(3)), torch.randn(3, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn(x, w).backward()
        if fn is not _sin_sum and i == 0:  # once: the entry runs calls like it eagerly
            assert any("runs eagerly" in str(w.message) and "compares" in str(w.message) for w in caught)
        return [_grad(w)]

    _compare(_sin_sum, step, calls=3)


def test_a_backward_inside_logs_as_eagerly() -> None:
    """``loss.backward()`` inside the function: its hooks run in pass 1 (no change here); the cached
    calls' logs and counters stay eager's."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = (x * w).sin().sum()
        out.backward()
        return out.detach()

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = Logged(torch.randn(4)), torch.randn(4, requires_grad=True)
        fn(x, w)
        return [_grad(w)]

    _compare(f, step)


def test_autograd_grad_inside_logs_no_detach_of_its_ones() -> None:
    """``torch.autograd.grad(out, w)`` inside: ``_make_grads``'s ``ones_like`` was followed by a ``detach``
    eager never runs (a variable factory's make_variable, asked of a value jitcore holds: Note [The detach
    of a variable factory])."""

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = (x * w).sin().sum()
        (g,) = torch.autograd.grad(out, w)
        return out.detach(), g

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x, w = Logged(torch.randn(4)), torch.randn(4, requires_grad=True)
        out, g = fn(x, w)
        return [(type(g), g.elem), (type(out), out.elem)]

    _compare(f, step)


def test_an_sgd_step_over_a_logging_parameter_logs_as_eagerly() -> None:
    """q15: ``zero_grad``, a backward inside, ``opt.step()``: the second traced call (its ``.grad`` None
    before, a LogW since) logged 32 entries where eager logs 8 (a guard's failure message formatted the
    found gradient with ``repr``, which runs the class's dispatch), and the gradient's ``detach`` came
    right after ``ones_like`` where eager's AccumulateGrad runs it after the backward's ops."""

    def make() -> tuple[Callable, torch.Tensor]:
        torch.manual_seed(0)
        w = torch.nn.Parameter(Logged(torch.randn(3, 3)))
        opt = torch.optim.SGD([w], lr=0.1)

        def step(x: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = (w @ x).sum()
            loss.backward()
            opt.step()
            return loss.detach()

        return step, w

    logs = []
    for jitted in (False, True):
        step, w = make()
        fn = jitcore.jit(step) if jitted else step
        calls = []
        for i in range(4):
            torch.manual_seed(i)
            LOG.clear()
            out = fn(torch.randn(3, 2))
            calls.append((list(LOG), out.elem, w.elem.detach().clone()))
        logs.append(calls)
    for (eager_log, eager_out, eager_w), (jit_log, jit_out, jit_w) in zip(*logs):
        assert jit_log == eager_log
        torch.testing.assert_close(jit_out, eager_out)
        torch.testing.assert_close(jit_w, eager_w)
    assert logs[0][1][0][-3:] == ["detach.default", "add_.Tensor", "detach.default"]


SEEN: set[str] = set()
RING: collections.deque[str] = collections.deque(maxlen=3)
TRAIL: collections.deque[str] = collections.deque()
STATS = types.SimpleNamespace(cos=0)  # held by the module, written for a backward op only
SIZES: list[int] = []


class Noting(Logged):
    """Writes state the watch once missed (issue 14): a set, deques, a plain object's attribute, and a
    number it measured (``len``), by a mode the test sets."""

    mode = "set"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__
        if cls.mode == "set":
            SEEN.add(name)
        elif cls.mode == "deques":
            RING.append(name)
            TRAIL.append(name)
        elif cls.mode == "object" and name == "cos.default":
            STATS.cos += 1
        elif cls.mode == "len":
            SIZES.append(len(SIZES))
        elif cls.mode == "counted":
            SIZES.append(sum(1 for _ in SIZES))
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs or {}))
        return tree_map(lambda t: Noting(t) if isinstance(t, torch.Tensor) else t, out)


@pytest.mark.parametrize("mode", ["set", "deques", "object", "len", "counted"])
def test_writes_the_watch_once_missed_are_eagers(mode: str) -> None:
    """bwd gaps (/tmp/eff38-probes/p2_watch_gaps.py): the backward's ``cos`` never reached a set or a
    deque (their contents were not watched), ``STATS.cos`` stayed 1 where eager counts 4 (a plain object
    the module holds, not watched), and ``SIZES.append(len(SIZES))`` replayed the recorded lengths
    ([0, 1, 2, 3, 3, ...] where eager counts on), and so did a count made by iterating the list: those
    now run eagerly (JC-J002)."""
    Noting.mode = mode

    def state() -> tuple:
        return sorted(SEEN), list(RING), list(TRAIL), STATS.cos, list(SIZES)

    runs = []
    for jitted in (False, True):
        SEEN.clear(), RING.clear(), TRAIL.clear(), SIZES.clear()
        STATS.cos = 0
        fn = jitcore.jit(_sin_sum) if jitted else _sin_sum
        calls = []
        for i in range(4):
            torch.manual_seed(i)
            x, w = Noting(torch.randn(3)), torch.randn(3, requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn(x, w).backward()
            eagerly = any("runs eagerly" in str(c.message) for c in caught)
            calls.append((state(), w.grad.clone(), eagerly and i == 0))
        runs.append(calls)
    for (eager_state, eager_grad, _), (jit_state, jit_grad, _eagerly) in zip(*runs):
        assert jit_state == eager_state
        torch.testing.assert_close(jit_grad, eager_grad)
    assert runs[1][0][2] == (mode in ("len", "counted"))  # the warning, once, where it runs eagerly


class _Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * x.cos()


class _Scaled(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ctx.save_for_backward(*inputs)
        ctx.scale = 2.0

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        return g * w * ctx.scale, g * x.sin()


def _grad_of_doubled(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    (g,) = torch.autograd.grad(_Doubled.apply(x).sum(), x)
    return g, w


def _backward_of_doubled(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = _Doubled.apply(w * x)
    y.sum().backward()
    return y.detach(), w.grad


def _grads_of_scaled(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.autograd.grad(_Scaled.apply(x, w).sum(), (x, w))


class _Pair(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(x)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g1 * x.cos() + g2


def _grad_of_pair(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = _Pair.apply(x)
    (g,) = torch.autograd.grad((a + b).sum(), x)
    return g, w


@pytest.mark.parametrize("program", [_grad_of_doubled, _backward_of_doubled, _grads_of_scaled, _grad_of_pair])
def test_a_functions_backward_inside_the_program_logs_as_eagerly(program: Callable) -> None:
    """p1_autograd_function.py: the Function's node in pass 1's shadow graph gave zero gradients, so the
    log held ``zeros_like`` where eager logs the user's backward's ``cos``/``sin`` and ``mul``s (the
    values were right: they are the replay's); a Function of two outputs logged ``zeros_like`` twice
    (each output was a node of its own). Note [A backward inside the program runs the Function's own
    backward], transforms/autograd_function.py."""

    def step(fn: Callable, i: int) -> Any:
        torch.manual_seed(i)
        x = Logged(torch.randn(3)).requires_grad_(program is not _backward_of_doubled)
        w = torch.randn(3, requires_grad=True)
        outs = fn(x, w)
        return [(type(t), t.elem if isinstance(t, Logged) else t) for t in outs]

    jitted = _compare(program, step, calls=3)
    assert jitcore.cache_hits(jitted) == 2
