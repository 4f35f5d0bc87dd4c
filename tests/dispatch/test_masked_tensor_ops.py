"""MaskedTensor's supported ops, each run eagerly and under jitcore.jit (issue 15, helper zoo47).

The op lists are torch's own (torch/masked/maskedtensor/unary.py, binary.py, reductions.py), so an op torch
adds is tested here too. Each program runs three calls with new values (the third with another mask) and
is compared with eager: the output's type, mask and data where the mask is set (elsewhere MaskedTensor
leaves it unspecified), the arguments afterwards, the error where eager raises one, and the gradients of
a backward outside the function. A program eager runs takes one trace, and none runs eagerly but those
of ``EAGER_ONLY`` (each checked to still run eagerly, with its reason).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.masked import as_masked_tensor, masked_tensor
from torch.masked.maskedtensor.binary import BINARY_NAMES
from torch.masked.maskedtensor.core import MaskedTensor
from torch.masked.maskedtensor.reductions import REDUCE_NAMES
from torch.masked.maskedtensor.unary import UNARY_NAMES

import jitcore

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # MaskedTensor's prototype warning

# Every op of torch's lists with JITCORE_MASKED_OPS_STEP=1 (about 90 s on 2 cores, 275 programs); by
# default every third, and the ops named where a list is sampled, in CI's time budget.
STEP = int(os.environ.get("JITCORE_MASKED_OPS_STEP", "3"))


def _sample(names: list[str], always: tuple[str, ...] = ()) -> list[str]:
    """Every ``STEP``-th of ``names`` and those of ``always``, in ``names``' order."""
    return [n for i, n in enumerate(names) if i % STEP == 0 or n in always]

Make = Callable[[int], tuple]


def _assert_same(actual: Any, expected: Any, what: str) -> None:
    """Types; a MaskedTensor's shape, dtype, ``requires_grad``, layout, mask and data where the mask is
    set; a plain tensor's values (NaN equal to NaN); other values equal."""
    assert type(actual) is type(expected), (what, type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _assert_same(a, e, f"{what}[{i}]")
    elif isinstance(expected, MaskedTensor):
        assert (actual.shape, actual.dtype, actual.requires_grad) == (
            expected.shape, expected.dtype, expected.requires_grad), what
        assert actual.get_data().layout == expected.get_data().layout, what
        mask = expected.get_mask().to_dense()
        torch.testing.assert_close(actual.get_mask().to_dense(), mask, msg=f"{what}: mask")
        torch.testing.assert_close(actual.get_data().detach().to_dense()[mask],
                                   expected.get_data().detach().to_dense()[mask], equal_nan=True,
                                   msg=f"{what}: data")
    elif isinstance(expected, torch.Tensor):
        assert actual.requires_grad == expected.requires_grad, what
        torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True, msg=what)
    else:
        assert actual == expected, (what, actual, expected)


def _outcome(fn: Callable[..., Any], args: tuple, backward: bool) -> tuple[Any, BaseException | None]:
    """``fn(*args)`` and, with ``backward``, the gradients of the arguments after ``out.sum().backward()``;
    or the error it raised."""
    try:
        out = fn(*args)
        if backward:
            out.sum().backward()
            return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad], None
        return out, None
    except Exception as error:  # noqa: BLE001 - eager's error is part of what is compared
        return None, error


def _check(name: str, fn: Callable[..., Any], make: Make, backward: bool = False) -> None:
    """``fn`` eagerly and jitted over three calls on equal fresh arguments ``make(call)``: outcomes and
    arguments afterwards as eager's; one trace where eager succeeds; no eager entry but ``EAGER_ONLY``'s."""
    jitted = jitcore.jit(fn)
    raised = False
    for call in range(3):
        eager_args, jit_args = make(call), make(call)
        expected, eager_error = _outcome(fn, eager_args, backward)
        actual, jit_error = _outcome(jitted, jit_args, backward)
        assert type(jit_error) is type(eager_error), (name, call, jit_error, eager_error)
        if eager_error is None:
            _assert_same(actual, expected, f"{name}, call {call}")
            _assert_same(list(jit_args), list(eager_args), f"{name}, call {call}: arguments afterwards")
        else:  # a recursion's message names where the limit was hit (sinc's backward recurses, as eagerly)
            assert isinstance(eager_error, RecursionError) or str(jit_error) == str(eager_error), (name, call)
            raised = True
    if name in EAGER_ONLY:
        assert jitted.fallback_reason is not None, f"{name} is traced now: take it out of EAGER_ONLY"
        return
    assert jitted.fallback_reason is None, (name, jitted.fallback_reason)
    if not raised:
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2), name


