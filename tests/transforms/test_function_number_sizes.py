"""A Function split alone that takes an int and makes sizes of it (``x.reshape(s, -1)``, ``x[:s]``).

Note [A split Function's int as a size] (jitcore/transforms/replayed_numbers.py): the split's stand-in for
such an int was unbacked, torch guarded on it, and the record stayed: every warm call of the entry keeping
the int dynamic ran ``apply`` natively, with the TwoTensor dispatches of its forward. Each program is
compared with eager exactly (values, output type and the input's gradient), and a call that hits the cache
runs no TwoTensor dispatch.
"""

from __future__ import annotations

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

_PAIRS: dict[str, Callable[[torch.Tensor, int], TwoTensor]] = {
    "reshaped": lambda x, s: (lambda y: TwoTensor(y, y * 3))(x.reshape(s, -1)),
    "sliced": lambda x, s: TwoTensor(x[:s] * 2, x[1:s + 1] * 1),
    "repeated": lambda x, s: TwoTensor(x.repeat(s, 1), x.repeat(1, s).reshape(-1, 6)),
    "padded": lambda x, s: TwoTensor(torch.cat([x, x.new_zeros(s, 6)]), torch.cat([x.new_ones(s, 6), x])),
}


def _function(pairs: Callable[[torch.Tensor, int], TwoTensor]) -> type:
    class Sized(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, s: int) -> torch.Tensor:
            ctx.s = s
            pair = pairs(x.detach(), s) * 2
            return (pair.a + pair.b).clone()

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
            return g.sum() * ctx.s + torch.zeros(12, 6), None

    return Sized


@pytest.mark.parametrize("name", sorted(_PAIRS))
def test_a_function_sizing_by_its_int_runs_no_dispatch_when_warm(name: str) -> None:
    fn = _function(_PAIRS[name])

    def program(x: torch.Tensor, s: int) -> torch.Tensor:
        return fn.apply(x * 1, s)

    f = jitcore.jit(program)
    hits = 0
    for i, s in enumerate((2, 3, 4, 6)):
        torch.manual_seed(i)
        x = torch.randn(12, 6, requires_grad=True)
        xj = x.detach().clone().requires_grad_()
        expected = program(x, s)
        expected.square().sum().backward()
        misses = jitcore.cache_misses(f)
        with protocol_calls(TwoTensor) as seen:
            got = f(xj, s)
            got.square().sum().backward()
        assert type(got) is torch.Tensor and got.requires_grad
        assert torch.equal(got, expected) and torch.equal(xj.grad, x.grad), s
        if jitcore.cache_misses(f) == misses:
            hits += 1
            assert seen == [], (s, seen)  # before: 1 or 2 TwoTensor dispatches per warm call
    assert hits == 2
