"""Tensor subclasses as others write them and use them, round 16 (issue 15, helper zoo38): each program
runs eagerly and under jitcore.jit on equal fresh arguments for several calls, comparing outputs, their
types and inner tensors, gradients, and what the classes log or keep, after every call. Each test failed
before its fix."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.testing._internal.logging_tensor import (
    LoggingTensor,
    LoggingTensorMode,
    LoggingTensorReentrant,
    capture_logs,
)

import jitcore


@pytest.fixture(autouse=True)
def _logging_tensor_logger() -> Any:
    """LoggingTensor's logger as a program finds it outside pytest: no handlers (pytest's log capture
    adds its own to a logger that ``capture_logs`` left without propagation), its level restored."""
    logger = logging.getLogger("LoggingTensor")
    state = (list(logger.handlers), logger.level, logger.propagate)
    logger.handlers.clear()
    yield
    # pytest's own handlers are detached by pytest, at the end of the phase that attached them
    logger.handlers[:] = [h for h in state[0] if not type(h).__module__.startswith("_pytest")]
    logger.setLevel(state[1])
    logger.propagate = state[2]


def _values(value: Any) -> Any:
    """What eager and jitted outputs are compared by: types, and the wrapped tensors' values."""
    if isinstance(value, (tuple, list)):
        return type(value)(_values(v) for v in value)
    if isinstance(value, LoggingTensor):
        return type(value).__name__, value.requires_grad, value.elem.tolist()
    if isinstance(value, torch.Tensor):
        return type(value).__name__, value.requires_grad, value.tolist()
    return value


# --- torch's LoggingTensor, its logs captured around the call -------------------------------------------
# LoggingTensor's __torch_dispatch__ logs every op it is given (``logger.info(name, args, kwargs, out)``);
# ``capture_logs()`` formats the records by the tensors' identities and metadata. A library's subclass
# code was taken as it is while tracing, so only the call that traced logged: a cached call logged
# nothing (Note [A library's dispatch logs its ops], jitcore/jit/log_records.py).


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).sin().sum()


def _in_place_and_views(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x.clone()
    z.add_(y)
    z.mul_(2)
    return z.view(-1)[1:]


def _linear(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.linear(x.view(1, 3), y.view(1, 3)).relu()


def _logged_calls(program: Callable[..., Any], cls: type, requires_grad: bool, backward: bool,
                  calls: int = 3) -> list[Any]:
    """Per call: the output, the records captured around the call (and the backward), the gradient."""
    seen = []
    for i in range(calls):
        torch.manual_seed(i)
        x, y = (cls(torch.randn(3), requires_grad=requires_grad) for _ in range(2))
        with capture_logs() as logs:
            out = program(x, y)
            if backward:
                out.backward()
        seen.append((_values(out), list(logs), _values(x.grad)))
    return seen


@pytest.mark.parametrize("program", [_pointwise, _in_place_and_views, _linear])
@pytest.mark.parametrize("cls", [LoggingTensor, LoggingTensorReentrant])
def test_a_logging_tensor_logs_on_every_call_as_eagerly(program: Callable[..., Any], cls: type) -> None:
    jitted = jitcore.jit(program)
    assert _logged_calls(jitted, cls, False, False) == _logged_calls(program, cls, False, False)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), jitted.fallback_reason) == (1, 2, None)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward_outside"])
def test_a_logging_tensor_under_grad_logs_its_forward_and_backward_as_eagerly(backward: bool) -> None:
    """Under autograd the entry runs pass 1 under torch's autograd: the class logs every call's forward
    ops, and the backward's ops when the caller differentiates the output."""
    jitted = jitcore.jit(_pointwise)
    expected = _logged_calls(_pointwise, LoggingTensor, True, backward)
    assert any("cos" in line for _out, logs, _grad in expected for line in logs) == backward
    assert _logged_calls(jitted, LoggingTensor, True, backward) == expected
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), jitted.fallback_reason) == (1, 2, None)


