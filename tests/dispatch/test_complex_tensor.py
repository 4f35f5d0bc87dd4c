"""torch's own ``ComplexTensor`` (``torch._subclasses.complex_tensor``): a wrapper subclass of complex
dtype holding a real and an imaginary float tensor, whose ``__torch_dispatch__`` decomposes each complex
op into real ones. Each program runs eagerly and under jitcore, twice (the second call a cache hit, no
eager entry), comparing output types and both parts; gradients flow through ``Complex.apply`` (an
``autograd.Function`` building a ComplexTensor), with the backward inside and outside the function.

Before the fix every program taking a ComplexTensor argument failed (``UnboundLocalError: t0``): the
class's ``__tensor_unflatten__`` keeps ``real.detach()``, so the traced argument held a tensor no input
named (Note [A caller's value holds its own inner tensors], jitcore/proxies/protocol.py). Gradients
through it failed too (``NameError``): see tests/transforms/test_grad_subclass_inputs.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._subclasses.complex_tensor import ComplexTensor
from torch._subclasses.complex_tensor._core import Complex

import jitcore


def _complex(*shape: int) -> ComplexTensor:
    return ComplexTensor(torch.randn(*shape), torch.randn(*shape))


def _parts(value: Any) -> list[Any]:
    if isinstance(value, ComplexTensor):
        return [value.re, value.im]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in _parts(v)]
    return [value]


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype)
    got, want = _parts(actual), _parts(expected)
    assert len(got) == len(want)
    for a, e in zip(got, want):
        if isinstance(e, torch.Tensor):
            assert type(a) is type(e)
            torch.testing.assert_close(a, e)
        else:
            assert a == e


def _traced_twice(fn: Callable[..., Any], *args: Any) -> None:
    expected = fn(*args)
    jfn = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")  # an eager entry fails the test
        first, second = jfn(*args), jfn(*args)
    _same(first, expected)
    _same(second, expected)
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 1)


PROGRAMS: dict[str, Callable[..., Any]] = {
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "chain": lambda x, y: (x * y + x).exp() - y,
    "conj": lambda x, y: x.conj() * y,
    "unary": lambda x, y: torch.sqrt(torch.sin(x)) + torch.log(y),
    "pow": lambda x, y: x**2 + y.reciprocal(),
    "abs": lambda x, y: (x * y).abs(),
    "angle": lambda x, y: torch.angle(x),
    "parts": lambda x, y: x.real * y.imag,
    "sum": lambda x, y: x.sum(),
    "mean_dim": lambda x, y: x.mean(dim=0) + y.sum(dim=-1, keepdim=True),
    "prod": lambda x, y: x.prod(),
    "matmul": lambda x, y: x @ y.mT,
    "linear": lambda x, y: torch.nn.functional.linear(x, y),
    "einsum": lambda x, y: torch.einsum("ij,kj->ik", x, y),
    "views": lambda x, y: x.view(12)[::2] * 2 + y.t().contiguous().view(12)[1::2],
    "cat_stack": lambda x, y: (torch.cat([x, y]), torch.stack([x, y])),
    "index": lambda x, y: x[1:, ::2] + y[:2, :2],
    "where": lambda x, y: torch.where(torch.tensor([True, False, True]).unsqueeze(1), x, y),
    "scalars": lambda x, y: x * 2.5 + (1 + 2j) * y,
    "plain_operand": lambda x, y: x * torch.ones(4),
    "compare": lambda x, y: (x == y, torch.isclose(x, x)),
    "inplace": lambda x, y: x.clone().mul_(y),
    "to_complex128": lambda x, y: x.to(torch.complex128),
    "interleaved": lambda x, y: x.as_interleaved() * 2,
    "polar": lambda x, y: torch.polar(x.abs(), x.angle()),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_complex_tensor_arguments(name: str) -> None:
    torch.manual_seed(0)
    _traced_twice(PROGRAMS[name], _complex(3, 4), _complex(3, 4))


def test_complex_tensors_made_inside() -> None:
    _traced_twice(lambda r, i: ComplexTensor(r, i) * ComplexTensor(i, r), torch.randn(3), torch.randn(3))
    _traced_twice(lambda t: ComplexTensor.from_interleaved(t).exp(), torch.randn(3, dtype=torch.complex64))


def _loss(r: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    z = Complex.apply(r, i)
    return (z * z + z).abs().sum()


def _backward_inside(r: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _loss(r, i).backward()
    return r.grad.clone(), i.grad.clone()


def _leaves() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)


def test_gradients_through_complex_apply_backward_outside() -> None:
    r, i = _leaves()
    _loss(r, i).backward()
    expected = (r.grad, i.grad)
    jfn = jitcore.jit(_loss)
    for _ in range(2):
        r.grad = i.grad = None
        jfn(r, i).backward()
        torch.testing.assert_close((r.grad, i.grad), expected)
    assert jitcore.cache_hits(jfn) == 1


def test_gradients_through_complex_apply_backward_inside() -> None:
    r, i = _leaves()
    expected = _backward_inside(r, i)
    jfn = jitcore.jit(_backward_inside)
    for _ in range(2):
        r.grad = i.grad = None
        torch.testing.assert_close(jfn(r, i), expected)
    assert jitcore.cache_hits(jfn) == 1
