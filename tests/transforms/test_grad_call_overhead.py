"""The per-call work of the autograd wrapper (Note [The autograd wrapper's per-call work],
jitcore/transforms/autograd.py) on cached calls: what depends only on the traces is not recomputed
per call, and the answers stay eager's. Each program runs eagerly and jitted (forward and backward),
and values, dtypes, output types and gradients are compared; the work of a cached call is counted
with ``sys.setprofile``: the wrapper's own frames and the C functions it calls."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jitcore
from tests.jit.jit_helpers import calls_entered

_AUTOGRAD_PY = "jitcore/transforms/autograd.py"


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
    seen = calls_entered(lambda: jitted(model, x, y).backward())
    wrapper = sorted(name for file, name in seen if file.endswith(_AUTOGRAD_PY))
    assert wrapper == ["__call__", "backward", "forward", "tangents"]
    assert not [name for file, name in seen if file == "C" and "unflatten" in name]


def test_a_cached_call_enters_the_function_without_torchs_python_apply():
    """A cached module forward and a cached loss enter ``JitcoreFunction`` through the C apply, with
    dead functorch wrappers unwrapped in C (Note [Entering the autograd Function]): no frame of
    torch's ``Function.apply`` or of its generator over the inputs (9 frames for the MLP before)."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted_loss, jitted_model = jitcore.jit(_loss), jitcore.jit(model)
    for _ in range(2):
        jitted_loss(model, x, y).backward()
        jitted_model(x)
    for call in (lambda: jitted_loss(model, x, y), lambda: jitted_model(x)):  # forwards: autograd's
        seen = calls_entered(call)  # backward enters torch's BackwardCFunction.apply, as eagerly
        torch_frames = [name for file, name in seen if file.endswith("torch/autograd/function.py")]
        assert "apply" not in torch_frames and "_is_setup_context_defined" not in torch_frames
        assert not [name for file, name in seen if file.endswith("torch/_functorch/utils.py")]
    assert jitcore.cache_misses(jitted_loss) == 1 and jitcore.cache_misses(jitted_model) == 1


def _dead_functorch_wrapper() -> torch.Tensor:
    """A tensor that escaped a ``torch.func.grad`` call: a functorch wrapper whose level is gone."""
    leaked = []

    def f(x):
        leaked.append(x)
        return x.sum()

    torch.func.grad(f)(torch.randn(3, generator=torch.Generator().manual_seed(1)))
    assert torch._C._functorch.is_functorch_wrapped_tensor(leaked[0])  # noqa: SLF001
    return leaked[0]


def _scaled(w, x):
    return (w * x).sin().sum()


def test_a_dead_functorch_wrapper_as_input_matches_eager():
    """The input is unwrapped as torch's ``Function.apply`` unwraps it: eager's value and gradient
    on every call, cached ones included."""
    dead = _dead_functorch_wrapper()
    w = torch.randn(3, requires_grad=True)
    jitted = jitcore.jit(_scaled)
    for _ in range(3):
        expected = _scaled(w, dead)
        expected.backward()
        expected_grad, w.grad = w.grad, None
        got = jitted(w, dead)
        got.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(w.grad, expected_grad)
        w.grad = None
    assert jitcore.cache_misses(jitted) == 1
