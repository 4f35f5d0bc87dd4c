"""Tensor subclasses as others write them and use them, round 9 (issue 15, helper zoo29): torch's own
subclasses (TwoTensor, nested jagged tensors) and libraries' patterns, each program run eagerly and
under jitcore.jit on equal fresh arguments. Each test failed before its fix."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import assert_same_nested, assert_same_values
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

# --- in-place writes into a subclass input that requires grad and is no leaf -----------------------------
# Note [A caller's non-leaf subclass value] (jit/subclass_inputs.py): the shadow was a leaf, so the write
# raised "a leaf Variable that requires grad is being used in an in-place operation" while tracing.


def _set_first(x: torch.Tensor) -> torch.Tensor:
    x[0] = 0.0
    return x * x


def _write_into_a_view(x: torch.Tensor) -> torch.Tensor:
    x[1].mul_(3)
    return x.sin()


def _add_in_place(x: torch.Tensor) -> torch.Tensor:
    x += 1
    return x


WRITES: dict[str, Callable[[torch.Tensor], Any]] = {
    "add_": lambda x: x.add_(1),
    "mul_then_use": lambda x: x.mul_(2) * 3,
    "setitem": _set_first,
    "into_a_view": _write_into_a_view,
    "iadd": _add_in_place,
    "relu_inplace": lambda x: F.relu(x, inplace=True) * 2,
    "written_and_another_output": lambda x: (x.clamp_(-0.5, 0.5), x.exp()),
}


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", list(WRITES))
def test_an_in_place_write_into_a_non_leaf_two_tensor_input(name: str) -> None:
    """``TwoTensor(...).requires_grad_() * 1`` written in place: values, inner tensors, the input's new
    contents, whether the output is the input, and the gradients reaching the caller's leaf through the
    output and through the input's rebased history are eager's; one trace, then hits."""
    program = WRITES[name]
    jitted = jitcore.jit(program)
    for _ in range(3):
        torch.manual_seed(0)
        leaf = TwoTensor(torch.randn(3, 4), torch.randn(3, 4)).requires_grad_()
        x, x2 = leaf * 1, leaf * 1
        got, expected = jitted(x), program(x2)
        assert_same_values(got, expected)
        assert_same_values(x, x2)
        assert (_first(got) is x) == (_first(expected) is x2)
        grads = []
        for out, inp in ((got, x), (expected, x2)):
            _first(out).sum().backward(retain_graph=True)
            (inp * 3).sum().backward()
            grads.append(leaf.grad)
            leaf.grad = None
        assert_same_values(grads[0], grads[1])
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
    assert jitted.fallback_reason is None


@pytest.mark.parametrize("name", ["add_", "mul_then_use", "iadd", "relu_inplace"])
def test_an_in_place_write_into_a_non_leaf_nested_jagged_input(name: str) -> None:
    """``nt * 1`` over values requiring grad, written in place: components and the values' gradient as
    eagerly; the output keeps the input's ragged size."""
    program = WRITES[name]
    jitted = jitcore.jit(program)
    for _ in range(3):
        torch.manual_seed(0)
        values = torch.randn(7, 4, requires_grad=True)
        offsets = torch.tensor([0, 2, 7])
        x = torch.nested.nested_tensor_from_jagged(values, offsets) * 1
        x2 = torch.nested.nested_tensor_from_jagged(values, offsets) * 1
        got, expected = jitted(x), program(x2)
        assert_same_nested(got, expected)
        assert_same_nested(x, x2)
        assert got.shape[1] is x.shape[1] or got.shape[1] == x.shape[1]
        grads = []
        for out in (got, expected):
            out.values().sum().backward()
            grads.append(values.grad)
            values.grad = None
        torch.testing.assert_close(grads[0], grads[1])
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def _backward_inside(x: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    (x * 2).sum().backward()
    return leaf.grad.a * 1


def test_a_backward_inside_through_a_non_leaf_two_tensor_input_runs_eagerly() -> None:
    """``backward()`` inside the function through such an input goes on into the caller's graph: the call
    runs eagerly (JC-J002), with eager's gradient (before: the caller's wrapper got a ``.grad`` of its
    own and the leaf none)."""
    jitted = jitcore.jit(_backward_inside)
    results = []
    for run in (jitted, _backward_inside):
        torch.manual_seed(0)
        leaf = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results.append(run(leaf * 1, leaf))
    torch.testing.assert_close(results[0], results[1])
    assert "caller's graph" in str(jitted.fallback_reason)


def test_is_leaf_of_a_non_leaf_two_tensor_input() -> None:
    """``x.is_leaf`` of such an input is False, as eagerly (its shadow was a leaf)."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        return x * 2, x.is_leaf

    leaf = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    got, expected = jitcore.jit(f)(leaf * 1), f(leaf * 1)
    assert_same_values(got, expected)


# --- what an overridable torch function written in Python hands __torch_function__ ------------------------
# Note [Python functions that hand their arguments] (dispatch/handed.py): jitcore handed the program's
# arguments as written, eager hands what the function's own handle_torch_function call names.


class Recording(torch.Tensor):
    """Records what its ``__torch_function__`` is handed: the callable's name, how many positional
    arguments, which keyword arguments."""

    log: list[tuple[str, int, tuple[str, ...]]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cls.log.append((func.__name__, len(args), tuple(sorted(kwargs))))
        return super().__torch_function__(func, types, args, kwargs)


HANDED: dict[str, Callable[[torch.Tensor], Any]] = {
    "torch.norm": lambda x: torch.norm(x, p=1, dim=1),
    "Tensor.norm": lambda x: x.norm(),
    "F.softmax": lambda x: F.softmax(x, -1),
    "F.dropout": lambda x: F.dropout(x, 0.1, False),
    "F.layer_norm": lambda x: F.layer_norm(x, (6,)),
    "F.relu": lambda x: F.relu(x),
    "F.cross_entropy": lambda x: F.cross_entropy(x, torch.tensor([0, 1, 2, 3])),
    "Tensor.split": lambda x: x.split(2),
    "torch.unique": lambda x: torch.unique(x > 0),
    "torch.tensordot": lambda x: torch.tensordot(x, x, dims=([1], [1])),
    "reversed": lambda x: reversed(x),
    "rpow": lambda x: 2**x,
    "rmatmul": lambda x: x.__rmatmul__(torch.ones(2, 4)),
}


@pytest.mark.parametrize("name", list(HANDED))
def test_a_python_torch_function_hands_its_own_arguments(name: str) -> None:
    """A subclass's ``__torch_function__`` is handed the callable, positional and keyword arguments
    eager hands it (``F.softmax(x, -1)``: ``(x,)`` with ``dim``, ``_stacklevel``, ``dtype``); the results
    are eager's. (``reversed(x)`` handed a second argument and gave NotImplemented.)"""
    program = HANDED[name]

    def logged(x: torch.Tensor) -> tuple[Any, list]:
        Recording.log.clear()
        out = program(x)
        return out, list(Recording.log)

    jitted = jitcore.jit(logged)
    for _ in range(2):
        x = torch.randn(4, 6).as_subclass(Recording)
        expected = logged(x)
        Recording.log.clear()  # each call starts from an empty log, so the second is a hit
        got = jitted(x)
        assert got[1] == expected[1]
        assert_same_values(got[0], expected[0])
    assert jitcore.cache_hits(jitted) == 1


def test_masked_tensor_norm_raises_as_eagerly() -> None:
    """``torch.norm(m)`` of a MaskedTensor: eager hands MaskedTensor's table ``p=``, ``dim=``, ... and it
    raises TypeError; jitted it computed a norm."""
    from torch.masked import masked_tensor

    data = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = masked_tensor(data, data > 0)
        with pytest.raises(TypeError) as eager:
            torch.norm(m)
        with pytest.raises(TypeError) as jitted:
            jitcore.jit(lambda m: torch.norm(m))(m)
    assert str(jitted.value) == str(eager.value)


# --- setattr() on a module inside the function -------------------------------------------------------------
# setattr() ran natively: nn.Module.__setattr__ did not see a traced nn.Parameter as one.


class Tag(torch.Tensor):
    """A plain subclass, as a checkpoint's tensors may be."""


def _load_assigning(m: torch.nn.Linear, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    m.load_state_dict({"weight": weight, "bias": torch.ones(3)}, assign=True)
    return m(x)


def _setattr_a_parameter(m: torch.nn.Linear, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    setattr(m, "weight", torch.nn.Parameter(weight * 2))  # noqa: B010 - the builtin is what is tested
    return m(x)


@pytest.mark.parametrize("program", [_load_assigning, _setattr_a_parameter],
                         ids=["load_state_dict", "setattr"])
@pytest.mark.parametrize("weight_class", [torch.Tensor, Tag], ids=["plain", "subclass"])
def test_a_parameter_set_with_setattr_inside(program: Callable[..., Any], weight_class: type) -> None:
    """``load_state_dict(..., assign=True)`` and ``setattr(m, "weight", nn.Parameter(...))`` inside the
    function: the output, the module's new parameters (class, values, ``requires_grad``) and the
    gradient they get are eager's (before: RuntimeError "cannot assign 'torch.FloatTensor' as parameter
    'weight' (torch.nn.Parameter or None expected)")."""
    jitted = jitcore.jit(program)
    for _ in range(2):
        torch.manual_seed(0)
        module = torch.nn.Linear(4, 3)
        modules = [module, copy.deepcopy(module)]
        x, weight = torch.randn(2, 4), torch.randn(3, 4).as_subclass(weight_class)
        got, expected = jitted(modules[0], x, weight), program(modules[1], x, weight)
        assert_same_values(got, expected)
        for name in ("weight", "bias"):
            assert_same_values(getattr(modules[0], name), getattr(modules[1], name))
        got.sum().backward()
        expected.sum().backward()
        assert_same_values(modules[0].weight.grad, modules[1].weight.grad)


# --- torch.func.functionalize inside the function ----------------------------------------------------------


def _write_through_a_view(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.view(-1).add_(1)
    x.mul_(2)
    return y


@pytest.mark.parametrize("make", [lambda: torch.randn(3, 4),
                                  lambda: TwoTensor(torch.randn(3, 4), torch.randn(3, 4))],
                         ids=["plain", "two_tensor"])
def test_functionalize_inside_runs_eagerly(make: Callable[[], torch.Tensor]) -> None:
    """``torch.func.functionalize(f)(x)`` inside the function runs the call eagerly (JC-J002), with eager's
    output and eager's write into the input (before: functorch's internal assert
    'unwrapped.unsafeGetTensorImpl() == wrapped_inner.unsafeGetTensorImpl()' while tracing)."""

    def program(x: torch.Tensor) -> torch.Tensor:
        return torch.func.functionalize(_write_through_a_view)(x) * 2

    jitted = jitcore.jit(program)
    for _ in range(2):
        torch.manual_seed(0)
        x = make()
        x2 = copy.deepcopy(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jitted(x)
        assert_same_values(got, program(x2))
        assert_same_values(x, x2)
    assert "torch.func.functionalize" in str(jitted.fallback_reason)