def _backward_inside(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = (x * y).sum()
    loss.backward()
    return loss.detach()


def test_a_backward_inside_over_a_logging_tensor_runs_eagerly_with_its_reason() -> None:
    """The pass ran the backward's ops natively (logging them while tracing, beside eager's records)."""
    jitted = jitcore.jit(_backward_inside)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        actual = _logged_calls(jitted, LoggingTensor, True, False)
    assert actual == _logged_calls(_backward_inside, LoggingTensor, True, False)
    assert "logs the ops it is given" in str(jitted.fallback_reason)


def _captured_inside(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    with capture_logs() as logs:
        z = (x * y).cos()
    return z, list(logs)


def test_logs_captured_inside_the_function_are_its_output() -> None:
    def calls(fn: Callable[..., Any]) -> list[Any]:
        seen = []
        for i in range(3):
            torch.manual_seed(i)
            out, logs = fn(LoggingTensor(torch.randn(3)), LoggingTensor(torch.randn(3)))
            seen.append((_values(out), logs))
        return seen

    jitted = jitcore.jit(_captured_inside)
    assert calls(jitted) == calls(_captured_inside)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), jitted.fallback_reason) == (1, 2, None)


def test_a_handler_the_caller_adds_between_calls_gets_the_records() -> None:
    """The logger enabled without a handler (as ``capture_logs`` leaves it: level INFO, not
    propagating), then a handler added around every other call: those calls log, as eagerly."""

    def calls(fn: Callable[..., Any]) -> list[Any]:
        logger = logging.getLogger("LoggingTensor")
        logger.setLevel(logging.INFO)
        logger.propagate = False
        seen = []
        for i in range(4):
            torch.manual_seed(i)
            x, y = LoggingTensor(torch.randn(3)), LoggingTensor(torch.randn(3))
            if i % 2:
                with capture_logs() as logs:
                    out = fn(x, y)
                seen.append((_values(out), list(logs)))
            else:
                seen.append((_values(fn(x, y)), None))
        return seen

    jitted = jitcore.jit(_pointwise)
    assert calls(jitted) == calls(_pointwise)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), jitted.fallback_reason) == (2, 2, None)


def _mode_inside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with LoggingTensorMode():
        y = F.linear(x, w).relu()
    return y * 2


def test_a_logging_mode_entered_inside_logs_on_every_call_as_eagerly() -> None:
    def calls(fn: Callable[..., Any]) -> list[Any]:
        seen = []
        for i in range(3):
            torch.manual_seed(i)
            with capture_logs(is_mode=True) as logs:
                out = fn(torch.randn(2, 3), torch.randn(4, 3))
            seen.append((_values(out), list(logs)))
        return seen

    jitted = jitcore.jit(_mode_inside)
    assert calls(jitted) == calls(_mode_inside)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted), jitted.fallback_reason) == (1, 2, None)


# --- item() of a wrapper subclass ------------------------------------------------------------------------
# ``x.sum().item()`` reaches the class's __torch_dispatch__ as ``aten._local_scalar_dense``, which it
# answers from its inner tensor: that read was a constant behind a check, so every value traced a new entry
# (4 misses in 4 calls, where plain tensors take 1); under grad the check was lost from the forward, and a
# cached call multiplied by the first call's number (Note [A number a subclass's item reads],
# jitcore/dispatch/resolver.py).


