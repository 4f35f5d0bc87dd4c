"""Tensor subclasses as others write them and use them, round 11 (issue 15, helper zoo31): NumPy on a
subclass with a ``__torch_function__`` of its own, each program run eagerly and under jitcore.jit on
equal fresh arguments. Each test failed before its fix."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from subclass_checks import assert_same_values

import jitcore

# --- numpy() through the class's __torch_function__ ---------------------------------------------------
# Note [numpy() through a class's __torch_function__] (jitcore/numpy/lookasides.py): eagerly the class is
# handed Tensor.numpy first; the bridge's lookaside answered before it.


class _Recording(torch.Tensor):
    log: list[tuple[str, tuple[str, ...]]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cls.log.append((getattr(func, "__name__", str(func)), tuple(sorted(kwargs))))
        return super().__torch_function__(func, types, args, kwargs)


class _Doubling(torch.Tensor):
    """Answers ``numpy()`` with twice the array."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if func is torch.Tensor.numpy else out


class _Refusing(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.numpy:
            raise TypeError("no numpy() for this class")
        return super().__torch_function__(func, types, args, kwargs or {})


def _logged(program: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
    def run(x: torch.Tensor) -> Any:
        _Recording.log.clear()
        out = program(x)
        return out, list(_Recording.log)

    return run


NUMPY_OF: dict[str, tuple[Callable[[torch.Tensor], Any], type, bool]] = {
    "handed": (_logged(lambda x: torch.from_numpy(x.numpy() + 1)), _Recording, False),
    "handed_force": (_logged(lambda x: torch.from_numpy(x.numpy(force=True) * 2)), _Recording, True),
    "answered": (lambda x: torch.from_numpy(x.numpy()), _Doubling, False),
    "answered_transposed": (lambda x: torch.from_numpy(x.numpy().T.copy()) + 1, _Doubling, False),
}


@pytest.mark.parametrize("name", list(NUMPY_OF))
def test_numpy_of_a_class_with_a_torch_function_is_what_it_answers(name: str) -> None:
    """The value (the class's answer: twice the array) and what the class was handed (``numpy``, with
    ``force`` where given) are eager's, on cached calls too."""
    program, cls, requires_grad = NUMPY_OF[name]
    jitted = jitcore.jit(program)
    for seed in range(3):
        made = []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append(torch.randn(4, 6, requires_grad=requires_grad).as_subclass(cls))
        expected, got = program(made[0]), jitted(made[1])
        assert_same_values(got, expected)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def test_numpy_refused_by_the_class_raises_as_eagerly() -> None:
    jitted = jitcore.jit(lambda x: x.numpy())
    for _ in range(2):
        with pytest.raises(TypeError, match="no numpy"):
            jitted(torch.randn(3).as_subclass(_Refusing))


# --- np.asarray through the class's __torch_function__ ---------------------------------------------------
# Note [np.asarray of a tensor whose class has a __torch_function__] (jitcore/numpy/bridge.py): eagerly the
# class is handed Tensor.__array__ (dtype=); torch._numpy's conversion handed it two __get__ calls instead.


class _ArrayDoubling(torch.Tensor):
    """Answers ``__array__`` with twice the array."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if func is torch.Tensor.__array__ else out


def _logged_with_dtypes(program: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
    def run(x: torch.Tensor) -> Any:
        _Recording.log.clear()
        out = program(x)
        return out, out.dtype, list(_Recording.log)

    return run


ASARRAY_OF: dict[str, tuple[Callable[[torch.Tensor], Any], type]] = {
    "asarray": (_logged_with_dtypes(lambda x: np.asarray(x) * 2), _Recording),
    "array": (_logged_with_dtypes(lambda x: np.array(x) + 1), _Recording),
    "asarray_float64": (_logged_with_dtypes(lambda x: np.asarray(x, dtype=np.float64)), _Recording),
    "ascontiguousarray": (_logged_with_dtypes(lambda x: np.ascontiguousarray(x).T), _Recording),
    "answered": (lambda x: np.asarray(x) + 1, _ArrayDoubling),
}


@pytest.mark.parametrize("name", list(ASARRAY_OF))
def test_asarray_of_a_class_with_a_torch_function_is_what_it_answers(name: str) -> None:
    """The array (the class's answer: twice the values), its dtype and what the class was handed
    (``__array__`` with its ``dtype``) are eager's, on cached calls too."""
    program, cls = ASARRAY_OF[name]
    jitted = jitcore.jit(program)
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(3, 2).as_subclass(cls)
        expected, got = program(x), jitted(x)
        if cls is _Recording:
            assert got[1:] == expected[1:]
            got, expected = got[0], expected[0]
        assert type(got) is type(expected) and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


# --- a Function class defined per call, closing over the program's values ------------------------------
# Note [A Function class whose methods close over the program's values] (transforms/autograd_function.py):
# MaskedTensor's get_data() defines GetData, whose backward reads the ``self`` of that call; the replay's
# backward met pass 1's proxy there and raised "Mixing fake modes NYI" at every backward().


def _scaled_by_a_closed_over_input(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
            return t * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * s

    return Scale.apply(x)


def _scaled_by_a_closed_over_value(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = y.exp()

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
            return t * s

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * s * 3

    return Scale.apply(x) + y


def _masked(d: torch.Tensor, m: torch.Tensor) -> Any:
    from torch.masked import as_masked_tensor

    return as_masked_tensor(d, m)


def _leaf_and_mask() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 4, requires_grad=True), torch.rand(3, 4) > 0.3


CLOSURES: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "masked_sum": (lambda d, m: (_masked(d, m) * 2).sum().get_data(), _leaf_and_mask),
    "masked_exp": (lambda d, m: _masked(d, m).exp().sum().get_data(), _leaf_and_mask),
    "masked_to_tensor": (lambda d, m: torch.where(m, d, 0.0) + _masked(d, m).to_tensor(0.0), _leaf_and_mask),
    "closed_over_input": (_scaled_by_a_closed_over_input,
                          lambda: (torch.randn(3, requires_grad=True), torch.randn(3))),
    "closed_over_value": (_scaled_by_a_closed_over_value,
                          lambda: (torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))),
}


def _assert_same_tensor(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Class, ``requires_grad`` and values equal; a MaskedTensor's data and mask."""
    assert (type(got), got.requires_grad) == (type(expected), expected.requires_grad)
    if type(expected) is torch.Tensor:
        torch.testing.assert_close(got.detach(), expected.detach())
        return
    torch.testing.assert_close(got.get_data().detach(), expected.get_data().detach())
    assert torch.equal(got.get_mask(), expected.get_mask())


@pytest.mark.parametrize("name", list(CLOSURES))
def test_a_function_closing_over_the_programs_values_differentiates_as_eagerly(name: str) -> None:
    """Outputs and the gradients of a backward outside (MaskedTensor ones for MaskedTensor's Functions)
    are eager's, on cached calls too (the mask changes per call); the calls are traced."""
    program, make = CLOSURES[name]
    jitted = jitcore.jit(program)
    for seed in range(3):
        results = []
        for run in (program, jitted):
            torch.manual_seed(seed)
            args = make()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # MaskedTensor's prototype warning
                out = run(*args)
                out.sum().backward()
            results.append((out, [a.grad for a in args]))
        (expected, expected_grads), (got, got_grads) = results
        _assert_same_tensor(got, expected)
        for got_grad, grad in zip(got_grads, expected_grads):
            assert (got_grad is None) == (grad is None)
            if grad is not None:
                _assert_same_tensor(got_grad, grad)
    assert jitted.fallback_reason is None
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)
