"""The per-call work of the autograd wrapper (Note [The autograd wrapper's per-call work],
jitcore/transforms/autograd.py) on cached calls: what depends only on the traces is not recomputed
per call, and the answers stay eager's. Each program runs eagerly and jitted (forward and backward),
and values, dtypes, output types and gradients are compared; the work of a cached call is counted
with ``sys.setprofile``: the wrapper's own frames and the C functions it calls."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jitcore

_AUTOGRAD_PY = "jitcore/transforms/autograd.py"


def _calls(fn) -> list[tuple[str, str]]:
    """The Python frames (file, name) and C functions ("C", name) that ``fn()`` enters."""
    seen: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append((frame.f_code.co_filename.replace("\\", "/"), frame.f_code.co_name))
        elif event == "c_call":
            seen.append(("C", getattr(arg, "__qualname__", repr(arg))))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def _loss(m, x, y):
    return F.mse_loss(m(x), y)


def _loss_and_argmax(m, x, y):
    out = m(x)
    return F.mse_loss(out, y), out.argmax(-1), 3


def _dict_of_outputs(m, x, y):
    out = m(x)
    return {"loss": F.mse_loss(out, y), "out": out}


def _to_scalar(out):
    if isinstance(out, dict):
        return out["loss"] + out["out"].sum()
    if isinstance(out, tuple):
        return out[0]
    return out


@pytest.mark.parametrize("program", [_loss, _loss_and_argmax, _dict_of_outputs])
def test_cached_calls_match_eager(program):
    """Single-output, constant-output (an integer tensor, a number) and dict outputs: values, dtypes,
    output types and gradients equal eager's on every call (the first traces, the rest are cached)."""
    eager_model = _mlp()
    jit_model = copy.deepcopy(eager_model)
    jitted = jitcore.jit(program)
    for step in range(3):
        x, y = torch.randn(4, 8, generator=torch.Generator().manual_seed(step)), torch.zeros(4, 8)
        expected, got = program(eager_model, x, y), jitted(jit_model, x, y)
        assert type(got) is type(expected)
        for e, g in zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)):
            assert type(g) is type(e)
            if isinstance(e, torch.Tensor):
                assert g.dtype == e.dtype and g.requires_grad == e.requires_grad
                torch.testing.assert_close(g, e)
            else:
                assert g == e
        _to_scalar(expected).backward()
        _to_scalar(got).backward()
        for pe, pj in zip(eager_model.parameters(), jit_model.parameters()):
            torch.testing.assert_close(pj.grad, pe.grad)
    assert jitcore.cache_misses(jitted) == 1


def test_cached_call_recomputes_nothing_per_trace():
    """A cached forward and backward of a single-output loss run the wrapper's three methods and
    nothing else of it: no comprehension rebuilding the set of differentiable outputs, no
    ``tree_unflatten`` of a one-value output (2 comprehension frames and a tree_unflatten before)."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted = jitcore.jit(_loss)
    for _ in range(2):
        jitted(model, x, y).backward()
    seen = _calls(lambda: jitted(model, x, y).backward())
    wrapper = sorted(name for file, name in seen if file.endswith(_AUTOGRAD_PY))
    assert wrapper == ["__call__", "backward", "forward", "tangents"]
    assert not [name for file, name in seen if file == "C" and "unflatten" in name]
