"""Tensor subclasses as others write them (torch's own test subclasses, and subclasses in the styles of
torch's test_python_dispatch.py/test_subclass.py and of albanD/subclass_zoo), each program run eagerly
and under jitcore, twice (the second call a cache hit), comparing output types, inner tensors, flatten
contexts, attributes and gradients. Every test here failed before the fix it names (issue 15):
- ``torch.autograd.grad``/``backward`` inside the function on a subclass with a ``__torch_function__``
  (torch's default one included) raised "element 0 of tensors does not require grad";
- torch's ``RedispatchTensor`` lost its ``call_log`` slot on outputs and retraced on every call (jitcore's
  own metadata reads ran its logging ``__torch_function__``);
- a wrapper with ``dispatch_sizes_strides_policy`` got JC-G001 for its gradient (torch's size caches
  were part of its derived flatten context);
- a module made inside the function was an eager entry (``register_parameter`` reads ``grad_fn``), and
  ``nn.Parameter(subclass)`` assigned to one raised TypeError;
- a TwoTensor subclass with its own ``__torch_function__`` came back a TwoTensor;
- a value read inside a ``__torch_dispatch__`` (``.item()`` of a scale, ``bool`` of a count, a sparse
  format's ``nonzero``, ``TwoTensor``'s ``x.sum().item()``) made the whole call run eagerly.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import assert_same_values, check_twice
from torch import nn
from torch.testing._internal.common_subclass import (
    DiagTensorBelow,
    NonWrapperTensor,
    RedispatchTensor,
    SparseTensor,
    WrapperTensorWithCustomSizes,
    WrapperTensorWithCustomStrides,
)
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map_only

import jitcore

aten = torch.ops.aten


def _check(fn: Callable[..., Any], make: Callable[[], tuple], grads: tuple[int, ...] = ()) -> Any:
    """``check_twice``, comparing the ``.grad`` of the arguments at ``grads`` after a backward of the
    output."""
    def backward_grads(out: Any, args: tuple) -> list[Any]:
        out.backward()
        return [args[i].grad for i in grads]

    return check_twice(fn, make, backward_grads if grads else None)


# --- autograd called inside the function on __torch_function__ subclasses ---------------------------
class Plain(torch.Tensor):
    pass


class LoggingFunction(torch.Tensor):
    """``super().__torch_function__`` after logging the call."""

    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs)


class Disabling(torch.Tensor):
    """Runs the call with subclass ``__torch_function__`` off and rewraps what it gets."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if func in torch.overrides.get_default_nowrap_functions():
            return out
        return tree_map_only(torch.Tensor, lambda t: t.as_subclass(cls) if type(t) is torch.Tensor else t,
                             out)


_FUNCTION_SUBCLASSES = {
    "Plain": lambda t: t.as_subclass(Plain),
    "LoggingFunction": lambda t: t.as_subclass(LoggingFunction),
    "Disabling": lambda t: t.as_subclass(Disabling),
    "NonWrapperTensor": NonWrapperTensor,
}


def _backward_inside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    (x * w).sum().backward()
    return w.grad * 1


@pytest.mark.parametrize("program", ["grad", "grad_create_graph", "backward_to_a_subclass_leaf"])
@pytest.mark.parametrize("subclass", sorted(_FUNCTION_SUBCLASSES))
def test_autograd_inside_on_torch_function_subclasses(subclass: str, program: str) -> None:
    make = _FUNCTION_SUBCLASSES[subclass]
    if program == "grad":
        _check(lambda x: torch.autograd.grad((x * x).sum(), x)[0],
               lambda: (make(torch.randn(3)).requires_grad_(),))
    elif program == "grad_create_graph":
        _check(lambda x: torch.autograd.grad((x ** 3).sum(), x, create_graph=True)[0].sum(),
               lambda: (make(torch.randn(3)).requires_grad_(),), grads=(0,))
    else:
        _check(_backward_inside, lambda: (torch.randn(3), make(torch.randn(3)).requires_grad_()))


# --- torch's test subclasses ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "program", [lambda x: (x + 1).sin(), lambda x: x.t() @ x, lambda x: x.sum(0), lambda x: x.add_(1)],
    ids=["pointwise", "matmul", "reduction", "in_place"],
)
def test_redispatch_tensor_keeps_its_call_log(program: Callable[..., Any]) -> None:
    """RedispatchTensor logs each call into a list in its ``call_log`` slot, shared by its results."""
    jitted = jitcore.jit(program)
    for _ in range(2):
        data = torch.randn(3, 3)
        x, y = RedispatchTensor(data.clone()), RedispatchTensor(data.clone())
        actual, expected = jitted(x), program(y)
        assert_same_values(actual, expected)
        assert actual.call_log == expected.call_log
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)


