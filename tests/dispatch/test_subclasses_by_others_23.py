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


# --- a float of the flatten ctx that changes every call ------------------------------------------------
# Note [A float of a flatten ctx that changes between calls] (jitcore/jit/ctx_numbers.py): the ``flatten``
# guard pinned a quantized weight's scale, so a scale that changed every call traced every call.


def _scaled_class(flatten_ctx: Callable[[Any], Any], from_ctx: Callable[[Any], tuple],
                  dispatch: Callable[..., Any]) -> type:
    """A wrapper over ``data_`` with a float ``scale`` (and a ``tag``) kept in its flatten ctx as
    ``flatten_ctx`` puts it, rebuilt by ``from_ctx``; ``dispatch(cls, func, args, kwargs)``."""

    class Wrapper(torch.Tensor):
        @staticmethod
        def __new__(cls, data: torch.Tensor, scale: float, tag: str = "w") -> Any:
            return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32)

        def __init__(self, data: torch.Tensor, scale: float, tag: str = "w") -> None:
            self.data_, self.scale, self.tag = data, scale, tag

        def __repr__(self) -> str:
            return f"Wrapper(scale={self.scale})"

        def __tensor_flatten__(self) -> tuple[list[str], Any]:
            return ["data_"], flatten_ctx(self)

        @staticmethod
        def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Any:
            return Wrapper(inner["data_"], *from_ctx(ctx))

        @classmethod
        def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (),
                               kwargs: dict | None = None) -> Any:
            return dispatch(cls, func, args, kwargs or {})

    return Wrapper


def _dequantizes(cls: type, func: Any, args: tuple, kwargs: dict) -> Any:
    inner_args, inner_kwargs = tree_map_only(cls, lambda t: t.data_ * t.scale, (args, kwargs))
    return func(*inner_args, **inner_kwargs)


def _keeps_the_scale(cls: type, func: Any, args: tuple, kwargs: dict) -> Any:
    scale = next(a.scale for a in args if isinstance(a, cls))
    inner_args, inner_kwargs = tree_map_only(cls, lambda t: t.data_, (args, kwargs))
    return tree_map_only(torch.Tensor, lambda t: cls(t, scale), func(*inner_args, **inner_kwargs))


def _branches_on_the_scale(cls: type, func: Any, args: tuple, kwargs: dict) -> Any:
    inner_args, inner_kwargs = tree_map_only(
        cls, lambda t: t.data_ * (t.scale if t.scale > 0.5 else -t.scale), (args, kwargs))
    return func(*inner_args, **inner_kwargs)


_LOG: list[str] = []


def _logs_the_scale(cls: type, func: Any, args: tuple, kwargs: dict) -> Any:
    _LOG.append(f"{func.__name__} at {next(a.scale for a in args if isinstance(a, cls)):.2f}")
    return _dequantizes(cls, func, args, kwargs)


_IN_A_DICT = (lambda t: {"scale": t.scale}, lambda ctx: (ctx["scale"],))
_CTX_NUMBERS: dict[str, tuple[Any, Any, Callable[..., Any], int]] = {  # ctx, its reading, dispatch, misses
    "dict_dequantized": (*_IN_A_DICT, _dequantizes, 2),
    "tuple_with_a_tag_kept_on_the_output": (lambda t: (t.scale, t.tag), lambda ctx: ctx, _keeps_the_scale, 2),
    "list_kept_on_the_output": (lambda t: [t.scale], lambda ctx: (ctx[0],), _keeps_the_scale, 2),
    "the_ctx_itself": (lambda t: t.scale, lambda ctx: (ctx,), _keeps_the_scale, 2),
    "a_branch_on_it": (*_IN_A_DICT, _branches_on_the_scale, 3),  # an entry per outcome, past the first
    "formatted_into_a_log": (*_IN_A_DICT, _logs_the_scale, 2),
}


