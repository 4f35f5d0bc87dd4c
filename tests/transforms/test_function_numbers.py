"""A Function split alone whose forward does Python arithmetic on, or branches on, a number it takes.

Note [Python arithmetic on a split Function's numbers] (jitcore/transforms/function_numbers.py): such a
record was never split, so every warm call of the entry keeping the number dynamic ran ``apply``
natively, with the TwoTensor dispatches of its forward and backward. Each program is compared with eager
exactly (values and gradients), and a warm call runs no TwoTensor dispatch.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402

_SCALES = (1.5, 2.5, 3.7, 0.5, 4.25, 1.1)


def _offset(s: float) -> float:
    return math.sqrt(s) * 2 + 1


_SCALINGS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "sqrt": lambda x, s: x * math.sqrt(s),
    "chain": lambda x, s: x * math.sqrt(s * 2 + 1),
    "distributed": lambda x, s: x * ((s + 1) * 3),  # sympy would write 3*s + 3: another rounding
    "helper": lambda x, s: x * _offset(s),
    "power": lambda x, s: x * s ** 0.5,
    "exp_log": lambda x, s: x * math.exp(-s) + math.log(s),
    "int_of": lambda x, s: x * int(s),
    "branch": lambda x, s: x * s if math.sqrt(s) > 1.2 else x - s,
    "negated": lambda x, s: x * -s + abs(s - 2),
}


def _function(scaling: Callable[[torch.Tensor, float], torch.Tensor],
              saved: Callable[[float], float]) -> type:
    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
            ctx.r = saved(s)
            x = x.detach()
            pair = TwoTensor(scaling(x, s), x) * 2
            return (pair.a + pair.b).clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            pair = TwoTensor(g * ctx.r, g) * 3
            return pair.a + pair.b, None

    return Scaled


def _check(fn: type, traced: int) -> None:
    def program(x: torch.Tensor, s: float) -> torch.Tensor:
        return fn.apply(x * 1, s)

    f = jitcore.jit(program)
    for i, s in enumerate(_SCALES):
        torch.manual_seed(i)
        x = torch.randn(4, 6, requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        expected = program(x, s)
        expected.square().sum().backward()
        with protocol_calls(TwoTensor) as seen:
            got = f(xj, s)
            got.square().sum().backward()
        assert type(got) is torch.Tensor and got.requires_grad
        assert torch.equal(got, expected) and torch.equal(xj.grad, x.grad), (s, got, expected)
        if i >= 2:  # warm: the dynamic-number entry (and a branch's other outcome) traced by then
            assert seen == [], (s, seen)  # before: 2 TwoTensor dispatches per warm call
    assert jitcore.cache_misses(f) == traced


@pytest.mark.parametrize("name", sorted(_SCALINGS))
def test_a_function_computing_with_its_number_runs_no_dispatch_when_warm(name: str) -> None:
    _check(_function(_SCALINGS[name], lambda s: s), 3 if name == "branch" else 2)


def test_a_number_the_forward_computes_and_keeps_for_the_backward_is_each_calls() -> None:
    _check(_function(lambda x, s: x * s, math.sqrt), 2)


class _Decided(torch.autograd.Function):
    """Decides with a comparison of its number that the program never branches on before the call."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
        ctx.s = s
        big = s > 2
        x = x.detach()
        pair = (TwoTensor(x * s, x) if big else TwoTensor(x, x * 2)) * 2
        return (pair.a * pair.b).clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g * ctx.s, None


def test_a_comparison_of_the_number_gives_each_calls_outcome() -> None:
    _check(_Decided, 3)


class _Flagged(torch.autograd.Function):
    """Computes with a comparison of its number that the program never branches on: pass 1 does not guard
    it, so the split's call checks it and runs ``apply`` where it comes out otherwise."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
        ctx.s = s
        x = x.detach()
        pair = TwoTensor(x * (s > 2), x) * 2
        return (pair.a + pair.b).clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g * ctx.s, None


def test_a_comparison_pass_1_does_not_guard_is_checked_by_the_split() -> None:
    def program(x: torch.Tensor, s: float) -> torch.Tensor:
        return _Flagged.apply(x * 1, s)

    f = jitcore.jit(program)
    for i, s in enumerate((1.5, 2.5, 3.5, 0.5, 4.0, 1.0)):
        torch.manual_seed(i)
        x = torch.randn(4, 6, requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        expected = program(x, s)
        expected.square().sum().backward()
        got = f(xj, s)
        got.square().sum().backward()
        assert torch.equal(got, expected) and torch.equal(xj.grad, x.grad), s
    assert jitcore.cache_misses(f) == 2


def _backward_computing(scale: Callable[[float], float]) -> type:
    """Note [A split Function's backward computing with its numbers]: Python on ``ctx.s`` in the backward."""

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
            ctx.s = s
            x = x.detach()
            pair = TwoTensor(x * s, x) * 2
            return (pair.a + pair.b).clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            pair = TwoTensor(g * scale(ctx.s), g) * 3
            return pair.a + pair.b, None

    return Scaled


@pytest.mark.parametrize("name", ["sqrt", "chain"])
def test_a_backward_computing_with_the_number_runs_no_dispatch_when_warm(name: str) -> None:
    scale = math.sqrt if name == "sqrt" else (lambda s: (s + 1) * 3 - math.exp(-s))
    _check(_backward_computing(scale), 2)  # before: 2 TwoTensor dispatches per warm call


def _branching(s: float) -> float:
    return s * 2 if s > 2 else 1.0 - s


def test_a_backward_branching_on_the_number_is_traced_for_each_outcome() -> None:
    """The backward's ``ctx.s > 2`` is a guard of the entry (pass 1 runs no backward: Note [A split
    Function's backward computing with its numbers]): the other outcome is traced too, no warm call runs
    ``apply`` natively. Before: one split, traced at 2.5; 0.5 and 1.1 ran ``apply`` (2 dispatches each)."""
    _check(_backward_computing(_branching), 3)


@pytest.mark.parametrize("name", ["branch", "sqrt"])
def test_a_backward_derived_for_a_subclass_gradient_compares_the_number_as_eagerly(name: str) -> None:
    """Note [A backward derived later compares numbers]: a TwoTensor gradient of the split's output has
    the backward derived again, where ``ctx.s > 2`` is compared again. Before: TangentMismatchError
    [JC-G001] where eager computes."""
    fn = _backward_computing(_branching if name == "branch" else math.sqrt)

    def program(x: torch.Tensor, s: float) -> torch.Tensor:
        return fn.apply(x * 1, s)

    f = jitcore.jit(program)
    for i, s in enumerate(_SCALES):
        torch.manual_seed(i)
        x = torch.randn(4, 6, requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        w = torch.randn(4, 6)
        weight = TwoTensor(w, w * 2) if i % 2 else w
        expected = program(x, s)
        (expected * weight).sum().backward()
        got = f(xj, s)
        (got * weight).sum().backward()
        assert torch.equal(got, expected), s
        assert type(xj.grad) is type(x.grad), (s, type(xj.grad))
        if isinstance(x.grad, TwoTensor):
            assert torch.equal(xj.grad.a, x.grad.a) and torch.equal(xj.grad.b, x.grad.b), s
        else:
            assert torch.equal(xj.grad, x.grad), s
    assert jitcore.cache_misses(f) == (3 if name == "branch" else 2)