@pytest.mark.parametrize("cls", [WrapperTensorWithCustomSizes, WrapperTensorWithCustomStrides])
def test_gradient_of_a_wrapper_with_dispatched_sizes(cls: type) -> None:
    def make() -> tuple:
        x = cls(torch.randn(3, 4), requires_grad=True)
        x.size(), x.stride()  # torch caches the answers on the object
        return (x,)

    _check(lambda x: (x.sin() * 2).sum(), make, grads=(0,))


@pytest.mark.parametrize(
    "program",
    [lambda d: d + 1, lambda d: d * d, lambda d: d @ torch.ones(4, 4), lambda d: d.t(),
     lambda d: torch.softmax(d, -1)],
    ids=["add", "mul", "mm", "t", "softmax"],
)
def test_diag_tensor_reads_its_values_while_traced(program: Callable[..., Any]) -> None:
    """DiagTensorBelow's dispatch decides whether a result is diagonal with ``bool(count == count)``:
    read and checked per call."""
    _check(program, lambda: (DiagTensorBelow(torch.randn(4)),))


@pytest.mark.parametrize(
    "program",
    [lambda s: s * 2, lambda s: s.sum(), lambda s: s.t(), lambda s: s @ torch.ones(4, 2)],
    ids=["mul", "sum", "t", "mm"],
)
def test_sparse_tensor_reads_its_values_while_traced(program: Callable[..., Any]) -> None:
    """SparseTensor's dispatch densifies and rebuilds with ``nonzero``: its shape is checked per call;
    another sparsity is another entry."""
    _check(program, lambda: (SparseTensor.from_dense(torch.randn(4, 4).relu()),))
    jitted = jitcore.jit(program)
    for seed in (0, 1, 0):
        torch.manual_seed(seed)
        x = SparseTensor.from_dense(torch.randn(4, 4).relu())
        assert_same_values(jitted(x), program(x))
    assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) >= 1


# --- wrapper subclasses in the styles people write --------------------------------------------------------
class ScaledItem(torch.Tensor):
    """int8 data and a scale that ``__torch_dispatch__`` reads as a Python number (float8-style)."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor) -> ScaledItem:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32, device=data.device)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        self._data, self._scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["_data", "_scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> ScaledItem:
        return ScaledItem(inner["_data"], inner["_scale"])

    @classmethod
    def quantize(cls, x: torch.Tensor) -> ScaledItem:
        scale = x.abs().amax() / 127.0
        return cls((x / scale).round().to(torch.int8), scale)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in (aten.t.default, aten.detach.default):
            return ScaledItem(func(args[0]._data), args[0]._scale)

        def plain(t: ScaledItem) -> torch.Tensor:
            return t._data.to(torch.float32) * t._scale.item()

        return func(*tree_map_only(ScaledItem, plain, args), **tree_map_only(ScaledItem, plain, kwargs or {}))


def test_scale_read_with_item_in_dispatch() -> None:
    _check(lambda x, w: F.linear(x, w), lambda: (torch.randn(2, 4), ScaledItem.quantize(torch.randn(3, 4))))
    _check(lambda x, w: F.linear(x, ScaledItem.quantize(w)), lambda: (torch.randn(2, 4), torch.randn(3, 4)))


class CappedScaleItem(ScaledItem):
    """Its dispatch branches on the scale it reads (scales from 1.5 up count as -1.5): the branch's
    outcome is checked on every call (a scale used in arithmetic only is a number of the computation)."""

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> CappedScaleItem:
        return CappedScaleItem(inner["_data"], inner["_scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def plain(t: CappedScaleItem) -> torch.Tensor:
            scale = t._scale.item()
            return t._data.to(torch.float32) * (scale if scale < 1.5 else -1.5)
        return func(*tree_map_only(cls, plain, args), **tree_map_only(cls, plain, kwargs or {}))


def test_scale_read_in_dispatch_after_an_in_place_write_is_rolled_back() -> None:
    """A failed check of a read inside dispatch code undoes the entry's earlier writes to the inputs
    before the next entry runs."""
    def f(y: torch.Tensor, s: CappedScaleItem) -> torch.Tensor:
        y.add_(1)
        return s + y

    jitted = jitcore.jit(f)
    for scale in (1.0, 2.0):
        s = CappedScaleItem(torch.ones(3, dtype=torch.int8), torch.tensor(scale))
        y_jit, y_eager = torch.zeros(3), torch.zeros(3)
        torch.testing.assert_close(jitted(y_jit, s), f(y_eager, s))
        torch.testing.assert_close(y_jit, y_eager)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 2


@pytest.mark.parametrize(
    "program",
    [lambda x: x.sum().item() * 2, lambda x: x * 2 if x.sum() > 0 else x * 3, lambda x: x * float(x.amax())],
    ids=["item", "bool", "float"],
)
def test_value_reads_of_a_two_tensor(program: Callable[..., Any]) -> None:
    jitted = _check(program, lambda: (TwoTensor(torch.randn(3), torch.randn(3)),))
    for sign in (1.0, -1.0):  # the other branch: another entry
        x = TwoTensor(sign * torch.ones(3), sign * torch.ones(3))
        assert_same_values(jitted(x), program(x))


class LoggedTwo(TwoTensor):
    """A TwoTensor subclass with a ``__torch_function__`` of its own; it inherits TwoTensor's
    ``__tensor_unflatten__``, which builds a TwoTensor."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def test_subclass_of_a_subclass_keeps_its_class() -> None:
    def make() -> tuple:
        return (LoggedTwo(torch.randn(3), torch.randn(3)),)

    _check(lambda x: (x + 1).sin(), make)
    _check(lambda x: x, make)

    def make_grad() -> tuple:
        return (LoggedTwo(torch.randn(3), torch.randn(3)).requires_grad_(),)

    _check(lambda x: (x * 2).sum(), make_grad, grads=(0,))


