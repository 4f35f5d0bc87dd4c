"""Programs written as the users of torch's nested jagged tensors, MaskedTensor and torchao write them
(issue 15, the sixteenth session), each run eagerly and under jitcore on equal fresh arguments:
outputs, gradients, types and cache hits compared. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_nested, nested_jagged

import jitcore


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.values().sum() if out.is_nested else out.sum()


def _gradients_match(fn: Callable[..., Any], make: Callable[[], tuple], calls: int = 3) -> Any:
    """``fn`` eagerly and jitted on equal fresh arguments, ``calls`` times: outputs and the gradients of
    the arguments that require grad equal; one trace, no eager entry."""
    jitted = jitcore.jit(fn)
    for i in range(calls):
        torch.manual_seed(i)
        eager_args = make()
        torch.manual_seed(i)
        jit_args = make()
        expected, actual = fn(*eager_args), jitted(*jit_args)
        assert_same_nested(actual, expected)
        _loss(expected).backward()
        _loss(actual).backward()
        for a, e in zip(jit_args, eager_args):
            if isinstance(e, torch.Tensor) and e.requires_grad:
                assert_same_nested(a.grad, e.grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, calls - 1)
    assert all(entry.eager_reason is None for entry in jitted.entries)
    return jitted


# --- nested jagged tensors: a dense tensor broadcast against an NJT under autograd -------------------
# NestedTensor's dispatch makes the dense side an NJT with ``torch._nested_from_padded_tensor`` over
# torch's ``_nt_view_dummy``; the grad transform's recording ran it natively on shadows and left its
# values unbound (NameError/UnboundLocalError on the first call; amax's backward over the ragged
# dimension, which broadcasts so, raised "self.shape_env must not be None" in every backward()).
@pytest.mark.parametrize("program", [
    lambda n: n.amax(dim=1),
    lambda n: n.amax(dim=1) * 2 + n.softmax(dim=1).amax(dim=1),
], ids=["amax-ragged", "amax-ragged-and-more"])
def test_njt_reduction_over_the_ragged_dim_under_grad(program: Callable[..., Any]) -> None:
    _gradients_match(program, lambda: (nested_jagged(requires_grad=True),))


def test_njt_times_a_dense_tensor_of_the_same_dim_under_grad() -> None:
    _gradients_match(lambda n, t: (n * t).relu(),
                     lambda: (nested_jagged(requires_grad=True), torch.randn(3, 1, 8, requires_grad=True)))



# NestedTensor's ``unbind`` backward splits the gradient by ``offsets.diff().tolist()``: no read of pass
# 1 answers it in the grad transform's recording, and the call ran eagerly (JC-T002). Such an entry now
# runs pass 1 under torch's autograd (Note [Reads in a subclass's backward], transforms/jit_hook.py).
@pytest.mark.parametrize("program", [
    lambda n: torch.stack([t.sum(0) for t in n.unbind()]),
    lambda n: n[1] * 2,
    lambda n: torch.cat([c.sin().values() for c in n.chunk(3, dim=0)]),
], ids=["unbind", "select", "chunk"])
def test_njt_code_reading_its_offsets_under_grad(program: Callable[..., Any]) -> None:
    _gradients_match(program, lambda: (nested_jagged(requires_grad=True),))

# --- MaskedTensor ---------------------------------------------------------------------------------
def _masked(requires_grad: bool = False, mask: torch.Tensor | None = None) -> torch.Tensor:
    from torch.masked import masked_tensor

    data = torch.randn(3, 4)
    if mask is None:
        mask = torch.rand(3, 4) > 0.3
    return masked_tensor(data, mask, requires_grad=requires_grad)


def _masked_values(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The data where the mask is set (elsewhere MaskedTensor leaves it unspecified), and the mask."""
    mask = t.get_mask()
    return t.get_data().detach().masked_fill(~mask, 0), mask


