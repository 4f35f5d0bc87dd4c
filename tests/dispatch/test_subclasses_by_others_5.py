"""Tensor subclasses as others write them, round 5 (issue 15, helper zoo24): library functions made
overridable the way torch documents it (``has_torch_function`` then ``handle_torch_function``) and the
subclasses and modes that override them; styles of the same probe that already worked are guarded
below them (an aliasing-correct wrapper through in-place ops and views, a bf16-packed tensor with an
enum ctx, an int4-packed tensor whose inner shape is not the outer one, a torchao-style int8 weight
with ``__torch_function__`` and aten tables and a frozen-dataclass ctx, a dispatch keyed by op tags).
Each runs eagerly and under jitcore.jit twice (subclass_checks.check_twice) unless it says otherwise.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import check_twice
from torch.overrides import (
    TorchFunctionMode,
    handle_torch_function,
    has_torch_function,
    has_torch_function_unary,
    has_torch_function_variadic,
)
from torch.testing._internal.common_subclass import NonWrapperTensor
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

import jitcore

# --- library functions that check for overrides themselves ---------------------------------------------


def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    if has_torch_function((x,)):
        return handle_torch_function(scale, (x,), x, s)
    return x * s


def combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if has_torch_function_variadic(a, b):
        return handle_torch_function(combine, (a, b), a, b)
    return a + b


def negate(a: torch.Tensor) -> torch.Tensor:
    if has_torch_function_unary(a):
        return handle_torch_function(negate, (a,), a)
    return -a


class Overrides(torch.Tensor):
    """A plain subclass that overrides ``scale`` and ``combine`` and leaves the rest to torch."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is scale:
            return args[0] * (args[1] + 1)
        if func is combine:
            return args[0] - args[1]
        return super().__torch_function__(func, types, args, kwargs or {})


class TwoOverrides(TwoTensor):
    """A wrapper subclass whose ``__torch_function__`` overrides ``negate``."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is negate:
            return args[0] * 10
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class Shifting(TorchFunctionMode):
    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is negate:
            return args[0] + 100
        return func(*args, **(kwargs or {}))


def _under_a_mode(x: torch.Tensor) -> tuple:
    with Shifting():
        return negate(x), scale(x, 2)


def _overrides() -> tuple:
    return (torch.randn(3).as_subclass(Overrides),)


@pytest.mark.parametrize(("program", "make"), [
    pytest.param(lambda x: scale(x, 2), _overrides, id="has_torch_function"),
    pytest.param(lambda x, y: (combine(y, x), combine(y, y)), lambda: (*_overrides(), torch.randn(3)),
                 id="variadic"),
    pytest.param(lambda x: negate(x) + scale(x, 3), lambda: (TwoOverrides(torch.randn(3), torch.randn(3)),),
                 id="wrapper_subclass"),
    pytest.param(_under_a_mode, _overrides, id="mode_entered_inside"),
])
def test_a_library_function_overridden_by_a_subclass(program: Callable[..., Any],
                                                     make: Callable[[], tuple]) -> None:
    """A function that asks ``has_torch_function`` itself runs the subclass's (or mode's) override, as
    eagerly (the check saw jitcore's proxy and answered False: the function's own body ran, a wrong
    answer; a wrapper subclass's override reached jitcore's own ``__torch_function__``: JC-T001)."""
    check_twice(program, make)


def test_a_library_function_overridden_under_grad() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return scale(x, 2).sum()

    check_twice(f, lambda: (torch.randn(3, requires_grad=True).as_subclass(Overrides),),
                after=lambda out, args: torch.autograd.grad(out, args[0]))


@pytest.mark.parametrize("disable", [torch._C.DisableTorchFunctionSubclass, torch._C.DisableTorchFunction])
def test_a_library_function_with_torch_function_disabled(disable: type) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        with disable():
            return scale(x, 2)

    check_twice(f, _overrides)


def test_the_value_reads_its_classes_protocol_methods() -> None:
    """``x.__torch_function__`` is the class's, bound as eagerly (it was jitcore's proxy's)."""
    def f(x: torch.Tensor) -> tuple:
        method = x.__torch_function__
        return method.__func__ is type(x).__torch_function__.__func__, method.__self__

    jitted = jitcore.jit(f)
    x = torch.randn(3).as_subclass(Overrides)
    assert jitted(x) == f(x) == (True, Overrides)


# --- an optimizer over parameters of a plain subclass ------------------------------------------------


class Marked(torch.Tensor):
    """A plain subclass (no ``__torch_dispatch__``) with torch's default ``__torch_function__``."""


