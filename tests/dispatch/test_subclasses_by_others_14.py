"""Tensor subclasses as others write them and use them, round 14 (issues 14 and 15, helper zoo35): the
Python effects of a class's ``__torch_function__``/``__torch_dispatch__`` (logs, counters) on cached
calls under grad, each program run eagerly and under jitcore.jit on equal fresh arguments, four calls,
the log or counter compared after every call. Each test failed before its fix."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

aten = torch.ops.aten
HOOKS: list[tuple[str, str]] = []


class Float8Weight(torch.Tensor):
    """A float8-style weight as torchao writes one: tables for both protocols (``implements``), a
    ``__torch_function__`` that logs every call and answers ``F.linear`` by dequantizing."""

    TORCH_FUNCTIONS: dict[Any, Any] = {}
    ATEN_OPS: dict[Any, Any] = {}
    function_calls = 0

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor, orig_dtype: torch.dtype) -> Float8Weight:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=orig_dtype)  # noqa: SLF001

    def __init__(self, data: torch.Tensor, scale: torch.Tensor, orig_dtype: torch.dtype) -> None:
        self._data, self._scale, self._orig_dtype = data, scale, orig_dtype

    def __tensor_flatten__(self) -> tuple[list[str], tuple]:
        return ["_data", "_scale"], (self._orig_dtype,)

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: tuple, size: Any, stride: Any) -> Float8Weight:
        return cls(inner["_data"], inner["_scale"], ctx[0])

    @classmethod
    def from_float(cls, w: torch.Tensor) -> Float8Weight:
        scale = w.abs().amax().clamp(min=1e-12) / torch.finfo(torch.float8_e4m3fn).max
        return cls((w / scale).to(torch.float8_e4m3fn), scale, w.dtype)

    def dequantize(self) -> torch.Tensor:
        return self._data.to(self._orig_dtype) * self._scale

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cls.function_calls += 1
        HOOKS.append(("tf", getattr(func, "__name__", str(func))))
        if func in cls.TORCH_FUNCTIONS:
            return cls.TORCH_FUNCTIONS[func](*args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        HOOKS.append(("td", str(func)))
        if func in cls.ATEN_OPS:
            return cls.ATEN_OPS[func](*args, **(kwargs or {}))
        raise NotImplementedError(f"Float8Weight dispatch: {func}")


def _linear(x: torch.Tensor, w: Float8Weight, bias: torch.Tensor | None = None) -> torch.Tensor:
    return F.linear(x, w.dequantize(), bias)


def _detach(w: Float8Weight) -> Float8Weight:
    return Float8Weight(w._data.detach(), w._scale, w._orig_dtype)


Float8Weight.TORCH_FUNCTIONS[F.linear] = _linear
Float8Weight.ATEN_OPS[aten.detach.default] = _detach


def _float8_linear() -> torch.nn.Linear:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 4)  # its bias requires grad: the call runs under the grad transform
    linear.weight = torch.nn.Parameter(Float8Weight.from_float(linear.weight.detach()), requires_grad=False)
    return linear


def _linear_module(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x)


def _functional(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, m.weight, m.bias)


def _backward_inside(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    m(x).sum().backward()
    return x.grad


@pytest.mark.parametrize("program, x_requires_grad", [
    (_linear_module, False), (_linear_module, True), (_functional, False), (_backward_inside, True),
], ids=["module", "input_requires_grad", "F_linear", "backward_inside"])
def test_a_torch_function_log_under_grad_is_kept_on_every_call(program: Any, x_requires_grad: bool) -> None:
    """A float8-style weight in an ``nn.Linear`` whose bias requires grad logs ``('tf', 'linear')`` and
    counts on every eager call; jitcore logged and counted on the traced call only: under grad, a user
    subclass's code was taken as it was while tracing (Note [Counters under grad])."""
    eager_module, jit_module = _float8_linear(), _float8_linear()
    jitted = jitcore.jit(program)
    for i in range(4):
        torch.manual_seed(i)
        x = torch.randn(3, 8)
        runs = []
        for fn, module in ((program, eager_module), (jitted, jit_module)):
            HOOKS.clear()
            Float8Weight.function_calls = 10 * i
            arg = x.clone().requires_grad_(x_requires_grad)
            out = fn(module, arg)
            runs.append((out, list(HOOKS), Float8Weight.function_calls, arg.grad))
        (eager_out, eager_log, eager_count, eager_grad), (out, log, count, grad) = runs
        torch.testing.assert_close(out, eager_out)
        assert (log, count) == (eager_log, eager_count)
        assert eager_log and eager_count > 10 * i
        if eager_grad is not None:
            torch.testing.assert_close(grad, eager_grad)
    assert jitcore.cache_hits(jitted) >= 2
    assert jitcore.cache_misses(jitted) <= 2  # a backward inside: x.grad None, then set


