"""A Function split alone over tensors whose batch size changes per call (Note [A split Function over
symbolic sizes], jitcore/transforms/function_records.py).

Such a record was never split (its tensors have symbolic sizes), so every warm call of the entry ran
``apply`` natively: 5 or 6 TwoTensor dispatches. Each program is compared with eager exactly (values and
both gradients), and a warm call runs no TwoTensor dispatch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402

_CALLS = ((4, 0.5), (5, 1.5), (6, 2.5), (7, 3.5), (7, 0.25), (4, 1.0), (9, 2.0))


def _pairs(kind: str, x: torch.Tensor, s: float) -> TwoTensor:
    if kind == "flattened":  # sizes the forward computes from its tensor's
        return TwoTensor(x.reshape(-1) * s, x.reshape(x.shape[0] * x.shape[1])).reshape(x.shape)
    if kind == "centered":  # a reduction over the changing dim
        return TwoTensor(x - x.mean(0) * s, x)
    if kind == "sliced":  # a slice whose bounds the pass guards
        return TwoTensor(x[:2] * s, x[1:3] * 1)
    return TwoTensor(x * s, x)


def _function(kind: str) -> type:
    class Paired(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, s: float) -> torch.Tensor:
            ctx.save_for_backward(x, w)
            ctx.s = s
            x, w = x.detach(), w.detach()
            pair = _pairs(kind, x, s) @ TwoTensor(w, w)
            return pair.a + pair.b

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
            x, w = (t.detach() for t in ctx.saved_tensors)
            if kind == "sliced":
                gx = torch.zeros_like(x)
                gx[:2] = (TwoTensor(g, g) @ TwoTensor(w, w).t()).a
                return gx, torch.zeros_like(w), None
            gx = TwoTensor(g, g) @ TwoTensor(w, w * ctx.s).t()
            gw = TwoTensor(x * ctx.s, x).t() @ TwoTensor(g, g)
            return gx.a + gx.b, gw.a + gw.b, None

    return Paired


def _check_warm_calls_dispatch_nothing(program: Any, make_x: Any, calls: list) -> Any:
    """``program(x, w, s)`` eagerly and jitted over ``calls`` (``(n, s)`` pairs, ``x = make_x(n)``):
    values, both gradients equal; from the third call on (the symbolic entry traced by then) no
    TwoTensor dispatch; two cache misses. Returns the jitted function."""
    f = jitcore.jit(program)
    for i, (n, s) in enumerate(calls):
        torch.manual_seed(i)
        x, w = make_x(n), torch.randn(3, 5, requires_grad=True)
        xj, wj = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        expected = program(x, w, s)
        expected.square().sum().backward()
        with protocol_calls(TwoTensor) as seen:
            got = f(xj, wj, s)
            got.square().sum().backward()
        assert type(got) is torch.Tensor and torch.equal(got, expected), (n, s)
        assert torch.equal(xj.grad, x.grad) and torch.equal(wj.grad, w.grad), (n, s)
        if i >= 2:
            assert seen == [], (n, s, seen)
    assert jitcore.cache_misses(f) == 2
    return f


@pytest.mark.parametrize("kind", ["scaled", "flattened", "centered", "sliced"])
def test_a_function_over_a_changing_batch_runs_no_dispatch_when_warm(kind: str) -> None:
    fn = _function(kind)

    def program(x: torch.Tensor, w: torch.Tensor, s: float) -> torch.Tensor:
        return fn.apply(x * 1, w, s) * 2

    # before: 5 or 6 TwoTensor dispatches per warm call
    _check_warm_calls_dispatch_nothing(program, lambda n: torch.randn(n, 3, requires_grad=True), _CALLS)


@pytest.mark.parametrize("merged", ["flatten", "concatenated"])
def test_a_function_over_a_size_that_is_an_expression_runs_no_dispatch_when_warm(merged: str) -> None:
    """Note [A size of a split's tensor that is an expression]: the record's tensor has size ``2*s0`` or
    ``2*s0 + 2``, no plain size of an argument; before, 5 TwoTensor dispatches per warm call."""
    fn = _function("scaled")

    def program(x: torch.Tensor, w: torch.Tensor, s: float) -> torch.Tensor:
        if merged == "flatten":
            return fn.apply(x.flatten(0, 1), w, s) * 2
        return fn.apply(torch.cat([x[0], x[1], x[0][:2]]) * 1, w, s) * 2

    _check_warm_calls_dispatch_nothing(program, lambda n: torch.randn(
        *((n, 2, 3) if merged == "flatten" else (2, n, 3)), requires_grad=True), _CALLS[:5])


@pytest.mark.parametrize("form", ["product", "halved"])
def test_a_function_over_a_size_of_no_linear_form_runs_no_dispatch_when_warm(form: str) -> None:
    """Note [A size of a split's tensor that is an expression]: the record's tensor has size ``s0*s1``
    (``x.flatten(0, 1)`` of ``(s0, s1, 3)``) or ``s0 // 2`` (``x[: x.shape[0] // 2]``), no size of an
    argument gives ``s0``: the split takes the entry's own size numbers. Before, the record stayed: 5
    TwoTensor dispatches per warm call."""
    fn = _function("scaled")

    def program(x: torch.Tensor, w: torch.Tensor, s: float) -> torch.Tensor:
        if form == "product":
            return fn.apply(x.flatten(0, 1), w, s) * 2
        return fn.apply(x[: x.shape[0] // 2], w, s) * 2

    f = _check_warm_calls_dispatch_nothing(program, lambda n: torch.randn(
        *((n, n - 2, 3) if form == "product" else (n, 3)), requires_grad=True), _CALLS[:5])
    assert f.fallback_reason is None
