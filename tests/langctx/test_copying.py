"""copy.copy / copy.deepcopy of tensors inside a jitted function (jitcore/langctx/copying.py):
eager vs jitcore — values, dtypes, classes, requires_grad, leaves, aliasing, memo, eager's errors."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.errors import UnsupportedOperationError

sys.path.insert(0, str(Path(__file__).parent.parent / "jit"))
from jit_helpers import assert_same, check  # noqa: E402


def _same_leaves(actual, expected) -> None:
    """``assert_same`` plus what it leaves out: leaf-ness and the class of every tensor."""
    assert_same(actual, expected)
    flat_a = actual if isinstance(actual, (list, tuple)) else [actual]
    flat_e = expected if isinstance(expected, (list, tuple)) else [expected]
    for a, e in zip(flat_a, flat_e):
        if isinstance(e, torch.Tensor):
            assert type(a) is type(e) and a.is_leaf == e.is_leaf, (type(a), a.is_leaf, e.is_leaf)


def test_deepcopy_is_a_new_tensor() -> None:
    def f(x):
        y = copy.deepcopy(x)
        y.add_(1)  # the source is untouched
        return x * 2, y

    jf = check(f, torch.randn(3, 4))
    check(f, torch.randn(3, 4), jfn=jf)
    assert len(jf.entries) == 1


def test_deepcopy_keeps_dtype_and_strides() -> None:
    def f(x):
        y = copy.deepcopy(x)
        return y, y.stride()

    check(f, torch.randn(4, 3).t())
    check(f, torch.arange(6, dtype=torch.int32))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_deepcopy_of_a_leaf_keeps_requires_grad(requires_grad: bool) -> None:
    def f(x):
        return copy.deepcopy(x)

    x = torch.randn(3, requires_grad=requires_grad)
    _same_leaves(jitcore.jit(f)(x), f(x))


def test_deepcopy_of_a_non_leaf_raises_eagers_error() -> None:
    def f(x):
        return copy.deepcopy(x * 2)

    check(f, torch.randn(3, requires_grad=True))
    check(f, torch.randn(3))  # no grad: x * 2 is a leaf, copied


def test_copy_shares_data_with_its_source() -> None:
    def f(x):
        y = copy.copy(x)
        y.mul_(3)  # eagerly a write to x's storage
        return y

    check(f, torch.randn(5))


def test_copy_of_a_non_leaf_is_a_leaf_requiring_grad() -> None:
    def f(x):
        return copy.copy(x * 2)

    x = torch.randn(3, requires_grad=True)
    _same_leaves(jitcore.jit(f)(x), f(x))


def test_copy_of_other_objects_is_interpreted() -> None:
    class Box:
        def __init__(self, t):
            self.t = t

        def __copy__(self):
            return Box(self.t + 1)

    def f(x):
        return copy.copy([x, 1])[0] + copy.copy(Box(x)).t

    check(f, torch.randn(3))


def test_deepcopy_memo_gives_one_copy_per_tensor() -> None:
    def f(x, w):
        state = {"x": x, "again": x, "nested": [w, {"w": w}], "step": 3}
        copied = copy.deepcopy(state)
        copied["x"].add_(1)
        return copied, copied["x"] is copied["again"], copied["nested"][0] is copied["nested"][1]["w"]

    jf = check(f, torch.randn(2), torch.randn(3))
    out = jf(torch.randn(2), torch.randn(3))
    assert out[1] and out[2]
    assert len(jf.entries) == 1


@pytest.mark.parametrize("requires_grad", [False, True])
def test_deepcopy_of_a_base_and_its_views_shares_the_new_storage(requires_grad: bool) -> None:
    def f(x):
        base, first, last = copy.deepcopy([x, x[1:3], x.view(2, 2).t()])
        base.mul_(10)  # eagerly seen through the copied views too, never through x
        return base, first, last, first.is_leaf, last.stride()

    jf = jitcore.jit(f)
    x = torch.randn(4, requires_grad=requires_grad)
    with torch.no_grad():
        expected = f(x)
        actual = jf(x.detach().clone().requires_grad_(requires_grad))
    assert_same(actual, expected)


def test_deepcopy_of_a_view_alone_copies_its_whole_storage() -> None:
    """Eager copies the view's whole storage: the copy keeps the view's strides and offset. It was a
    compact tensor (strides (3, 1) where eager's are (6, 2))."""

    def f(x):
        y = x * 2
        copies = copy.deepcopy(x[:, ::2]), copy.deepcopy(y[1:]), copy.deepcopy(x.view(torch.int32)[1:])
        return [(c, c.stride(), c.storage_offset()) for c in copies]

    jf = check(f, torch.randn(4, 6))
    check(f, torch.randn(4, 6), jfn=jf)
    assert len(jf.entries) == 1 and jf.fallback_reason is None


def test_deepcopy_of_a_view_before_its_base_shares_the_new_storage() -> None:
    def f(x):
        first, base = copy.deepcopy([x[1:], x])  # eager copies them sharing one new storage
        base.add_(1)  # seen through the copied view too
        return first, base

    jf = check(f, torch.randn(4))
    assert len(jf.entries) == 1 and jf.fallback_reason is None


def test_deepcopy_of_a_tensor_with_a_grad_runs_eagerly() -> None:
    def f(x):
        y = copy.deepcopy(x)
        return y, y.grad  # eager copies the .grad too

    x = torch.randn(3, requires_grad=True)
    x.grad = torch.ones(3)
    jfn = jitcore.jit(f)
    with pytest.warns(UserWarning, match="runs eagerly for this call"):
        y, grad = jfn(x)
    assert torch.equal(y, x) and y is not x and torch.equal(grad, x.grad) and grad is not x.grad
    with pytest.raises(UnsupportedOperationError, match="has a .grad"):
        jitcore.jit(f, fullgraph=True)(x)


def test_deepcopy_of_a_parameter_is_a_parameter() -> None:
    def f(p):
        q = copy.deepcopy(p)
        return q, type(q) is nn.Parameter

    p = nn.Parameter(torch.randn(3))
    expected, actual = f(p), jitcore.jit(f)(p)
    _same_leaves(actual[0], expected[0])
    assert actual[1] is expected[1] is True


def test_deepcopy_of_a_subclass_value() -> None:
    def f(x):
        y = copy.deepcopy(x)
        return y * 2, type(y) is TwoTensor

    jf = check(f, TwoTensor(torch.randn(3), torch.randn(3)))
    check(f, TwoTensor(torch.randn(3), torch.randn(3)), jfn=jf)
    assert len(jf.entries) == 1


def test_deepcopy_of_a_subclass_requiring_grad() -> None:
    def f(x):
        return copy.deepcopy(x)

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    expected, actual = f(x), jitcore.jit(f)(x)
    assert type(actual) is TwoTensor and actual.requires_grad and actual.is_leaf
    assert expected.requires_grad and expected.is_leaf
    torch.testing.assert_close(actual.a, expected.a)
    torch.testing.assert_close(actual.b, expected.b)


def test_deepcopy_of_a_subclass_made_inside() -> None:
    def f(a, b):
        y = copy.deepcopy(TwoTensor(a.sin(), b))
        return y.a + y.b

    check(f, torch.randn(3), torch.randn(3))


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.fc(x))


def test_deepcopy_of_a_module_a_target_network() -> None:
    torch.manual_seed(0)
    model = _Net().eval()

    def step(x, tau):
        target = copy.deepcopy(model)
        with torch.no_grad():
            for pt, p in zip(target.parameters(), model.parameters()):
                pt.mul_(1 - tau).add_(p, alpha=tau)
        return target(x), [p.requires_grad for p in target.parameters()]

    jf = jitcore.jit(step)
    for _ in range(2):
        x = torch.randn(5, 4)
        expected, actual = step(x, 0.5), jf(x, 0.5)
        assert_same(actual, expected)
    assert len(jf.entries) == 1
    with torch.no_grad():
        model.fc.weight.add_(1)  # the copy is made from the model as it is at each call
    x = torch.randn(5, 4)
    assert_same(jf(x, 0.5), step(x, 0.5))
