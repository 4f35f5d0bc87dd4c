"""TorchFunctionMode and TorchDispatchMode entered inside the jitted function (jitcore/dispatch/modes.py).

Each program runs eagerly and under jitcore.jit twice (subclass_checks.check_twice): eager's values,
output types and inner tensors, one cache entry, no eager entry. Before, a mode the program entered was
pushed on torch's stack while tracing, saw only the shadows, and its rewrites never reached the trace:
every program here but the grad one gave the results without the mode (a wrong answer).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import assert_same_values, check_twice
from torch.overrides import BaseTorchFunctionMode, TorchFunctionMode
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily

import jitcore

aten = torch.ops.aten
# Rounding reports each of its calls with sys.audit, a C call a cached call never makes (as in
# subclass_zoo.py); the traced code never reads the list.
_MODE_EVENT = "jitcore.tests.modes.dispatch"
MODE_CALLS: list[tuple] = []


def _on_audit(event: str, args: tuple) -> None:
    if event == _MODE_EVENT:
        MODE_CALLS.append(args)


sys.addaudithook(_on_audit)


class Rounding(TorchDispatchMode):
    """Rounds every floating-point result to one decimal (a mode that changes values)."""

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        sys.audit(_MODE_EVENT, str(func))
        out = func(*args, **(kwargs or {}))
        if type(out) is torch.Tensor and out.is_floating_point():
            return out.round(decimals=1)
        return out


class OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class AddIsMul(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__):
            func = torch.mul
        return func(*args, **(kwargs or {}))


class FunctionNames(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class SinTimesTen(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is torch.Tensor.sin else out


class Clamped(BaseTorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            out = out.clamp(-0.5, 0.5)
        return out


class NegatedMul(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return -out if func in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__) else out


class Float64Factories(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func in (torch.ones, torch.zeros):
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


class TimesTenAdds(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out * 10 if func is aten.add.Tensor else out


class Tagged(torch.Tensor):
    pass


def _rounded(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with Rounding():
        return x * y + 1


def _rounded_factory(x: torch.Tensor) -> torch.Tensor:
    with Rounding():
        return torch.full((3,), 0.123) + x


def _rounded_subclass(x: torch.Tensor) -> torch.Tensor:
    with Rounding():
        return x * 3


def _rounded_in_place(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    with Rounding():
        y.mul_(1.2345)
        y.add_(0.0111)
    return y


def _rounded_tuples(x: torch.Tensor) -> tuple:
    with Rounding():
        values, indices = x.max(dim=0)
        first, second = x.split(2)
    return values, indices, first, second


def _nested_dispatch_modes(x: torch.Tensor) -> tuple:
    with OpNames() as outer, Rounding():
        y = F.softmax(x, 0) * 2
    return y, outer.names


def _add_is_mul(x: torch.Tensor, y: torch.Tensor) -> tuple:
    with AddIsMul():
        inside = x + y
    return inside, x + y


def _add_is_mul_on_two_tensor(x: torch.Tensor) -> torch.Tensor:
    with AddIsMul():
        return x + x


def _function_names(x: torch.Tensor) -> tuple:
    with FunctionNames() as mode:
        y = torch.relu(x) + x.sum()
    return y, list(mode.names)


def _sin_of_plain_subclass(x: torch.Tensor) -> torch.Tensor:
    with SinTimesTen():
        return x.sin()


def _clamped_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with Clamped():
        return F.linear(x, w).relu()


def _function_mode_inside_dispatch_mode(x: torch.Tensor) -> tuple:
    with OpNames() as names, NegatedMul():
        y = x * 2
    return y, names.names


def _factories(x: torch.Tensor) -> tuple:
    with Float64Factories():
        ones = torch.ones(3)
    return ones, x + 1


def _popped_for_a_while(x: torch.Tensor) -> tuple:
    with TimesTenAdds():
        y = x + 1
        with _pop_mode_temporarily():
            z = x + 1
    return y, z


def _left_by_an_exception(x: torch.Tensor) -> tuple:
    try:
        with Rounding():
            y = x * 2
            raise ValueError("stop")
    except ValueError:
        pass
    return y, x * 2


def _two() -> TwoTensor:
    return TwoTensor(torch.randn(3), torch.randn(3))


PROGRAMS = {
    "dispatch mode rounding results": (_rounded, lambda: (torch.randn(4), torch.randn(4))),
    "dispatch mode sees a factory": (_rounded_factory, lambda: (torch.randn(3),)),
    "dispatch mode over a subclass's dispatch": (_rounded_subclass, lambda: (_two(),)),
    "dispatch mode and in-place ops": (_rounded_in_place, lambda: (torch.randn(3),)),
    "dispatch mode and tuple results": (_rounded_tuples, lambda: (torch.randn(4, 2),)),
    "two dispatch modes, innermost first": (_nested_dispatch_modes, lambda: (torch.randn(4),)),
    "function mode rewriting a call": (_add_is_mul, lambda: (torch.randn(4), torch.randn(4))),
    "function mode over a wrapper subclass": (_add_is_mul_on_two_tensor, lambda: (_two(),)),
    "function mode's own state": (_function_names, lambda: (torch.randn(3),)),
    "function mode before a plain subclass": (
        _sin_of_plain_subclass, lambda: (torch.randn(3).as_subclass(Tagged),)),
    "BaseTorchFunctionMode's super call": (_clamped_linear, lambda: (torch.randn(2, 3), torch.randn(4, 3))),
    "function mode inside a dispatch mode": (_function_mode_inside_dispatch_mode, lambda: (torch.randn(3),)),
    "function mode changing a factory's dtype": (_factories, lambda: (torch.randn(3),)),
    "mode popped temporarily": (_popped_for_a_while, lambda: (torch.randn(3),)),
    "mode left by an exception": (_left_by_an_exception, lambda: (torch.randn(3),)),
}


@pytest.mark.parametrize("program", PROGRAMS, ids=list(PROGRAMS))
def test_mode_entered_inside_matches_eager(program: str) -> None:
    fn, make = PROGRAMS[program]
    check_twice(fn, make)


def test_a_cached_call_runs_no_mode_code() -> None:
    jitted = check_twice(_rounded, lambda: (torch.randn(4), torch.randn(4)))
    MODE_CALLS.clear()
    jitted(torch.randn(4), torch.randn(4))
    assert MODE_CALLS == []
    assert jitcore.cache_hits(jitted) == 2


def test_module_under_a_dispatch_mode_without_grad() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)

    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), Rounding():
            return lin(x)

    check_twice(fn, lambda: (torch.randn(3, 4),))


def test_dispatch_mode_on_values_that_require_grad_runs_eagerly() -> None:
    """A dispatch mode runs below autograd: a call under it that carries gradients is an eager entry
    (JC-T001), with eager's values and gradients."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        with Rounding():
            return (x * 3).sum()

    jitted = jitcore.jit(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = torch.randn(3, requires_grad=True)
            y = x.detach().clone().requires_grad_()
            out = jitted(x)
            expected = fn(y)
            assert_same_values(out, expected)
            out.backward()
            expected.backward()
            torch.testing.assert_close(x.grad, y.grad)
    assert any("runs eagerly" in str(w.message) for w in caught)
    assert "TorchDispatchMode (Rounding)" in str(jitted.fallback_reason)


def test_a_dispatch_mode_that_only_logs_over_values_that_require_grad_is_traced() -> None:
    """A mode that hands back each op's own result (it only logs) runs below autograd as eagerly: the
    entry runs pass 1 under torch's autograd (Note [A dispatch mode under autograd]), so the forward ops
    it logs and the gradients are eager's, on every call. Before: an eager entry (JC-T001)."""

    def fn(x: torch.Tensor, w: torch.Tensor, mode: OpNames) -> torch.Tensor:
        with mode:
            y = F.linear(x, w).relu()
        return (y * y).sum()

    jitted = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            x, w = torch.randn(3, 4), torch.randn(2, 4)
            results = []
            for f in (fn, jitted):
                mode, given = OpNames(), w.clone().requires_grad_()
                out = f(x, given, mode)
                out.backward()  # outside the mode: it sees no backward op, eagerly or jitted
                results.append((out.detach(), given.grad, mode.names))
            (expected, expected_grad, expected_names), (got, grad, names) = results
            assert_same_values(got, expected)
            torch.testing.assert_close(grad, expected_grad, rtol=0, atol=0)
            assert names == expected_names == ["t", "mm", "relu", "detach"]
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)
