"""Tensor subclasses as others write them, round 3 (issue 15, helper zoo22): a subclass's own
``__repr__`` (torchao's shape-and-dtype style, and one showing values), rules registered with
``torch.library.register_torch_dispatch`` / a custom op's ``register_torch_dispatch`` for a subclass
and for a TorchDispatchMode, a wrapper returned by an ``autograd.Function`` (float8 training's style),
``Module.to`` of a module with subclass parameters, and guards for styles of the same probe that
already worked (torchao's ``TorchAOBaseTensor`` tables with an optional inner tensor, a LoRA wrapper, a
ctx flag flipped by ``t()``, ``NotImplemented`` and another class taking over, a dispatch keyed by
``func.name()`` or the decomposition table). Each runs eagerly and under jitcore.jit twice
(subclass_checks.check_twice) unless it says otherwise.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import assert_same_values, check_twice
from torch._decomp import decomposition_table
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import TorchDispatchMode, return_and_correct_aliasing
from torch.utils._pytree import tree_map_only

import jitcore

aten = torch.ops.aten


class Wrapped(torch.Tensor):
    """One inner tensor; ops run on it and the results are wrapped again in the class of the call."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                   device=elem.device)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple:
        return ["elem"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> Wrapped:
        return cls(inner["elem"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*tree_map_only(Wrapped, lambda t: t.elem, args), **(kwargs or {}))
        return tree_map_only(torch.Tensor, cls, out)


# --- a subclass's own __repr__ ------------------------------------------------------------------------

class ShapeRepr(Wrapped):
    """torchao's style: the class, shape and dtype, no values."""

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        inner = type(self.elem).__name__
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype}, inner={inner})"


class ValuesRepr(Wrapped):
    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"ValuesRepr({self.elem!r})"


def test_a_subclass_repr_of_its_own_is_run() -> None:
    """``repr(y)``, ``f"{y!r}"`` and ``"%r" % (y,)`` of a subclass value run the class's ``__repr__``
    (they gave jitcore's proxy text, ``SubclassTensorProxy(t1, ...)``, a wrong answer)."""
    def f(x: torch.Tensor) -> tuple:
        y = x + 1
        return y, repr(y), f"{y!r}", "%r" % (y,)

    jitted = check_twice(f, lambda: (ShapeRepr(torch.arange(3.0)),))
    text = "ShapeRepr(shape=(3,), dtype=torch.float32, inner=Tensor)"
    assert jitted(ShapeRepr(torch.arange(3.0)))[1] == text


def test_a_subclass_repr_showing_values_is_made_on_each_call() -> None:
    """A ``__repr__`` that shows the inner tensor's values (``f"ValuesRepr({self.elem!r})"``) ran the call
    eagerly (JC-T001). The inner tensor's text is now made from each call's tensor (Note [A tensor the
    program prints], jit/printing.py): one entry, eager's text on every call."""
    def f(x: torch.Tensor) -> tuple:
        y = x + 1
        return y, repr(y)

    jitted = jitcore.jit(f)
    for k in range(3):
        expected = f(ValuesRepr(torch.arange(3.0) * k))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            actual = jitted(ValuesRepr(torch.arange(3.0) * k))
        assert actual[1] == expected[1] == f"ValuesRepr({torch.arange(3.0) * k + 1!r})"
        assert_same_values(actual[0], expected[0])
    assert (jitcore.cache_misses(jitted), jitted.fallback_reason) == (1, None)


# --- torch.library.register_torch_dispatch rules --------------------------------------------------------

@torch.library.custom_op("jitcore_zoo22::scaled_mul", mutates_args=())
def scaled_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y


@scaled_mul.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class RuleOwner(Wrapped):
    """Its ``__torch_dispatch__`` (Wrapped's) would compute ``x * y``; the registered rule times 100."""


