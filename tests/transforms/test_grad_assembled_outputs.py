"""Tensor-subclass outputs the program assembles from tensors that require grad (Note [Subclass outputs
the program assembles], jitcore/transforms/assembly.py): eagerly the wrapper is its class's own
leaf and its inner tensors keep their graph; the jitted call hands back the same, gradients through
the inner tensors included, and inner tensors that are inputs are the caller's own tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_leaves, tree_map_only

import jitcore


class Unflagged(torch.Tensor):
    """A wrapper that never requires grad, whatever its inner tensor does."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Unflagged:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, requires_grad=False)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> Unflagged:
        return Unflagged(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        args, kwargs = tree_map_only(Unflagged, lambda t: t.inner, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, Unflagged, func(*args, **kwargs))


PROGRAMS: dict[str, tuple[Callable[..., Any], int]] = {
    "two products": (lambda a: TwoTensor(a * 2, a * 3), 1),
    "an input inside": (lambda a: TwoTensor(a, a * 2), 1),
    "an inner tensor also returned": (lambda a: (lambda y: (TwoTensor(y, y.sin()), y))(a * 2), 1),
    "a wrapper that never requires grad": (lambda a: Unflagged(a.exp()), 1),
    "beside a loss": (lambda a, b: (TwoTensor(a @ b, (a * 2) @ b), (a + b).sum()), 2),
    "nested": (lambda a: TwoTensor(TwoTensor(a * 2, a.cos()), TwoTensor(a.sin(), a * 5)), 1),
    "in containers": (lambda a: [TwoTensor(a * 2, a * 3), {"k": TwoTensor(a.exp(), a)}], 1),
    "views": (lambda a: TwoTensor(a.view(3, 1) * 2, (a * 3).view(3, 1)), 1),
    "made a leaf": (lambda a: (TwoTensor(a.detach() * 2, a.detach() * 3).requires_grad_(), a.sum()), 1),
}


def _flat(value: Any) -> list[Any]:
    """The plain tensors of ``value``, inner tensors of wrappers in flatten order."""
    out: list[Any] = []
    for t in tree_leaves(value):
        if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
            out += _flat([getattr(t, n) for n in t.__tensor_flatten__()[0]])
        else:
            out.append(t)
    return out


def _calls(fn: Callable[..., Any], n_args: int) -> list[tuple]:
    results = []
    for seed in range(3):
        torch.manual_seed(seed)
        args = [torch.randn(3, 3, requires_grad=True) for _ in range(n_args)] if n_args > 1 else \
            [torch.randn(3, requires_grad=True)]
        out = fn(*args)
        wrappers = [(type(t), t.requires_grad, t.is_leaf) for t in tree_leaves(out)]
        inner = _flat(out)
        flags = [(t.requires_grad, t.is_leaf, any(t is a for a in args)) for t in inner]
        graph = [t for t in inner if t.grad_fn is not None]
        loss = sum(t.sum() * (k + 1) for k, t in enumerate(graph))
        grads = torch.autograd.grad(loss, args, allow_unused=True)
        results.append((wrappers, flags, [t.detach() for t in inner], grads))
    return results


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_assembled_outputs_as_eagerly(name: str) -> None:
    fn, n_args = PROGRAMS[name]
    expected = _calls(fn, n_args)
    jitted = jitcore.jit(fn)
    got = _calls(jitted, n_args)
    for (e_wrappers, e_flags, *e_tensors), (g_wrappers, g_flags, *g_tensors) in zip(expected, got):
        assert g_wrappers == e_wrappers
        assert g_flags == e_flags
        torch.testing.assert_close(g_tensors, e_tensors)
    assert jitcore.cache_misses(jitted) == 1


def test_the_wrappers_gradient_and_its_inner_tensors() -> None:
    """``out.sum().backward()`` fills the wrapper's own ``.grad`` (a leaf), none of ``a``'s, as eagerly;
    a backward through one inner tensor reaches ``a``."""
    def f(a: torch.Tensor) -> TwoTensor:
        return TwoTensor(a * 2, a * 3)

    for fn in (f, jitcore.jit(f)):
        a = torch.ones(3, requires_grad=True)
        out = fn(a)
        out.sum().backward()
        assert a.grad is None and type(out.grad) is TwoTensor
        torch.testing.assert_close(out.grad.a, torch.ones(3))
        out.b.sum().backward()
        torch.testing.assert_close(a.grad, torch.full((3,), 3.0))


def test_inner_tensors_of_a_subclass_input_stay_the_callers() -> None:
    def f(x: TwoTensor) -> tuple[TwoTensor, TwoTensor]:
        return x, TwoTensor(x.a * 2, x.b)

    jitted = jitcore.jit(f)
    for _ in range(2):
        x = TwoTensor(torch.randn(3), torch.randn(3))
        same, made = jitted(x)
        assert same is x and made.b is x.b
        torch.testing.assert_close(made.a, x.a * 2)
