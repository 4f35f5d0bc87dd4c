"""Backward formulas that check values (jitcore/transforms/backward_checks.py): the complex
``svd_backward`` asks ``allclose`` of two tensors it computed and refuses a loss that depends on the
singular vectors' phase. Jitted, the backward is traced (no eager entry), its gradients equal eager's,
and a call whose loss depends on the phase raises eager's kind of error in the backward, also from the
cache."""

from __future__ import annotations

import warnings

import pytest
import torch

import jitcore


def _svd(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(torch.linalg.svd(a, full_matrices=False))


def _svd_lowrank_product(a: torch.Tensor) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(a, full_matrices=False)
    return (u * s.unsqueeze(-2)) @ vh


def _phase_free_loss(outs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return sum((o.abs() ** 2).sum() for o in outs)


def _grad(fn, a: torch.Tensor, loss) -> torch.Tensor:
    a = a.detach().clone().requires_grad_()
    out = fn(a)
    (g,) = torch.autograd.grad(loss(out if isinstance(out, tuple) else (out,)), a)
    return g


@pytest.mark.parametrize("fn", [_svd, _svd_lowrank_product], ids=["svd", "u_s_vh"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_svd_backward_is_traced_and_matches_eager(fn, dtype: torch.dtype) -> None:
    jf = jitcore.jit(fn)
    for seed in (0, 1):
        a = torch.randn(4, 3, dtype=dtype, generator=torch.Generator().manual_seed(seed))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an eager entry warns
            got = _grad(jf, a, _phase_free_loss)
        torch.testing.assert_close(got, _grad(fn, a, _phase_free_loss))
    assert jf.fallback_reason is None, jf.fallback_reason
    assert jitcore.cache_hits(jf) == 1, jitcore.miss_reasons(jf)
    assert jitcore.last_backward_traces(jf), "no backward trace was recorded"
    assert "check_close" in str(jitcore.last_backward_traces(jf)[-1])


def test_a_loss_that_depends_on_the_phase_raises_as_eagerly() -> None:
    """``u.real.sum()`` depends on the phase of the singular vectors: eager's backward raises a
    RuntimeError; so does the jitted one, on the traced call and on the cached one, while a loss
    free of the phase between them still gets eager's gradient from the same entry."""

    def phase_loss(outs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return outs[0].real.sum()

    a = torch.randn(4, 3, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="svd_backward"):
        _grad(_svd, a, phase_loss)
    jf = jitcore.jit(_svd)
    with pytest.raises(RuntimeError, match="check of torch's backward formula"):
        _grad(jf, a, phase_loss)
    torch.testing.assert_close(_grad(jf, a, _phase_free_loss), _grad(_svd, a, _phase_free_loss))
    with pytest.raises(RuntimeError, match="check of torch's backward formula"):
        _grad(jf, a, phase_loss)
    assert jitcore.cache_hits(jf) == 2 and jf.fallback_reason is None