# What still runs eagerly (JC-J002), each with its reason; values are eager's.
EAGER_ONLY: dict[str, str] = {
    "to_sparse_coo": "the sparse tensor MaskedTensor makes: jitcore traces strided tensors only",
    "to_sparse_csr": "the sparse tensor MaskedTensor makes: jitcore traces strided tensors only",
    "sparse_coo_input": "a MaskedTensor of sparse tensors: jitcore traces strided tensors only",
}


def _values(call: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values in (0.1, 0.9), in every op's domain but acosh's (NaN there, as eagerly); ints 1..9."""
    values = torch.rand(3, 4, generator=torch.Generator().manual_seed(call)) * 0.8 + 0.1
    return (values * 10).to(dtype) if not dtype.is_floating_point else values


def _mask(call: int) -> torch.Tensor:
    """The same mask for the first two calls, another for the third."""
    return torch.rand(3, 4, generator=torch.Generator().manual_seed(100 + (call == 2))) > 0.4


def _dtype_for(name: str) -> torch.dtype:
    return torch.int64 if name.startswith("bitwise") else torch.float32


def _one(dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> Make:
    return lambda call: (masked_tensor(_values(call, dtype), _mask(call), requires_grad=requires_grad),)


def _two(dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> Make:
    def make(call: int) -> tuple:
        mask = _mask(call)
        return (masked_tensor(_values(call, dtype), mask, requires_grad=requires_grad),
                masked_tensor(_values(call + 10, dtype), mask.clone(), requires_grad=requires_grad))
    return make


def _plain(dtype: torch.dtype = torch.float32) -> Make:
    return lambda call: (_values(call, dtype), _values(call + 10, dtype), _mask(call))


# --- unary ops ---------------------------------------------------------------------------------------
_UNARY_ARGUMENTS: dict[str, tuple] = {"clamp": (0.2, 0.7), "clip": (0.2, 0.7), "pow": (2,)}
_NOT_DIFFERENTIABLE = {"angle", "bitwise_not", "ceil", "fix", "floor", "frac", "isnan", "round", "sign",
                       "sgn", "signbit", "trunc"}


def _unary(name: str) -> Callable[..., Any]:
    return lambda m: getattr(torch, name)(m, *_UNARY_ARGUMENTS.get(name, ()))


@pytest.mark.parametrize("name", _sample(UNARY_NAMES, ("abs", "exp", "pow", "clamp", "isnan", "bitwise_not")))
def test_unary_op_of_a_masked_tensor_input(name: str) -> None:
    _check(name, _unary(name), _one(_dtype_for(name)))


@pytest.mark.parametrize("name", _sample([n for n in UNARY_NAMES if n not in _NOT_DIFFERENTIABLE],
                                         ("exp", "tanh", "sigmoid", "logit", "atanh", "clamp", "digamma")))
def test_unary_op_gradient(name: str) -> None:
    """Note [An error raised for eager] (dispatch/declined.py): where MaskedTensor's dispatch has no
    backward op (``aten.tanh_backward``, ``sigmoid_backward``, ``logit_backward``), ``backward()``
    raised JC-I002, a jitcore bug, where eager raises the dispatcher's TypeError."""
    _check(name, _unary(name), _one(requires_grad=True), backward=True)


@pytest.mark.parametrize("name", ["exp", "sin", "tanh", "sqrt", "clamp", "bitwise_not"])
def test_unary_op_of_a_masked_tensor_made_inside(name: str) -> None:
    unary = _unary(name)
    _check(name, lambda d, e, k: unary(masked_tensor(d, k)), _plain(_dtype_for(name)))


@pytest.mark.parametrize("name", ["exp_", "sin_", "neg_", "clamp_", "bitwise_not_"])
def test_in_place_unary_op_writes_the_input(name: str) -> None:
    arguments = _UNARY_ARGUMENTS.get(name[:-1], ())
    _check(name, lambda m: getattr(m, name)(*arguments), _one(_dtype_for(name)))


# --- binary ops --------------------------------------------------------------------------------------
def _binary(name: str) -> Callable[..., Any]:
    return lambda a, b: getattr(torch, name)(a, b)


@pytest.mark.parametrize("name", _sample(BINARY_NAMES, ("add", "mul", "eq", "bitwise_and", "maximum")))
def test_binary_op_of_two_masked_tensors(name: str) -> None:
    _check(name, _binary(name), _two(_dtype_for(name)))


@pytest.mark.parametrize("name", ["add", "mul", "atan2", "maximum", "lt", "bitwise_and"])
def test_binary_op_with_a_plain_tensor_or_a_number(name: str) -> None:
    """A plain tensor operand and a Python number: MaskedTensor raises for several (as eagerly)."""
    op = getattr(torch, name)
    _check(f"{name}-plain", lambda d, e, k: op(masked_tensor(d, k), e), _plain(_dtype_for(name)))
    _check(f"{name}-number", lambda a, b: op(a, 2), _two(_dtype_for(name)))


@pytest.mark.parametrize("name", ["add", "mul", "div", "atan2"])
def test_binary_op_gradient(name: str) -> None:
    _check(name, _binary(name), _two(requires_grad=True), backward=True)


@pytest.mark.parametrize("name", ["add_", "mul_", "div_", "fmod_", "eq_", "bitwise_or_"])
def test_in_place_binary_op_writes_the_input(name: str) -> None:
    _check(name, lambda a, b: getattr(a, name)(b), _two(_dtype_for(name)))


def test_binary_op_of_masks_that_differ_raises_as_eagerly() -> None:
    def make(call: int) -> tuple:
        return masked_tensor(_values(call), _mask(call)), masked_tensor(_values(call), ~_mask(call))

    _check("masks-differ", lambda a, b: a + b, make)


# --- reductions --------------------------------------------------------------------------------------
def _reduced(name: str) -> Make:
    if name == "all":
        return lambda call: (masked_tensor(_values(call) > 0.5, _mask(call)),)
    return _one()


_REDUCTION_FORMS: dict[str, Callable[[str], Callable[..., Any]]] = {
    "all-elements": lambda name: lambda m: getattr(m, name)(),
    "dim": lambda name: lambda m: getattr(torch, name)(m, 1),
    "keepdim": lambda name: lambda m: getattr(torch, name)(m, 0, keepdim=True),
}


@pytest.mark.parametrize("form", list(_REDUCTION_FORMS))
@pytest.mark.parametrize("name", REDUCE_NAMES)
def test_reduction(name: str, form: str) -> None:
    """``norm`` raises in MaskedTensor's own code (its ``p``), as eagerly."""
    _check(f"{name}-{form}", _REDUCTION_FORMS[form](name), _reduced(name))


@pytest.mark.parametrize("form", ["all-elements", "dim"])
@pytest.mark.parametrize("name", [n for n in REDUCE_NAMES if n not in ("argmin", "argmax", "all")])
def test_reduction_gradient(name: str, form: str) -> None:
    _check(f"{name}-{form}", _REDUCTION_FORMS[form](name), _one(requires_grad=True), backward=True)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "var", "std"])