class Logged(torch.Tensor):
    """A wrapper whose dispatch counts per op on the class (a dict keyed by op name) and appends."""

    seen: list[str] = []
    per_op: dict[str, int] = {}

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Logged:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, size: Any, stride: Any) -> Logged:
        return Logged(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        name = func.__name__
        cls.seen.append(name)
        cls.per_op[name] = cls.per_op.get(name, 0) + 1
        out = func(*[a.inner if isinstance(a, Logged) else a for a in args], **(kwargs or {}))
        return Logged(out) if isinstance(out, torch.Tensor) else out


def test_dispatch_counters_under_grad_count_like_eager_with_one_entry() -> None:
    """Under grad (a weight that requires grad), the per-op counts and the log the class keeps were
    those of the traced call only on every later call; counted by value they would trace each call."""

    def f(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (t * w + 1).relu()

    jitted = jitcore.jit(f)
    for i in range(6):
        states = []
        for fn in (f, jitted):
            Logged.seen, Logged.per_op = [], {"mul.Tensor": i}
            out = fn(Logged(torch.full((3,), i - 2.0)), torch.ones(3, requires_grad=True))
            states.append((out.inner.detach(), out.requires_grad, Logged.seen, dict(Logged.per_op)))
        (eager_value, *eager_state), (value, *state) = states
        torch.testing.assert_close(value, eager_value)
        assert state == eager_state
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 5)


class Tagged(torch.Tensor):
    """A plain subclass (``as_subclass``) whose ``__torch_function__`` counts and logs, then defers."""

    calls = 0
    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.calls += 1
        cls.log.append(getattr(func, "__name__", "?"))
        return super().__torch_function__(func, types, args, kwargs or {})


class LoggedTwo(TwoTensor):
    """torch's TwoTensor with a dispatch that logs each aten op to a global list."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        HOOKS.append(("td", func.__name__))
        return super().__torch_dispatch__(func, types, args, kwargs)


def _tagged_loss(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum().as_subclass(torch.Tensor)


def _two_loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sin().sum()


@pytest.mark.parametrize("name", ["tagged_backward", "logged_two"])
def test_the_grad_transforms_replay_adds_nothing_to_a_log(name: str) -> None:
    """The call that traces under grad logged the class's hooks twice or more: the grad transform's replay
    ran the class's code again and its writes stayed (``['sin', 'mul', 'sum', 'cos.default',
    'mul.Tensor']`` where eager logs ``['sin', 'mul', 'sum']`` before the backward; a TwoTensor's dispatch
    log of 3 ops held 10). Each call's log, before its backward, is eager's."""
    if name == "tagged_backward":
        program: Any = _tagged_loss

        def make(i: int) -> tuple:
            torch.manual_seed(i)
            return (torch.randn(3).as_subclass(Tagged).requires_grad_(),)

        def state() -> Any:
            return Tagged.calls, list(Tagged.log)
    else:
        program = _two_loss

        def make(i: int) -> tuple:
            torch.manual_seed(i)
            return LoggedTwo(torch.randn(3), torch.randn(3)), torch.randn(3).requires_grad_()

        def state() -> Any:
            return list(HOOKS)
    jitted = jitcore.jit(program)
    for i in range(4):
        runs = []
        for fn in (program, jitted):
            Tagged.calls, Tagged.log = 0, []
            HOOKS.clear()
            args = make(i)
            out = fn(*args)
            runs.append((state(), out.detach().as_subclass(torch.Tensor)))
            out.backward()
            runs.append([a.grad for a in args if a.grad is not None])
        (eager_state, eager_out), eager_grads, (jit_state, jit_out), jit_grads = runs
        assert jit_state == eager_state
        torch.testing.assert_close(jit_out, eager_out)
        torch.testing.assert_close(jit_grads, eager_grads)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def _redispatch_step(p: torch.Tensor, x: torch.Tensor) -> tuple:
    out = (p @ x).sum()  # RedispatchTensor rebuilds each result as a fresh leaf (``_make_subclass``)
    out.backward()
    return out.detach(), out.grad, p.grad


def _leaf_input_backward(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    w.backward()
    return w.grad * x


def _leaf_made_inside_backward(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).sum().detach().requires_grad_()
    y.backward()
    return y.grad + x


@pytest.mark.parametrize("program", [_redispatch_step, _leaf_input_backward, _leaf_made_inside_backward],
                         ids=["redispatch_tensor", "leaf_input", "leaf_made_inside"])
def test_backward_of_an_output_that_is_a_leaf_runs_as_eagerly(program: Any) -> None:
    """``out.backward()`` on a tensor that requires grad and has no ``grad_fn`` (torch's RedispatchTensor
    makes every result such a leaf; an input leaf; ``detach().requires_grad_()`` inside) sets its own
    ``.grad`` eagerly; jitcore raised "`inputs` argument to `grad()` cannot be empty" (Note [An output
    that is a leaf])."""
    from torch.testing._internal.common_subclass import RedispatchTensor

    def make(i: int) -> tuple:
        torch.manual_seed(i)
        if program is _redispatch_step:
            return RedispatchTensor(torch.randn(3, 3)).requires_grad_(), torch.randn(3, 3)
        return torch.tensor(float(i + 2), requires_grad=True), torch.randn(3)

    jitted = jitcore.jit(program)
    for i in range(3):
        eager_args, jit_args = make(i), make(i)
        expected, got = program(*eager_args), jitted(*jit_args)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert [type(v) for v in got] == [type(v) for v in expected]
        for g, e in zip(got, expected):
            if e is not None:
                torch.testing.assert_close(g.as_subclass(torch.Tensor), e.as_subclass(torch.Tensor))
        assert [a.grad is None for a in jit_args] == [a.grad is None for a in eager_args]
        for a, e in zip(jit_args, eager_args):
            if e.grad is not None:
                torch.testing.assert_close(a.grad, e.grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


KEPT: list[torch.Tensor] = []


class Keeping(TwoTensor):
    """A TwoTensor whose dispatch keeps each result's first inner tensor in a global list."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if isinstance(out, TwoTensor):
            KEPT.append(out.a.detach())
        return out


