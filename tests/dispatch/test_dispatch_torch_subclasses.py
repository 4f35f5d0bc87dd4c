"""Tensor subclasses written by others: the reference subclasses torch ships for its own tests, each
run through a set of programs eagerly and under jitcore (output type, shape, dtype, inner values,
flatten context), and through a forward + backward."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing._internal.common_subclass import SubclassWithTensorFactory
from torch.testing._internal.custom_tensor import ConstantExtraMetadataTensor, CustomTensorPlainOut
from torch.testing._internal.subclasses import WrapperSubclass
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

MAKERS = {
    "ConstantExtraMetadataTensor": ConstantExtraMetadataTensor,
    "CustomTensorPlainOut": lambda a: CustomTensorPlainOut(a, a * 2),
    "WrapperSubclass": WrapperSubclass,
    "TwoTensor": lambda a: TwoTensor(a, a.clone()),
    "SubclassWithTensorFactory": SubclassWithTensorFactory,
}

PROGRAMS = {
    "add": lambda x: x + 1,
    "mul_self": lambda x: x * x,
    "sum": lambda x: x.sum(),
    "view": lambda x: x.view(12) * 2,
    "t": lambda x: x.t() + 1,
    "inplace": lambda x: x.mul_(2),
    "matmul": lambda x: x @ torch.ones(4, 2),
    "relu": lambda x: torch.relu(x),
    "softmax": lambda x: torch.softmax(x, -1),
    "slice": lambda x: x[1:, :2],
    "cat": lambda x: torch.cat([x, x]),
    "linear": lambda x: torch.nn.functional.linear(x, torch.ones(2, 4)),
    "detach": lambda x: x.detach(),
    "clone": lambda x: x.clone(),
    "methods": lambda x: x.exp().log(),
}


def _inner(t: torch.Tensor) -> torch.Tensor:
    """The first inner tensor of a subclass instance (the tensor itself when plain)."""
    if type(t) is torch.Tensor:
        return t
    names, _ = t.__tensor_flatten__()
    return _inner(getattr(t, names[0]))


def _same(actual, expected) -> None:
    assert type(actual) is type(expected)
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert (
        actual.shape == expected.shape
        and actual.dtype == expected.dtype
        and actual.stride() == expected.stride()
    )
    if type(expected) is not torch.Tensor:
        assert actual.__tensor_flatten__()[1] == expected.__tensor_flatten__()[1]  # the flatten context
    torch.testing.assert_close(_inner(actual), _inner(expected))


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("subclass", sorted(MAKERS))
def test_programs_match_eager(subclass: str, program: str) -> None:
    fn = PROGRAMS[program]
    base = torch.randn(3, 4)
    x_eager, x_jit = MAKERS[subclass](base.clone()), MAKERS[subclass](base.clone())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = fn(x_eager)
        except Exception as exc:  # noqa: BLE001 - the jitted call must raise the same
            with pytest.raises(type(exc)):
                jitcore.jit(fn)(x_jit)
            return
        jf = jitcore.jit(fn)
        _same(jf(x_jit), expected)
        _same(x_jit, x_eager)  # what the program did to its argument (x.mul_(2))
        _same(jf(MAKERS[subclass](base.clone())), fn(MAKERS[subclass](base.clone())))  # the cached call
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize("subclass", ["ConstantExtraMetadataTensor", "TwoTensor", "WrapperSubclass"])
def test_forward_and_backward_match_eager(subclass: str) -> None:
    def f(x, w):
        return (torch.tanh(x @ w) * 2).sum()

    a, w = torch.randn(3, 4), torch.randn(4, 2)
    x1 = MAKERS[subclass](a.clone()).requires_grad_()
    x2 = MAKERS[subclass](a.clone()).requires_grad_()
    w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
    expected, actual = f(x1, w1), jitcore.jit(f)(x2, w2)
    _same(actual, expected)
    expected.backward()
    actual.backward()
    torch.testing.assert_close(w2.grad, w1.grad)
    assert type(x2.grad) is type(x1.grad)
    torch.testing.assert_close(_inner(x2.grad), _inner(x1.grad))