def test_backward_inside_a_reduction(name: str) -> None:
    def step(m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = getattr(m, name)()
        loss.backward()
        return loss.detach(), m.grad

    _check(f"backward_inside_{name}", step, _one(requires_grad=True))


# --- softmax, where, layouts, accessors, views --------------------------------------------------------
OTHERS: dict[str, tuple[Callable[..., Any], Make]] = {
    "softmax": (lambda m: torch.softmax(m, -1), _one()),
    "softmax_method": (lambda m: m.softmax(0), _one()),
    "log_softmax": (lambda m: torch.nn.functional.log_softmax(m, -1), _one()),  # raises, as eagerly
    "softmin": (lambda m: torch.nn.functional.softmin(m, -1), _one()),
    "where": (lambda a, b: torch.where(a.get_mask(), a, b), _two()),
    "where_mask_made_inside": (lambda d, e, k: torch.where(k, masked_tensor(d, k), masked_tensor(e, k)),
                               _plain()),
    "to_dense": (lambda m: m.to_dense(), _one()),
    "to_tensor": (lambda m: m.to_tensor(0.0), _one()),
    "to_sparse_coo": (lambda m: m.to_sparse_coo(), _one()),
    "to_sparse_csr": (lambda m: m.to_sparse_csr(), _one()),
    "sparse_coo_input": (lambda m: m.exp(), lambda call: (
        masked_tensor(_values(call).to_sparse_coo(), _mask(call).to_sparse_coo()),)),
    "get_data_and_mask": (lambda m: (m.get_data() * 2, m.get_mask(), m._masked_data + 1, m._masked_mask),
                          _one()),
    "as_masked_tensor": (lambda d, e, k: as_masked_tensor(d, k) * 3, _plain()),
    "output_made_inside": (lambda d, e, k: masked_tensor(d, k), _plain()),
    "input_returned": (lambda m: m, _one()),
    "views": (lambda m: (m.t() * 2, m[1], m[:, 1:3], m.view(12), m.reshape(4, 3), m.unsqueeze(0),
                         m[0:1].expand(3, 4), m.split(2, dim=1), m[torch.tensor([0, 2])]), _one()),
    "cat_and_stack": (lambda a, b: (torch.cat([a, b]), torch.stack([a, b])), _two()),
    "copies_and_casts": (lambda m: (m.t().contiguous(), m.clone(), m.to(torch.float64), m.to("cpu")),
                         _one()),
    "metadata": (lambda m: (m.dim(), m.shape, m.size(1), m.numel(), m.stride(), m.is_contiguous()), _one()),
    "operators": (lambda a, b: ((a + b) * (a - b) / (b + 1), 1 + a, a < b), _two()),
    "value_branch": (lambda m: m * 2 if m.sum().get_data() > 3 else m * 3, _one()),
    "matmul": (lambda a, b: a @ b.t(), _two()),  # raises, as eagerly
}
OTHERS_WITH_GRAD: dict[str, tuple[Callable[..., Any], Make]] = {
    "softmax": (lambda m: torch.softmax(m, -1), _one(requires_grad=True)),
    "softmin": (lambda m: torch.nn.functional.softmin(m, -1), _one(requires_grad=True)),
    "where": (lambda a, b: torch.where(a.get_mask(), a, b), _two(requires_grad=True)),
    "to_tensor": (lambda m: m.to_tensor(0.0), _one(requires_grad=True)),
    "get_data": (lambda m: m.get_data() * 2, _one(requires_grad=True)),
    "transpose": (lambda m: m.t().exp(), _one(requires_grad=True)),
    "chain": (lambda a, b: torch.softmax((a * b).exp() - 1, -1).sum(0), _two(requires_grad=True)),
}


@pytest.mark.parametrize("name", list(OTHERS))
def test_other_supported_op(name: str) -> None:
    fn, make = OTHERS[name]
    _check(name, fn, make)


@pytest.mark.parametrize("name", list(OTHERS_WITH_GRAD))
def test_other_supported_op_gradient(name: str) -> None:
    fn, make = OTHERS_WITH_GRAD[name]
    _check(name, fn, make, backward=True)


def test_every_eager_only_entry_is_tested() -> None:
    """Each EAGER_ONLY entry names a program above, so that its check that it still runs eagerly runs."""
    checked = set(OTHERS) | {f"backward_inside_{n}" for n in ("sum", "mean", "prod", "amax", "var", "std")}
    assert set(EAGER_ONLY) <= checked
