"""Programs whose Python follows tensor values (Note [Programs that tensor values drive],
jitcore/jit/value_driven.py): a read site new on call after call stops tracing; repeating values keep
their entries. Differential: every call's result is compared with eager's."""

from __future__ import annotations

import heapq
import warnings

import torch
import torch.nn.functional as F
from jit_helpers import assert_same

import jitcore
from jitcore.jit.value_driven import LIMIT


def _beam_search(h: torch.Tensor, w: torch.Tensor, width: int) -> list:
    beams = [(0.0, [])]
    for _ in range(3):
        candidates = []
        for score, seq in beams:
            top = F.log_softmax((h + len(seq)) @ w, -1).topk(width)
            for v, i in zip(top.values.tolist(), top.indices.tolist()):
                candidates.append((score + v, seq + [i]))
        beams = heapq.nlargest(width, candidates, key=lambda t: t[0])  # the scores decide
    return beams


def _calls(fn, jfn, calls: list[tuple]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            assert_same(jfn(*args), fn(*args))
    return [str(w.message) for w in caught if "jitcore" in str(w.message)]


def test_a_search_over_values_new_on_every_call_stops_tracing() -> None:
    """Each fresh input gave the beam's scores new values: every call traced again (a beam search ran
    500x slower than eager, evicting entries at the cache limit without end). After LIMIT distinct values
    at the read site, calls like these run eagerly through one eager entry; one warning names the line."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 6, generator=g)
    calls = [(torch.randn(4, generator=g), w, 2) for _ in range(3 * LIMIT)]
    jfn = jitcore.jit(_beam_search)
    messages = _calls(_beam_search, jfn, calls)
    assert jitcore.cache_misses(jfn) == LIMIT  # LIMIT - 1 traces, then the eager entry
    assert jitcore.cache_hits(jfn) == 2 * LIMIT
    assert len(messages) == 1 and "runs eagerly for this call and calls like it" in messages[0]
    assert "tolist()" in messages[0] and "test_jit_value_driven.py" in messages[0]
    hits = jitcore.cache_hits(jfn)
    _calls(_beam_search, jfn, calls[:3])  # seen values: answered without a trace
    assert jitcore.cache_misses(jfn) == LIMIT and jitcore.cache_hits(jfn) == hits + 3


def test_inputs_unlike_the_eager_entry_still_trace() -> None:
    """The eager entry guards what the failing entry guarded: another input shape traces again, and
    a program's tensor work with repeating values keeps its traced entries."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(4, 6, generator=g)
    jfn = jitcore.jit(_beam_search)
    _calls(_beam_search, jfn, [(torch.randn(4, generator=g), w, 2) for _ in range(LIMIT + 2)])
    misses = jitcore.cache_misses(jfn)
    w5 = torch.randn(5, 6, generator=g)
    _calls(_beam_search, jfn, [(torch.randn(5, generator=g), w5, 2)])
    assert jitcore.cache_misses(jfn) == misses + 1
    assert jfn.entries[-1].eager_reason is None  # a traced entry, not an eager one


def test_repeating_values_keep_their_traced_entries() -> None:
    """A read whose values repeat (a loop that stops when values settle: a few iteration counts) is
    not value-driven: its entries serve the calls, none of them eager."""

    def settle(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            y = torch.where(x > 1, x / 2, x)
            if torch.equal(y, x):
                break
            x = y
        return x

    calls = [(torch.tensor([float(2 ** (i % 4))]), 6) for i in range(4 * LIMIT)]
    jfn = jitcore.jit(settle)
    assert not _calls(settle, jfn, calls)
    assert jitcore.cache_misses(jfn) == 4
    assert all(entry.eager_reason is None for entry in jfn.entries)
