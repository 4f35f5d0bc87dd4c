"""Tensor subclasses as others write them, round 2 (issue 15, helper zoo20): programs in the styles of
albanD/subclass_zoo (a lazily negated tensor, a tracer, a quantized tensor), torch's test subclasses
and torchao/float8 (a blocked int8 tensor with a frozen-dataclass ctx and an ``implements`` table, a
ctx of int/tuple/dtype/enum, ``__tensor_unflatten__`` using the outer size and strides, an outer dtype
other than the inner one), ``__torch_function__`` unit propagation, and subclasses meeting each other.
Each runs eagerly and under jitcore.jit twice (subclass_checks.check_twice). They all passed when
written: they guard what works (the failing programs of the same probe are
test_modes_entered_inside.py and tests/jit/test_jit_data_assignment.py).
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
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

aten = torch.ops.aten


class Negative(torch.Tensor):
    """Holds ``elem`` and stands for ``-elem`` (subclass_zoo's negative tensor, lazily negated)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                   device=elem.device)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Negative:
        return Negative(inner["elem"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.neg.default:
            return args[0].elem.clone()
        negated = tree_map_only(Negative, lambda t: -t.elem, (args, kwargs or {}))
        return func(*negated[0], **negated[1])


class Mode(enum.Enum):
    PLAIN = 1
    SCALED = 2


class Described(torch.Tensor):
    """A ctx of an int, a tuple, a dtype and an enum; its dispatch reads them."""

    @staticmethod
    def __new__(cls, x: torch.Tensor, n: int, shape: tuple, dtype: torch.dtype, mode: Mode) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, x.shape, dtype=dtype, device=x.device)

    def __init__(self, x: torch.Tensor, n: int, shape: tuple, dtype: torch.dtype, mode: Mode) -> None:
        self.x, self.n, self.shape_t, self.dt, self.mode = x, n, shape, dtype, mode

    def __tensor_flatten__(self) -> tuple:
        return ["x"], (self.n, self.shape_t, self.dt, self.mode)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: tuple, size: Any, stride: Any) -> Described:
        return Described(inner["x"], *ctx)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        t = next(a for a in args if isinstance(a, Described))
        out = func(*tree_map_only(Described, lambda a: a.x, args), **(kwargs or {}))
        if t.mode is Mode.SCALED:
            out = tree_map_only(torch.Tensor, lambda o: o * t.n, out)
        return tree_map_only(torch.Tensor, lambda o: Described(o, t.n + 1, t.shape_t, o.dtype, t.mode), out)


class OuterSized(torch.Tensor):
    """Rebuilt with the outer size and strides ``__tensor_unflatten__`` is given (views keep them)."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor, size: Any = None, stride: Any = None) -> Any:
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape if size is None else size, strides=inner.stride() if stride is None else stride,
            dtype=inner.dtype, device=inner.device)

    def __init__(self, inner: torch.Tensor, size: Any = None, stride: Any = None) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> OuterSized:
        return OuterSized(inner["inner"], size, stride)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*tree_map_only(OuterSized, lambda a: a.inner, args),
                   **tree_map_only(OuterSized, lambda a: a.inner, kwargs))
        return return_and_correct_aliasing(func, args, kwargs, tree_map_only(torch.Tensor, OuterSized, out))


@dataclasses.dataclass(frozen=True)
class BlockMeta:
    block: int
    dtype: torch.dtype


class Blocked(torch.Tensor):
    """int8 blocks with per-block scales (torchao style: a frozen dataclass ctx, an ``implements`` table)."""

    HANDLED: dict[Any, Callable[..., Any]] = {}

    @staticmethod
    def __new__(cls, q: torch.Tensor, s: torch.Tensor, meta: BlockMeta, shape: Any) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=meta.dtype, device=q.device)

    def __init__(self, q: torch.Tensor, s: torch.Tensor, meta: BlockMeta, shape: Any) -> None:
        self.q, self.s, self.meta = q, s, meta

    def __tensor_flatten__(self) -> tuple:
        return ["q", "s"], self.meta

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, meta: BlockMeta, size: Any, stride: Any) -> Blocked:
        return cls(inner["q"], inner["s"], meta, size)

    @classmethod
    def from_float(cls, t: torch.Tensor, block: int = 4) -> Blocked:
        blocks = t.reshape(-1, block)
        s = blocks.abs().amax(1, keepdim=True) / 127
        return cls(torch.round(blocks / s).to(torch.int8), s, BlockMeta(block, t.dtype), t.shape)

    def dequantize(self) -> torch.Tensor:
        return (self.q.float() * self.s).reshape(self.shape).to(self.meta.dtype)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls.HANDLED:
            return cls.HANDLED[func](func, args, kwargs or {})
        plain = tree_map_only(Blocked, lambda t: t.dequantize(), (args, kwargs or {}))
        return func(*plain[0], **plain[1])


def _implements(*ops: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in ops:
            Blocked.HANDLED[op] = fn
        return fn
    return register


@_implements(aten.detach.default, aten.clone.default)
def _blocked_alias(func: Any, args: tuple, kwargs: dict) -> Blocked:
    t = args[0]
    return Blocked(func(t.q), func(t.s), t.meta, t.shape)


@_implements(aten.t.default)
def _blocked_t(func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
    return aten.t.default(args[0].dequantize())


class Declining(torch.Tensor):
    """Returns NotImplemented when another subclass takes part: the other one's dispatch decides."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __tensor_flatten__(self) -> tuple:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Declining:
        return Declining(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if any(t not in (Declining, torch.Tensor) for t in types):
            return NotImplemented
        out = func(*tree_map_only(Declining, lambda t: t.a, args), **(kwargs or {}))
        return tree_map_only(torch.Tensor, Declining, out)


class Unit(torch.Tensor):
    """A unit carried by ``__torch_function__`` (its results re-tagged under DisableTorchFunctionSubclass)."""

    def __new__(cls, data: Any, unit: str = "m") -> Unit:
        t = torch.as_tensor(data).as_subclass(cls)
        t.unit = unit
        return t

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        units = [a.unit for a in args if isinstance(a, Unit)]
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor):
            out = out.as_subclass(Unit)
            mul = func in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__) and len(units) == 2
            out.unit = "*".join(units) if mul else (units[0] if units else None)
        return out


