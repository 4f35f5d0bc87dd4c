"""Values made inside a jitted function and flagged with ``requires_grad_()`` come back as eagerly:
``requires_grad``, leaf-ness and class, plain and tensor-subclass values, with and without inputs
that require grad (Note [Subclass values that require grad] in jitcore/dispatch/flatten.py,
``GradTraces.fresh_leaves`` in jitcore/transforms/grad.py)."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _flags(t: torch.Tensor) -> tuple:
    return type(t), t.requires_grad, t.is_leaf, t.dtype, t.shape


def _compare(fn, *args) -> None:
    expected, actual = fn(*args), jitcore.jit(fn)(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    for e, a in zip(expected, actual):
        assert _flags(a) == _flags(e)
        if isinstance(e, TwoTensor):
            torch.testing.assert_close(a.a, e.a)
            torch.testing.assert_close(a.b, e.b)
        else:
            torch.testing.assert_close(a, e)


def _made_inside(x):
    y = TwoTensor(x.clone(), x * 2)
    y.requires_grad_()
    return y


def _chained(x):
    return TwoTensor(x.sin(), x).requires_grad_()


def _of_an_argument(x):
    y = x.clone()
    y.requires_grad_()
    return y


@pytest.mark.parametrize("fn", [_made_inside, _chained])
def test_subclass_made_inside_requires_grad(fn) -> None:
    _compare(fn, torch.randn(3))


def test_subclass_argument_cloned_then_flagged() -> None:
    _compare(_of_an_argument, TwoTensor(torch.randn(3), torch.randn(3)))


def test_computed_from_a_flagged_subclass_requires_grad() -> None:
    def f(x):
        y = TwoTensor(x.clone(), x).requires_grad_()
        return y * 2

    out = jitcore.jit(f)(torch.randn(3))
    assert type(out) is TwoTensor and out.requires_grad  # eagerly too (there with a grad_fn)
    assert f(torch.randn(3)).requires_grad
    out.sum().backward()  # eagerly a backward to the dropped leaf; here into the output's own .grad


@pytest.mark.parametrize("fn", [_made_inside, _of_an_argument])
def test_flagged_next_to_an_input_requiring_grad(fn) -> None:
    def g(x, w):
        y = fn(x)
        return y, w * 2, y * 3

    _compare(g, torch.randn(3), torch.randn(3, requires_grad=True))


def test_a_fresh_leaf_beside_inputs_requiring_grad() -> None:
    def f(x, w):
        y = x.detach().clone().requires_grad_()
        return y, (y * w).sum()

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    y, loss = jitcore.jit(f)(x, w)
    assert y.is_leaf and y.requires_grad and loss.requires_grad and not loss.is_leaf
    loss.backward()
    torch.testing.assert_close(w.grad, x)


def test_a_subclass_input_requiring_grad_says_so_inside() -> None:
    def f(x):
        return x * 2, x.requires_grad, x.is_leaf

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    assert jitcore.jit(f)(x)[1:] == f(x)[1:] == (True, True)


def test_a_value_computed_from_a_subclass_input_requiring_grad() -> None:
    def f(x):
        y = x * 2
        return y.requires_grad, y.is_leaf

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    assert jitcore.jit(f)(x) == f(x) == (True, False)


def test_deepcopy_of_a_non_leaf_subclass_raises_eagers_error() -> None:
    import copy

    def f(x):
        return copy.deepcopy(x * 2)

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    with pytest.raises(RuntimeError, match="graph leaves") as eager:
        f(x)
    with pytest.raises(RuntimeError, match="graph leaves") as jitted:
        jitcore.jit(f)(x)
    assert str(jitted.value) == str(eager.value)
