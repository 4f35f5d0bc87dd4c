"""Integers read with ``item()``/``tolist()`` and used as sizes (Note [Counts that values decide],
jitcore/jit/shapes.py): once a read count changes between calls, it is an unbacked symbol in the next
trace, and later calls with other counts hit that entry instead of tracing one entry per count (an
MoE layer's tokens per expert: ``x.split(counts.tolist())``, JetMoe in transformers). Every call is
compared with eager (values, dtypes, shapes, gradients); what needs a count's own value (a Python
loop over it) stays right with an entry per value.
"""

from __future__ import annotations

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _split_by_counts(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    groups = (y[:, 0] > 0).long() + (y[:, 1] > 0).long()  # 0, 1 or 2 per row
    counts = torch.bincount(groups, minlength=3).tolist()
    parts = x[groups.argsort(stable=True)].split(counts, dim=0)
    return torch.cat([p * (i + 1) for i, p in enumerate(parts)])


def _slice_by_count(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = (y > 0).sum().item()
    return x.flatten()[:n].cumsum(0)


def _factories(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = int((y > 0).sum())  # int(t): a read as well
    m = (y < 0).sum().item()
    return torch.arange(m) * 2, x.new_zeros(m, 2) + x.sum() + n


def _narrow_and_view(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = (y[0] > 0).sum().item()
    return x.narrow(1, 0, n).reshape(n, -1).exp()


def _count_returned(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int]:
    n = (y > 0).sum().item()
    return x.flatten()[:n].sum(), n + 1


def _nested_tolist(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    rows = (y > 0).long().view(4, 2, 4).sum(-1).tolist()  # [[a, b], ...]: a + b <= 8
    return [x[i, :a + b].sum(0, keepdim=True) * a for i, (a, b) in enumerate(rows)]


PROGRAMS = {f.__name__.strip("_"): f for f in (
    _split_by_counts, _slice_by_count, _factories, _narrow_and_view, _count_returned, _nested_tolist)}


def _calls(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 8, generator=generator), torch.randn(4, 8, generator=generator))
            for _ in range(n)]


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_counts_read_from_values_need_at_most_a_few_traces(name: str) -> None:
    fn = PROGRAMS[name]
    jf = jitcore.jit(fn)
    for x, y in _calls(12):
        assert_same(jf(x, y), fn(x, y))
    # one entry per count before (up to 12 here); a read's counts become symbols when its check fails
    assert jitcore.cache_misses(jf) <= 3, jitcore.miss_reasons(jf)


def test_the_computation_names_the_counts_it_read() -> None:
    jf = jitcore.jit(_split_by_counts)
    for x, y in _calls(4):
        jf(x, y)
    text = str(jitcore.last_traces(jf)[-1])
    assert "= torch.Tensor.tolist(" in text and "torch.split(t" in text and "[n0, n1, n2]" in text, text


def test_a_loop_over_a_count_is_one_entry_per_value_and_right() -> None:
    """``range(n)`` needs the count's value: each value its own entry (a condition on the symbol, checked
    by the computation), never a wrong answer."""

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = (y[0] > 0).sum().item()
        out = x[0]
        for _ in range(n):
            out = out * 0.5 + 1
        return out

    jf = jitcore.jit(fn)
    for x, y in _calls(10):
        assert_same(jf(x, y), fn(x, y))


class _TinyMoE(torch.nn.Module):
    """Top-1 routing with the tokens of each expert split off by their counts (JetMoe's pattern)."""

    def __init__(self, dim: int = 6, experts: int = 3) -> None:
        super().__init__()
        self.router = torch.nn.Linear(dim, experts)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        choice = self.router(x).argmax(-1)
        order = choice.argsort(stable=True)
        counts = torch.bincount(choice, minlength=len(self.experts)).tolist()
        parts = x[order].split(counts, dim=0)
        out = torch.cat([expert(part) for expert, part in zip(self.experts, parts)])
        return torch.zeros_like(x).index_copy(0, order, out)


def test_an_moe_training_step_with_changing_routing_hits_after_the_first_change() -> None:
    torch.manual_seed(0)
    eager, jitted_model = _TinyMoE(), _TinyMoE()
    jitted_model.load_state_dict(eager.state_dict())

    def step(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    jf = jitcore.jit(step)
    generator = torch.Generator().manual_seed(1)
    for _ in range(8):
        x = torch.randn(10, 6, generator=generator)
        assert_same(jf(jitted_model, x), step(eager, x))
        for a, b in zip(eager.parameters(), jitted_model.parameters()):
            torch.testing.assert_close(b.grad, a.grad)
            a.grad = b.grad = None
    assert jitcore.cache_misses(jf) <= 3, jitcore.miss_reasons(jf)


# Lengths read from an offsets tensor split a tensor whose own size is their sum, as a variable-length
# batch is split into its sequences (torch's jagged SDPA splits so). The lengths' sum is a symbol of the
# input (``s0``) that torch compares with the counts (``Eq(u0 + u1 + u2, s0)``): that condition is
# checked on every call once the input's size is read, so one entry serves every list of lengths.
def _split_by_tolist(v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    lengths = offsets[1:] - offsets[:-1]
    return torch.cat([p.sum(0) * (i + 1) for i, p in enumerate(v.split(lengths.tolist(), 0))])


def _split_by_list(v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    lengths = offsets[1:] - offsets[:-1]  # list(t) reads each 0-dim element with __index__
    return torch.cat([p.transpose(0, 1).contiguous().sum(1) for p in v.split(list(lengths), 0)])


def _split_by_diff(v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.stack([p.amax(0) for p in torch.split(v, offsets.diff().tolist())])


def _split_by_diff_list(v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return torch.stack([p.softmax(0).mean(0) for p in v.split(list(offsets.diff()), 0)])


SPLITS = {f.__name__.strip("_"): f for f in (_split_by_tolist, _split_by_list, _split_by_diff,
                                              _split_by_diff_list)}
LENGTHS = ([2, 3, 4], [1, 5, 2], [3, 3, 1], [4, 1, 2], [2, 2, 5], [1, 1, 1], [6, 2, 3], [0, 4, 1])


def _batch(lengths: list[int], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    return torch.randn(sum(lengths), 2, 3, generator=generator), offsets


@pytest.mark.parametrize("name", list(SPLITS))
def test_a_split_by_lengths_read_from_offsets_is_one_entry_over_changing_lengths(name: str) -> None:
    fn = SPLITS[name]
    jf = jitcore.jit(fn)
    generator = torch.Generator().manual_seed(0)
    for lengths in LENGTHS:
        v, offsets = _batch(lengths, generator)
        try:
            expected = fn(v, offsets)
        except IndexError as error:  # amax of an empty sequence: raised on the symbolic entry's call too
            with pytest.raises(IndexError, match="non-zero size"):
                jf(v, offsets)
            assert "non-zero size" in str(error)
            continue
        assert_same(jf(v, offsets), expected)
    # one entry per list of lengths before (8 misses): the condition on the input's size was refused
    assert jitcore.cache_hits(jf) >= len(LENGTHS) - 4, jitcore.miss_reasons(jf)


@pytest.mark.parametrize("name", ["split_by_tolist", "split_by_diff_list"])
def test_a_split_by_lengths_trains_over_changing_lengths(name: str) -> None:
    fn = SPLITS[name]

    def step(v: torch.Tensor, offsets: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v = v.detach().requires_grad_()
        loss = (fn(v * w, offsets) ** 2).sum()
        loss.backward()
        return loss.detach(), v.grad

    jf = jitcore.jit(step)
    generator = torch.Generator().manual_seed(1)
    for lengths in LENGTHS:
        v, offsets = _batch(lengths, generator)
        w = torch.randn(3, generator=generator)
        w_eager, w_jit = w.clone().requires_grad_(), w.clone().requires_grad_()
        assert_same(jf(v, offsets, w_jit), step(v, offsets, w_eager))
        torch.testing.assert_close(w_jit.grad, w_eager.grad)
    assert jitcore.cache_misses(jf) <= 3, jitcore.miss_reasons(jf)


def test_lengths_that_do_not_sum_to_the_size_raise_as_eagerly_on_a_symbolic_entry() -> None:
    jf = jitcore.jit(_split_by_tolist)
    generator = torch.Generator().manual_seed(2)
    for lengths in LENGTHS[:4]:
        v, offsets = _batch(lengths, generator)
        assert_same(jf(v, offsets), _split_by_tolist(v, offsets))
    v, offsets = _batch([2, 3, 4], generator)
    for bad in (torch.tensor([0, 2, 5, 10]), torch.tensor([0, 3, 2, 9])):  # sums 10; a negative length
        with pytest.raises(RuntimeError, match="split_with_sizes expects") as eager:
            _split_by_tolist(v, bad)
        with pytest.raises(RuntimeError, match="split_with_sizes expects") as jitted:
            jf(v, bad)
        assert str(jitted.value) == str(eager.value)


@pytest.mark.parametrize("name", list(SPLITS))
def test_a_split_by_lengths_learns_its_lengths_in_the_miss_that_sees_them_change(name: str) -> None:
    """The symbolic pass of the second call pins other lengths than the first call's pass: it is run
    again at once with them symbols (Note [A symbolic pass that learnt its counts], jit/api.py), so
    the second call's entry serves every later list of lengths (3 misses before)."""
    fn = SPLITS[name]
    jf = jitcore.jit(fn)
    generator = torch.Generator().manual_seed(0)
    for lengths in LENGTHS[:-1]:  # the last one has an empty sequence (amax raises)
        v, offsets = _batch(lengths, generator)
        assert_same(jf(v, offsets), fn(v, offsets))
    assert jitcore.cache_misses(jf) == 2, jitcore.miss_reasons(jf)
