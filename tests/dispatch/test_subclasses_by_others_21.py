"""Tensor subclasses written by others (issue 15, zoo43): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, strides, output types, inner tensors,
flatten contexts, the Python state the classes keep), for what the survey of this round found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import Scaled as _Scaled
from subclass_checks import assert_same_flattened, compare_over_sizes
from torch.utils._pytree import tree_map_only

import jitcore

# --- what a class keeps outside its flatten protocol ----------------------------------------------------
# Note [An attribute the flatten protocol does not report] (jitcore/jit/tensor_binding.py): a wrapper input
# is rebuilt for tracing by its ``__tensor_unflatten__``; what unflatten does not pass (a log list made
# anew, ``LogT(inner["a"], [])``; a number the caller set after construction) was the rebuilt value's: the
# dispatch appended to a list the caller never saw (eager's log ['mul.Tensor', 'add.Tensor'], jitted []),
# and read the default where eager reads the caller's number.


class _Logged(torch.Tensor):
    """A wrapper whose dispatch logs each op's name into the instance's list (which its unflatten makes
    anew) and scales results by 2 once the log holds more than 4 names."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, log: list) -> _Logged:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype)

    def __init__(self, a: torch.Tensor, log: list) -> None:
        self.a, self.log = a, log

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Logged:
        return _Logged(inner["a"], [])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        t = next(a for a in args if isinstance(a, _Logged))
        t.log.append(func.__name__)
        k = 2.0 if len(t.log) > 4 else 1.0
        inner = tree_map_only(_Logged, lambda v: v.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda o: _Logged(o * k, t.log), func(*inner[0], **inner[1]))


@pytest.mark.parametrize("fn", [
    lambda x: (x * 2 + 1).a,
    lambda x: (x * 2 + 1).a * len(x.log),
    lambda x: ((x + 1).a, x.log[-1]),
], ids=["appended_by_the_dispatch", "length_read_by_the_program", "item_read_by_the_program"])
@pytest.mark.parametrize("shared", [False, True], ids=["a_log_per_call", "one_log"])
def test_a_log_list_the_unflatten_makes_anew(fn: Callable, shared: bool) -> None:
    jitted = jitcore.jit(fn)
    eager_log: list[str] = []
    jit_log: list[str] = []
    for i, n in enumerate((3, 4, 5, 5)):
        if not shared:
            eager_log, jit_log = [], []
        torch.manual_seed(i)
        a = torch.randn(n, 2)
        expected = fn(_Logged(a.clone(), eager_log))
        actual = jitted(_Logged(a.clone(), jit_log))
        assert_same_flattened(actual, expected, f"call {i} (size {n}) output")
        assert jit_log == eager_log, (i, jit_log, eager_log)


class _Tagged(torch.Tensor):
    """A wrapper whose dispatch adds ``offset`` (set by the caller after construction, not flattened)."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> _Tagged:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Tagged:
        return _Tagged(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        offset = next(getattr(a, "offset", 0.0) for a in args if isinstance(a, _Tagged))
        inner = tree_map_only(_Tagged, lambda v: v.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda o: _Tagged(o + offset), func(*inner[0], **inner[1]))


def _tagged(n: int) -> tuple[_Tagged]:
    x = _Tagged(torch.randn(n, 2))
    x.offset = float(n)
    return (x,)


@pytest.mark.parametrize("fn", [
    lambda x: (x * 2).a,
    lambda x: x.offset + 1,
], ids=["read_by_the_dispatch", "read_by_the_program"])
def test_an_attribute_the_caller_sets_after_construction(fn: Callable) -> None:
    assert compare_over_sizes(fn, _tagged, (3, 3, 4, 5)) <= 3


class _Rows(torch.Tensor):
    """A wrapper keeping its row count (``__init__`` computes it from the inner tensor, unflatten too):
    the number follows the sizes, so it must not pin an entry per size."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> _Rows:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype)

    def __init__(self, a: torch.Tensor) -> None:
        self.a, self.rows, self.block = a, a.shape[0], [a.shape[0], 2]

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _Rows:
        return _Rows(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        inner = tree_map_only(_Rows, lambda v: v.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, _Rows, func(*inner[0], **inner[1]))


def test_a_number_the_unflatten_rebuilds_from_the_sizes_is_not_pinned() -> None:
    fn = lambda x: ((x * 2).a, x.rows)  # noqa: E731
    assert compare_over_sizes(fn, lambda n: (_Rows(torch.randn(n, 2)),), (3, 4, 5, 6, 7)) <= 2


# --- an output's attribute outside its flatten protocol ---------------------------------------------------
# Note [An output's attribute outside its flatten protocol] (jitcore/dispatch/flatten.py): a subclass output
# is rebuilt at the computation's end by ``__tensor_unflatten__``, which passes ``__init__``'s default
# ``k=1.0`` where the value the dispatch made holds the caller's ``k`` (or the program's constant).


def _ks(value: Any) -> Any:
    return [_ks(v) for v in value] if isinstance(value, (tuple, list)) else getattr(value, "k", None)


@pytest.mark.parametrize("fn", [
    lambda x, a: x + 1,
    lambda x, a: (x * 2, _Scaled(a * 2, 4.0)),
    lambda x, a: _Scaled(a, 2.5) + x.a,
], ids=["the_inputs_k", "a_constant_k", "made_then_an_op"])
def test_an_outputs_attribute_outside_its_flatten_protocol(fn: Callable) -> None:
    jitted = jitcore.jit(fn)
    for i, (n, k) in enumerate(((3, 3.0), (4, 3.0), (5, 5.0), (5, 5.0), (6, 2.0))):
        torch.manual_seed(i)
        a = torch.randn(n, 2)
        expected = fn(_Scaled(a.clone(), k), a.clone())
        actual = jitted(_Scaled(a.clone(), k), a.clone())
        assert_same_flattened(actual, expected, f"call {i} (size {n}) output")
        assert _ks(actual) == _ks(expected), (i, _ks(actual), _ks(expected))


class _ScaledGrad(_Scaled):
    """``_Scaled`` whose wrapper requires grad when its inner tensor does (the grad transform's replay
    rebuilt its values by unflatten: its dispatch read ``k`` 1.0 there, the forward's values scaled by 1).
    Its backward: test_subclasses_by_others_22.py."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, k: float = 1.0) -> _ScaledGrad:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype,
                                                   requires_grad=a.requires_grad)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _ScaledGrad:
        return _ScaledGrad(inner["a"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        k = next(a.k for a in args if isinstance(a, _ScaledGrad))
        inner = tree_map_only(_ScaledGrad, lambda t: t.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _ScaledGrad(t * k, k), func(*inner[0], **inner[1]))


@pytest.mark.parametrize("fn", [
    lambda w, x: (w * x).sum(),
    lambda w, x: _ScaledGrad(x, 3.0) * 2,
], ids=["an_input_times_a_grad_input", "made_inside_from_a_grad_input"])
def test_an_attribute_outside_the_flatten_protocol_under_grad(fn: Callable) -> None:
    jitted = jitcore.jit(fn)
    for i, (n, k) in enumerate(((3, 3.0), (4, 4.0), (5, 4.0), (5, 2.0))):
        torch.manual_seed(i)
        w, x = torch.randn(n, 2), torch.randn(n, 2)
        x_eager, x_jit = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected = fn(_ScaledGrad(w.clone(), k), x_eager)
        actual = jitted(_ScaledGrad(w.clone(), k), x_jit)
        assert_same_flattened(actual, expected, f"call {i} (size {n}) output")
        assert _ks(actual) == _ks(expected), (i, _ks(actual), _ks(expected))