@pytest.mark.parametrize("name", list(_CTX_NUMBERS))
def test_a_float_of_the_flatten_ctx_that_changes_every_call_is_a_number_of_the_computation(name: str) -> None:
    flatten_ctx, from_ctx, dispatch, misses = _CTX_NUMBERS[name]
    cls = _scaled_class(flatten_ctx, from_ctx, dispatch)
    fn = lambda x, w: (x * w).sum(0)  # noqa: E731
    jitted = jitcore.jit(fn)
    for i, scale in enumerate((0.1, 0.2, 0.7, 0.9, 0.3, 0.2, 0.45, 1.5)):
        torch.manual_seed(i)
        x, data = torch.randn(4, 3), torch.randint(-5, 5, (4, 3)).float()
        _LOG.clear()
        expected, eager_log = fn(x, cls(data, scale)), list(_LOG)
        _LOG.clear()
        with protocol_calls(cls) as calls:
            actual = jitted(x, cls(data, scale))
        assert_same_flattened(actual, expected, f"call {i} (scale {scale})")
        assert _LOG == eager_log, (i, _LOG, eager_log)
        if i == 7:
            assert calls == [], calls  # a warm call with a new scale runs only the flattened trace
    assert jitcore.cache_misses(jitted) == misses


def test_an_int_of_the_flatten_ctx_stays_pinned() -> None:
    """An int in the ctx is structure (a bit width here): each value its own entry, never dynamic."""
    cls = _scaled_class(lambda t: {"bits": t.scale}, lambda ctx: (ctx["bits"],), _dequantizes)
    fn = lambda x, w: x * w  # noqa: E731
    jitted = jitcore.jit(fn)
    for i, bits in enumerate((2, 4, 8, 4)):
        x, data = torch.randn(3), torch.randn(3)
        assert_same_flattened(jitted(x, cls(data, bits)), fn(x, cls(data, bits)), f"call {i}")
    assert jitcore.cache_misses(jitted) == 3


def _frozen_dispatch(cls: type, func: Any, args: tuple, kwargs: dict) -> Any:
    """Dequantizes, but keeps the class through ``detach`` (what ``nn.Parameter`` asks of it)."""
    if func is torch.ops.aten.detach.default:
        return _keeps_the_scale(cls, func, args, kwargs)
    return _dequantizes(cls, func, args, kwargs)


@pytest.mark.parametrize("jit_the_module", [False, True], ids=["module_argument", "jitted_module"])
def test_a_frozen_linear_whose_weights_scale_changes_every_call(jit_the_module: bool) -> None:
    """A quantized weight swapped in with a new scale between calls (a module's state, checked as one
    group when the module is jitted); its bias does not require grad, so no grad transform pins it."""
    cls = _scaled_class(*_IN_A_DICT, _frozen_dispatch)
    torch.manual_seed(0)
    weight, bias = torch.randint(-5, 5, (2, 3)).float(), torch.randn(2)
    model, reference = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    for m in (model, reference):
        m.bias = torch.nn.Parameter(bias.clone(), requires_grad=False)
    fn = lambda m, x: m(x)  # noqa: E731
    jitted = jitcore.jit(model) if jit_the_module else jitcore.jit(fn)
    for i, scale in enumerate((0.1, 0.2, 0.3, 0.25, 0.05)):
        x = torch.randn(4, 3)
        for m in (model, reference):
            m.weight = torch.nn.Parameter(cls(weight.clone(), scale), requires_grad=False)
        actual = jitted(x) if jit_the_module else jitted(model, x)
        assert_same_flattened(actual, fn(reference, x), f"call {i} (scale {scale})")
    assert jitcore.cache_misses(jitted) == 2


class _ScaleAsTensor(torch.Tensor):
    """Hands its ctx's scale to C in ``__init__`` (``torch.tensor(scale)``): rebuilt around a number of
    the computation it could not be (Note [A ctx number its class cannot rebuild with])."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float) -> _ScaleAsTensor:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32)

    def __init__(self, data: torch.Tensor, scale: float) -> None:
        self.data_, self.scale, self.scale_t = data, scale, torch.tensor(scale)

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["data_"], {"scale": self.scale}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> _ScaleAsTensor:
        return _ScaleAsTensor(inner["data_"], ctx["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        inner_args, inner_kwargs = tree_map_only(cls, lambda t: t.data_ * t.scale_t, (args, kwargs or {}))
        return func(*inner_args, **inner_kwargs)


def test_a_ctx_float_its_class_hands_to_c_stays_pinned() -> None:
    fn = lambda x, w: x * w  # noqa: E731
    jitted = jitcore.jit(fn)
    scales = (0.5, 0.25, 0.125, 0.3, 0.25)
    for i, scale in enumerate(scales):
        x, data = torch.randn(3), torch.randn(3)
        assert_same_flattened(jitted(x, _ScaleAsTensor(data, scale)), fn(x, _ScaleAsTensor(data, scale)),
                              f"call {i}")
    assert jitcore.cache_misses(jitted) == len(set(scales))
