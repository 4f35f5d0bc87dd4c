"""Tensor subclasses written by others (issue 15, zoo46): differential tests, eager against ``jitcore.jit``
over several calls (values, output types, inner tensors, gradients, cache entries, the subclass code a
warm call runs), for what this round's survey found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

# --- an inner tensor of a subclass value under grad ---------------------------------------------------
# Note [A tensor a subclass's code stores under grad] (jitcore/transforms/jit_hook.py): an inner tensor
# of a subclass value a call returns (``x.grad.a`` after a backward inside the function) was taken for a
# tensor only the call's resolution names, and the whole call ran eagerly (JC-J002).


def _backward_of_a_wrapper_made_inside(a: torch.Tensor, b: torch.Tensor) -> tuple:
    x = TwoTensor(a, b).requires_grad_()
    (x * x).sum().backward()
    return x.grad.a, x.grad.b


def _backward_of_a_wrapper_input(x: torch.Tensor) -> tuple:
    (x.sin() * x).sum().backward()
    return x.grad.a, x.grad.b


def _grad_with_a_graph(x: torch.Tensor) -> tuple:
    (g,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
    return g.a, g.b.sum()


def _grad_taken_and_reset(x: torch.Tensor) -> tuple:
    x.sum().backward()
    g = x.grad
    x.grad = None
    return g.a * 2, g.b


def _inner_of_a_wrapper_over_a_leaf(x: torch.Tensor) -> tuple:
    y = TwoTensor(x, x * 2).sin()
    return y.a, y


def _two(n: int) -> Callable[[], tuple]:
    return lambda: (TwoTensor(torch.randn(n), torch.randn(n)).requires_grad_(),)


_INNER_UNDER_GRAD: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "backward_of_a_wrapper_made_inside": (_backward_of_a_wrapper_made_inside,
                                          lambda: (torch.randn(4), torch.randn(4))),
    "backward_of_a_wrapper_input": (_backward_of_a_wrapper_input, _two(4)),
    "grad_with_a_graph": (_grad_with_a_graph, _two(3)),
    "grad_taken_and_reset": (_grad_taken_and_reset, _two(5)),
    "inner_of_a_wrapper_over_a_leaf": (_inner_of_a_wrapper_over_a_leaf,
                                       lambda: (torch.randn(3, requires_grad=True),)),
}


@pytest.mark.parametrize("name", list(_INNER_UNDER_GRAD))
def test_an_inner_tensor_of_a_subclass_value_under_grad_is_traced(name: str) -> None:
    fn, make = _INNER_UNDER_GRAD[name]
    jitted = jitcore.jit(fn)
    for i in range(3):
        torch.manual_seed(i)
        eager_args = make()
        torch.manual_seed(i)
        jit_args = make()
        expected = fn(*eager_args)
        with protocol_calls(TwoTensor) as calls:
            actual = jitted(*jit_args)
        assert jitted.fallback_reason is None, jitted.fallback_reason
        assert_same_flattened(actual, expected, f"call {i} output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} arguments")
        assert_same_flattened([a.grad for a in jit_args], [a.grad for a in eager_args], f"call {i} .grad")
        if i:
            assert calls == [], (i, calls)  # a warm call runs only the flattened trace
        for got, want in zip(actual, expected):
            if want.requires_grad:  # the gradient of what the call returns, as eagerly
                (grad_got,) = torch.autograd.grad(got.sum(), jit_args, allow_unused=True)
                (grad_want,) = torch.autograd.grad(want.sum(), eager_args, allow_unused=True)
                assert_same_flattened(grad_got, grad_want, f"call {i} gradient")
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


# --- float() and int() of a wrapper subclass ----------------------------------------------------------
# Note [float() of a wrapper subclass] (jitcore/langctx/python.py): ``float(x.sum())`` of a TwoTensor was a
# value C used, specialized: an entry per value, where ``x.sum().item()`` and a plain tensor's ``float``
# take one.


def _floats(n: int) -> tuple:
    return (TwoTensor(torch.randn(n), torch.randn(n)),)


def _ints(n: int) -> tuple:
    return (TwoTensor(torch.randint(-4, 5, (n,)), torch.randint(-4, 5, (n,))),)


_CONVERTED: dict[str, tuple[Callable[..., Any], Callable[[int], tuple], int]] = {
    "float_returned": (lambda x: float(x.sum()), _floats, 1),
    "float_scales": (lambda x: x * float(x.sum()), _floats, 1),
    "int_of_ints": (lambda x: (int(x.sum()), x * int(x.sum())), _ints, 1),
    "float_of_ints": (lambda x: (float(x.sum()), type(float(x.sum())).__name__), _ints, 1),
    "int_of_floats": (lambda x: (int(x.sum() * 10), type(int(x.sum())).__name__), _floats, 1),
    "float_branched_on": (lambda x: x * 2 if float(x.sum()) > 0 else x * 3, _floats, 2),
}


@pytest.mark.parametrize("name", list(_CONVERTED))
def test_float_of_a_wrapper_is_a_number_of_the_computation(name: str) -> None:
    fn, make, entries = _CONVERTED[name]
    jitted = jitcore.jit(fn)
    signs = set()
    for i in range(6):
        torch.manual_seed(i)
        (arg,) = make(3)
        expected = fn(arg)
        with protocol_calls(TwoTensor) as calls:
            actual = jitted(arg)
        assert_same_flattened(actual, expected, f"call {i} output")
        if i >= 4:
            assert calls == [], (i, calls)  # a warm call runs only the flattened trace
        signs.add(float(arg.sum()) > 0)
    assert signs == {True, False}
    assert jitted.fallback_reason is None
    assert jitcore.cache_misses(jitted) == entries


# --- a boolean mask of a wrapper in a symbolic pass -----------------------------------------------------
# Note [A mask in a symbolic pass] (jitcore/jit/value_reads.py): the index a wrapper's dispatch runs on
# its inner tensors with the mask was refused in the symbolic pass, so every count traced again (one
# entry per count where a plain tensor takes 2).


def _two_by(n: int, count: int, *shape: int) -> tuple:
    return TwoTensor(torch.randn(n, *shape), torch.randn(n, *shape)), torch.arange(n) < count


def _two_and_plain_by(n: int, count: int) -> tuple:
    x, mask = _two_by(n, count)
    return x, torch.randn(n), mask


_MASKS: dict[str, tuple[Callable[..., Any], Callable[[int, int], tuple]]] = {
    "summed": (lambda x, m: x[m].sum(), _two_by),
    "returned": (lambda x, m: x[m], _two_by),
    "rows_summed": (lambda x, m: x[m].sum(0), lambda n, c: _two_by(n, c, 3)),
    "times_a_plain_tensor_by_the_same_mask": (lambda x, y, m: x[m] * y[m], _two_and_plain_by),
    "viewed_and_expanded": (lambda x, m: x[m].view(-1, 1).expand(-1, 2), _two_by),
    "masked_select": (lambda x, m: torch.masked_select(x, m).sum(), _two_by),
    "of_a_wrapper_of_wrappers": (lambda x, m: x[m].sum(),
                                 lambda n, c: (TwoTensor(*_two_by(n, c)[:1], *_two_by(n, c)[:1]),
                                               torch.arange(n) < c)),
}


@pytest.mark.parametrize("name", list(_MASKS))
def test_a_mask_of_a_wrapper_takes_two_entries_for_every_count(name: str) -> None:
    fn, make = _MASKS[name]
    jitted = jitcore.jit(fn)
    for i, count in enumerate((1, 2, 3, 4, 6, 0, 5)):
        torch.manual_seed(i)
        eager_args = make(6, count)
        torch.manual_seed(i)
        jit_args = make(6, count)
        expected = fn(*eager_args)
        with protocol_calls(TwoTensor) as calls:
            actual = jitted(*jit_args)
        assert_same_flattened(actual, expected, f"call {i} (count {count}) output")
        if i >= 2:
            assert calls == [], (i, calls)  # a warm call runs only the flattened trace
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 5)
