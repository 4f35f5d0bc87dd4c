"""Tensor subclasses as others write them and use them, round 10 (issue 15, helper zoo30): the
``autograd.Function`` test cases torch ships in ``torch.testing._internal.autograd_function_db`` (their
forwards call ``x.numpy()``) and ``numpy()`` of subclass values, each program run eagerly and under
jitcore.jit on equal fresh arguments. Each test failed before its fix."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from subclass_checks import assert_same_nested, assert_same_values, check_twice, nested_jagged
from torch.testing._internal import autograd_function_db
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

# --- numpy() as torch refuses or accepts it -----------------------------------------------------------
# torch's numpy() refuses an instance of a class with a __torch_dispatch__ (".numpy() is not supported for
# tensor subclasses"), and a tensor that requires grad only while grad mode is on; its array forgets a
# plain subclass's class (jitcore/numpy/lookasides.py tensor_numpy).


def _raised(fn: Callable[..., Any], *args: Any) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return exc
    raise AssertionError(f"{fn} raised nothing")


REFUSED: dict[str, Callable[[], torch.Tensor]] = {
    "two_tensor": lambda: TwoTensor(torch.randn(3), torch.randn(3)),
    "nested_jagged": lambda: nested_jagged((2, 3), 4),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_numpy_of_a_dispatch_subclass_raises_as_eagerly(name: str) -> None:
    """``x.numpy()`` raises eager's RuntimeError (jitted, TwoTensor's gave an array of its outer
    metadata; inside ``NumpyCube.apply`` the call computed where eager raises)."""

    def f(x: torch.Tensor) -> Any:
        return x.numpy()

    def inside_a_function(x: torch.Tensor) -> Any:
        return autograd_function_db.NumpyCube.apply(x)

    for program in (f, inside_a_function):
        jitted = jitcore.jit(program)
        for _ in range(2):
            expected, got = _raised(program, REFUSED[name]()), _raised(jitted, REFUSED[name]())
            assert (type(got), str(got)) == (type(expected), str(expected))


def _numpy_under_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.from_numpy(np.sin(x.numpy())) * 2


class Plain(torch.Tensor):
    """A subclass without ``__torch_dispatch__``: numpy() accepts it, and the array is NumPy's."""


def _plain() -> torch.Tensor:
    return torch.randn(3).as_subclass(Plain)


NUMPY: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "requires_grad_under_no_grad": (_numpy_under_no_grad, lambda: (torch.randn(3, requires_grad=True),)),
    "plain_subclass_round_trip": (lambda x: torch.from_numpy(x.numpy() + 1), lambda: (_plain(),)),
    "plain_subclass_written_through_the_array": (
        lambda x: (torch.from_numpy(x.numpy()).mul_(2), x + 0), lambda: (_plain(),)),
}


@pytest.mark.parametrize("name", list(NUMPY))
def test_numpy_of_what_torch_accepts(name: str) -> None:
    """Under ``no_grad`` a tensor that requires grad gives its array (jitted: the RuntimeError of grad
    mode on); the array of a plain subclass value holds a plain tensor (``torch.from_numpy`` of it was
    of the subclass)."""
    program, make = NUMPY[name]
    check_twice(program, make)


TENSOR_OF_AN_ARRAY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "plain": lambda x: torch.tensor(np.sin(x.numpy()) * 2),
    "transposed": lambda x: torch.tensor(x.numpy().T),
    "dtype_and_requires_grad": lambda x: torch.tensor(x.numpy(), dtype=torch.float64, requires_grad=True),
    "NumpyCube": lambda x: autograd_function_db.NumpyCube.apply(x)[0],
}


