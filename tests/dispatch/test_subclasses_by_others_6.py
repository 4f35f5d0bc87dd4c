"""Programs written as the users of torch's nested jagged tensors write them (issue 15, the eighteenth
session), each run eagerly and under jitcore on equal fresh arguments: outputs, gradients and cache
hits compared. Each test failed before its fix (the DTensor programs of that session are in
tests/dispatch/test_dtensor.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


# --- MaskedTensor: a backward inside the function through its own backward code ---------------------
# Note [A zero gradient keeps its subclass's structure] (transforms/autograd_function.py): pass 1's
# shadow graph gave MaskedTensor's ``get_data`` a zero gradient whose mask was all False, so the mask
# check of ``mul`` in ``exp``'s backward raised "Input masks must match" (eager computes). The
# gradient values no record made, and the backward the pass could not free on its shadows, are
# Note [Subclass values the probe rebuilds] (jit/probe.py) and Note [A graph the pass could not free]
# (jit/autograd_calls.py).
_MASKED_LOSSES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exp": lambda m: m.exp().sum(),
    "softmax": lambda m: (torch.softmax(m, -1) * 2).sum(),
    "sin-times-itself": lambda m: (m.sin() * m).sum(),
    "mean-of-exp": lambda m: m.exp().mean(),
    "sum-over-a-dim": lambda m: m.exp().sum(1).sum(),
}


def _masked(seed: int) -> torch.Tensor:
    from torch.masked import masked_tensor

    generator = torch.Generator().manual_seed(seed)
    data, mask = torch.randn(3, 4, generator=generator), torch.rand(3, 4, generator=generator) > 0.3
    return masked_tensor(data, mask, requires_grad=True)


def _assert_same_masked_grads(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert type(actual) is type(expected)
    torch.testing.assert_close(actual.get_mask(), expected.get_mask())
    fill = ~expected.get_mask()
    torch.testing.assert_close(actual.get_data().masked_fill(fill, 0),
                               expected.get_data().masked_fill(fill, 0))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("loss", list(_MASKED_LOSSES.values()), ids=list(_MASKED_LOSSES))
def test_masked_tensor_backward_inside(loss: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def step(m: torch.Tensor) -> torch.Tensor:
        value = loss(m)
        value.backward()
        return value.detach()

    jitted = jitcore.jit(step)
    for seed in (0, 1, 1):  # another mask, then a cache hit
        actual_in, expected_in = _masked(seed), _masked(seed)
        actual, expected = jitted(actual_in), step(expected_in)
        _assert_same_masked_grads(actual, expected)
        _assert_same_masked_grads(actual_in.grad, expected_in.grad)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def _check_step_on_masked_inputs(step: Callable[[torch.Tensor], torch.Tensor],
                                 seeds: tuple[int, ...]) -> None:
    """``step`` jitted and eagerly on equal MaskedTensor inputs, one call per seed: its result and the
    inputs' gradients equal, traced (no eager entry), exactly one cache hit."""
    jitted = jitcore.jit(step)
    for seed in seeds:
        actual_in, expected_in = _masked(seed), _masked(seed)
        _assert_same_masked_grads(jitted(actual_in), step(expected_in))
        _assert_same_masked_grads(actual_in.grad, expected_in.grad)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) == 1


# The loss itself returned: the trace's backward (for a backward outside the function) runs
# MaskedTensor's mask checks, answered behind ``check_masks_match`` (Note [Mask checks in a backward],
# transforms/backward_checks.py); before, the call raised.
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_masked_tensor_backward_inside_returning_the_loss() -> None:
    def step(m: torch.Tensor) -> torch.Tensor:
        value = m.exp().sum()
        value.backward()
        return value

    _check_step_on_masked_inputs(step, (0, 0))


# A MaskedTensor output's gradient taken outside the function: the mask checks of its backward ran
# the call eagerly. A gradient whose mask differs from the output's raises a ValueError as eagerly
# (its message is the binary ops'), from the check the backward trace holds.
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("loss", [lambda m: (m * m).sum(), lambda m: m.exp().mean()],
                         ids=["square", "exp-mean"])
