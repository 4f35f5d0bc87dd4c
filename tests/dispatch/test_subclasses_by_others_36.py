"""Tensor subclasses written by others (issue 15, zoo58): torch.masked's MaskedTensor as its users pass it,
over the sizes a user varies, eager against ``jitcore.jit`` (values, masks, output types by
``assert_same_flattened``; no eager entry; no ``__torch_dispatch__`` frame on a warm call; the entries
expected). MaskedTensor answers its strides in its ``__torch_dispatch__`` (``dispatch_sizes_strides_policy=
"strides"``); its inputs traced one entry per size (Note [A wrapper that answers its strides],
jitcore/jit/subclass_inputs.py); its softmax calls ``aten._masked_softmax``, which has no meta kernel, so
it was read on the values with symbolic sizes and every size was an entry (Note [Kernels without a meta
kernel], jitcore/langctx/shadows.py); a binary op between two MaskedTensors reads whether their masks
match, a truth value that was refused with symbolic sizes (Note [A truth value a subclass's code reads in a
symbolic pass], jitcore/jit/value_reads.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, frames_over_sizes, protocol_calls
from torch.masked import MaskedTensor, masked_tensor

import jitcore

SIZES = (5, 7, 4, 9)


def _masked(n: int) -> tuple[MaskedTensor]:
    data = torch.randn(3, n)
    with warnings.catch_warnings():  # "The PyTorch API of MaskedTensors is in prototype stage ..."
        warnings.simplefilter("ignore")
        return (masked_tensor(data, data > 0),)


PROGRAMS: dict[str, Callable[[MaskedTensor], Any]] = {
    "pointwise": lambda x: (x * 2 + 1).sin(),
    "sum over a dim": lambda x: torch.sum(x, 1),
    "mean": lambda x: x.mean(),
    "to_tensor": lambda x: (x.exp() * 3).to_tensor(0.0),
    "softmax": lambda x: torch.softmax(x, -1),
    "binary between MaskedTensors": lambda x: x + x * x,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_masked_tensor_inputs_over_sizes_share_one_symbolic_entry(name: str) -> None:
    """A MaskedTensor of 3 rows and 5, 7, 4, 9 columns: eager's values and masks on every call, the
    second size traced with symbolic sizes and the next ones answered from it without running
    MaskedTensor's ``__torch_dispatch__`` (before: an entry per size, its sizes static)."""
    program = PROGRAMS[name]
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        misses, warm = frames_over_sizes(program, _masked, SIZES, (MaskedTensor,), jitted=jitted)
    assert jitted.fallback_reason is None
    assert warm == []
    assert misses == 2


def test_masked_tensors_over_rows_and_columns() -> None:
    """Columns change first (symbolic from the second call), then rows (a miss: the prologue checks the
    MaskedTensor's sizes through its data's, its ``shape`` check, and the next entry has both symbolic):
    eager's answers, three entries for five shapes (before: five)."""
    program = PROGRAMS["sum over a dim"]
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (rows, n) in enumerate(((3, 5), (3, 7), (3, 8), (4, 8), (2, 3))):
            torch.manual_seed(i)
            data = torch.randn(rows, n)
            x = masked_tensor(data, data > 0)
            assert_same_flattened(jitted(x), program(x), f"call {i} ({rows} x {n})")
    assert jitcore.cache_misses(jitted) == 3


def test_a_masked_tensor_made_inside_over_sizes() -> None:
    """``masked_tensor(data, mask)`` made inside from plain inputs of 5, 7, 4, 9 columns, its row sums and
    softmax returned: eager's values and types, two entries (before: four; the softmax's sizes were
    decided by its values)."""

    def program(data: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, MaskedTensor]:
        x = masked_tensor(data, mask)
        return x.sum(1).get_data(), torch.softmax(x, -1)

    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, n in enumerate(SIZES):
            torch.manual_seed(i)
            data, mask = torch.randn(2, n), torch.rand(2, n) > 0.3
            assert_same_flattened(jitted(data, mask), program(data, mask), f"call {i} (2 x {n})")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 2


