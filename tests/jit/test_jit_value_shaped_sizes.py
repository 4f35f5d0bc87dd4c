"""Sizes that values decide (Note [Sizes that values decide], jitcore/jit/shapes.py).

A value-shaped op (``x[mask]``, ``nonzero``, ``masked_select``, ``unique``, ``torch.where(c)``) whose
output sizes change between calls becomes symbolic after the first change: the calls after it hit one
entry, whatever the count. Every call is compared with eager (values, dtypes, shapes, gradients);
programs that need such a size's value fall back to static sizes and stay right.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same

import jitcore

PROGRAMS = {
    "mask_sum": lambda x, y: x[y > 0].sum() * 2,
    "masked_select": lambda x, y: torch.masked_select(x, y > 0) * 2,
    "nonzero": lambda x, y: (y > 0).nonzero(),
    "nonzero_mean": lambda x, y: (y > 0).nonzero().float().mean(0),
    "where_condition": lambda x, y: torch.where(y > 0)[1] + 1,
    "unique": lambda x, y: torch.unique(y.round()),
    "unique_counts": lambda x, y: torch.unique(y.round(), return_counts=True),
    "unique_inverse": lambda x, y: torch.unique(y.round(), return_inverse=True),
    "mask_then_view": lambda x, y: x[y > 0].view(-1, 1).exp(),
    "mask_shape": lambda x, y: (x[y > 0].shape, x[y > 0].size(0)),
    "coordinates": lambda x, y: x[(y > 0).nonzero(as_tuple=True)].cumsum(0),
    "sorted_mask": lambda x, y: x[y > 0].sort().values[:3],
    "new_zeros": lambda x, y: x.new_zeros(x[y > 0].shape[0]) + x.sum(),
    "arange": lambda x, y: torch.arange(x[y > 0].shape[0]) * 2,
    "index_select": lambda x, y: x.flatten().index_select(0, (y.flatten() > 0).nonzero().squeeze(1)),
    "repeat_interleave": lambda x, y: torch.repeat_interleave(torch.arange(3), (y[0, :3] > 0).long() + 1),
}


def _calls(n: int, grad: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 8, generator=generator).requires_grad_(grad),
             torch.randn(4, 8, generator=generator)) for _ in range(n)]


def _run(fn, jf, calls, grad: bool = False) -> None:
    for x, y in calls:
        x_eager, x_jit = (x.detach().clone().requires_grad_(grad) for _ in range(2))
        expected, actual = fn(x_eager, y), jf(x_jit, y)
        assert_same(actual, expected)
        if grad and isinstance(expected, torch.Tensor) and expected.requires_grad:
            expected.sum().backward()
            actual.sum().backward()
            assert_same(x_jit.grad, x_eager.grad)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_counts_that_change_need_two_traces(name):
    fn = PROGRAMS[name]
    jf = jitcore.jit(fn)
    _run(fn, jf, _calls(12))
    # one per count before (8 of 12 here); each read's sizes become symbolic when its own check fails
    assert jitcore.cache_misses(jf) <= (3 if name == "mask_shape" else 2)


@pytest.mark.parametrize("name", ["mask_sum", "masked_select", "coordinates", "mask_then_view", "new_zeros"])
def test_gradients_through_changing_counts(name):
    fn = PROGRAMS[name]
    jf = jitcore.jit(fn)
    _run(fn, jf, _calls(10, grad=True), grad=True)
    assert jitcore.cache_misses(jf) <= 2


def test_the_size_is_read_from_the_output_on_every_call():
    def fn(x, y):
        picked = x[y > 0]
        return picked.view(-1, 1) * torch.arange(picked.shape[0]).view(-1, 1)

    jf = jitcore.jit(fn)
    _run(fn, jf, _calls(6))
    trace = str(jitcore.last_traces(jf)[-1])
    assert "jitcore.langctx.reads.size_of(" in trace
    assert re.search(r"torch\.arange\(u\d+\)", trace)  # the size read, not a constant


def test_a_branch_on_a_changing_count_is_a_checked_condition():
    def branch(x, y):
        return x.sum() if len(x[y > 0]) > 16 else x.mean()

    jf = jitcore.jit(branch)
    calls = _calls(16)
    assert len({int((y > 0).sum()) > 16 for _x, y in calls}) == 2  # both sides are taken
    _run(branch, jf, calls)
    # a static entry, then one symbolic entry per side: the count's condition is checked on every call
    assert jitcore.cache_misses(jf) == 3
    reasons = " ".join(str(r) for miss in jitcore.miss_reasons(jf) for r in miss)
    assert "the size condition" in reasons


def test_two_masked_tensors_compared_by_size():
    def two_masks(x, y):  # mse_loss compares the sizes of the two masked tensors
        return F.mse_loss(x[y > 0], y[y > 0])

    jf = jitcore.jit(two_masks)
    _run(two_masks, jf, _calls(12))
    assert jitcore.cache_misses(jf) <= 2


def test_a_size_stored_into_python_state_is_each_calls():
    """The count stored into a list is a slot of the computation, computed per call (Note [A size
    stored into state], jitcore/jit/effects.py): it kept static sizes before, an entry per count."""
    counts = []

    def fn(x, y):
        picked = x[y > 0]
        counts.append(picked.shape[0])
        return picked.sum()

    jf = jitcore.jit(fn)
    calls = _calls(8)
    for x, y in calls:
        assert_same(jf(x, y), fn(x, y))
        assert counts[-1] == counts[-2] and type(counts[-2]) is int  # the jitted call appended eager's count
    assert jitcore.cache_misses(jf) <= 2


def test_dynamic_false_keeps_one_entry_per_count():
    fn = PROGRAMS["mask_sum"]
    calls = _calls(12)
    jf = jitcore.jit(fn, dynamic=False)
    _run(fn, jf, calls)
    assert jitcore.cache_misses(jf) == len({int((y > 0).sum()) for _x, y in calls})


def test_in_place_writes_before_a_changed_count_are_undone():
    def fn(x, y):
        x.mul_(2)
        return x[y > 0].sum()

    jf = jitcore.jit(fn)
    for x, y in _calls(8):
        x_eager, x_jit = x.clone(), x.clone()
        assert_same(jf(x_jit, y), fn(x_eager, y))
        assert_same(x_jit, x_eager)  # written once, as eagerly, also on calls that went to another entry
    assert jitcore.cache_misses(jf) <= 2


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 5), threshold=st.floats(-1.5, 1.5), seed=st.integers(0, 2**16))
def test_masked_programs_match_eager(rows, threshold, seed):
    def fn(x, y):
        picked = x[y > threshold]
        return picked.sum() + picked.numel() * 0 + (y > threshold).nonzero()[:, 1].float().sum()

    generator = torch.Generator().manual_seed(seed)
    jf = jitcore.jit(fn)
    for _ in range(4):
        x, y = torch.randn(rows, 6, generator=generator), torch.randn(rows, 6, generator=generator)
        assert_same(jf(x, y), fn(x, y))


# --- Note [One mask, one count] ---------------------------------------------------------------------
def _two_reads(x, y):
    m = y > 0
    return x[m] + y[m] * 2


def _write_between(x, y):
    m = y > 0
    a = x[m]
    m[:, 0] = True  # a write to the mask: the next index reads its coordinates again
    return a.sum() + y[m].sum(), y[m]


def _view_written_between(x, y):
    m = y > 0
    rows = m.view(-1)
    a = x[m]
    rows[0] = ~rows[0]
    return a, x[m] * y[m]


def _masked_select_and_index(x, y):
    m = y > 0
    return torch.masked_select(x, m) - x[m] * y[m]


def _changing_counts(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=generator), torch.randn(4, 8, generator=generator))
            for _ in range(n)]


def test_two_indexes_by_one_mask_share_one_symbol():
    jf = jitcore.jit(_two_reads)
    _run(_two_reads, jf, _changing_counts(10))
    assert jitcore.cache_misses(jf) == 2 and jitcore.cache_hits(jf) == 8
    text = str(jitcore.last_traces(jf)[-1])
    # one read of the coordinates, one symbol for both of its outputs and both indexes: no condition
    # that two symbols are equal
    assert text.count("torch.nonzero(") == 1 and "u0" in text and "u1" not in text, text


@pytest.mark.parametrize("fn", [_write_between, _view_written_between, _masked_select_and_index])
def test_a_mask_written_between_indexes_is_read_again(fn):
    jf = jitcore.jit(fn)
    _run(fn, jf, _changing_counts(10))
    assert jitcore.cache_misses(jf) == 2


def test_two_indexes_by_one_mask_under_grad():
    jf = jitcore.jit(_two_reads)
    calls = [(x.requires_grad_(True), y) for x, y in _changing_counts(6)]
    _run(_two_reads, jf, calls, grad=True)
    assert jitcore.cache_misses(jf) == 2