# --- modules and parameters made inside the function -------------------------------------------------------
class Int8Weight(ScaledItem):
    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Int8Weight:
        return Int8Weight(inner["_data"], inner["_scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func in (aten.t.default, aten.detach.default):
            return Int8Weight(func(args[0]._data), args[0]._scale)

        def plain(t: Int8Weight) -> torch.Tensor:
            return t._data.to(torch.float32) * t._scale

        return func(*tree_map_only(Int8Weight, plain, args), **tree_map_only(Int8Weight, plain, kwargs or {}))


def test_a_module_made_inside_with_a_subclass_weight() -> None:
    def program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        linear = nn.Linear(4, 3)
        linear.weight = nn.Parameter(Int8Weight.quantize(w), requires_grad=False)
        return linear(x) - linear.bias

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager entry
        _check(program, lambda: (torch.randn(2, 4), torch.randn(3, 4)))


def test_a_parameter_of_a_subclass_is_a_parameter_inside() -> None:
    def program(w: torch.Tensor) -> tuple:
        p = nn.Parameter(TwoTensor(w, w * 2))
        return isinstance(p, nn.Parameter), type(p) is TwoTensor, p.grad_fn is None, p.requires_grad

    _check(program, lambda: (torch.randn(3),))


class MethodDispatch(torch.Tensor):
    """A complex number as two real tensors, its ``__torch_dispatch__`` a plain method (deprecated but
    accepted: torch binds it to the first argument of the class)."""

    def __new__(cls, re: torch.Tensor, im: torch.Tensor) -> MethodDispatch:
        return torch.Tensor._make_wrapper_subclass(cls, re.size(), strides=re.stride(), dtype=torch.complex64)

    def __init__(self, re: torch.Tensor, im: torch.Tensor) -> None:
        self.re, self.im = re, im

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["re", "im"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> MethodDispatch:
        return MethodDispatch(inner["re"], inner["im"])

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        assert isinstance(self, MethodDispatch)
        x, y = args
        if func is aten.mm.default:
            return MethodDispatch(x.re @ y.re - x.im @ y.im, x.re @ y.im + x.im @ y.re)
        if func is aten.add.Tensor:
            return MethodDispatch(x.re + y.re, x.im + y.im)
        raise NotImplementedError(func)


def test_torch_dispatch_defined_as_a_plain_method() -> None:
    def make() -> tuple:
        return tuple(MethodDispatch(torch.randn(2, 2), torch.randn(2, 2)) for _ in range(2))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch's, for the plain method
        _check(lambda x, y: x @ y + x, make)
        _check(lambda a, b: MethodDispatch(a, b) @ MethodDispatch(b, a),
               lambda: (torch.randn(2, 2), torch.randn(2, 2)))


@pytest.mark.parametrize("cls", [Plain, LoggingFunction])
def test_new_tensor_requiring_grad_on_a_subclass_is_not_a_leaf(cls: type) -> None:
    """torch's default ``__torch_function__`` converts the fresh leaf with ``as_subclass``: an alias."""
    def program(x: torch.Tensor) -> tuple:
        w = x.new_tensor([1.0, 2.0], requires_grad=True)
        return w, w.is_leaf, w.requires_grad

    _check(program, lambda: (torch.randn(2).as_subclass(cls),))
