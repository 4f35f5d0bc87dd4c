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


def _flagged_then_computed(x):
    y = TwoTensor(x.clone(), x).requires_grad_()
    return y * 2


def _parameter_then_computed(x):
    p = torch.nn.Parameter(x)
    return p * 2


@pytest.mark.parametrize("fn, make", [
    (_flagged_then_computed, lambda: torch.randn(3)),
    (_parameter_then_computed, lambda: TwoTensor(torch.randn(2, 3), torch.randn(2, 3))),
], ids=["flagged", "parameter"])
def test_computed_from_a_subclass_leaf_made_inside_has_eagers_node(fn, make) -> None:
    """A subclass value computed from a leaf the program made and keeps: eagerly a non-leaf with a
    grad_fn, whose backward leaves its own ``.grad`` None. It came back a leaf (grad_fn None, its
    ``.grad`` filled by the backward): the program now runs eagerly (JC-J002)."""
    jitted = jitcore.jit(fn)
    for _ in range(2):
        x = make()
        expected, actual = fn(x), jitted(x)
        assert _flags(actual) == _flags(expected)
        assert type(actual.grad_fn) is type(expected.grad_fn)
        torch.testing.assert_close(actual.a, expected.a)
        expected.sum().backward()
        actual.sum().backward()
        assert expected.grad is None and actual.grad is None
    assert "JC-J002" in str(jitted.fallback_reason)


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