def _training(make_parameter: Callable[[torch.Tensor], torch.Tensor], optimizer: str) -> tuple:
    torch.manual_seed(0)
    parameter = torch.nn.Parameter(make_parameter(torch.randn(4)))
    opt = getattr(torch.optim, optimizer)([parameter], lr=0.1)

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = (parameter * x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    return parameter, opt, step


@pytest.mark.parametrize("optimizer", ["Adam", "AdamW", "NAdam"])
@pytest.mark.parametrize("make_parameter", [
    pytest.param(lambda t: t.as_subclass(Marked), id="plain_subclass"),
    pytest.param(NonWrapperTensor, id="NonWrapperTensor"),
])
def test_an_optimizer_step_on_plain_subclass_parameters(make_parameter: Callable[..., Any],
                                                        optimizer: str) -> None:
    """The training step that traces with the optimizer's state made reads ``step.item()`` after
    writing the state (``exp_avg.lerp_``, of the parameter's class) in place: the probe that answers the
    read wrote the caller's state itself, and the computation wrote it again (a wrong answer: the
    moments moved twice, the parameters differed from the second step on)."""
    expected_parameter, expected_opt, expected_step = _training(make_parameter, optimizer)
    parameter, opt, step = _training(make_parameter, optimizer)
    jitted = jitcore.jit(step)
    for i in range(4):
        torch.manual_seed(10 + i)
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x), expected_step(x))
        assert type(parameter) is type(expected_parameter)
        torch.testing.assert_close(parameter.detach().as_subclass(torch.Tensor),
                                   expected_parameter.detach().as_subclass(torch.Tensor))
        for key, value in expected_opt.state[expected_parameter].items():
            torch.testing.assert_close(opt.state[parameter][key].as_subclass(torch.Tensor),
                                       value.as_subclass(torch.Tensor))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
    assert jitted.fallback_reason is None


# --- styles that already worked (regression guards) -----------------------------------------------------

aten = torch.ops.aten


