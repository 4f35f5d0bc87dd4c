"""A wrapper subclass whose ``__torch_dispatch__`` runs each op on its inner tensors with
``torch.overrides.enable_reentrant_dispatch()``: where the inner tensors require grad, autograd builds
its graph *below* the dispatch, on the inner tensors. Eager against ``jitcore.jit`` (values, output
types, gradients). The grad transform cannot connect what such an inner node saves to the forward's
records, so the call runs eagerly (Note [A saved value the forward does not make],
jitcore/transforms/saving.py); it used to die with a NameError of the compiled forward.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import OneInner
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
    for seed in range(2):
        torch.manual_seed(seed)
        x, w0 = torch.randn(3, 4), torch.randn(4, 2)
        w_eager, w_jit = w0.clone().requires_grad_(), w0.clone().requires_grad_()
        expected = prog(_Reentrant(x), w_eager)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the warning that the call runs eagerly
            got = jitted(_Reentrant(x), w_jit)
        assert type(got) is type(expected)
        assert got.requires_grad == expected.requires_grad
        torch.testing.assert_close(got, expected)
        cotangent = torch.randn(expected.shape)
        (g_eager,) = torch.autograd.grad(expected, w_eager, cotangent)
        (g_jit,) = torch.autograd.grad(got, w_jit, cotangent)
        torch.testing.assert_close(g_jit, g_eager)
