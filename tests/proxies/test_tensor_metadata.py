"""A traced tensor's metadata flags answer as eager's tensor does (jitcore/proxies/tensor.py: every
metadata query answers from the shadow), for tensors the program makes and for results of backward."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import jitcore
from tests.jit.jit_helpers import assert_same


def _made_on_meta(x: torch.Tensor) -> tuple:
    m = torch.empty(3, device="meta")
    return x + 1, m.is_meta, m.device.type, x.is_meta, (x * 2).is_meta


def _made_sparse(x: torch.Tensor) -> tuple:
    s = x.to_sparse()
    return x.sin(), s.is_sparse, s.layout, x.is_sparse, x.is_quantized, s.is_quantized


def _flags_steer_the_program(x: torch.Tensor) -> torch.Tensor:
    s = x.to_sparse()
    return x * 2 if s.is_sparse else x * 3


_EMBEDDING = torch.nn.Embedding(10, 3, sparse=True)


def _sparse_gradient(ix: torch.Tensor) -> tuple:
    _EMBEDDING.weight.grad = None
    _EMBEDDING(ix).sum().backward()
    g = _EMBEDDING.weight.grad
    return g.is_sparse, g.layout, g.shape


PROGRAMS: dict[str, tuple[Callable, Callable[[int], tuple]]] = {
    "made_on_meta": (_made_on_meta, lambda i: (torch.randn(3 + i),)),
    "made_sparse": (_made_sparse, lambda i: (torch.randn(4),)),
    "flags_steer_the_program": (_flags_steer_the_program, lambda i: (torch.randn(4),)),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_metadata_flags_of_tensors_the_program_makes(name: str) -> None:
    fn, make = PROGRAMS[name]
    jitted = jitcore.jit(fn)
    for i in range(3):
        args = make(i)
        assert_same(jitted(*args), fn(*args))
    assert jitcore.cache_misses(jitted) <= 2


def test_a_sparse_gradient_reads_as_sparse() -> None:
    """``nn.Embedding(sparse=True)``'s traced backward makes a sparse_coo gradient; its proxy said
    ``is_sparse`` False, and an optimizer checking it (SparseAdam) raised while tracing."""
    ix = torch.tensor([1, 2, 2])
    expected = _sparse_gradient(ix)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither an eager entry nor a "jitcore bug" warning
        jitted = jitcore.jit(_sparse_gradient)
        for _ in range(2):
            assert jitted(ix) == expected
    assert jitcore.cache_misses(jitted) == 1
    assert _EMBEDDING.weight.grad.is_sparse


def test_an_optimizer_of_sparse_gradients_matches_eager() -> None:
    torch.manual_seed(0)
    models = [torch.nn.Embedding(10, 3, sparse=True) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.SparseAdam(m.parameters(), 0.1) for m in models]

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer, ix: torch.Tensor) -> torch.Tensor:
        loss = model(ix).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    jitted = jitcore.jit(step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            ix = torch.randint(0, 10, (5,), generator=torch.Generator().manual_seed(i))
            assert_same(jitted(models[1], opts[1], ix), step(models[0], opts[0], ix))
            assert_same(models[1].weight, models[0].weight)
    # SparseAdam reads the gradient's indices: that call runs eagerly, said in a warning that is not
    # a jitcore bug report (JC-I002)
    assert not any("JC-I002" in str(w.message) for w in caught), [str(w.message) for w in caught]
