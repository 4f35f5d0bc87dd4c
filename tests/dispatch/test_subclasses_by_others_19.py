"""Tensor subclasses written by others (issue 15, zoo41): differential tests, eager against
``jitcore.jit`` over calls of changing sizes (values, dtypes, strides, output types, inner tensors,
flatten contexts), for what the survey of this round found."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import compare_over_sizes
from torch.testing._internal.common_subclass import (
    WrapperTensorWithCustomSizes,
    WrapperTensorWithCustomStrides,
)
from torch.utils._pytree import tree_map_only

import jitcore

# --- a wrapper that answers its layout from __torch_dispatch__, made inside ------------------------------
# Note [A wrapper that answers its own layout] (jitcore/dispatch/flatten.py) and Note [A wrapper that
# answers its own layout, while tracing] (jitcore/proxies/subclass.py): torch's
# WrapperTensorWithCustomSizes/Strides (``dispatch_sizes_strides_policy``) answer ``stride()`` and
# ``is_contiguous()`` from their inner tensor. An output made inside came back answering the contiguous
# strides its ``__new__`` gave (``(3, 1)`` where eager says ``(1, 2)``), and a read inside the function
# answered them too (``is_contiguous()`` True where eager says False).

_LAYOUT_PROGRAMS: dict[str, Callable] = {
    "transposed then scaled": lambda x: x.transpose(0, 1) * 2,
    "transposed": lambda x: x.transpose(0, 1),
    "strides read": lambda x: (x.transpose(0, 1) * 2).stride(),
    "is_contiguous read": lambda x: ((x.transpose(0, 1) + 1).is_contiguous(), x.is_contiguous()),
    "expanded": lambda x: x[:, :1].expand(-1, 3) + 0,
}


@pytest.mark.parametrize("cls", [WrapperTensorWithCustomSizes, WrapperTensorWithCustomStrides])
@pytest.mark.parametrize("name", sorted(_LAYOUT_PROGRAMS))
def test_a_wrapper_answering_its_layout_made_inside(cls: type, name: str) -> None:
    misses = compare_over_sizes(_LAYOUT_PROGRAMS[name], lambda n: (cls(torch.randn(n, 2)),), (3, 3, 4, 5))
    assert misses <= 3


# --- a list the subclass input holds, appended to by its __torch_dispatch__ or by the program --------------
# Note [A subclass input's own containers] (jitcore/jit/subclass_inputs.py): subclass_zoo's tracer tensor
# logs each op its ``__torch_dispatch__`` sees into a list the instance holds. The proxy held a copy of
# that list, so the caller's list stayed empty where eager's grew by ``['mul', 'relu', 'sum']``.


class _LoggedOps(torch.Tensor):
    """A wrapper whose dispatch appends each op's name to the list ``log`` of its first argument."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, log: list) -> _LoggedOps:
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), strides=elem.stride(), dtype=elem.dtype)

    def __init__(self, elem: torch.Tensor, log: list) -> None:
        self.elem, self.log = elem, log

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        log = next(a.log for a in args if isinstance(a, _LoggedOps))
        log.append(func.overloadpacket.__name__)
        out = func(*tree_map_only(_LoggedOps, lambda t: t.elem, args), **(kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: _LoggedOps(t, log), out)


class _LoggedOpsInCtx(_LoggedOps):
    """The same, with the log as its flatten ctx."""

    def __tensor_flatten__(self) -> tuple[list[str], list]:
        return ["elem"], self.log

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: list, size: Any, stride: Any) -> _LoggedOpsInCtx:
        return _LoggedOpsInCtx(inner["elem"], ctx)


def _logged_ops(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).relu().sum(0).elem


def _program_appends(x: torch.Tensor) -> torch.Tensor:
    x.log.append(x.shape[0])
    return (x + 1).elem


@pytest.mark.parametrize("cls", [_LoggedOps, _LoggedOpsInCtx])
@pytest.mark.parametrize("fn", [_logged_ops, _program_appends])
def test_a_list_a_subclass_input_holds_gets_the_appends(cls: type, fn: Callable) -> None:
    jitted = jitcore.jit(fn)
    for i, n in enumerate((3, 3, 4, 4, 3)):
        eager_log, jit_log = ["before"], ["before"]
        torch.manual_seed(i)
        expected = fn(cls(torch.randn(n, 2), eager_log))
        torch.manual_seed(i)
        actual = jitted(cls(torch.randn(n, 2), jit_log))
        torch.testing.assert_close(actual, expected)
        assert jit_log == eager_log, (i, jit_log, eager_log)
    assert jitcore.cache_misses(jitted) <= 3


# --- a wrapper that does not require grad over an inner tensor that does ------------------------------
# Note [A graph no output reaches] (jitcore/jit/api.py): eagerly the ops a ``__torch_dispatch__`` runs
# on inner tensors run below autograd, even inside ``torch.enable_grad()`` (subclass_zoo's
# inner-autograd tensor), so nothing the program computes from such a wrapper requires grad.
class _InnerGrad(torch.Tensor):
    """A wrapper made with ``requires_grad=False`` whose dispatch runs its inner ops, optionally under
    ``torch.enable_grad()``; it wraps only results that require grad (none, eagerly)."""

    enable_grad = False

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> _InnerGrad:
        return torch.Tensor._make_wrapper_subclass(cls, elem.size(), dtype=elem.dtype, requires_grad=False)

    def __init__(self, elem: torch.Tensor) -> None:
        self.elem = elem

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> _InnerGrad:
        return _InnerGrad(inner["elem"])

    __torch_function__ = torch._C._disabled_torch_function_impl  # noqa: SLF001

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        def wrap(t: Any) -> Any:
            return cls(t) if isinstance(t, torch.Tensor) and not isinstance(t, cls) and t.requires_grad else t

        unwrapped = tree_map_only(cls, lambda t: t.elem, (args, kwargs or {}))
        with torch.enable_grad() if cls.enable_grad else contextlib.nullcontext():
            return tree_map_only(torch.Tensor, wrap, func(*unwrapped[0], **unwrapped[1]))


@pytest.mark.parametrize("enable_grad", [False, True], ids=["plain", "enable_grad_inside"])
def test_a_wrapper_over_an_inner_tensor_that_requires_grad_builds_no_graph(
    enable_grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``enable_grad()`` inside the dispatch the jitted output required grad (connected to the
    inner tensor) where eager's does not: the computation runs with grad mode off, and the recorded
    ``enable_grad()`` turned it back on. Fails before; the plain dispatch is a control."""
    monkeypatch.setattr(_InnerGrad, "enable_grad", enable_grad)

    def program(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
        r = x + y
        return r.sum(), r.requires_grad, isinstance(r, _InnerGrad)

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        w = torch.randn(n, requires_grad=True)
        return _InnerGrad(w), _InnerGrad(w * 2)

    jitted = jitcore.jit(program)
    for i, n in enumerate((2, 2, 3)):
        torch.manual_seed(i)
        expected = program(*make(n))
        torch.manual_seed(i)
        got = jitted(*make(n))
        assert got[1:] == expected[1:]
        assert got[0].requires_grad == expected[0].requires_grad is False, f"call {i}"
        torch.testing.assert_close(got[0], expected[0])
