"""Tensor subclasses written by others (issue 15, zoo44): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, output types, inner tensors, flatten
contexts, attributes, gradients), for what the survey of this round found."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_flattened, compare_over_sizes
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map_only

import jitcore

# --- a backward through an attribute outside the flatten protocol ------------------------------------------
# Note [A tangent's attribute outside its flatten protocol] (jitcore/transforms/tangents.py): the backward
# was recorded on a tangent rebuilt by unflatten, without the attribute the class's dispatch scales by
# (grad 3 where eager gives 27).


class _ScaledBoth(torch.Tensor):
    """A wrapper whose dispatch scales each result by the product of its wrapper arguments' ``k`` (so the
    backward reads the tangent's and the saved wrapper's); its flatten protocol leaves ``k`` out."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, k: float = 1.0) -> _ScaledBoth:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype,
                                                   requires_grad=a.requires_grad)

    def __init__(self, a: torch.Tensor, k: float = 1.0) -> None:
        self.a, self.k = a, k

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _ScaledBoth:
        return _ScaledBoth(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        k = 1.0
        for a in args:
            if isinstance(a, _ScaledBoth):
                k *= a.k
        inner = tree_map_only(_ScaledBoth, lambda t: t.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _ScaledBoth(t * k, k), func(*inner[0], **inner[1]))


def _grad_and_k(out: torch.Tensor, x: torch.Tensor, tangent_k: float | None) -> tuple[Any, Any]:
    grad = torch.ones_like(out) if tangent_k is None else _ScaledBoth(torch.ones(out.shape), tangent_k)
    (gx,) = torch.autograd.grad(out, x, grad)
    return gx, getattr(gx, "k", None)


@pytest.mark.parametrize("fn", [
    lambda w, x: (w * x).sum(),
    lambda w, x: ((w * x) * w).sum(1),
    lambda w, x: (x * w).exp(),
], ids=["an_input_times_a_grad_input", "the_wrapper_saved_twice", "a_plain_grad_input_first"])
def test_a_backward_through_an_attribute_outside_the_flatten_protocol(fn: Callable) -> None:
    jitted = jitcore.jit(fn)
    calls = ((3, 2.0, None), (4, 2.0, None), (5, 2.0, 5.0), (5, 3.0, None), (5, 3.0, 0.5))
    for i, (n, k, tangent_k) in enumerate(calls):
        torch.manual_seed(i)
        w, x = torch.randn(n, 2), torch.randn(n, 2)
        x_eager, x_jit = x.clone().requires_grad_(), x.clone().requires_grad_()
        expected = fn(_ScaledBoth(w.clone(), k), x_eager)
        actual = jitted(_ScaledBoth(w.clone(), k), x_jit)
        assert_same_flattened(actual, expected, f"call {i} (size {n}) output")
        assert actual.k == expected.k, (i, actual.k, expected.k)
        grad_eager, k_eager = _grad_and_k(expected, x_eager, tangent_k)
        grad_jit, k_jit = _grad_and_k(actual, x_jit, tangent_k)
        assert_same_flattened(grad_jit, grad_eager, f"call {i} (size {n}) gradient")
        assert k_jit == k_eager, (i, k_jit, k_eager)


# --- a subclass parameter of an optimizer made per call -------------------------------------------------
# Note [A caller's tensor reached as itself as a key] (jitcore/jit/tensor_keys.py): AdamW's ``self.state[p]``
# over its ``param_groups`` kept the traced call's parameter as the key on later calls.


def test_adamw_steps_a_subclass_parameter_of_a_fresh_optimizer() -> None:
    def step(p: torch.nn.Parameter, grad: torch.Tensor, opt: torch.optim.Optimizer) -> torch.Tensor:
        p.grad = grad
        opt.step()
        return p

    jitted = jitcore.jit(step)
    for i, n in enumerate((3, 4, 5, 5)):
        runs = []
        for fn in (step, jitted):
            torch.manual_seed(i)
            p = torch.nn.Parameter(TwoTensor(torch.randn(n, 2), torch.randn(n, 2)))
            opt = torch.optim.AdamW([p], lr=0.1)
            out = fn(p, TwoTensor(torch.randn(n, 2), torch.randn(n, 2)), opt)
            assert out is p and [k is p for k in opt.state] == [True], (i, fn is jitted)
            runs.append((p, opt.state[p]))
        (p_eager, state_eager), (p_jit, state_jit) = runs
        assert_same_flattened(p_jit, p_eager, f"call {i} (size {n}) parameter")
        assert list(state_jit) == list(state_eager)
        for key, value in state_eager.items():
            assert_same_flattened(state_jit[key], value, f"call {i} (size {n}) state {key}")


# --- survey programs that agree with eager (regression checks) ---------------------------------------------


class _CopyAware(torch.Tensor):
    """A wrapper whose dispatch handles ``aten.detach``/``clone``/``copy_`` itself (a tag in its ctx marks
    which ran; clone adds 1 to the data) and propagates the largest tag otherwise."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, tag: int = 0) -> _CopyAware:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype,
                                                   requires_grad=a.requires_grad)

    def __init__(self, a: torch.Tensor, tag: int = 0) -> None:
        self.a, self.tag = a, tag

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["a"], {"tag": self.tag}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> _CopyAware:
        return _CopyAware(inner["a"], ctx["tag"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        aten = torch.ops.aten
        if func is aten.detach.default:
            return _CopyAware(args[0].a.detach(), args[0].tag + 100)
        if func is aten.clone.default:
            return _CopyAware(args[0].a.clone() + 1, args[0].tag + 1)
        if func is aten.copy_.default:
            args[0].a.copy_(args[1].a if isinstance(args[1], _CopyAware) else args[1])
            return args[0]
        tag = max(a.tag for a in args if isinstance(a, _CopyAware))
        inner = tree_map_only(_CopyAware, lambda t: t.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _CopyAware(t, tag), func(*inner[0], **inner[1]))


def test_a_dispatch_handling_copy_detach_and_clone_itself() -> None:
    def fn(x: _CopyAware, y: _CopyAware) -> tuple:
        c, d = x.clone(), x.detach()
        y.copy_(x * 2)
        return c, d, y, c.tag + d.tag

    def make(n: int) -> tuple:
        return _CopyAware(torch.randn(n, 2), n), _CopyAware(torch.zeros(n, 2))

    misses = compare_over_sizes(fn, make, (3, 4, 5, 5))
    assert misses <= 3


class _Indexed(torch.Tensor):
    """A ``__torch_function__``-only subclass whose ``__getitem__`` doubles what it reads (a negative int
    index counted from the end by hand) and whose ``__setitem__`` clamps what it writes."""

    def __getitem__(self, idx: Any) -> torch.Tensor:
        if isinstance(idx, int) and idx < 0:
            idx = idx + self.shape[0]
        return super().__getitem__(idx) * 2

    def __setitem__(self, idx: Any, value: Any) -> None:
        super().__setitem__(idx, torch.as_tensor(value).clamp(-1, 1))


def test_a_function_only_subclass_overriding_getitem_and_setitem() -> None:
    def fn(x: _Indexed, v: torch.Tensor) -> tuple:
        x[0] = v
        return x[-1] + x[1:3].sum(), x

    def make(n: int) -> tuple:
        return torch.randn(n, 2).as_subclass(_Indexed), torch.full((2,), 3.0)

    misses = compare_over_sizes(fn, make, (3, 4, 5, 5))
    assert misses <= 3