@pytest.mark.parametrize("name", list(TENSOR_OF_AN_ARRAY))
def test_tensor_of_an_array_warns_as_eagerly(name: str) -> None:
    """``torch.tensor(array)`` (``NumpyCube``'s forward makes its outputs so): eager warns nothing; jitted
    it warned "To copy construct from a tensor ..." while tracing and on every cached call. Values,
    strides, dtype and ``requires_grad`` are eager's."""
    program = TENSOR_OF_AN_ARRAY[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        x = torch.randn(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got, expected = jitted(x), program(x)
        assert_same_values(got, expected)
        assert got.stride() == expected.stride()
    assert jitcore.cache_hits(jitted) == 1


# --- autograd.Function forwards, run by apply with grad mode off -------------------------------------


class IntermediateRequiresGrad(torch.autograd.Function):
    """A forward that returns whether its intermediate result requires grad (False eagerly)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
        y = x.exp()
        return y, y.requires_grad, torch.is_grad_enabled()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *_: Any) -> torch.Tensor:
        return grad


def test_a_function_forward_runs_with_grad_mode_off() -> None:
    """The forward was interpreted with the program's grad mode: ``y.requires_grad`` and
    ``torch.is_grad_enabled()`` inside it were True, traced as constants (a wrong answer)."""
    check_twice(lambda x: IntermediateRequiresGrad.apply(x), lambda: (torch.randn(3, requires_grad=True),))


def _leaf(n: int) -> torch.Tensor:
    return torch.randn(n, requires_grad=True)


def _backward_inside(function: type) -> Callable[..., Any]:
    def program(*args: Any) -> Any:
        out = function.apply(*args)
        (out[0] if isinstance(out, tuple) else out).sum().backward()
        return out

    return program


FUNCTIONS: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "NumpyCube": (lambda x: autograd_function_db.NumpyCube.apply(x), lambda: (_leaf(3),)),
    "NumpyCube, backward inside": (_backward_inside(autograd_function_db.NumpyCube), lambda: (_leaf(3),)),
    "NumpyMul": (lambda x, y: autograd_function_db.NumpyMul.apply(x, y), lambda: (_leaf(3), _leaf(3))),
    "NumpySort": (_backward_inside(autograd_function_db.NumpySort), lambda: (_leaf(5), 0)),
}


def _eager_and_jitted(program: Callable[..., Any], jitted: Callable[..., Any],
                      make: Callable[[], tuple]) -> tuple[Any, Any, tuple, tuple]:
    """``program`` eagerly and ``jitted`` on equal fresh arguments (the same seed before each ``make``),
    an eager entry's warning silenced: (got, expected, the jitted call's arguments, the eager one's)."""
    torch.manual_seed(0)
    eager_args = make()
    expected = program(*eager_args)
    torch.manual_seed(0)
    jit_args = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jitted(*jit_args)
    return got, expected, jit_args, eager_args


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_a_numpy_function_with_inputs_requiring_grad_runs_eagerly(name: str) -> None:
    """Note [A Function's forward that needs values] (transforms/autograd_function.py): torch's
    ``NumpyCube``-style Functions with inputs that require grad computed eager's outputs and gradients
    (jitted, they raised "Can't call numpy() on Tensor that requires grad" while tracing); the grad
    transform's replay has no values for NumPy, so the call runs eagerly (JC-T002)."""
    program, make = FUNCTIONS[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        got, expected, jit_args, eager_args = _eager_and_jitted(program, jitted, make)
        assert_same_values(got, expected)
        for a, e in zip(jit_args, eager_args):
            if isinstance(e, torch.Tensor):
                assert_same_values(a.grad, e.grad)
    assert "JC-T002" in str(jitted.fallback_reason)


def test_a_numpy_function_without_grad_is_traced() -> None:
    """Without grad, its forward's NumPy calls are traced (no eager entry)."""
    check_twice(lambda x: autograd_function_db.NumpyCube.apply(x), lambda: (torch.randn(3),))



# --- subclass values made inside inference_mode() -----------------------------------------------------
# Note [A subclass output made in inference mode] (dispatch/flatten.py): the computation rebuilt such an
# output after leaving the block, so it was no inference tensor.


def _relu_in_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    with torch.inference_mode():
        y = x.relu()
    return y, y.is_inference()


def _made_in_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    with torch.inference_mode():
        y = TwoTensor(x, x * 2)
    return y, y.is_inference()


INFERENCE: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "two_tensor_output": (_relu_in_inference_mode, lambda: (TwoTensor(torch.randn(3), torch.randn(3)),)),
    "two_tensor_made_inside": (_made_in_inference_mode, lambda: (torch.randn(3),)),
}


@pytest.mark.parametrize("name", list(INFERENCE))
def test_a_subclass_value_made_in_inference_mode_is_an_inference_tensor(name: str) -> None:
    """``out.is_inference()`` of the output, and ``y.is_inference()`` read inside, are eager's (True;
    jitted, the output was no inference tensor, and a wrapper made inside read False)."""
    program, make = INFERENCE[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        got, expected = jitted(*make()), program(*make())
        assert (got[0].is_inference(), got[1]) == (expected[0].is_inference(), expected[1]) == (True, True)
        assert type(got[0]) is type(expected[0])
    assert jitcore.cache_hits(jitted) == 1


def test_values_of_a_nested_jagged_output_made_in_inference_mode() -> None:
    """``out.values()`` of an NJT output computed in ``inference_mode()``: eager's values (it raised
    "Cannot set version_counter for inference tensor")."""

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return x.relu() * 2

    jitted = jitcore.jit(f)
    for _ in range(2):
        x = nested_jagged((2, 5, 3), 4)
        got, expected = jitted(x), f(x)
        torch.testing.assert_close(got.values(), expected.values())
        assert got.is_inference() and expected.is_inference()
    assert jitcore.cache_hits(jitted) == 1


# --- copy.deepcopy of a nested jagged tensor ----------------------------------------------------------
# Eager's Tensor.__deepcopy__ drops the sizes and strides a wrapper caches as PyCapsules
# (``_clear_non_serializable_cached_data``) before it deep-copies the instance's __dict__; jitcore's copy
# carried them over and raised "cannot pickle 'PyCapsule' object" (langctx/copying.py _NOT_SERIALIZABLE).

DEEPCOPIES: dict[str, Callable[[torch.Tensor], Any]] = {
    "deepcopy": lambda x: copy.deepcopy(x) * 2,
    "deepcopy_in_a_list": lambda x: copy.deepcopy([x, x])[1].sin(),
    "deepcopy_values_and_offsets": lambda x: (copy.deepcopy(x).values() + 1, copy.deepcopy(x).offsets()),
}


@pytest.mark.parametrize("name", list(DEEPCOPIES))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_deepcopy_of_a_nested_jagged_tensor(name: str, requires_grad: bool) -> None:
    """Outputs are eager's (components, offsets, ``requires_grad``); one trace, then hits."""
    program = DEEPCOPIES[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        torch.manual_seed(0)
        expected = program(nested_jagged((2, 5, 3), 4, requires_grad=requires_grad))
        torch.manual_seed(0)
        got = jitted(nested_jagged((2, 5, 3), 4, requires_grad=requires_grad))
        assert_same_nested(got, expected)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)


# --- leaves made inside, a backward inside, no input requiring grad ------------------------------------
# Note [Leaves made inside under autograd] (transforms/jit_hook.py): the backward made the grad transform
# run, and its node over the caller's tensors (none requiring grad) gave the outputs no grad.


def _parameter_made_inside(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.nn.Parameter(torch.ones(3))
    (w * x).sum().backward()
    return w * 2, w.grad


def _module_stepped_inside(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    layer = torch.nn.Linear(4, 3)
    if isinstance(x, TwoTensor):
        layer.weight = torch.nn.Parameter(TwoTensor(layer.weight.detach().clone(), layer.weight.detach() * 2))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    layer(x).sum().backward()
    optimizer.step()
    return layer.weight.clone(), layer.bias.clone()


LEAVES_MADE_INSIDE: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "parameter": (_parameter_made_inside, lambda: (torch.randn(3),)),
    "module_and_sgd": (_module_stepped_inside, lambda: (torch.randn(2, 4),)),
    "module_and_sgd_two_tensor": (
        _module_stepped_inside, lambda: (TwoTensor(torch.randn(2, 4), torch.randn(2, 4)),)),
}


@pytest.mark.parametrize("name", list(LEAVES_MADE_INSIDE))
def test_values_of_leaves_made_inside_after_a_backward_inside(name: str) -> None:
    """``w * 2`` and ``layer.bias.clone()`` require grad, as eagerly (jitted, they did not); values and
    ``.grad`` are eager's. The plain programs are traced; the TwoTensor one runs eagerly (JC-J002)."""
    program, make = LEAVES_MADE_INSIDE[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        torch.manual_seed(0)
        expected = program(*make())
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jitted(*make())
        assert_same_values(got, expected)
    assert jitcore.cache_hits(jitted) == 1
    assert (jitted.fallback_reason is None) == ("two_tensor" not in name)


# --- requires_grad_() / detach_() on a subclass input ----------------------------------------------------
# Note [requires_grad_ on an input] (transforms/jit_hook.py): the change was lost (outputs that did not
# require grad, the caller's flag unchanged); later it ran eagerly (JC-J002). Pass 1 now runs under torch's
# autograd with the caller's TwoTensor taken whole, so values computed before the change keep the old flag.

def _two() -> torch.Tensor:
    return TwoTensor(torch.randn(3), torch.randn(3))


def _used_then_flagged(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x.sin()
    x.requires_grad_()
    return y, x.cos() * 2


def _used_then_detached(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * w
    x.detach_()
    return y, x * w


FLAG_CHANGES: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "requires_grad_": (lambda x: (x.requires_grad_() * 2).sum(), lambda: (_two(),)),
    "requires_grad_returned": (lambda x: x.requires_grad_(), lambda: (_two(),)),
    "detach_": (lambda x: x.detach_() * 2, lambda: (TwoTensor(_leaf(3), _leaf(3)).requires_grad_() * 1,)),
    "used_then_flagged": (_used_then_flagged, lambda: (_two(),)),
    "used_then_detached": (_used_then_detached, lambda: (_two().requires_grad_(), _leaf(3))),
    "flagged_under_no_grad": (torch.no_grad()(_used_then_flagged), lambda: (_two(),)),
}


def _backward_of_outputs(out: Any, args: tuple) -> list[Any]:
    """The gradients a backward of the outputs that require grad leaves on the arguments, and their flags."""
    outputs = out if isinstance(out, tuple) else (out,)
    total = sum(o.sum() for o in outputs if o.requires_grad)
    if isinstance(total, torch.Tensor):
        total.backward()
    return [(a.requires_grad, a.grad) for a in args]


@pytest.mark.parametrize("name", list(FLAG_CHANGES))
def test_a_flag_change_of_a_subclass_input_is_traced_as_eagerly(name: str) -> None:
    """Outputs (``requires_grad`` included), the caller's flags after the call and the gradients of a
    backward outside are eager's; the call is traced (a cache hit the second time)."""
    program, make = FLAG_CHANGES[name]
    jitted = jitcore.jit(program)
    for _ in range(2):
        got, expected, jit_args, eager_args = _eager_and_jitted(program, jitted, make)
        assert_same_values(got, expected)
        for (got_flag, got_grad), (flag, grad) in zip(_backward_of_outputs(got, jit_args),
                                                      _backward_of_outputs(expected, eager_args)):
            assert got_flag == flag
            assert_same_values(got_grad, grad)
    assert jitted.fallback_reason is None
    assert jitcore.cache_hits(jitted) == 1