@scaled_mul.register_torch_dispatch(RuleOwner)
def _(cls: type, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    x, y = args
    return cls(x.elem * (y.elem if isinstance(y, RuleOwner) else y) * 100)


class RuleDeclines(Wrapped):
    pass


@scaled_mul.register_torch_dispatch(RuleDeclines)
def _(*args: Any) -> Any:
    # eager calls a rule that declines a second time, without the class (torch's dispatch_on_subclass)
    RuleDeclines.calls.append(len(args))
    return NotImplemented


RuleDeclines.calls = []


class PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


@scaled_mul.register_torch_dispatch(PassThrough)
def _(mode: TorchDispatchMode, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
    return func(*args, **kwargs) * 7


def test_a_rule_registered_for_a_subclass_replaces_its_dispatch() -> None:
    """Eager's dispatcher calls the rule in place of the class's ``__torch_dispatch__`` (jitcore called
    the class's: ``x * y`` where eager gives ``x * y * 100``)."""
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple:
        return scaled_mul(x, y), scaled_mul(x, x), x + y

    check_twice(f, lambda: (RuleOwner(torch.randn(3)), torch.randn(3)))


def test_a_rule_returning_notimplemented_passes_to_the_next_class() -> None:
    """A rule's NotImplemented is the class's answer (its ``__torch_dispatch__`` is not asked): the next
    class's rule decides, and with none left the call raises TypeError as eagerly."""
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple:
        try:
            alone = scaled_mul(x, x)
        except TypeError:
            alone = x - 1
        return scaled_mul(x, y), alone

    RuleDeclines.calls.clear()
    jitted = check_twice(f, lambda: (RuleDeclines(torch.randn(3)), RuleOwner(torch.randn(3))))
    # eager's first call: two scaled_mul, the declining rule asked twice each (5 arguments, then 4)
    assert RuleDeclines.calls[:4] == [5, 4, 5, 4]
    assert jitted.fallback_reason is None


def test_a_rule_registered_for_a_mode_replaces_its_dispatch() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with PassThrough():
            return scaled_mul(x, y) + 1

    check_twice(f, lambda: (torch.randn(3), torch.randn(3)))


# --- an autograd.Function returning a wrapper ----------------------------------------------------------

class GemmRole(enum.Enum):
    INPUT = "input"
    WEIGHT = "weight"


class MMConfig(NamedTuple):
    emulate: bool = True
    use_fast_accum: bool = False


class Float8Like(torch.Tensor):
    """float8 training's style: ``_data``/``_scale`` inner, a dict ctx with a NamedTuple config and an enum;
    made by an autograd.Function whose forward returns it (eager's apply sends it no op)."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor, orig_dtype: torch.dtype, config: MMConfig,
                role: GemmRole) -> Any:
        self = torch.Tensor._make_wrapper_subclass(cls, data.size(), strides=data.stride(), dtype=orig_dtype,
                                                   device=data.device, requires_grad=data.requires_grad)
        self._data, self._scale, self._orig_dtype = data, scale, orig_dtype
        self._config, self._role = config, role
        return self

    def __tensor_flatten__(self) -> tuple:
        ctx = {"orig_dtype": self._orig_dtype, "config": self._config, "role": self._role}
        return ["_data", "_scale"], ctx

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> Float8Like:
        return Float8Like(inner["_data"], inner["_scale"], ctx["orig_dtype"], ctx["config"], ctx["role"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.mm.default:
            a, b = (t._data.to(t._orig_dtype) / t._scale if isinstance(t, Float8Like) else t for t in args)
            return func(a, b)
        if func in (aten.t.default, aten.detach.default):
            a = args[0]
            return Float8Like(func(a._data), a._scale, a._orig_dtype, a._config, a._role)
        raise NotImplementedError(func)


class _ToFloat8(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, role: GemmRole) -> Float8Like:
        scale = 448.0 / t.detach().abs().amax().clamp(min=1e-12)
        return Float8Like((t * scale).to(torch.float8_e4m3fn), scale, t.dtype, MMConfig(), role)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        return g, None


def test_an_autograd_function_returning_a_wrapper_sends_it_no_op() -> None:
    """Eager's ``Function.apply`` connects the wrapper its forward made to the graph without an op; jitcore
    sent the class ``aten.detach`` and ``aten.view`` (the latter unimplemented here, as in many classes:
    NotImplementedError while tracing)."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.mm(_ToFloat8.apply(x, GemmRole.INPUT), _ToFloat8.apply(w, GemmRole.WEIGHT).t())

    check_twice(f, lambda: (torch.randn(3, 8, requires_grad=True), torch.randn(4, 8, requires_grad=True)),
                lambda out, args: torch.autograd.grad(out.sum(), args))


# --- Module.to of a module with subclass parameters -----------------------------------------------------

def test_module_to_with_subclass_parameters_runs_eagerly() -> None:
    """``m.to(torch.float64)`` inside the function swaps each wrapper-subclass parameter in place
    (``torch.utils.swap_tensors``), which a traced value cannot do to the caller's object: the call runs
    eagerly (JC-T001) with eager's result and eager's converted module (it raised "_apply(): Couldn't swap
    Linear.weight" while tracing)."""
    def f(m: torch.nn.Module, x: torch.Tensor) -> tuple:
        m2 = m.to(torch.float64)
        return m2(x.double()), m2.weight.dtype

    def make() -> tuple:
        torch.manual_seed(0)
        m = torch.nn.Linear(3, 2)
        m.weight = torch.nn.Parameter(TwoTensor(m.weight.detach().clone(), m.weight.detach() * 2))
        return m, torch.randn(2, 3)

    eager_args, jit_args = make(), make()
    expected = f(*eager_args)
    jitted = jitcore.jit(f)
    with pytest.warns(UserWarning, match="runs eagerly"):
        actual = jitted(*jit_args)
    assert_same_values(actual, expected)
    assert_same_values(jit_args[0].weight, eager_args[0].weight)
    assert type(jit_args[0].weight) is TwoTensor and jit_args[0].weight.dtype is torch.float64
    assert "swap_tensors" in str(jitted.fallback_reason)


# --- guards: styles that worked when probed ----------------------------------------------------------

class AffineQuantized(torch.Tensor):
    """torchao's TorchAOBaseTensor style written standalone: ``tensor_data_names`` with an optional
    ``zero_point``, ``tensor_attribute_names`` as the ctx, and ``implements`` / ``implements_torch_function``
    tables (F.linear handled by the torch_function table, never reaching ``aten.t``)."""

    tensor_data_names = ["qdata", "scale"]
    tensor_attribute_names = ["block_size", "dtype"]
    ATEN: dict = {}
    TORCH_FN: dict = {}

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: torch.Tensor, zero_point: Any, block_size: tuple,
                dtype: torch.dtype) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=dtype, device=qdata.device)

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, zero_point: Any, block_size: tuple,
                 dtype: torch.dtype) -> None:
        self.qdata, self.scale, self.zero_point, self.block_size = qdata, scale, zero_point, block_size

    def __tensor_flatten__(self) -> tuple:
        names = [*self.tensor_data_names, *(["zero_point"] if self.zero_point is not None else [])]
        return names, [getattr(self, a) for a in self.tensor_attribute_names]

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, attrs: list, size: Any, stride: Any) -> AffineQuantized:
        return cls(inner["qdata"], inner["scale"], inner.get("zero_point"), *attrs)

    @classmethod
    def from_hp(cls, w: torch.Tensor, with_zero_point: bool) -> AffineQuantized:
        scale = w.abs().amax(1, keepdim=True) / 7
        zero_point = torch.ones_like(scale) if with_zero_point else None
        q = torch.round(w / scale + (1.0 if with_zero_point else 0.0)).to(torch.int8)
        return cls(q, scale, zero_point, (1, w.shape[1]), w.dtype)

    def dequantize(self) -> torch.Tensor:
        q = self.qdata.to(self.dtype)
        return (q - self.zero_point if self.zero_point is not None else q) * self.scale

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls.TORCH_FN:
            return cls.TORCH_FN[func](*args, **(kwargs or {}))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in cls.ATEN:
            return cls.ATEN[func](func, args, kwargs or {})
        raise NotImplementedError(f"{cls.__name__} dispatch: attempting to run unimplemented {func}")


