"""``x.data = y`` inside the jitted function (jitcore/langctx/torch.py ``_set_data``).

Before, every such program raised ``AttributeError: property of 'PlainTensorProxy' object has no
setter`` while tracing (bitsandbytes-style code swapping a parameter's data, a training loop's
``p.data = ...``). Now it is recorded as ``x.set_(y.detach())`` with grad mode off, as eager's
``set_data``: ``x`` keeps its autograd identity and shares ``y``'s storage.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402


def _swap_then_write(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.data = y
    y.add_(1)
    return x * 2


def test_data_assignment_aliases_and_is_cached() -> None:
    jitted = jitcore.jit(_swap_then_write)
    for _ in range(2):
        x, y = torch.randn(3), torch.randn(3)
        ex, ey = x.clone(), y.clone()
        expected = _swap_then_write(ex, ey)
        out = jitted(x, y)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, ex)
        y.add_(5)  # x shares y's storage after the call, as eagerly
        torch.testing.assert_close(x, y)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
    assert jitted.fallback_reason is None


def _parameter_program(p: torch.nn.Parameter, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    p.data = y
    return (p * x).sum()


def test_parameter_keeps_its_gradient_after_its_data_is_swapped() -> None:
    jitted = jitcore.jit(_parameter_program)
    for _ in range(2):
        y, x = torch.randn(3), torch.randn(3)
        p, q = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(3))
        out, expected = jitted(p, y.clone(), x), _parameter_program(q, y.clone(), x)
        out.backward()
        expected.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(p.grad, q.grad)
        torch.testing.assert_close(p.detach(), q.detach())
        assert type(p) is torch.nn.Parameter and p.requires_grad
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)


def test_module_weight_data_swapped_inside() -> None:
    torch.manual_seed(0)
    eager_lin = torch.nn.Linear(3, 2)
    jit_lin = torch.nn.Linear(3, 2)
    jit_lin.load_state_dict(eager_lin.state_dict())

    def program(lin: torch.nn.Linear, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        lin.weight.data = w
        return lin(x)

    jitted = jitcore.jit(program)
    for _ in range(2):
        x, w = torch.randn(4, 3), torch.randn(2, 3)
        out, expected = jitted(jit_lin, x, w.clone()), program(eager_lin, x, w.clone())
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(jit_lin.weight, eager_lin.weight)
        torch.testing.assert_close(jit_lin.weight.grad, eager_lin.weight.grad)
    assert jitted.fallback_reason is None


def _other_dtype(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.data = y.double()
    return x + 1


def _wrapper(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.data = y
    return x + 1


def test_what_is_not_traced_runs_eagerly_with_eagers_result() -> None:
    """Another dtype (eager changes ``x``'s) and a plain tensor into a wrapper subclass (eager swaps its
    outer tensor only, which then reports the plain tensor's storage) are eager entries (JC-T001)."""
    for program, make in ((_other_dtype, lambda: (torch.randn(3), torch.randn(3))),
                          (_wrapper, lambda: (TwoTensor(torch.randn(3), torch.randn(3)), torch.randn(3)))):
        jitted = jitcore.jit(program)
        torch.manual_seed(0)
        eager_args = make()
        torch.manual_seed(0)
        jit_args = make()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = jitted(*jit_args)
        expected = program(*eager_args)
        assert type(out) is type(expected) and out.dtype == expected.dtype
        torch.testing.assert_close(out, expected)
        assert any("runs eagerly" in str(w.message) for w in caught)
        assert "x.data = y" in str(jitted.fallback_reason)


def _halve_through_a_vector(m: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    v = torch.nn.utils.parameters_to_vector(m.parameters())
    torch.nn.utils.vector_to_parameters(v * 0.5, m.parameters())
    return v, m.weight.detach().clone()


def _reset_bias(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    for name, p in m.named_parameters():
        if name == "bias":
            p.data = x[:2].clone()
    return m(x[None, :3]) + m.bias


def _fill_with_setattr(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    for p in m.parameters():
        setattr(p, "data", p * 0 + x.sum())  # noqa: B010 - the builtin is what is tested
    return m.weight * 1


def test_data_assignment_to_parameters_the_module_yields() -> None:
    """``module.parameters()`` hands the program the caller's tensors themselves (library code is not
    bound item by item); ``p.data = ...`` on one was done natively, pointing the parameter at a traced
    value's storage: a segmentation fault on the next use (``vector_to_parameters``). It is stored into
    the parameter's input proxy now, recorded as ``set_``."""
    for program, make in ((_halve_through_a_vector, lambda: ()), (_reset_bias, lambda: (torch.randn(4),)),
                          (_fill_with_setattr, lambda: (torch.randn(2),))):
        torch.manual_seed(0)
        eager_model, jit_model = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        jit_model.load_state_dict(eager_model.state_dict())
        jitted = jitcore.jit(program)
        for _ in range(3):
            args = make()
            torch.testing.assert_close(jitted(jit_model, *args), program(eager_model, *args))
            for p, q in zip(jit_model.parameters(), eager_model.parameters()):
                torch.testing.assert_close(p, q)
                assert type(p) is torch.nn.Parameter and p.requires_grad
        assert jitted.fallback_reason is None
        assert jitcore.cache_hits(jitted) >= 1


def _wrapper_under_grad(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    p.data = y * 3
    return (p * 2).sum()


@pytest.mark.parametrize("program", [_wrapper, _wrapper_under_grad], ids=["plain", "parameter"])
def test_a_wrapper_subclass_given_a_wrappers_data_keeps_its_inner_tensors(program) -> None:
    """Note [x.data = y of a wrapper subclass]: eager keeps ``x``'s inner tensors (``x + 1`` computes with
    its old values); traced, with no dispatch on a warm call. Before: JC-T001, the call ran eagerly."""
    parameter = program is _wrapper_under_grad
    jitted = jitcore.jit(program)
    for i in range(3):
        def make(i: int = i) -> tuple[torch.Tensor, torch.Tensor]:
            torch.manual_seed(i)
            x = TwoTensor(torch.randn(3), torch.randn(3))
            return (torch.nn.Parameter(x) if parameter else x), TwoTensor(torch.randn(3), torch.randn(3))
        eager_args, jit_args = make(), make()
        expected = program(*eager_args)
        with protocol_calls(TwoTensor) as seen:
            got = jitted(*jit_args)
        assert type(got) is type(expected)
        assert torch.equal(got.a, expected.a) and torch.equal(got.b, expected.b)
        assert torch.equal(jit_args[0].a, eager_args[0].a) and torch.equal(jit_args[0].b, eager_args[0].b)
        if parameter:
            expected.backward()
            got.backward()
            assert type(jit_args[0].grad) is type(eager_args[0].grad)
            assert torch.equal(jit_args[0].grad.a, eager_args[0].grad.a)
            assert torch.equal(jit_args[0].grad.b, eager_args[0].grad.b)
        if i:
            assert seen == [], seen
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1
