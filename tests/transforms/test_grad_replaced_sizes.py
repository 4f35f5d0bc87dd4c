"""An entry with symbolic sizes whose grad-transform replay replaces a size (Note [A size the replay
replaced], jitcore/transforms/symbolic_sizes.py).

``sum(t.sum() for t in x.split(2))`` of a TwoTensor requiring grad: for ``s0 = 5`` the backward of the last
chunk (one row) makes torch replace ``s0`` by 5. Before, the replacement was refused and the entry ran pass 1
under torch's autograd: 13 to 19 TwoTensor dispatches on every warm call. Now the replacement is checked at
the start of the forward, and a call where it does not hold goes to another entry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402


def _chunk_sums(x: torch.Tensor) -> torch.Tensor:
    return sum(t.sum() for t in x.split(2))


def _pair(n: int, seed: int) -> tuple[TwoTensor, TwoTensor]:
    torch.manual_seed(seed)
    a, b = torch.randn(n, 3), torch.randn(n, 3)
    return (TwoTensor(a.clone(), b.clone()).requires_grad_(),
            TwoTensor(a.clone(), b.clone()).requires_grad_())


def test_a_size_the_replay_replaces_is_checked_and_warm_calls_run_no_dispatch() -> None:
    f = jitcore.jit(_chunk_sums)
    seen_sizes: set[int] = set()
    for i, n in enumerate((4, 5, 6, 5, 6, 7, 8, 7, 8, 5)):
        x, xj = _pair(n, i)
        expected = _chunk_sums(x)
        expected.backward(TwoTensor(torch.ones(()), torch.ones(())))
        misses = jitcore.cache_misses(f)
        with protocol_calls(TwoTensor) as forward:
            got = f(xj)
        with protocol_calls(TwoTensor) as backward:
            got.backward(TwoTensor(torch.ones(()), torch.ones(())))
        assert type(got) is TwoTensor
        assert torch.equal(got.a, expected.a) and torch.equal(got.b, expected.b)
        assert torch.equal(xj.grad.a, x.grad.a) and torch.equal(xj.grad.b, x.grad.b)
        if n in seen_sizes:  # warm: before, pass 1 under torch's autograd dispatched split, sum, add ...
            assert jitcore.cache_misses(f) == misses, n
            assert forward == [], (n, forward)
            assert backward == ["aten.detach.default"], (n, backward)  # AccumulateGrad's, as eagerly
        seen_sizes.add(n)