def test_masked_softmax_gradients_over_sizes() -> None:
    """``torch.softmax(x * 2, -1)`` of a MaskedTensor requiring grad, ``backward`` taken outside with a
    MaskedTensor gradient, over 5, 7, 4, 9 columns: eager's outputs and gradients (data and mask), two
    entries (before: four; ``aten._masked_softmax_backward`` has no meta kernel either)."""

    def program(x: MaskedTensor) -> MaskedTensor:
        return torch.softmax(x * 2, -1)

    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, n in enumerate(SIZES):
            torch.manual_seed(i)
            data, mask, grad = torch.randn(3, n), torch.randn(3, n) > -0.5, torch.randn(3, n)
            eager_x, jit_x = (masked_tensor(data.clone(), mask.clone(), requires_grad=True) for _ in range(2))
            expected, got = program(eager_x), jitted(jit_x)
            for out in (expected, got):
                out.backward(masked_tensor(grad, mask))
            assert_same_flattened(got, expected, f"call {i} (3 x {n}) output")
            assert_same_flattened(jit_x.grad, eager_x.grad, f"call {i} (3 x {n}) gradient")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 2


def test_binary_ops_between_masked_tensors_check_their_masks_on_every_call() -> None:
    """``x + x * y`` of two MaskedTensors over 5, 7, 4, 9, 6, 8 columns, with y's mask another than x's at
    6 columns: eager's values and masks, and eager's ValueError ("Input masks must match") where they
    differ. MaskedTensor reads ``torch.eq(mask_x, mask_y).all().item()``; that truth value is checked on
    every call, so the call with other masks takes an entry of its own and the others share the symbolic
    one: three entries (before: six, one per size)."""

    def program(x: MaskedTensor, y: MaskedTensor) -> MaskedTensor:
        return x + x * y

    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, n in enumerate((5, 7, 4, 9, 6, 8)):
            torch.manual_seed(i)
            data = torch.randn(3, n)
            y_mask = data > 0.5 if n == 6 else data > 0
            x, y = masked_tensor(data, data > 0), masked_tensor(data * 2, y_mask)
            try:
                expected = program(x, y)
            except ValueError as exc:
                with pytest.raises(ValueError, match="Input masks must match") as raised:
                    jitted(x, y)
                assert str(raised.value) == str(exc)
                continue
            assert n != 6
            assert_same_flattened(jitted(x, y), expected, f"call {i} (3 x {n})")
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == 3


def test_a_masked_tensor_input_requiring_grad_runs_no_dispatch_when_warm() -> None:
    """``torch.softmax(x, -1).sum()`` of a MaskedTensor requiring grad over 5, 7, 4, 9 columns, the
    backward taken outside: eager's outputs and gradients (data and mask), two entries, and no frame of
    MaskedTensor's ``__torch_dispatch__`` in a cached call (before: two ``prim.layout`` per call, asked
    by torch's C ``Function.apply`` of the outer tensor it is given; Note [The layouts of the applied
    subclass inputs], jitcore/transforms/autograd.py)."""

    def program(x: MaskedTensor) -> MaskedTensor:
        return torch.softmax(x, -1).sum()

    jitted = jitcore.jit(program)
    warm: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, n in enumerate(SIZES):
            torch.manual_seed(i)
            data = torch.randn(3, n)
            eager_x, jit_x = (masked_tensor(data.clone(), data > 0, requires_grad=True) for _ in range(2))
            expected = program(eager_x)
            misses = jitcore.cache_misses(jitted)
            with protocol_calls(MaskedTensor) as frames:
                got = jitted(jit_x)
            if jitcore.cache_misses(jitted) == misses:
                warm += frames
            for out in (expected, got):
                out.backward()
            assert_same_flattened(got, expected, f"call {i} (3 x {n}) output")
            assert_same_flattened(jit_x.grad, eager_x.grad, f"call {i} (3 x {n}) gradient")
    assert jitted.fallback_reason is None
    assert warm == []
    assert jitcore.cache_misses(jitted) == 2
