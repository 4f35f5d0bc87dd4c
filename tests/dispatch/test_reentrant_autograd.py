"""A wrapper subclass whose ``__torch_dispatch__`` runs each op on its inner tensors with
``torch.overrides.enable_reentrant_dispatch()``: where the inner tensors require grad, autograd builds
its graph *below* the dispatch, on the inner tensors. Eager against ``jitcore.jit`` (values, output
types, gradients, the dispatch a warm call runs). What a node of that inner graph saves of its output
is known as that output (Note [The saved output of a graph built below a dispatch],
jitcore/langctx/saved_outputs.py), so the call is traced; it used to die with a NameError of the
compiled forward, then ran eagerly (Note [A saved value the forward does not make],
jitcore/transforms/saving.py).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import OneInner, protocol_calls
from torch.utils._pytree import tree_map_only

import jitcore


class _Reentrant(OneInner):
    """Computes every op on its inner tensor through the dispatcher again (autograd included)."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        raw = tree_map_only(_Reentrant, lambda x: x.t, (args, kwargs or {}))
        with torch.overrides.enable_reentrant_dispatch():
            out = func(*raw[0], **raw[1])
        return tree_map_only(torch.Tensor, _Reentrant, out)


PROGRAMS: dict[str, Callable[[Any, torch.Tensor], torch.Tensor]] = {
    "softmax": lambda x, w: ((x * 2) @ w).softmax(-1).t,  # softmax saves its output
    "exp": lambda x, w: ((x - 1) @ w).exp().t,  # so does exp
    "tanh_mean": lambda x, w: (x @ w).tanh().t.mean(0),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_autograd_below_a_dispatch_gives_eagers_values_and_gradients(name: str) -> None:
    prog = PROGRAMS[name]
    jitted = jitcore.jit(prog)
    for seed in range(3):
        torch.manual_seed(seed)
        x, w0 = torch.randn(3, 4), torch.randn(4, 2)
        w_eager, w_jit = w0.clone().requires_grad_(), w0.clone().requires_grad_()
        expected = prog(_Reentrant(x), w_eager)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning that the call runs eagerly
            with protocol_calls(_Reentrant) as frames:
                got = jitted(_Reentrant(x), w_jit)
        if seed:
            assert frames == []  # a warm call runs no dispatch
        assert type(got) is type(expected)
        assert got.requires_grad == expected.requires_grad
        torch.testing.assert_close(got, expected)
        cotangent = torch.randn(expected.shape)
        (g_eager,) = torch.autograd.grad(expected, w_eager, cotangent)
        (g_jit,) = torch.autograd.grad(got, w_jit, cotangent)
        torch.testing.assert_close(g_jit, g_eager)
    assert (jitcore.cache_misses(jitted), jitted.fallback_reason) == (1, None)
