"""Writes a backward's code makes into state the backward-effects watch does not hold (issue 14).

A cached call's backward runs a trace of aten ops; the Python code eager runs there (a subclass's
``__torch_dispatch__``, an ``autograd.Function``'s ``backward``) ran once, while the backward was
recorded. The watch replays its writes into the state pass 1 reached; a write elsewhere (a tensor's
attribute, a helper's closure variable, a global tensor's attribute) was lost on every later call, a
silently wrong state. Such a write now makes the call run eagerly, with jitcore's warning naming it
(jitcore/transforms/backward_unwatched.py). Each test runs the same calls eagerly and jitted, each
on its own fresh state, and compares the state after every call and backward, and the gradients.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

import jitcore

CALLS = 4
W_GLOBAL = torch.ones(3)
LOGGED: list[str] = []


def _program(mode: str) -> tuple[Callable, Callable, Callable]:
    """(f, state, make_x): a fresh program whose backward code writes state in the way ``mode`` names."""
    shared = torch.ones(3)
    shared.count = 0
    box = [0]

    def make_counter() -> tuple[Callable, Callable]:
        k = 0

        def bump() -> None:
            nonlocal k
            k += 1

        return bump, lambda: k

    bump, counted = make_counter()

    def add_to_box() -> None:
        box[0] += 1

    class Logged(torch.Tensor):
        @staticmethod
        def __new__(cls, elem: torch.Tensor) -> Any:
            return torch.Tensor._make_wrapper_subclass(  # noqa: SLF001
                cls, elem.shape, dtype=elem.dtype, requires_grad=elem.requires_grad)

        def __init__(self, elem: torch.Tensor) -> None:
            self.elem = elem

        def __tensor_flatten__(self) -> tuple[list[str], None]:
            return ["elem"], None

        @staticmethod
        def __tensor_unflatten__(inner: dict, _ctx: Any, *_sizes: Any) -> Any:
            return Logged(inner["elem"])

        @classmethod
        def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = func.__name__.split(".")[0]
            if mode == "dispatch_tensor_attribute":
                for a in args:
                    if isinstance(a, Logged):
                        a.touched = getattr(a, "touched", 0) + 1
            elif mode == "dispatch_nonlocal" and name == "cos":
                bump()
            elif mode == "dispatch_closure_list" and name == "cos":
                add_to_box()
            elif mode == "dispatch_logs_a_global":
                LOGGED.append(name)
            unwrap = lambda t: t.elem if isinstance(t, Logged) else t  # noqa: E731
            out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
            return tree_map(lambda t: Logged(t) if isinstance(t, torch.Tensor) else t, out)

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            if mode == "function_global_tensor_attribute":
                W_GLOBAL.count += 1
            elif mode == "function_closure_tensor_attribute":
                shared.count += 1
            elif mode == "function_nonlocal":
                bump()
            return grad * x.cos()

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if mode.startswith("dispatch"):
            return (x * w).sin().sum()
        return Sin.apply(x * w).sum()

    def state(x: torch.Tensor) -> tuple:
        return (getattr(x, "touched", None), W_GLOBAL.count, shared.count, counted(), box[0], list(LOGGED))

    def make_x(i: int) -> torch.Tensor:
        x = torch.full((3,), float(i))
        return Logged(x) if mode.startswith("dispatch") else x

    return f, state, make_x


def _run(mode: str, jit: bool) -> tuple[list, list[str], Callable]:
    W_GLOBAL.count = 0
    LOGGED.clear()
    f, state, make_x = _program(mode)
    fn = jitcore.jit(f) if jit else f
    calls = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(CALLS):
            x, w = make_x(i), torch.ones(3, requires_grad=True)
            fn(x, w).backward()
            calls.append((state(x), w.grad.clone()))
    return calls, [str(w.message) for w in caught if str(w.message).startswith("jitcore")], fn


UNWATCHED = {
    "dispatch_tensor_attribute": "an attribute of a Logged its __torch_dispatch__ was handed",
    "dispatch_nonlocal": "the closure variable k of",
    "dispatch_closure_list": "the contents of the closure variable box of",
    "function_global_tensor_attribute": "the contents of the global W_GLOBAL of",
    "function_closure_tensor_attribute": "the contents of the closure variable shared of",
    "function_nonlocal": "the closure variable k of",
}


@pytest.mark.parametrize("mode", list(UNWATCHED))
def test_a_backward_writing_state_the_watch_does_not_hold_runs_eagerly(mode: str) -> None:
    eager, _, _ = _run(mode, jit=False)
    jitted, warned, _ = _run(mode, jit=True)
    for i, ((got_state, got_grad), (state, grad)) in enumerate(zip(jitted, eager)):
        assert got_state == state, f"call {i}: {got_state} != eager's {state}"
        assert torch.equal(got_grad, grad)
    assert warned and "runs eagerly" in warned[0] and UNWATCHED[mode] in warned[0], warned


def test_a_write_the_watch_holds_is_still_replayed() -> None:
    """The control: a log in a global the dispatch reads is replayed, with no refusal and one entry."""
    eager, _, _ = _run("dispatch_logs_a_global", jit=False)
    jitted, warned, jf = _run("dispatch_logs_a_global", jit=True)
    for i, ((got_state, got_grad), (state, grad)) in enumerate(zip(jitted, eager)):
        assert got_state == state, f"call {i}: {got_state} != eager's {state}"
        assert torch.equal(got_grad, grad)
    assert not warned
    assert jitcore.cache_misses(jf) == 1
