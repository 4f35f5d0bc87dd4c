"""A float that changes between calls, given to a torch function written in Python where torch's
schemas take no value (``F.gumbel_softmax``'s ``tau``, ``F.normalize``'s ``p``, ``F.dropout2d``'s
``p``, ``F.cross_entropy``'s ``label_smoothing``): the call is interpreted, so the float stays a name
of the trace (Note [A float a torch function would fix], jitcore/langctx/scalars.py). Differential:
values, gradients and the RNG stream as eager's; one symbolic entry serves every value."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from jit_helpers import assert_same

import jitcore


def _gumbel_hard(logits: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.gumbel_softmax(logits, tau=tau, hard=True)
    (y * torch.arange(logits.shape[-1], dtype=y.dtype)).sum().backward()
    return y, logits.grad


def _normalize(x: torch.Tensor, p: float) -> torch.Tensor:
    return F.normalize(x, p=p, dim=-1)


def _dropout2d(x: torch.Tensor, p: float) -> torch.Tensor:
    return F.dropout2d(x, p=p, training=True)


def _smoothed_loss(x: torch.Tensor, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    loss = F.cross_entropy(x, torch.tensor([0, 2, 1]), label_smoothing=smoothing)
    loss.backward()
    return loss, x.grad


PROGRAMS = {  # each: the function, its tensor argument, the floats of successive calls
    "gumbel_softmax_annealed_tau": (_gumbel_hard, lambda: torch.randn(4, 5, requires_grad=True),
                                    (1.0, 0.9, 0.81, 0.729, 0.6561)),
    "normalize_p": (_normalize, lambda: torch.randn(3, 4), (2.0, 1.5, 3.0, 2.5)),
    "dropout2d_p": (_dropout2d, lambda: torch.randn(2, 6, 3, 3), (0.1, 0.2, 0.3, 0.4)),
    "cross_entropy_label_smoothing": (_smoothed_loss, lambda: torch.randn(3, 4, requires_grad=True),
                                      (0.0, 0.1, 0.2, 0.05)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_changing_float_keeps_one_entry(name: str) -> None:
    fn, make, floats = PROGRAMS[name]
    jitted = jitcore.jit(fn)
    for i, value in enumerate(floats):
        torch.manual_seed(i)
        x = make()
        x_jit = x.detach().clone().requires_grad_(x.requires_grad)
        torch.manual_seed(100 + i)
        expected = fn(x, value)
        after_eager = torch.rand(3)  # the RNG stream after the call
        torch.manual_seed(100 + i)
        got = jitted(x_jit, value)
        assert_same(got, expected)
        assert_same(torch.rand(3), after_eager)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)  # the first value, then a name
    text = str(jitcore.last_traces(jitted)[-1])
    assert "specialized" not in text, text
