"""Tensor subclasses written by others (issue 15, zoo45): differential tests, eager against ``jitcore.jit``
over several calls (values, output types, inner tensors, gradients, cache entries, the subclass code a
warm call runs), for what this round's survey found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, protocol_calls
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map_only

import jitcore

# --- a boolean mask below autograd ---------------------------------------------------------------------
# Note [Below autograd nothing needs grad] (jitcore/jit/read_arguments.py): a wrapper whose inner tensors
# require grad (made inside the function from an input that does, or holding a parameter) indexed by a
# boolean mask ran the whole call eagerly (JC-J002): the index its dispatch calls on an inner tensor was
# taken for an op whose value-shaped output must carry gradients, though below autograd it carries none.


class _Scaled(torch.Tensor):
    """A quantized-looking wrapper as library authors write one: its data, a Python-number scale in the
    flatten ctx, a custom ``__repr__``; the wrapper requires grad where its data does."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float) -> _Scaled:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype,
                                                   requires_grad=data.requires_grad)

    def __init__(self, data: torch.Tensor, scale: float) -> None:
        self.data_, self.scale = data, scale

    def __repr__(self) -> str:
        return f"_Scaled({self.data_}, scale={self.scale})"

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["data_"], {"scale": self.scale}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> _Scaled:
        return _Scaled(inner["data_"], ctx["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        scale = next(a.scale for a in args if isinstance(a, _Scaled))
        inner_args, inner_kwargs = tree_map_only(_Scaled, lambda t: t.data_, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _Scaled(t, scale), func(*inner_args, **inner_kwargs))


def _two_over_leaves(x: torch.Tensor) -> TwoTensor:
    return TwoTensor(x.clone().requires_grad_(), (x * 2).requires_grad_())


def _over_a_parameter(x: torch.Tensor) -> _Scaled:
    return _Scaled(torch.nn.Parameter(x.clone()), 2.0)


def _leaf(x: torch.Tensor) -> torch.Tensor:
    return x.clone().requires_grad_()


_MASKED: dict[str, tuple[Callable[..., Any], Callable[[torch.Tensor], torch.Tensor]]] = {
    "inner_leaves_require_grad": (lambda y, m: (y[m] * 2).sum(), _two_over_leaves),
    "a_parameter_inside": (lambda y, m: y[m].exp(), _over_a_parameter),
    "made_inside_from_an_input": (lambda x, m: TwoTensor(x, x * 2)[m] * 3, _leaf),
    "made_inside_two_dimensional_mask": (
        lambda x, m: TwoTensor(x, x.cos())[m[:, None].expand(-1, 3)].sum(), _leaf),
    "made_inside_then_linear": (
        lambda x, m: torch.nn.functional.linear(TwoTensor(x, x * 2)[m], torch.ones(4, 3)), _leaf),
}


def _gradients(out: torch.Tensor, arg: torch.Tensor) -> list[Any]:
    """What a backward of ``out`` leaves on ``arg`` and on its inner tensors (None where nothing)."""
    if out.requires_grad:
        out.backward(tree_map_only(torch.Tensor, torch.ones_like, out) if type(out) is not torch.Tensor
                     else torch.ones_like(out))
    inner = [getattr(arg, n) for n in arg.__tensor_flatten__()[0]] if type(arg) is not torch.Tensor else []
    return [arg.grad, *(t.grad for t in inner)]


@pytest.mark.parametrize("name", list(_MASKED))
def test_a_boolean_mask_of_a_wrapper_whose_inner_tensors_require_grad_is_traced(name: str) -> None:
    fn, make = _MASKED[name]
    jitted = jitcore.jit(fn)
    counts = []
    for i in range(4):
        torch.manual_seed(i % 2)  # calls 2 and 3 repeat the masks of 0 and 1
        x, mask = torch.randn(6, 3), torch.rand(6) > 0.5
        counts.append(int(mask.sum()))
        eager_arg, jit_arg = make(x), make(x)
        expected = fn(eager_arg, mask)
        with protocol_calls(TwoTensor, _Scaled) as calls:
            actual = jitted(jit_arg, mask)
        assert_same_flattened(actual, expected, f"call {i} output")
        assert jitted.fallback_reason is None, jitted.fallback_reason
        if i >= 2:
            assert calls == [], (i, calls)  # a warm call runs only the flattened trace
        for j, (got, want) in enumerate(zip(_gradients(actual, jit_arg), _gradients(expected, eager_arg))):
            assert (got is None) == (want is None), (i, j, got, want)
            if want is not None:
                assert_same_flattened(got, want, f"call {i} gradient {j}")
    assert counts[0] != counts[1]
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)


# --- an attribute the rebuilt value holds by its constructor's default ---------------------------------
# Note [An attribute the rebuilt value happens to hold] (jitcore/jit/tensor_binding.py): traced with the
# default, the attribute was not guarded, and a later call with another value ran that entry (a wrong
# answer: scaled by the default).


class _Quantized(torch.Tensor):
    """Int data with a float ``scale`` and an int ``bits`` its dispatch computes with, both outside its
    flatten protocol: ``__tensor_unflatten__`` passes the constructor's defaults."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float = 1.0, bits: int = 8) -> _Quantized:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32)

    def __init__(self, data: torch.Tensor, scale: float = 1.0, bits: int = 8) -> None:
        self.data_, self.scale, self.bits = data, scale, bits

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["data_"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Quantized:
        return _Quantized(inner["data_"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        def dequantized(t: _Quantized) -> torch.Tensor:
            return t.data_.clamp(-2 ** (t.bits - 1), 2 ** (t.bits - 1) - 1).float() * t.scale

        inner_args, inner_kwargs = tree_map_only(_Quantized, dequantized, (args, kwargs or {}))
        return func(*inner_args, **inner_kwargs)


@pytest.mark.parametrize("calls", [
    ((1.0, 8), (3.0, 8), (0.5, 8), (1.0, 8)),
    ((0.5, 8), (0.5, 4), (0.5, 8)),
    ((1.0, 8), (1.0, 4), (2.0, 4), (1.0, 8)),
], ids=["scale_from_the_default", "bits_from_the_default", "both"])
def test_an_attribute_equal_to_the_constructors_default_is_checked(calls: tuple) -> None:
    fn = lambda x, w: torch.nn.functional.linear(x, w)  # noqa: E731
    jitted = jitcore.jit(fn)
    for i, (scale, bits) in enumerate(calls):
        torch.manual_seed(i)
        x, data = torch.randn(2, 4), torch.randint(-100, 100, (3, 4))
        expected = fn(x, _Quantized(data, scale, bits))
        actual = jitted(x, _Quantized(data, scale, bits))
        assert_same_flattened(actual, expected, f"call {i} (scale {scale}, bits {bits})")
    assert jitcore.cache_misses(jitted) <= 3
