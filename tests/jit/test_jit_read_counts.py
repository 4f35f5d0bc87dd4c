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