def test_masked_tensor_loss_differentiated_outside(loss: Callable[[torch.Tensor], torch.Tensor]) -> None:
    from torch.masked import masked_tensor

    jitted = jitcore.jit(loss)
    for seed in (0, 1, 1):
        actual_in, expected_in = _masked(seed), _masked(seed)
        actual, expected = jitted(actual_in), loss(expected_in)
        _assert_same_masked_grads(actual, expected)
        actual.backward()
        expected.backward()
        _assert_same_masked_grads(actual_in.grad, expected_in.grad)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1

    def program(m: torch.Tensor) -> torch.Tensor:
        return m.exp() * m

    jitted = jitcore.jit(program)
    for same_mask in (True, True, False):
        actual_in, expected_in = _masked(0), _masked(0)
        actual, expected = jitted(actual_in), program(expected_in)
        _assert_same_masked_grads(actual, expected)
        mask = expected_in.get_mask() if same_mask else torch.ones(3, 4, dtype=torch.bool)
        gradient = masked_tensor(torch.randn(3, 4, generator=torch.Generator().manual_seed(1)), mask)
        if same_mask:
            actual.backward(gradient)
            expected.backward(gradient)
            _assert_same_masked_grads(actual_in.grad, expected_in.grad)
        else:
            with pytest.raises(ValueError, match="masks"):
                expected.backward(gradient)
            with pytest.raises(ValueError, match="masks"):
                actual.backward(gradient)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) == 2


# Note [The probe runs above autograd] (jit/probe.py): the second backward's mask read has the probe
# run the first backward from inside MaskedTensor's dispatch, below autograd, where the forward records
# built no graph: "element 0 of tensors does not require grad" (eager computes).
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_masked_tensor_two_backwards_inside() -> None:
    def step(m: torch.Tensor) -> torch.Tensor:
        (m * 3).sum().backward()
        value = m.exp().sum()
        value.backward()
        return value.detach()

    _check_step_on_masked_inputs(step, (0, 1))


# --- a wrapper subclass as a parameter under Adam --------------------------------------------------
class _Wrapped(torch.Tensor):
    """A minimal wrapper subclass, as tutorials write one: every op on the wrapped tensor, in-place ops
    return their wrapper; no ``__repr__`` of its own (torch's repr of it fails: its ``item()`` answers
    a wrapper)."""

    _IN_PLACE = frozenset({"add_", "mul_", "lerp_", "addcmul_", "addcdiv_", "sqrt_", "div_", "copy_",
                           "zero_"})

    @staticmethod
    def __new__(cls, t: torch.Tensor) -> _Wrapped:
        return torch.Tensor._make_wrapper_subclass(cls, t.shape, dtype=t.dtype, device=t.device)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["t"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: object, stride: object) -> _Wrapped:
        return _Wrapped(inner["t"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        def unwrap(x: object) -> object:
            return x.t if isinstance(x, _Wrapped) else x

        def wrap(x: object) -> object:
            plain = isinstance(x, torch.Tensor) and not isinstance(x, _Wrapped)
            return _Wrapped(x) if plain and x.dtype.is_floating_point else x

        out = func(*torch.utils._pytree.tree_map(unwrap, args),
                   **torch.utils._pytree.tree_map(unwrap, kwargs or {}))
        if func.overloadpacket.__name__ in cls._IN_PLACE:
            return args[0]
        return torch.utils._pytree.tree_map(wrap, out)


# The optimizer's state is keyed by the parameter: jitcore named the state it read ``str(key)``, which
# printed the parameter (torch's repr runs ops on it): "unsupported format string passed to
# _Wrapped.__format__" on the second call, where eager never prints it.
@pytest.mark.parametrize("optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_wrapper_parameter_under_adam(optimizer: type) -> None:
    def linear() -> tuple[nn.Linear, torch.optim.Optimizer]:
        torch.manual_seed(1)
        layer = nn.Linear(4, 3)
        layer.weight = nn.Parameter(_Wrapped(layer.weight.detach().clone()), requires_grad=True)
        return layer, optimizer(layer.parameters(), lr=0.1)

    def step(layer: nn.Linear, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = layer(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss.detach()

    (layer, opt), (reference, reference_opt) = linear(), linear()
    jitted = jitcore.jit(step)
    for i in range(4):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(jitted(layer, opt, x), step(reference, reference_opt, x))
        assert type(layer.weight) is type(reference.weight)
        torch.testing.assert_close(layer.weight.t, reference.weight.t)
        torch.testing.assert_close(layer.bias, reference.bias)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


# Note [The nested int registry] (dispatch/lookasides.py): NestedTensor's ``_to_copy`` reads torch's
# registry of nested ints with the offsets as the key; a traced offsets tensor was not one: KeyError
# (eager computes).
@pytest.mark.parametrize("convert", [lambda x: x.to(torch.float64), lambda x: x.double(),
                                     lambda x: x.to("cpu", torch.float16)],
                         ids=["to-dtype", "double", "to-device-dtype"])
def test_njt_dtype_conversion(convert: Callable[[torch.Tensor], torch.Tensor]) -> None:
    def program(x: torch.Tensor) -> torch.Tensor:
        return convert(x).sin() * 2

    jitted = jitcore.jit(program)
    for lengths in _LENGTHS:
        x = nested_jagged(lengths)
        assert_same_nested(jitted(x), program(x))
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 2