class Wrapper(torch.Tensor):
    """The minimal wrapper of the subclass zoo: one inner tensor, every op unwrapped and rewrapped."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor, requires_grad: bool = False) -> Wrapper:
        return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
            cls, inner.shape, dtype=inner.dtype, requires_grad=requires_grad)

    def __init__(self, inner: torch.Tensor, requires_grad: bool = False) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Wrapper:
        return Wrapper(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        args, kwargs = pytree.tree_map_only(Wrapper, lambda t: t.inner, (args, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, Wrapper, func(*args, **kwargs))


def _scaled_by_item(x: torch.Tensor) -> Any:
    return x * x.sum().item()


def _item_returned(x: torch.Tensor) -> Any:
    return x.sum().item(), x.amax().item()


def _branch_on_item(x: torch.Tensor) -> Any:
    return x * 2 if x.sum().item() > 4 else x - 1


def _float_of(x: torch.Tensor) -> Any:
    return x * float(x.sum())


def _inner(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_inner(v) for v in value)
    if isinstance(value, Wrapper):
        return "Wrapper", value.requires_grad, value.inner.tolist()
    return value


@pytest.mark.parametrize(("program", "misses"), [
    (_scaled_by_item, 1), (_item_returned, 1), (_branch_on_item, 2), (_float_of, 1),
])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
def test_item_of_a_wrapper_is_a_number_of_the_computation(program: Callable[..., Any], misses: int,
                                                          requires_grad: bool) -> None:
    """Four calls with four values: as eagerly, with one entry where the program only computes with
    the number (under grad torch's autograd needs its value: an entry per value, checked)."""
    jitted = jitcore.jit(program)
    for i in range(4):
        expected = program(Wrapper(torch.arange(3.0) + i, requires_grad))
        actual = jitted(Wrapper(torch.arange(3.0) + i, requires_grad))
        assert _inner(actual) == _inner(expected)
    if requires_grad and program in (_scaled_by_item, _float_of):
        misses = 4  # mul under autograd keeps the number's value for the backward
    # float(x) is read as x.item() is (Note [float() of a wrapper subclass], jitcore/langctx/python.py)
    assert (jitcore.cache_misses(jitted), jitted.fallback_reason) == (misses, None)


def test_item_of_a_two_tensor_under_grad_is_each_calls_number() -> None:
    """torch's TwoTensor requiring grad: a cached call scaled by the first call's sum before."""
    from torch.testing._internal.two_tensor import TwoTensor

    jitted = jitcore.jit(_scaled_by_item)
    for i in range(3):
        def make(i: int = i) -> TwoTensor:
            return TwoTensor(torch.arange(3.0) + i, torch.arange(3.0) * 2 + i).requires_grad_()

        expected, actual = _scaled_by_item(make()), jitted(make())
        assert type(actual) is TwoTensor
        torch.testing.assert_close((actual.a, actual.b), (expected.a, expected.b))
    assert jitted.fallback_reason is None


# --- value-shaped ops in a subclass's dispatch under grad -------------------------------------------------
# The grad transform's replay recorded the op and dropped the check of its outputs' sizes (it looked for
# an older form of that check): a cached call computed with the first call's sizes (Note [The shape
# checks replayed], jitcore/transforms/replayed_reads.py).


def _times_count(x: torch.Tensor) -> torch.Tensor:
    return x * len(x.nonzero())


def _times_masked_count(x: torch.Tensor) -> torch.Tensor:
    return x * x[x > 1].shape[0]


@pytest.mark.parametrize("program", [_times_count, _times_masked_count])
@pytest.mark.parametrize("cls", ["Wrapper", "TwoTensor"])
def test_a_value_shaped_op_under_grad_is_checked_on_every_call(program: Callable[..., Any], cls: str) -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    def make(shift: float) -> torch.Tensor:
        if cls == "Wrapper":
            return Wrapper(torch.arange(4.0) + shift, requires_grad=True)
        return TwoTensor(torch.arange(4.0) + shift, torch.arange(4.0) + shift).requires_grad_()

    def inner(t: torch.Tensor) -> list:
        return t.inner.tolist() if isinstance(t, Wrapper) else [t.a.tolist(), t.b.tolist()]

    jitted = jitcore.jit(program)
    for shift in (0.0, 1.0, 0.0, -1.0):  # 3, 4, 3 and 3 nonzero elements; 2, 3, 2 and 1 above 1
        expected, actual = program(make(shift)), jitted(make(shift))
        assert type(actual) is type(expected)
        assert inner(actual) == inner(expected)
    assert jitted.fallback_reason is None
