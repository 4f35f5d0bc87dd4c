"""Programs written as the users of torch's nested jagged tensors write them (issue 15, the eighteenth
session), each run eagerly and under jitcore on equal fresh arguments: outputs, gradients and cache
hits compared. Each test failed before its fix (the DTensor programs of that session are in
tests/dispatch/test_dtensor.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from subclass_checks import assert_same_nested, nested_jagged
from torch import nn

import jitcore

# One ragged structure per call, of one batch size: the second call traces the entry whose ragged sizes
# are symbolic (jitcore/jit/ragged.py), the later ones hit it.
_LENGTHS = [(2, 5, 3), (4, 1, 6), (3, 3, 2), (7, 2, 1)]


def _heads(linear: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor]:
    """A multi-head attention's head split and merge over an NJT: ``(B, j, 8) -> (B, j, 2, 4) -> (B, j,
    8)``, the merge recorded as ``reshape`` with the NJT's ragged size."""
    return lambda x: linear(x).unflatten(-1, (2, 4)).transpose(1, 2).transpose(1, 2).flatten(-2)


# --- nested jagged tensors: a size the program gives, under autograd ------------------------------
# Note [Ragged sizes under autograd] (dispatch/flatten.py): with a parameter requiring grad, the entry
# with symbolic ragged sizes runs its torch-level calls under torch's autograd on the caller's NJT, and
# ``flatten(-2)``'s ``reshape`` was given the pass's symbol: NestedTensor's view raised "cannot view
# shape (3, j2, 2, 4) as [3, s2, 8]" from the second ragged structure on (eager computes).
@pytest.mark.parametrize("backward_inside", [False, True], ids=["grad-outside", "backward-inside"])
def test_njt_heads_merged_under_grad_with_changing_lengths(backward_inside: bool) -> None:
    def program(linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        out = _heads(linear)(x)
        if backward_inside:
            out.values().pow(2).sum().backward()
        return out * 2

    torch.manual_seed(0)
    linear, reference = nn.Linear(8, 8), nn.Linear(8, 8)
    reference.load_state_dict(linear.state_dict())
    jitted = jitcore.jit(program)
    for lengths in _LENGTHS:
        x = nested_jagged(lengths)
        actual, expected = jitted(linear, x), program(reference, x)
        assert_same_nested(actual, expected)
        if not backward_inside:
            actual.values().sum().backward()
            expected.values().sum().backward()
        torch.testing.assert_close(linear.weight.grad, reference.weight.grad)
    assert jitcore.cache_hits(jitted) >= 1 and jitted.fallback_reason is None


# Note [The probe's ragged sizes] (jit/probe.py): a value read after a backward over such a reshape has
# the probe run the reshape natively on the caller's NJT, with the pass's symbol: the first call raised.
def test_njt_reshape_under_grad_then_a_value_read() -> None:
    def program(linear: nn.Linear, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        out = _heads(linear)(x)
        out.values().sum().backward()
        return out * scale.item()

    torch.manual_seed(0)
    linear, reference = nn.Linear(8, 8), nn.Linear(8, 8)
    reference.load_state_dict(linear.state_dict())
    jitted = jitcore.jit(program)
    for lengths in _LENGTHS[:1] * 3:
        x, scale = nested_jagged(lengths), torch.tensor(2.0)
        assert_same_nested(jitted(linear, x, scale), program(reference, x, scale))
        torch.testing.assert_close(linear.weight.grad, reference.weight.grad)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


# Note [A backward after records run without their graph] (jit/probe.py): NJT attention reads its
# lengths before the backward record arrives; the probe had run the calls before it as their
# operations, without autograd's graph, so the backward it ran for a later value read (an optimizer's
# ``step.item()``) found no gradient: "LookupError: t98 has no value" from the second call on (eager
# computes).
def test_njt_attention_backward_then_a_value_read() -> None:
    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.qkv(x).unflatten(-1, (2, 4)).transpose(1, 2)
            o = nn.functional.scaled_dot_product_attention(q, q, q)
            return self.out(o.transpose(1, 2).flatten(-2))

    def step(model: nn.Module, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        loss = torch.nested.to_padded_tensor(model(x), 0.0).pow(2).sum()
        loss.backward()
        return loss * scale.item()

    torch.manual_seed(0)
    model, reference = Attention(), Attention()
    reference.load_state_dict(model.state_dict())
    jitted = jitcore.jit(step)
    for lengths in _LENGTHS[:1] * 3:
        x, scale = nested_jagged(lengths), torch.tensor(2.0)
        torch.testing.assert_close(jitted(model, x, scale), step(reference, x, scale))
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1
