"""Tensors a composite makes while it runs natively under grad (Note [Tensors a native composite
makes], jit/tensor_binding.py): ``combinations``' triangular mask and ``index_fill``'s bool mask were
held weakly, as a caller's captured tensor is; once a collection freed them, a cached call missed and
traced again, and a collection between tracing and the first call's computation passed None as that
input ("unwrap_if_dead() ... Invoked with: None"). The entry holds them now. Each program runs
eagerly and jitted, with a full collection after every call; values and gradients are compared."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore


def _combinations(g: torch.Generator) -> tuple[Callable[..., Any], tuple]:
    return (lambda x: torch.combinations(x, r=2).prod(1)), (torch.randn(5, generator=g),)


def _index_fill(g: torch.Generator) -> tuple[Callable[..., Any], tuple]:
    return (lambda x, v: torch.index_fill(x, 0, torch.tensor([0, 2]), v)), (
        torch.randn(4, 3, generator=g), torch.randn((), generator=g))


@pytest.mark.parametrize("make", [_combinations, _index_fill], ids=["combinations", "index_fill"])
def test_a_composites_own_tensor_outlives_collections(make: Callable[..., Any]) -> None:
    fn, _ = make(torch.Generator().manual_seed(0))
    jitted = jitcore.jit(fn)
    for i in range(4):
        _, args = make(torch.Generator().manual_seed(i))
        eager_args = [a.clone().requires_grad_() for a in args]
        jit_args = [a.clone().requires_grad_() for a in args]
        expected = fn(*eager_args)
        actual = jitted(*jit_args)
        gc.collect()
        torch.testing.assert_close(actual, expected)
        weights = torch.linspace(-1, 1, expected.numel()).reshape(expected.shape)
        for a, b in zip(torch.autograd.grad((actual * weights).sum(), jit_args),
                        torch.autograd.grad((expected * weights).sum(), eager_args)):
            torch.testing.assert_close(a, b)
    assert jitcore.cache_misses(jitted) == 1