def test_backward_inside_the_function_over_a_masked_tensor() -> None:
    """The shadow graph's zero gradient of an ``autograd.Function`` input (MaskedTensor's ``get_data``)
    was ``zeros_like`` of the MaskedTensor, which its dispatch does not implement: a TypeError where
    eager computes the gradient."""
    def f(m: torch.Tensor) -> torch.Tensor:
        loss = (m * 3).sum()
        loss.backward()
        return loss.detach()

    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="prototype"):
        for i in range(3):
            torch.manual_seed(i)
            eager_m = _masked(requires_grad=True)
            torch.manual_seed(i)
            jit_m = _masked(requires_grad=True)
            for got, want in zip(_masked_values(jitted(jit_m)), _masked_values(f(eager_m))):
                torch.testing.assert_close(got, want)
            for got, want in zip(_masked_values(jit_m.grad), _masked_values(eager_m.grad)):
                torch.testing.assert_close(got, want)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert all(entry.eager_reason is None for entry in jitted.entries)


def test_binary_op_of_two_masked_tensors_is_traced() -> None:
    """MaskedTensor's binary dispatch reads whether the masks match, then unwraps each operand with an
    ``autograd.Function``; the probe had no value for an operand made inside (``a * 2``): an eager
    entry. A call whose masks differ raises as eagerly (the read's check misses)."""
    f = lambda a, b: a + b * 2  # noqa: E731
    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="prototype"):
        for i in range(3):
            torch.manual_seed(i)
            a = _masked()
            b = _masked(mask=a.get_mask())
            for got, want in zip(_masked_values(jitted(a, b)), _masked_values(f(a, b))):
                torch.testing.assert_close(got, want)
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
        assert all(entry.eager_reason is None for entry in jitted.entries)
        a = _masked(mask=torch.ones(3, 4, dtype=torch.bool))
        b = _masked(mask=torch.zeros(3, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="masks must match"):
            f(a, b)
        with pytest.raises(ValueError, match="masks must match"):
            jitted(a, b)


# --- torchao's quantized training -----------------------------------------------------------------
def test_bitnet_training_step_inside_the_function() -> None:
    """BitNet's linear Function adds the bias to its int8 matmul in its forward: a backward inside the
    function reached the bias alone, so the weights and the first layer got no gradient and AdamW
    moved only the last bias (a wrong answer)."""
    import torchao.quantization as Q
    from torchao.prototype.quantized_training import bitnet_training

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
        Q.quantize_(model, bitnet_training())
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.detach()

    (eager_model, eager_opt), (model, opt) = make(), make()
    jitted = jitcore.jit(step)
    for _ in range(3):
        x = torch.randn(8, 64)
        torch.testing.assert_close(jitted(model, opt, x), step(eager_model, eager_opt, x))
        for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
            assert type(p) is type(q) and type(p.grad) is type(q.grad)
            torch.testing.assert_close(getattr(p, "_data", p).detach(), getattr(q, "_data", q).detach())
            torch.testing.assert_close(p.grad, q.grad)
    assert jitcore.cache_misses(jitted) == 2  # the step that makes AdamW's state, then a hit
    assert all(entry.eager_reason is None for entry in jitted.entries)


@pytest.mark.parametrize("program", [
    lambda m: (m * m).exp(),
    lambda m: torch.softmax(m, -1),
], ids=["pointwise", "softmax"])
def test_masked_tensor_gradients(program: Callable[..., Any]) -> None:
    """MaskedTensor's backward reads whether the masks match (``.item()``) in its binary ops: the grad
    transform's recording had no answer and the call ran eagerly (JC-T002); it now runs pass 1 under
    torch's autograd (Note [Reads in a subclass's backward])."""
    jitted = jitcore.jit(program)
    with pytest.warns(UserWarning, match="prototype"):
        for i in range(3):
            torch.manual_seed(i)
            eager_m = _masked(requires_grad=True)
            torch.manual_seed(i)
            jit_m = _masked(requires_grad=True)
            expected, actual = program(eager_m), jitted(jit_m)
            for got, want in zip(_masked_values(actual), _masked_values(expected)):
                torch.testing.assert_close(got, want)
            expected.sum().backward()
            actual.sum().backward()
            for got, want in zip(_masked_values(jit_m.grad), _masked_values(eager_m.grad)):
                torch.testing.assert_close(got, want)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert all(entry.eager_reason is None for entry in jitted.entries)
