"""Tensor subclasses as others write them, round 8 (issue 15, helper zoo28): patterns from torch's own
test suite and from quantization libraries, each program run eagerly and under jitcore.jit on equal
fresh arguments (subclass_checks.check_twice). Each test failed before its fix."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import torch
from subclass_checks import check_twice
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore

# --- copy.deepcopy of a plain subclass ---------------------------------------------------------------------
# Note [A plain subclass's deep copy] (langctx/copying.py): eager makes the copy with ``new_empty([])``
# under torch's default __torch_function__ and refuses it unless that keeps the class; jitcore copied.


class Pickled(torch.Tensor):
    """A plain subclass with its own pickling (``__reduce_ex__``), torch's ``new_empty``."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        return Pickled, ()


class Tagged(torch.Tensor):
    """A plain subclass with nothing of its own."""


class KeepsClass(torch.Tensor):
    """``new_empty`` keeps the class, as torch's error message asks: its deep copies work eagerly."""

    def new_empty(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return super().new_empty(*args, **kwargs).as_subclass(type(self))


def _deepcopy(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = copy.deepcopy(x)
    return y * 2, y


@pytest.mark.parametrize("make", [
    lambda: torch.Tensor._make_subclass(Pickled, torch.randn(3)),
    lambda: torch.randn(3).as_subclass(Pickled),
    lambda: torch.randn(3).as_subclass(Tagged),
], ids=["make_subclass", "as_subclass", "nothing_of_its_own"])
def test_deepcopy_of_a_plain_subclass_raises_as_eagerly(make: Any) -> None:
    with pytest.raises(RuntimeError, match="non-wrapper subclasses only works") as eager:
        _deepcopy(make())
    with pytest.raises(RuntimeError) as jitted:
        jitcore.jit(_deepcopy)(make())
    assert str(jitted.value) == str(eager.value)


def _copied_module_weight(module: torch.nn.Module) -> torch.Tensor:
    return copy.deepcopy(module).weight * 2


@pytest.mark.parametrize("cls", [Tagged, KeepsClass])
def test_deepcopy_of_a_module_whose_weight_is_a_plain_subclass(cls: type) -> None:
    # the weight is a real tensor of the caller's module, not a traced one: the check was skipped
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        module = torch.nn.Linear(3, 2)
        module.weight = torch.nn.Parameter(module.weight.detach().as_subclass(cls))
        return module

    if cls is Tagged:
        with pytest.raises(RuntimeError, match="non-wrapper subclasses only works") as eager:
            _copied_module_weight(make())
        with pytest.raises(RuntimeError) as jitted:
            jitcore.jit(_copied_module_weight)(make())
        assert str(jitted.value) == str(eager.value)
    else:
        torch.testing.assert_close(jitcore.jit(_copied_module_weight)(make()), _copied_module_weight(make()))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_deepcopy_of_a_plain_subclass_whose_new_empty_keeps_its_class(requires_grad: bool) -> None:
    check_twice(_deepcopy, lambda: (torch.randn(3).as_subclass(KeepsClass).requires_grad_(requires_grad),))


# --- every __torch_dispatch__ / __torch_function__ declining a call -------------------------------------
# jitcore/dispatch/declined.py: eager's TypeError names the op by its module and name
# ('torch._ops.aten.exp.default', 'torch.Tensor.exp', 'torch.nn.functional.softmax'); jitcore's said
# 'aten.exp.default', and 'exp' with the classes' bare names for a __torch_function__.


class Declines(torch.Tensor):
    """A wrapper that takes ``add`` and ``mul`` and returns NotImplemented for every other op."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> Declines:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, meta: None, size: Any, stride: Any) -> Declines:
        return cls(inner["a"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.overloadpacket not in (torch.ops.aten.add, torch.ops.aten.mul):
            return NotImplemented
        inner = [a.a if isinstance(a, Declines) else a for a in args]
        return cls(func(*inner, **(kwargs or {})))


class AlsoDeclines(Declines):
    """A second class, so two handlers decline."""


def _declined(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = x + 1
    return torch.maximum(z, y)


@pytest.mark.parametrize("second", [Declines, AlsoDeclines])
def test_an_op_every_handler_declines_raises_eagers_error(second: type) -> None:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        return Declines(torch.randn(3)), second(torch.randn(3))

    with pytest.raises(TypeError, match="Multiple dispatch failed") as eager:
        _declined(*make())
    jitted = jitcore.jit(_declined)
    for _ in range(2):
        with pytest.raises(TypeError) as got:
            jitted(*make())
        assert str(got.value) == str(eager.value)



class OnlyAdds(torch.Tensor):
    """A ``__torch_function__`` with a table of what it handles, NotImplemented for the rest (the
    pattern of torch's docs, ``HANDLED_FUNCTIONS``)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in (torch.Tensor.add, torch.Tensor.__add__):
            return super().__torch_function__(func, types, args, kwargs or {})
        return NotImplemented


class AlsoOnlyAdds(OnlyAdds):
    """A second class, so two handlers decline."""


@pytest.mark.parametrize("program", [
    lambda x, y: x.exp(),
    lambda x, y: torch.mul(x, y),
    lambda x, y: torch.nn.functional.gelu(x),
    lambda x, y: torch.linalg.vector_norm(x),
    lambda x, y: x.shape,
    lambda x, y: torch.nn.functional.softmax(x, 0),
    lambda x, y: torch.nn.functional.layer_norm(x, (4,), y),
    lambda x, y: x.split(2),
], ids=["method", "torch_function_of_two", "nn", "linalg", "property", "python_function",
        "python_function_of_two", "tensor_python_method"])
def test_a_call_every_torch_function_declines_raises_eagers_error(program: Any) -> None:
    def make() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(4, 4).as_subclass(OnlyAdds), torch.randn(4, 4).as_subclass(AlsoOnlyAdds)

    with pytest.raises(TypeError) as eager:
        program(*make())
    with pytest.raises(TypeError) as got:
        jitcore.jit(program)(*make())
    assert str(got.value) == str(eager.value)


class DeclinesExp(TorchFunctionMode):
    """A function mode that declines ``exp`` and ``softmax`` and runs everything else."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in (torch.exp, torch.nn.functional.softmax):
            return NotImplemented
        return func(*args, **(kwargs or {}))


class DeclinesExpBelow(TorchDispatchMode):
    """A dispatch mode that declines ``aten.exp`` and runs everything else."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.ops.aten.exp.default:
            return NotImplemented
        return func(*args, **(kwargs or {}))


def _under_function_mode(x: torch.Tensor) -> Any:
    with DeclinesExp():
        return torch.exp(x)


def _python_function_under_function_mode(x: torch.Tensor) -> Any:
    with DeclinesExp():
        return torch.nn.functional.softmax(x, 0)


def _under_dispatch_mode(x: torch.Tensor) -> Any:
    with DeclinesExpBelow():
        return torch.exp(x)


@pytest.mark.parametrize(("program", "make"), [
    (_under_function_mode, lambda: torch.randn(3)),
    (_under_function_mode, lambda: torch.randn(3).as_subclass(OnlyAdds)),
    (_python_function_under_function_mode, lambda: torch.randn(3)),
    (_python_function_under_function_mode, lambda: torch.randn(3).as_subclass(OnlyAdds)),
    (_under_dispatch_mode, lambda: torch.randn(3)),
    (_under_dispatch_mode, lambda: Declines(torch.randn(3))),
], ids=["function_mode", "function_mode_and_subclass", "python_function", "python_function_and_subclass",
        "dispatch_mode", "dispatch_mode_and_subclass"])
def test_a_call_a_mode_declines_raises_eagers_error(program: Any, make: Any) -> None:
    with pytest.raises(TypeError) as eager:
        program(make())
    with pytest.raises(TypeError) as got:
        jitcore.jit(program)(make())
    # the same text but the mode's address (each run makes its own mode object)
    assert re.sub(" at 0x[0-9a-f]+", "", str(got.value)) == re.sub(" at 0x[0-9a-f]+", "", str(eager.value))


class TakesExp(torch.Tensor):
    """A plain subclass whose ``__torch_function__`` answers ``torch.exp`` itself (with ``sin``)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func is torch.exp:
            with torch._C.DisableTorchFunctionSubclass():
                return torch.sin(args[0])
        return super().__torch_function__(func, types, args, kwargs or {})


def _declined_by_the_mode_taken_by_the_subclass(x: torch.Tensor) -> torch.Tensor:
    with DeclinesExp():
        return torch.exp(x) * 2


def test_a_call_a_function_mode_declines_goes_to_the_subclass() -> None:
    # eager asks the arguments' __torch_function__ after the mode's NotImplemented; jitcore raised
    check_twice(_declined_by_the_mode_taken_by_the_subclass, lambda: (torch.randn(3).as_subclass(TakesExp),))

# --- inner tensors kept in a list too -------------------------------------------------------------------
# Note [Inner tensors kept twice] (dispatch/resolver.py): the proxy's list held the fake tensors of its
# shadow, so code reading the list computed on values the trace never names.

aten = torch.ops.aten


class Sharded(torch.Tensor):
    """Rows split into a variable number of shards: ``shard0``, ``shard1``, ... for the flatten protocol
    (the count is the ctx) and the list ``shards`` that the class's own code reads."""

    @staticmethod
    def __new__(cls, shards: list[torch.Tensor]) -> Sharded:
        rows = sum(s.shape[0] for s in shards)
        return torch.Tensor._make_wrapper_subclass(cls, (rows, *shards[0].shape[1:]), dtype=shards[0].dtype,
                                                   device=shards[0].device)

    def __init__(self, shards: list[torch.Tensor]) -> None:
        self.shards = list(shards)
        for i, shard in enumerate(shards):
            setattr(self, f"shard{i}", shard)

    def __tensor_flatten__(self) -> tuple[list[str], int]:
        return [f"shard{i}" for i in range(len(self.shards))], len(self.shards)

    @staticmethod
    def __tensor_unflatten__(inner: dict, count: int, size: Any, stride: Any) -> Sharded:
        return Sharded([inner[f"shard{i}"] for i in range(count)])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in (aten.add.Tensor, aten.mul.Tensor, aten.sin.default):
            count = next(len(a.shards) for a in args if isinstance(a, Sharded))
            return Sharded([func(*[a.shards[i] if isinstance(a, Sharded) else a for a in args], **kwargs)
                            for i in range(count)])
        if func is aten.sum.default:
            return sum(s.sum() for s in args[0].shards)
        if func is aten.mm.default and isinstance(args[0], Sharded):
            return Sharded([s @ args[1] for s in args[0].shards])
        whole = [torch.cat(a.shards) if isinstance(a, Sharded) else a for a in args]
        return func(*whole, **kwargs)


def _shards(count: int) -> tuple[torch.Tensor]:
    return (Sharded(list(torch.randn(2 * count, 3).split(2))),)


@pytest.mark.parametrize("program", [
    lambda x: (x * 2 + x).sin(),
    lambda x: x.sum(),
    lambda x: x @ torch.ones(3, 4),
    lambda x: x.exp(),
    lambda x: [s * 2 for s in x.shards],
], ids=["pointwise", "sum", "mm", "whole", "read_in_program"])
@pytest.mark.parametrize("count", [1, 3])
def test_a_subclass_keeping_its_inner_tensors_in_a_list(program: Any, count: int) -> None:
    check_twice(program, lambda: _shards(count))