class Aliasing(torch.Tensor):
    """One inner tensor; every op is run on it and ``return_and_correct_aliasing`` fixes the outputs'
    aliasing (the style of torch's ``WrapperSubclass``)."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(),
                                                   storage_offset=a.storage_offset(), dtype=a.dtype,
                                                   device=a.device, requires_grad=a.requires_grad)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __tensor_flatten__(self) -> tuple:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Aliasing:
        return Aliasing(inner["a"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        args_a, kwargs_a = tree_map_only(Aliasing, lambda x: x.a, (args, kwargs))
        out = func(*args_a, **kwargs_a)
        return return_and_correct_aliasing(func, args, kwargs, tree_map_only(torch.Tensor, Aliasing, out))


def _set_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x[1:] = y[:2]
    return x * 1


@pytest.mark.parametrize("program", [
    pytest.param(lambda x, y: (x.add_(1) * 2, x), id="add_"),
    pytest.param(lambda x, y: (x.t_().sum(0), x), id="t_"),
    pytest.param(lambda x, y: (x.view(12).mul_(2), x), id="view_then_in_place"),
    pytest.param(_set_rows, id="setitem"),
    pytest.param(lambda x, y: (x.index_put_((torch.tensor([0, 2]),), torch.tensor(1.0)), x), id="index_put_"),
    pytest.param(lambda x, y: (torch.cat([x, y]), torch.stack([x, y], 1), x.split(2), x.unbind(1)),
                 id="cat_split"),
    pytest.param(lambda x, y: (x.detach(), x.clone(), x.t().contiguous(), x.to(torch.float64), x.data * 2),
                 id="conversions"),
    pytest.param(lambda x, y: (torch.empty_like(x).fill_(2), x.new_zeros(3), torch.zeros_like(x)),
                 id="factories"),
])
def test_an_aliasing_correct_wrapper(program: Callable[..., Any]) -> None:
    check_twice(program, lambda: (Aliasing(torch.randn(3, 4)), Aliasing(torch.randn(3, 4))))


class Layout(enum.Enum):
    ROW = 1
    COL = 2


@dataclasses.dataclass(frozen=True)
class PackMeta:
    layout: Layout
    dtype: torch.dtype


class Packed(torch.Tensor):
    """bf16 values stored as int16, outer float32; ``t()`` flips the layout in the ctx (an enum in a
    frozen dataclass); everything else unpacks."""

    @staticmethod
    def __new__(cls, packed: torch.Tensor, meta: PackMeta) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, packed.shape, dtype=meta.dtype, device=packed.device)

    def __init__(self, packed: torch.Tensor, meta: PackMeta) -> None:
        self.packed, self.meta = packed, meta

    def __tensor_flatten__(self) -> tuple:
        return ["packed"], self.meta

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, meta: PackMeta, size: Any, stride: Any) -> Packed:
        return cls(inner["packed"], meta)

    @classmethod
    def pack(cls, t: torch.Tensor) -> Packed:
        return cls(t.to(torch.bfloat16).view(torch.int16), PackMeta(Layout.ROW, t.dtype))

    def unpack(self) -> torch.Tensor:
        return self.packed.view(torch.bfloat16).to(self.meta.dtype)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.detach.default:
            return cls(args[0].packed, args[0].meta)
        if func is aten.t.default:
            flipped = Layout.COL if args[0].meta.layout is Layout.ROW else Layout.ROW
            return cls(args[0].packed.t(), dataclasses.replace(args[0].meta, layout=flipped))
        return func(*tree_map_only(cls, lambda x: x.unpack(), args), **(kwargs or {}))


class Int4(torch.Tensor):
    """Two int4 values per uint8 with a row scale: the inner tensor's shape is not the outer one."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor, shape: Any) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=scale.dtype, device=q.device)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, shape: Any) -> None:
        self.q, self.scale = q, scale

    def __tensor_flatten__(self) -> tuple:
        return ["q", "scale"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> Int4:
        return cls(inner["q"], inner["scale"], size)

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int4:
        scale = w.abs().amax(1, keepdim=True) / 7
        q = ((w / scale).round().clamp(-8, 7).to(torch.int8) + 8).to(torch.uint8)
        return cls(q[:, ::2] << 4 | q[:, 1::2], scale, w.shape)

    def dequantize(self) -> torch.Tensor:
        high, low = (self.q >> 4).to(torch.int8) - 8, (self.q & 15).to(torch.int8) - 8
        return torch.stack([high, low], -1).reshape(self.shape).to(self.scale.dtype) * self.scale

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.detach.default:
            return args[0]
        return func(*tree_map_only(cls, lambda x: x.dequantize(), args), **(kwargs or {}))


class Int8MM(torch.Tensor):
    """An int8 weight whose ``mm`` quantizes the activation and runs ``torch._int_mm``."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=torch.float32, device=q.device)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.q, self.scale = q, scale

    def __tensor_flatten__(self) -> tuple:
        return ["q", "scale"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> Int8MM:
        return cls(inner["q"], inner["scale"])

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int8MM:
        scale = w.abs().amax(1, keepdim=True) / 127
        return cls((w / scale).round().to(torch.int8), scale)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            return cls(args[0].q.t(), args[0].scale.t())
        if func is aten.detach.default:
            return args[0]
        if func is aten.mm.default and isinstance(args[1], cls):
            x, w = args
            x_scale = x.abs().amax(1, keepdim=True) / 127
            xq = F.pad((x / x_scale).round().to(torch.int8), (0, 0, 0, (-x.shape[0]) % 8))
            return torch._int_mm(xq, w.q)[: x.shape[0]].to(torch.float32) * x_scale * w.scale
        raise NotImplementedError(func)


@pytest.mark.parametrize(("program", "make"), [
    pytest.param(F.linear, lambda: (torch.randn(2, 4), Packed.pack(torch.randn(3, 4))), id="packed_linear"),
    pytest.param(lambda w: (w.t().t(), w.t().meta, w.to(torch.float64) * 2),
                 lambda: (Packed.pack(torch.randn(3, 4)),), id="packed_ctx"),
    pytest.param(lambda t: Packed.pack(t).t(), lambda: (torch.randn(3, 4),), id="packed_made_inside"),
    pytest.param(F.linear, lambda: (torch.randn(2, 8), Int4.quantize(torch.randn(4, 8))), id="int4_linear"),
    pytest.param(Int4.quantize, lambda: (torch.randn(4, 8),), id="int4_output"),
    pytest.param(F.linear, lambda: (torch.randn(3, 32), Int8MM.quantize(torch.randn(16, 32))), id="int_mm"),
    pytest.param(lambda x, w: F.linear(x, Int8MM.quantize(w)),
                 lambda: (torch.randn(8, 32), torch.randn(16, 32)), id="int_mm_made_inside"),
])
def test_packed_and_quantized_tensors(program: Callable[..., Any], make: Callable[[], tuple]) -> None:
    check_twice(program, make)


# --- a plain subclass that wraps every result, as a parameter with a backward inside ---------------------


class Unit(torch.Tensor):
    """A tensor with a unit: its ``__torch_function__`` wraps every tensor result with the unit of its
    first argument that has one (``Unit(out, unit)`` over ``as_subclass``)."""

    @staticmethod
    def __new__(cls, t: torch.Tensor, unit: str | None) -> Unit:
        made = t.as_subclass(cls)
        made.unit = unit
        return made

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        units = [a.unit for a in args if isinstance(a, Unit)]
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and not isinstance(out, Unit):
            return Unit(out, units[0] if units else None)
        return out


def _unit_parameter() -> tuple:
    return torch.nn.Parameter(Unit(torch.randn(4), "m")), torch.randn(4)


@pytest.mark.parametrize("program", [
    pytest.param(lambda p, x: (p * x).sum().backward(), id="backward"),
    pytest.param(lambda p, x: ((p * x).sum().backward(), p.grad, p.grad.unit)[1:], id="grad_read"),
])
def test_a_backward_inside_on_a_parameter_whose_torch_function_wraps(program: Callable[..., Any]) -> None:
    """jitcore's snapshot of a caller's tensor read its ``.grad`` through the class's
    ``__torch_function__``, which wrapped the pass's fake gradient and raised (RuntimeError: ...
    already associated to a python object of type FakeTensor) where eager computes."""
    check_twice(program, _unit_parameter, after=lambda out, args: (args[0].grad, args[0].grad.unit))
