"""Float dynamic numbers read inside a fused region as eager reads them (jitcore/executors/
float_reads.py, Note [Float reads in a region]): ``alpha=``, ``rsub`` (``x - t``), ``x / t`` and
clamp bounds, compiled once for every value, with eager's values and dtypes for float32, float64,
float16, bfloat16 and int64 tensors."""

from __future__ import annotations

import pytest
import torch
from executor_helpers import INDUCTOR, executor_log, fused, lowered_trace

import jitcore

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64)
# the values: one exact in every dtype, two that round differently in each, negative, tiny
VALUES = (0.5, 0.1, 1 / 3, -2.7, 1e-3)


def _tensor(dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(6, 7, generator=g) * 3
    return t.round().to(dtype) if not dtype.is_floating_point else t.to(dtype)


def alpha(t, u, lr):
    return torch.add(t * 2, u, alpha=lr).sin() + torch.sub(t, u.cos(), alpha=lr)


def rsub(t, u, lr):
    return (lr - t.abs()) * 2 + 1


def rtruediv(t, u, lr):
    return (lr / (t.abs() + 1)).cos() * 2


def clamp(t, u, lr):
    return torch.clamp(t * 2, min=-lr, max=lr).sin() + u.clamp(max=lr) * 3


def clamp_one_sided(t, u, lr):
    return torch.clamp_min(t + 1, lr).exp() + torch.clamp_max(u * 2, lr) + torch.clip(t, lr, 0.25)


def _fused_dtypes(program) -> tuple[torch.dtype, ...]:
    if program is alpha:  # an int tensor with a float alpha is an error in eager
        return DTYPES[:4]
    return DTYPES


CASES = [(p, d) for p in (alpha, rsub, rtruediv, clamp, clamp_one_sided) for d in _fused_dtypes(p)]


@pytest.mark.parametrize("program,dtype", CASES, ids=[f"{p.__name__}-{str(d)[6:]}" for p, d in CASES])
def test_a_float_read_is_fused_with_eagers_values_and_dtypes(program, dtype) -> None:
    jfn = jitcore.jit(program, executors=INDUCTOR, dynamic_numbers=("lr",))
    t, u = _tensor(dtype, 0), _tensor(dtype, 1)
    with executor_log() as log:
        for lr in VALUES:
            want, got = program(t, u, lr), jfn(t, u, lr)
            assert got.dtype == want.dtype
            # Note [Fusion and rounding] (docs/executors.md): a fused low-precision chain rounds once,
            # eager after each op: a few ulps (bfloat16's is 2**-6 at 2..4, where sums cancel)
            tolerance = {torch.float16: 1e-2, torch.bfloat16: 3e-2}.get(dtype)
            torch.testing.assert_close(got, want, rtol=tolerance and 1.6e-2, atol=tolerance)
    assert sum(m.startswith("computation lowered") for m in log) == 1, log  # one compile for every value
    trace = lowered_trace(jfn)
    assert len(fused(trace)) == 1, trace
    body = [line for line in trace.splitlines() if "= torch." in line and not line.strip().startswith("#")]
    assert not body, trace  # every call, the float reads included, is inside the region


def test_the_float_read_itself_rounds_as_eager() -> None:
    """The float's own rounding, without a chain around it (float32, bfloat16): ``rsub`` and the
    clamps bit for bit; ``alpha=`` to one ulp (eager computes ``t + alpha*u`` with a fused
    multiply-add, inductor's C++ with a multiply and an add)."""
    def f(t, u, lr):
        return torch.rsub(t, lr), torch.clamp(t, min=-lr, max=lr), torch.add(t, u, alpha=lr)

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr",))
    for dtype in (torch.float32, torch.bfloat16):
        t, u = _tensor(dtype, 2), _tensor(dtype, 3)
        ulp = torch.finfo(dtype).eps
        for lr in VALUES:
            (*exact, alpha_got), (*exact_want, alpha_want) = jfn(t, u, lr), f(t, u, lr)
            for got, want in zip(exact, exact_want):
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want, rtol=0, atol=0)
            assert alpha_got.dtype == alpha_want.dtype
            torch.testing.assert_close(alpha_got, alpha_want, rtol=ulp, atol=ulp * 8)
    assert len(fused(lowered_trace(jfn))) == 1
