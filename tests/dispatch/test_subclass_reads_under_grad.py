"""Reads of a wrapper subclass's values under grad (issue 15, helpers zoo47 and grad48): a number read
(``x.sum().item()`` of a TwoTensor that requires grad, then used by an op autograd records), and a
boolean mask of a wrapper that requires grad, whose count values decide; a number read (``float(x)``,
``x.item()``) under grad taking one entry for every value, as without grad. Each program runs eagerly and
under jitcore.jit on equal fresh arguments with values that change; outputs and gradients (inner
tensors too) are compared, with the entries traced and the subclass code a warm call runs. Note [A
read's check names the replay's tensor] (jitcore/transforms/grad.py), Note [Symbolic sizes through the
grad transform] (jitcore/transforms/symbolic_sizes.py), Note [A read number under grad]
(jitcore/transforms/replayed_numbers.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from subclass_zoo import Int8RowwiseTensor
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

_READS: dict[str, Callable[..., Any]] = {
    "sum_item_times_a_plain_tensor": lambda x, y: y * x.sum().item(),
    "mean_item_plus_a_plain_tensor": lambda x, y: (y + x.mean().item()).exp(),
    "sum_item_times_the_wrapper": lambda x, y: x * x.sum().item() + y.sum(),
}


def _arguments(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a, b, y = (torch.randn(3, generator=generator) for _ in range(3))
    return TwoTensor(a, b).requires_grad_(), y.requires_grad_()


def _gradients(out: torch.Tensor, args: tuple) -> list[Any]:
    out.sum().backward()
    return [a.grad for a in args]


@pytest.mark.parametrize("name", list(_READS))
def test_a_number_read_of_a_wrapper_under_grad_is_eagers(name: str) -> None:
    """Before: the check of the read named pass 1's inner tensor, which the grad transform's forward
    never defines: UnboundLocalError on every call, where eager computes."""
    fn = _READS[name]
    jitted = jitcore.jit(fn)
    for call, seed in enumerate((0, 0, 1)):
        jit_args, eager_args = _arguments(seed), _arguments(seed)
        actual, expected = jitted(*jit_args), fn(*eager_args)
        assert_same_flattened(actual, expected, f"call {call} output")
        assert_same_flattened(_gradients(actual, jit_args), _gradients(expected, eager_args),
                              f"call {call} gradients")
    assert jitted.fallback_reason is None
    assert jitcore.cache_hits(jitted) >= 1


# --- a boolean mask of a wrapper that requires grad ----------------------------------------------------
_MASKS: dict[str, Callable[..., Any]] = {
    "indexed_then_summed": lambda x, m: x[m].sum(),
    "masked_select_times_a_number": lambda x, m: torch.masked_select(x, m).sum() * 2,
}

_WRAPPERS: dict[str, tuple[type, Callable[[torch.Tensor], torch.Tensor]]] = {
    "two_tensor": (TwoTensor, lambda v: TwoTensor(v.clone(), v * 2)),
    "int8_rowwise": (Int8RowwiseTensor, Int8RowwiseTensor.quantize),
}


@pytest.mark.parametrize("wrapper", list(_WRAPPERS))
@pytest.mark.parametrize("name", list(_MASKS))
def test_a_mask_of_a_wrapper_under_grad_takes_one_entry_for_every_count(name: str, wrapper: str) -> None:
    """Before: a TwoTensor took an entry per count (7 in 7 calls: the count, named on an inner tensor,
    kept the entry from running pass 1 under torch's autograd, so shapes stayed static), and an int8
    wrapper's 2 entries ran its ``__torch_dispatch__`` on every warm call (pass 1 under autograd). Now
    the count is a size of the grad transform's forward: 2 entries, no subclass code on a warm call."""
    fn, (cls, make) = _MASKS[name], _WRAPPERS[wrapper]
    jitted = jitcore.jit(fn)
    for call, count in enumerate((1, 2, 3, 4, 6, 0, 5)):
        values = torch.randn(2, 3, generator=torch.Generator().manual_seed(call))
        mask = torch.arange(6).view(2, 3) < count
        jit_arg, eager_arg = make(values).requires_grad_(), make(values).requires_grad_()
        expected = fn(eager_arg, mask)
        with protocol_calls(cls) as calls:
            actual = jitted(jit_arg, mask)
        assert calls == [] or call < 2, (call, calls)  # a warm call runs only the flattened trace
        assert_same_flattened(actual, expected, f"call {call} output")
        assert_same_flattened(_gradients(actual, (jit_arg,)), _gradients(expected, (eager_arg,)),
                              f"call {call} gradients")
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 5)


# --- a number read from a wrapper under grad, one entry for every value --------------------------------
_NUMBERS: dict[str, tuple[Callable[..., Any], int]] = {  # the program, its entries over _VALUES
    "float_of_the_wrapper": (lambda x, y: y * float(x), 1),
    "item_of_the_wrapper": (lambda x, y: (y + x.item()).exp(), 1),
    "sum_item_then_divided": (lambda x, y: y / x.sum().item(), 1),
    # checked where the program needs its value: an entry per outcome
    "item_branched_on": (lambda x, y: y * x.item() if x.item() > 0 else y * 2, 2),
}
_VALUES = (0.5, 1.5, -0.7, 2.0, -1.2)


@pytest.mark.parametrize("wrapper", list(_WRAPPERS))
@pytest.mark.parametrize("name", list(_NUMBERS))
def test_a_number_read_of_a_wrapper_under_grad_is_a_name_of_the_computation(name: str, wrapper: str) -> None:
    """Before: the grad transform's replay gave the op the read's value, which autograd records in the
    backward too, checked on every call: an entry per value (5 in 5 calls; without grad, 1). Now a
    stand-in makes it a name in the forward and the backward (among the saved values)."""
    (fn, entries), (cls, make) = _NUMBERS[name], _WRAPPERS[wrapper]
    jitted = jitcore.jit(fn)
    for call, value in enumerate(_VALUES):
        y = torch.randn(3, generator=torch.Generator().manual_seed(call))
        jit_args = make(torch.tensor([value])).requires_grad_(), y.clone().requires_grad_()
        eager_args = make(torch.tensor([value])).requires_grad_(), y.clone().requires_grad_()
        expected = fn(*eager_args)
        with protocol_calls(cls) as calls:
            actual = jitted(*jit_args)
        assert calls == [] or call < entries, (call, calls)  # a warm call runs only the flattened trace
        assert_same_flattened(actual, expected, f"call {call} output")
        assert_same_flattened(_gradients(actual, jit_args), _gradients(expected, eager_args),
                              f"call {call} gradients")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == entries