class BFloat16Outside(torch.Tensor):
    """Outer dtype bfloat16 over a float32 inner tensor."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=torch.bfloat16,
                                                   device=inner.device)

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> BFloat16Outside:
        return BFloat16Outside(inner["inner"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*tree_map_only(BFloat16Outside, lambda t: t.inner, args), **(kwargs or {}))
        if func is aten._to_copy.default:
            return out
        return tree_map_only(torch.Tensor, lambda o: BFloat16Outside(o) if o.dtype == torch.float32 else o,
                             out)


class Squared(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * grad * x


def _two(*shape: int, requires_grad: bool = False) -> TwoTensor:
    return TwoTensor(torch.randn(*shape), torch.randn(*shape)).requires_grad_(requires_grad)


def _backward(out: Any, args: tuple) -> Any:
    out.sum().backward()
    return tuple(a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad)


def _units(a: Unit, b: Unit) -> tuple:
    c = a * b + 1
    return c, c.unit, (a + a).unit


PROGRAMS: dict[str, tuple] = {
    "lazily negated tensor": (lambda x, y: ((-x) * y, x + 1, x.sum(dim=0)),
                              lambda: (Negative(torch.randn(3, 4)), torch.randn(3, 4))),
    "ctx of int, tuple, dtype and enum": (
        lambda x: (x + 1, (x * 2).sum(0)),
        lambda: (Described(torch.randn(2, 3), 2, (2, 3), torch.float32, Mode.SCALED),)),
    "unflatten with outer size and strides": (lambda x: (x.t(), x.t().contiguous() + 1, x[:, 1:]),
                                              lambda: (OuterSized(torch.randn(3, 4)),)),
    "blocked int8 with an implements table": (
        lambda x, w: (F.linear(x, w), w.detach(), w * 2),
        lambda: (torch.randn(2, 8), Blocked.from_float(torch.randn(3, 8)))),
    "a subclass declining for another": (
        lambda x, y: (x * y, y + x), lambda: (Declining(torch.randn(3)), _two(3))),
    "units through __torch_function__": (
        _units, lambda: (Unit(torch.randn(3), "m"), Unit(torch.randn(3), "s"))),
    "outer dtype other than the inner": (lambda x: (x * 2, (x + 1).to(torch.float32), x.sum()),
                                         lambda: (BFloat16Outside(torch.randn(3)),)),
    "cat and stack mixing subclass and plain": (
        lambda x, y: (torch.cat([x, y, x]), torch.stack([y.expand(2, 3), x])),
        lambda: (_two(2, 3), torch.randn(1, 3))),
    "where with a plain condition": (
        lambda c, x: torch.where(c, x, 0.0), lambda: (torch.randn(4) > 0, _two(4))),
    "scaled dot product attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                                     lambda: (_two(1, 2, 4, 8), _two(1, 2, 4, 8), _two(1, 2, 4, 8))),
    "nested two deep": (lambda x: (x * 2 + 1, x.a.b.sum()), lambda: (TwoTensor(_two(3), _two(3)),)),
}

BACKWARD_PROGRAMS: dict[str, tuple] = {
    "blocked weight, gradient to the input": (
        lambda x, w: F.linear(x, w).relu(),
        lambda: (torch.randn(2, 8, requires_grad=True), Blocked.from_float(torch.randn(3, 8)))),
    "autograd.Function saving a subclass": (
        lambda x: Squared.apply(x) + 1, lambda: (_two(3, requires_grad=True),)),
    "nested two deep": (lambda x: (x * x).sin(), lambda: (TwoTensor(_two(3), _two(3)).requires_grad_(),)),
    "layer norm and softmax": (
        lambda x: F.layer_norm(x, (4,)).softmax(-1), lambda: (_two(2, 4, requires_grad=True),)),
}


@pytest.mark.parametrize("program", PROGRAMS, ids=list(PROGRAMS))
def test_program_matches_eager(program: str) -> None:
    check_twice(*PROGRAMS[program])


@pytest.mark.parametrize("program", BACKWARD_PROGRAMS, ids=list(BACKWARD_PROGRAMS))
def test_gradients_match_eager(program: str) -> None:
    check_twice(*BACKWARD_PROGRAMS[program], after=_backward)
