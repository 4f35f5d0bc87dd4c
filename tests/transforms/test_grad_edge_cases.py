"""Outputs and inputs that are easy to get wrong when connecting a trace to autograd: inputs returned
as they are, views, the same tensor returned twice, integer outputs, unused inputs, in-place ops on
intermediates, detach, buffers mutated in place (BatchNorm running statistics)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import jitcore


def _run(fn, args):
    args = [t.detach().clone().requires_grad_(t.requires_grad) for t in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.float().sum() * (i + 1) for i, o in enumerate(outs) if o.requires_grad), torch.zeros(()))
    loss.backward()
    return list(outs), [t.grad for t in args]


CASES = {
    "identity": lambda x, w: x,
    "view": lambda x, w: x.view(-1),
    "an input among the outputs": lambda x, w: (x * w, w),
    "integer output": lambda x, w: (x.sin(), x.argmax()),
    "same output twice": lambda x, w: (x.sin(),) * 2,
    "unused input": lambda x, w: x.cos(),
    "in-place on intermediates": lambda x, w: x.mul(2).add_(w).relu_(),
    "constant output": lambda x, w: (x * w, torch.zeros(3)),
    "detach": lambda x, w: x.detach() * x + w,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(name: str) -> None:
    fn = CASES[name]
    args = (torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True))
    expected, got = _run(fn, args), _run(jitcore.jit(fn), args)
    torch.testing.assert_close(got, expected)


def test_batch_norm_training_updates_buffers_and_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    jitted_model = copy.deepcopy(model)
    jmodel = jitcore.jit(jitted_model)
    img = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        model(img).sum().backward()
        jmodel(img).sum().backward()
    torch.testing.assert_close(
        [p.grad for p in jitted_model.parameters()], [p.grad for p in model.parameters()]
    )
    torch.testing.assert_close(jitted_model[1].running_mean, model[1].running_mean)
    torch.testing.assert_close(jitted_model[1].running_var, model[1].running_var)
    assert jitcore.cache_misses(jmodel) == 1


def test_a_missing_derivative_raises_in_backward_as_in_eager() -> None:
    def f(x, y):
        return torch.special.zeta(x, y).sum()

    x, y = (torch.rand(3) + 2).requires_grad_(), torch.rand(3) + 1
    jf = jitcore.jit(f)
    out = jf(x, y)  # the forward works, as eagerly
    torch.testing.assert_close(out, f(x, y))
    with pytest.raises(NotImplementedError, match="derivative for 'zeta' is not implemented"):
        out.backward()


def _replace_weight(m: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    m.weight = nn.Parameter(m.weight.detach() * 2)  # a new leaf stored on the module
    return m(x)


_STORE: dict[str, torch.Tensor] = {}


def _store_parameter(m: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    _STORE["w"] = w = nn.Parameter(torch.ones(3))
    return (x * w).sum() + m(x).sum()


def _return_leaf(m: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = nn.Parameter(m.weight.detach().clone())
    return (x @ w.t()).sum(), w


@pytest.mark.parametrize("requires_grad", [True, False], ids=["module_requires_grad", "frozen_module"])
@pytest.mark.parametrize("program", [_replace_weight, _store_parameter, _return_leaf])
def test_a_leaf_made_inside_and_handed_out_gets_its_gradient(program, requires_grad: bool) -> None:
    """A parameter the function makes and stores on a module, in a dict, or returns, with a value
    computed from it: a backward from that value fills the parameter's ``.grad`` as eagerly (before:
    None, a fresh leaf came out of the computation apart from the values computed from it)."""
    torch.manual_seed(0)
    base = nn.Linear(3, 2).requires_grad_(requires_grad)
    jitted = jitcore.jit(program)
    eager_module, jit_module = copy.deepcopy(base), copy.deepcopy(base)
    for _ in range(3):  # (the first call makes a frozen module's weight a parameter requiring grad)
        eager_module.zero_grad()
        jit_module.zero_grad()
        x = torch.randn(4, 3)
        expected = program(eager_module, x)
        expected_leaf = _STORE.pop("w", None) if program is _store_parameter else None
        got = jitted(jit_module, x)
        got = got if isinstance(got, tuple) else (got,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        expected[0].sum().backward()
        expected_leaf = expected_leaf if expected_leaf is not None else (
            expected[1] if program is _return_leaf else eager_module.weight)
        got_leaf = _STORE.pop("w", None) if program is _store_parameter else (
            got[1] if program is _return_leaf else jit_module.weight)
        got[0].sum().backward()
        torch.testing.assert_close(got[0], expected[0])
        assert type(got_leaf) is type(expected_leaf) and got_leaf.is_leaf
        torch.testing.assert_close(got_leaf.grad, expected_leaf.grad)
        for p, q in zip(jit_module.parameters(), eager_module.parameters(), strict=True):
            assert (p.grad is None) == (q.grad is None)
            if q.grad is not None:
                torch.testing.assert_close(p.grad, q.grad)
    assert jitcore.cache_hits(jitted) >= 1


def test_a_subclass_input_returned_beside_a_value_computed_from_it_is_traced() -> None:
    """A tensor-subclass input requiring grad, returned beside a value computed from it, is no leaf
    the function made: the entry is traced (no eager entry) and the gradient reaches the input."""
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x.sin() * 2).sum()

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for _ in range(2):
            a, b = torch.randn(3), torch.randn(3)
            x, x2 = TwoTensor(a, b).requires_grad_(), TwoTensor(a.clone(), b.clone()).requires_grad_()
            got, expected = jitted(x), f(x2)
            torch.testing.assert_close(got[1], expected[1])
            got[1].backward()
            expected[1].backward()
            torch.testing.assert_close(x.grad, x2.grad)
    assert jitcore.cache_hits(jitted) == 1


class _Keeper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kept: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.kept = w  # stored as it is
        return w, (x @ w).sin().sum()


@pytest.mark.parametrize("kind", ["plain", "two_tensor"])
def test_an_input_returned_as_it_is_comes_back_itself(kind: str) -> None:
    """``return w, loss`` and ``self.kept = w`` with ``w`` an input requiring grad: the caller gets
    ``w`` itself (a leaf whose ``.grad`` the loss's backward fills), as eagerly; before, a non-leaf
    alias made by the computation, whose ``.grad`` stayed None."""
    from torch.testing._internal.two_tensor import TwoTensor

    keeper, jitted = _Keeper(), jitcore.jit(_Keeper())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # traced: no call runs eagerly
        for _ in range(2):
            x, a, b = torch.randn(2, 3), torch.randn(3, 2), torch.randn(3, 2)
            w1, w2 = ((TwoTensor(a, b), TwoTensor(a.clone(), b.clone())) if kind == "two_tensor"
                      else (a, a.clone()))
            w1.requires_grad_()
            w2.requires_grad_()
            expected, got = keeper(x, w1), jitted(x, w2)
            assert got[0] is w2 and jitted.kept is w2 and got[0].is_leaf
            expected[1].backward()
            got[1].backward()
            torch.testing.assert_close(got[1], expected[1])
            torch.testing.assert_close(got[0].grad, expected[0].grad)
    assert jitcore.cache_hits(jitted) == 1


def _setitem(x: torch.Tensor) -> torch.Tensor:
    x[0] = 5.0
    return x * 2


WRITES_INTO_A_NON_LEAF_INPUT = {
    "mul_": lambda x: x.mul_(2),
    "relu_inplace": lambda x: torch.nn.functional.relu(x, inplace=True) * 2,
    "iadd": lambda x: x.__iadd__(1) * 2,
    "setitem": _setitem,
    "module_relu_inplace": nn.Sequential(nn.ReLU(inplace=True), nn.Linear(3, 2)),
}


@pytest.mark.parametrize("name", list(WRITES_INTO_A_NON_LEAF_INPUT))
def test_an_in_place_write_into_a_non_leaf_input(name: str) -> None:
    """In-place writes into an input that requires grad and is no leaf (an activation the caller
    computed): values, the input's new contents and history, and the gradient reaching the
    caller's leaf are eager's (before: RuntimeError 'a leaf Variable that requires grad is being used
    in an in-place operation' while tracing, where eager computes)."""
    program = WRITES_INTO_A_NON_LEAF_INPUT[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        base = torch.randn(3, requires_grad=True)
        x, x2 = base * 1, base * 1
        got, expected = jitted(x), program(x2)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(x, x2)
        assert (got is x) == (expected is x2)
        got.sum().backward(retain_graph=True)
        jitted_grad, base.grad = base.grad, None
        expected.sum().backward(retain_graph=True)
        torch.testing.assert_close(jitted_grad, base.grad)
        base.grad = None
        (x * 3).sum().backward()  # through x's own (rebased) history afterwards
        jitted_grad, base.grad = base.grad, None
        (x2 * 3).sum().backward()
        torch.testing.assert_close(jitted_grad, base.grad)
    assert jitcore.cache_hits(jitted) == 1


def test_an_inference_tensor_returned_beside_a_loss() -> None:
    """An input made under inference mode (no version counter), returned as it is beside a loss of
    another input requiring grad: it comes back itself, as eagerly (reading its version raised)."""
    with torch.inference_mode():
        x = torch.randn(3)

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (w * 2).sum() + x.sum()

    jitted = jitcore.jit(f)
    for _ in range(2):
        w = torch.randn(3, requires_grad=True)
        got, expected = jitted(x, w), f(x, w)
        assert got[0] is x
        torch.testing.assert_close(got[1], expected[1])
    assert jitcore.cache_hits(jitted) == 1
