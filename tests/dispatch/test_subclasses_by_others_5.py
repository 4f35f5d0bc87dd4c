"""Tensor subclasses as others write them, round 5 (issue 15, helper zoo24): library functions made
overridable the way torch documents it (``has_torch_function`` then ``handle_torch_function``) and the
subclasses and modes that override them; styles of the same probe that already worked are guarded
below them (an aliasing-correct wrapper through in-place ops and views, a bf16-packed tensor with an
enum ctx, an int4-packed tensor whose inner shape is not the outer one, a torchao-style int8 weight
with ``__torch_function__`` and aten tables and a frozen-dataclass ctx, a dispatch keyed by op tags).
Each runs eagerly and under jitcore.jit twice (subclass_checks.check_twice) unless it says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import check_twice
from torch.overrides import (
    TorchFunctionMode,
    handle_torch_function,
    has_torch_function,
    has_torch_function_unary,
    has_torch_function_variadic,
)
from torch.testing._internal.common_subclass import NonWrapperTensor
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

# --- library functions that check for overrides themselves ---------------------------------------------


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    if has_torch_function((x,)):
        return handle_torch_function(scale, (x,), x, s)
    return x * s


def combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if has_torch_function_variadic(a, b):
        return handle_torch_function(combine, (a, b), a, b)
    return a + b


def negate(a: torch.Tensor) -> torch.Tensor:
    if has_torch_function_unary(a):
        return handle_torch_function(negate, (a,), a)
    return -a


class Overrides(torch.Tensor):
    """A plain subclass that overrides ``scale`` and ``combine`` and leaves the rest to torch."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is scale:
            return args[0] * (args[1] + 1)
        if func is combine:
            return args[0] - args[1]
        return super().__torch_function__(func, types, args, kwargs or {})


class TwoOverrides(TwoTensor):
    """A wrapper subclass whose ``__torch_function__`` overrides ``negate``."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is negate:
            return args[0] * 10
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class Shifting(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is negate:
            return args[0] + 100
        return func(*args, **(kwargs or {}))


def _under_a_mode(x: torch.Tensor) -> tuple:
    with Shifting():
        return negate(x), scale(x, 2)


def _overrides() -> tuple:
    return (torch.randn(3).as_subclass(Overrides),)


@pytest.mark.parametrize(("program", "make"), [
    pytest.param(lambda x: scale(x, 2), _overrides, id="has_torch_function"),
    pytest.param(lambda x, y: (combine(y, x), combine(y, y)), lambda: (*_overrides(), torch.randn(3)),
                 id="variadic"),
    pytest.param(lambda x: negate(x) + scale(x, 3), lambda: (TwoOverrides(torch.randn(3), torch.randn(3)),),
                 id="wrapper_subclass"),
    pytest.param(_under_a_mode, _overrides, id="mode_entered_inside"),
])
def test_a_library_function_overridden_by_a_subclass(program: Callable[..., Any],
                                                     make: Callable[[], tuple]) -> None:
    """A function that asks ``has_torch_function`` itself runs the subclass's (or mode's) override, as
    eagerly (the check saw jitcore's proxy and answered False: the function's own body ran, a wrong
    answer; a wrapper subclass's override reached jitcore's own ``__torch_function__``: JC-T001)."""
    check_twice(program, make)


def test_a_library_function_overridden_under_grad() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return scale(x, 2).sum()

    check_twice(f, lambda: (torch.randn(3, requires_grad=True).as_subclass(Overrides),),
                after=lambda out, args: torch.autograd.grad(out, args[0]))


@pytest.mark.parametrize("disable", [torch._C.DisableTorchFunctionSubclass, torch._C.DisableTorchFunction])
def test_a_library_function_with_torch_function_disabled(disable: type) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with disable():
            return scale(x, 2)

    check_twice(f, _overrides)


def test_the_value_reads_its_classes_protocol_methods() -> None:
    """``x.__torch_function__`` is the class's, bound as eagerly (it was jitcore's proxy's)."""
    def f(x: torch.Tensor) -> tuple:
        method = x.__torch_function__
        return method.__func__ is type(x).__torch_function__.__func__, method.__self__

    jitted = jitcore.jit(f)
    x = torch.randn(3).as_subclass(Overrides)
    assert jitted(x) == f(x) == (True, Overrides)


# --- an optimizer over parameters of a plain subclass ------------------------------------------------


class Marked(torch.Tensor):
    """A plain subclass (no ``__torch_dispatch__``) with torch's default ``__torch_function__``."""


def _training(make_parameter: Callable[[torch.Tensor], torch.Tensor], optimizer: str) -> tuple:
    torch.manual_seed(0)
    parameter = torch.nn.Parameter(make_parameter(torch.randn(4)))
    opt = getattr(torch.optim, optimizer)([parameter], lr=0.1)

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = (parameter * x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    return parameter, opt, step


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW", "NAdam"])
@pytest.mark.parametrize("make_parameter", [
    pytest.param(lambda t: t.as_subclass(Marked), id="plain_subclass"),
    pytest.param(NonWrapperTensor, id="NonWrapperTensor"),
])
def test_an_optimizer_step_on_plain_subclass_parameters(make_parameter: Callable[..., Any],
                                                        optimizer: str) -> None:
    """The training step that traces with the optimizer's state made reads ``step.item()`` after
    writing the state (``exp_avg.lerp_``, of the parameter's class) in place: the probe that answers the
    read wrote the caller's state itself, and the computation wrote it again (a wrong answer: the
    moments moved twice, the parameters differed from the second step on)."""
    expected_parameter, expected_opt, expected_step = _training(make_parameter, optimizer)
    parameter, opt, step = _training(make_parameter, optimizer)
    jitted = jitcore.jit(step)
    for i in range(4):
        torch.manual_seed(10 + i)
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x), expected_step(x))
        assert type(parameter) is type(expected_parameter)
        torch.testing.assert_close(parameter.detach().as_subclass(torch.Tensor),
                                   expected_parameter.detach().as_subclass(torch.Tensor))
        for key, value in expected_opt.state[expected_parameter].items():
            torch.testing.assert_close(opt.state[parameter][key].as_subclass(torch.Tensor),
                                       value.as_subclass(torch.Tensor))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
    assert jitted.fallback_reason is None
