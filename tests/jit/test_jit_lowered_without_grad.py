"""A computation called under no_grad (or inference mode) is lowered for inference, though a module's
parameters require grad (Note [A computation under no_grad is lowered for inference], jit/api.py):
each region's ``grad`` is False there, True where the program turns grad mode on itself; values,
dtypes and ``requires_grad`` of the outputs as eager's."""

from __future__ import annotations

import pytest
import torch

import jitcore
from jitcore.executors import InductorExecutor, Region
from jitcore.executors.fx_graph import region_graph


class Recording:
    """Claims what inductor claims; runs each region as its FX graph (under autograd where
    ``region.grad``); records ``region.grad`` per region."""

    name = "recording"
    min_region = 2
    trains = True

    def __init__(self) -> None:
        self._claims = InductorExecutor()
        self.grads: list[bool] = []

    def claim(self, bsym):
        return self._claims.claim(bsym)

    def fuse(self, region: Region):
        self.grads.append(region.grad)
        return region_graph(region)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.Tanh())


def _compare(out: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(out, expected)
    assert (out.dtype, out.requires_grad) == (expected.dtype, expected.requires_grad)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_module_called_without_grad_is_lowered_for_inference(mode) -> None:
    model, x = _model(), torch.randn(3, 8)
    recording = Recording()
    jm = jitcore.jit(model, executors=(recording, "torch"))
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    for _ in range(3):
        with context():
            _compare(jm(x), model(x))
    assert recording.grads and not any(recording.grads), recording.grads
    assert jitcore.cache_misses(jm) == 1


def test_grad_turned_on_inside_the_program_keeps_regions_under_autograd() -> None:
    model, x = _model(), torch.randn(3, 8)

    def f(x):
        with torch.enable_grad():
            return model(x).sum()

    recording = Recording()
    jf = jitcore.jit(f, executors=(recording, "torch"))
    for _ in range(2):
        with torch.no_grad():
            out, expected = jf(x), f(x)
        _compare(out, expected)
        (got,) = torch.autograd.grad(out, model[0].weight)
        (want,) = torch.autograd.grad(expected, model[0].weight)
        torch.testing.assert_close(got, want)
    assert recording.grads and all(recording.grads), recording.grads


def test_the_same_module_with_grad_on_is_another_entry_with_gradients() -> None:
    model, x = _model(), torch.randn(3, 8)
    recording = Recording()
    jm = jitcore.jit(model, executors=(recording, "torch"))
    with torch.no_grad():
        _compare(jm(x), model(x))
    out, expected = jm(x), model(x)
    _compare(out, expected)
    (got,) = torch.autograd.grad(out.sum(), model[2].weight)
    (want,) = torch.autograd.grad(expected.sum(), model[2].weight)
    torch.testing.assert_close(got, want)
    assert jitcore.cache_misses(jm) == 2
