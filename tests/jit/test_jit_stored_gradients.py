"""The tensor a backward inside a jitted function stores as a leaf's first ``.grad``
(jitcore/jit/autograd_calls.py, Note [A gradient eager steals]).

Eager's ``AccumulateGrad`` stores the backward's own tensor only when nothing else holds it and its
strides are the leaf's; otherwise a copy with the leaf's strides. Differential: each program runs
eagerly and jitted on twin leaves over several calls without zeroing, so a shared or expanded
gradient shows as a wrong accumulation or an error; values, strides, and which gradients are the same
object as each other or as an argument are compared after every call.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _layout(tensors: list[torch.Tensor], others: list[torch.Tensor]) -> list:
    """Each leaf's gradient's strides, and which gradients are one object with another or an argument."""
    grads = [t.grad for t in tensors]
    pool = [*grads, *others]
    return [(None if g is None else g.stride(),
             [j for j, o in enumerate(pool) if g is not None and o is g and j != i])
            for i, g in enumerate(grads)]


def _compare(fn: Callable, make: Callable[[], tuple[list[torch.Tensor], list[torch.Tensor]]],
             calls: int = 3) -> None:
    leaves_e, others_e = make()
    leaves_j, others_j = make()
    jitted = jitcore.jit(fn)
    for _ in range(calls):
        fn(*leaves_e, *others_e)
        jitted(*leaves_j, *others_j)
        assert_same([t.grad for t in leaves_j], [t.grad for t in leaves_e])
        assert _layout(leaves_j, others_j) == _layout(leaves_e, others_e)
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def _leaf(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, requires_grad=True)


def test_an_expanded_gradient_is_stored_dense():
    """``sum``'s backward expands one number: eager stores a dense copy; the jitted call stored the
    stride-0 view, and the next call's accumulation into it raised."""
    def f(a, b):
        (a + b).sum().backward()

    _compare(f, lambda: ([_leaf(3), _leaf(3)], []))


def test_one_gradient_for_two_leaves_is_two_tensors():
    """nn.LSTM's backward gives its two biases one tensor: eager stores two, so accumulating over
    calls adds each bias's gradient once (the jitted call added it twice)."""
    def make():
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(3, 4, batch_first=True)
        return list(lstm.parameters()), [lstm]

    def step(*args):
        *_params, lstm = args
        torch.manual_seed(1)
        out, _ = lstm(torch.randn(2, 5, 3))
        out.square().sum().backward()

    leaves_e, others_e = make()
    leaves_j, others_j = make()
    jitted = jitcore.jit(step)
    for _ in range(3):
        step(*leaves_e, *others_e)
        jitted(*leaves_j, *others_j)
        assert_same([t.grad for t in leaves_j], [t.grad for t in leaves_e])
        assert _layout(leaves_j, []) == _layout(leaves_e, [])
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def test_a_gradient_passed_in_is_copied():
    """``x.backward(g)`` of a leaf: eager's ``x.grad`` is a copy of ``g``, not ``g``."""
    def f(x, g):
        x.backward(g)

    _compare(f, lambda: ([_leaf(3)], [torch.ones(3)]))


def test_a_gradient_keeps_the_leafs_strides():
    """A transposed leaf: its gradient has the leaf's strides, as eager's layout contract makes it."""
    def f(w, x):
        (x @ w).square().sum().backward()

    _compare(f, lambda: ([torch.zeros(4, 3).t().detach().requires_grad_()], [torch.ones(2, 3)]))


@pytest.mark.parametrize("second", ["add", "mul"])
def test_a_leaf_made_inside_accumulates_twice(second):
    def f(x):
        w = torch.zeros(3, requires_grad=True)
        (w + x).sum().backward()
        ((w * 2 if second == "mul" else w + 1) * x).sum().backward()
        return w.grad

    jitted = jitcore.jit(f)
    for i in range(3):
        x = torch.arange(3.0) + i
        assert_same(jitted(x), f(x))
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def test_create_graph_stores_a_gradient_with_history():
    """With ``create_graph=True`` grad mode is on in the backward: eager stores a copy that requires
    grad; a second backward adds out of place."""
    def f(x):
        (x ** 3).sum().backward(create_graph=True)
        first = x.grad
        (x ** 2).sum().backward(create_graph=True)
        return first, x.grad, x.grad is first, x.grad.requires_grad, first.requires_grad

    jitted = jitcore.jit(f)
    for i in range(3):
        xe = torch.arange(3.0).add(i).requires_grad_()
        xj = xe.detach().clone().requires_grad_()
        got, want = jitted(xj), f(xe)
        assert_same([t.detach() if isinstance(t, torch.Tensor) else t for t in got],
                    [t.detach() if isinstance(t, torch.Tensor) else t for t in want])
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def test_a_subclass_leafs_expanded_gradient_is_stored_dense():
    """The same for TwoTensor leaves: eager's copy (``new_empty_strided`` + ``copy_`` through the
    class's dispatch) has the leaf's strides, and the next call accumulates into it."""
    from torch.testing._internal.two_tensor import TwoTensor

    def f(a, b):
        (a + b).sum().backward()

    def make():
        return [TwoTensor(torch.zeros(3), torch.ones(3)).requires_grad_() for _ in range(2)], []

    leaves_e, _ = make()
    leaves_j, _ = make()
    jitted = jitcore.jit(f)
    for _ in range(3):
        f(*leaves_e)
        jitted(*leaves_j)
        for e, j in zip(leaves_e, leaves_j):
            assert type(j.grad) is type(e.grad)
            assert_same([j.grad.a, j.grad.b], [e.grad.a, e.grad.b])
            assert (j.grad.a.stride(), j.grad.b.stride()) == (e.grad.a.stride(), e.grad.b.stride())
        assert _layout(leaves_j, []) == _layout(leaves_e, [])
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


def test_a_stored_view_gradient_can_be_detached_in_place():
    """A Linear weight's gradient is a view (``mm(...).t()``); eager stores its ``detach()``, so the
    old-style zeroing ``p.grad.detach_(); p.grad.zero_()`` works on the next call."""
    def make():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 1)

    def f(m, x):
        for p in m.parameters():
            if p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()
        m(x).sum().backward()
        return m.weight.grad.clone()

    me, mj = make(), make()
    jitted = jitcore.jit(f)
    for i in range(3):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jitted(mj, x), f(me, x))
    assert jitted.fallback_reason is None