def _aq_linear(x: torch.Tensor, w: AffineQuantized, bias: Any = None) -> torch.Tensor:
    y = torch.matmul(x, w.dequantize().t())
    return y if bias is None else y + bias


def _aq_detach(func: Any, args: tuple, kwargs: dict) -> Any:
    w = args[0]
    out = AffineQuantized(w.qdata, w.scale, w.zero_point, w.block_size, w.dtype)
    return return_and_correct_aliasing(func, args, kwargs, out)


AffineQuantized.TORCH_FN[F.linear] = _aq_linear
AffineQuantized.ATEN[aten.detach.default] = _aq_detach


class LoraWeight(torch.Tensor):
    """PEFT/LoRA style: ``F.linear`` with it is the base linear plus the low-rank path (its
    ``__torch_function__``); any other op sees the merged weight (its ``__torch_dispatch__``)."""

    @staticmethod
    def __new__(cls, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, base.shape, dtype=base.dtype, device=base.device)

    def __init__(self, base: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> None:
        self.base, self.a, self.b, self.scaling = base, a, b, scaling

    def __tensor_flatten__(self) -> tuple:
        return ["base", "a", "b"], self.scaling

    @staticmethod
    def __tensor_unflatten__(inner: dict, scaling: float, size: Any, stride: Any) -> LoraWeight:
        return LoraWeight(inner["base"], inner["a"], inner["b"], scaling)

    def merged(self) -> torch.Tensor:
        return self.base + self.scaling * (self.b @ self.a)

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is F.linear:
            x, w = args[0], args[1]
            return F.linear(x, w.base) + w.scaling * F.linear(F.linear(x, w.a), w.b)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        return func(*tree_map_only(LoraWeight, LoraWeight.merged, (args, kwargs or {}))[0],
                    **tree_map_only(LoraWeight, LoraWeight.merged, kwargs or {}))


class Transposed(torch.Tensor):
    """A ctx flag that ``t()`` flips instead of moving data (a semi-structured sparse weight's style)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, transposed: bool = False) -> Any:
        shape = elem.shape[::-1] if transposed else elem.shape
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem: torch.Tensor, transposed: bool = False) -> None:
        self.elem, self.transposed = elem, transposed

    def __tensor_flatten__(self) -> tuple:
        return ["elem"], self.transposed

    @staticmethod
    def __tensor_unflatten__(inner: dict, transposed: bool, size: Any, stride: Any) -> Transposed:
        return Transposed(inner["elem"], transposed)

    def materialize(self) -> torch.Tensor:
        return self.elem.t() if self.transposed else self.elem

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in (aten.t.default, aten.detach.default):
            return Transposed(args[0].elem, args[0].transposed != (func is aten.t.default))
        return func(*tree_map_only(Transposed, Transposed.materialize, args), **(kwargs or {}))


class Declines(Wrapped):
    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if any(t is not Declines for t in types):
            return NotImplemented
        return super().__torch_dispatch__(func, types, args, kwargs)


class TakesOver(Wrapped):
    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        scaled = tree_map_only(Wrapped, lambda t: t.elem * (10 if isinstance(t, Declines) else 1), args)
        return tree_map_only(torch.Tensor, TakesOver, func(*scaled, **(kwargs or {})))


class NameKeyed(Wrapped):
    TABLE: dict[str, Callable[..., Any]] = {"aten::add.Tensor": lambda a, b, alpha=1: a - b}

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        unwrapped = tree_map_only(Wrapped, lambda t: t.elem, args)
        handler = cls.TABLE.get(func.name(), func)
        return tree_map_only(torch.Tensor, cls, handler(*unwrapped, **(kwargs or {})))


class Decomposing(Wrapped):
    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in decomposition_table and func is not aten.detach.default:
            out = decomposition_table[func](*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        return super().__torch_dispatch__(func, types, args, kwargs)


def _aq_pair() -> tuple:
    return (AffineQuantized.from_hp(torch.randn(3, 4), True),
            AffineQuantized.from_hp(torch.randn(3, 4), False), torch.randn(2, 4))


GUARDS: dict[str, tuple] = {
    "torchao base tensor tables, optional inner": (
        lambda a, b, x: (F.linear(x, a), F.linear(x, b, torch.ones(3)), a.detach(), b.detach()),
        _aq_pair, None),
    "torchao base tensor made inside": (
        lambda w, x: (F.linear(x, AffineQuantized.from_hp(w, True)), AffineQuantized.from_hp(w, False)),
        lambda: (torch.randn(3, 4), torch.randn(2, 4)), None),
    "LoRA weight, linear and merged": (
        lambda x, base, a, b: (F.linear(x, LoraWeight(base, a, b, 0.5)).tanh(),
                               LoraWeight(base, a, b, 2.0) * 2),
        lambda: (torch.randn(3, 6), torch.randn(4, 6), torch.randn(2, 6, requires_grad=True),
                 torch.randn(4, 2, requires_grad=True)),
        lambda out, args: torch.autograd.grad(out[0].sum(), args[2:])),
    "ctx flag flipped by t": (
        lambda w, x: (w.t(), x @ w.t(), F.linear(x, w), w.t().t().transposed),
        lambda: (Transposed(torch.randn(3, 4)), torch.randn(2, 4)), None),
    "NotImplemented, another class takes over": (
        lambda a, b: (a + b, b * a, a.sin()),
        lambda: (Declines(torch.randn(3)), TakesOver(torch.randn(3))), None),
    "dispatch keyed by func.name()": (
        lambda a, b: (a + b, a * b), lambda: (NameKeyed(torch.randn(3)), torch.randn(3)), None),
    "dispatch through the decomposition table": (
        lambda x, y: (torch.addmm(y, x, x.t()), F.gelu(x), F.silu(x) * 2),
        lambda: (Decomposing(torch.randn(3, 3)), torch.randn(3, 3)), None),
}


@pytest.mark.parametrize("name", list(GUARDS))
def test_guard(name: str) -> None:
    fn, make, after = GUARDS[name]
    check_twice(fn, make, after)