def test_a_tensor_a_subclass_stores_under_grad_is_kept_as_eagerly() -> None:
    """Under grad, a dispatch that appends a tensor it computed to a global list raised "grad transform:
    t3 is used before it is produced" from inside jitcore (Note [A tensor a subclass's code stores
    under grad]); such a call runs eagerly, and the list holds eager's tensors after every call."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sin()

    jitted = jitcore.jit(f)
    for i in range(3):
        kept = []
        outs = []
        for fn in (f, jitted):
            KEPT.clear()
            torch.manual_seed(i)
            x, w = Keeping(torch.randn(3), torch.randn(3)), torch.randn(3, requires_grad=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outs.append(fn(x, w))
            kept.append(list(KEPT))
        assert len(kept[1]) == len(kept[0]) == 2
        torch.testing.assert_close(kept[1], kept[0])
        assert type(outs[1]) is type(outs[0]) and outs[1].requires_grad == outs[0].requires_grad
        torch.testing.assert_close((outs[1].a, outs[1].b), (outs[0].a, outs[0].b))


class LoggedWeight(torch.Tensor):
    """A user's logging wrapper (test_python_dispatch's LoggingTensor in spirit): each aten op's name."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> LoggedWeight:
        return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
            cls, elem.shape, dtype=elem.dtype, requires_grad=elem.requires_grad)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, size: Any, stride: Any) -> LoggedWeight:
        return LoggedWeight(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        HOOKS.append(("td", func.__name__))
        unwrap = pytree.tree_map_only(LoggedWeight, lambda t: t.elem, (args, kwargs or {}))
        out = func(*unwrap[0], **unwrap[1])
        return pytree.tree_map_only(torch.Tensor, LoggedWeight, out)


def test_a_backward_inside_logs_its_ops_once_per_call() -> None:
    """An SGD step over a LoggedWeight parameter, its backward inside: each cached call logged the
    backward's ``ones_like``, ``expand`` and ``mm`` twice (11 entries where eager logs 8): the pass ran
    the backward a second time to free the shadows' graph, and the class's writes there were recorded
    too (Note [Freeing runs the backward again]). The entries are eager's; their order is not: the
    gradient's ``detach`` comes after ``ones_like`` where eager's AccumulateGrad makes it last."""

    def make() -> tuple:
        torch.manual_seed(0)
        w = torch.nn.Parameter(LoggedWeight(torch.randn(3, 3)))
        opt = torch.optim.SGD([w], lr=0.1)

        def step(x: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = (w @ x).sum()
            loss.backward()
            opt.step()
            return loss.detach()

        return step, w

    (eager_step, eager_w), (step, w) = make(), make()
    jitted = jitcore.jit(step)
    for i in range(4):
        torch.manual_seed(i)
        x = torch.randn(3, 2)
        HOOKS.clear()
        expected = eager_step(x)
        eager_log = list(HOOKS)
        HOOKS.clear()
        got = jitted(x)
        torch.testing.assert_close(got.elem, expected.elem)
        torch.testing.assert_close(w.elem, eager_w.elem)
        if i >= 2:  # cached: the step before set .grad, so the first two calls each traced
            assert sorted(HOOKS) == sorted(eager_log) and len(eager_log) == 8
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
