"""In-place writes into tensors a trace made itself run out of place when lowered
(jitcore/executors/functional.py), so they no longer split fused regions; writes into inputs, into
views or into tensors something else sees stay in place. The rewrite applies to aten traces (the
grad transform's forward and backward, where autograd's formulas write into temporaries), so the
programs here take a weight that requires grad. Each is checked against eager."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, check, fused

import jitcore
from jitcore.executors import is_lowered


def ops_on_torch(trace) -> list[str]:
    return [b.symbol.id for b in trace.bound_symbols if not is_lowered(b)]


def test_clamps_backward_is_one_region() -> None:
    def f(x):
        y = x * 2
        for _ in range(3):
            y = (y - 0.5).clamp(-1, 1) * 1.5
        return y.sum()

    x = torch.randn(8, 8, requires_grad=True)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        (gj,) = torch.autograd.grad(jfn(x), x)
        (ge,) = torch.autograd.grad(f(x), x)
        torch.testing.assert_close(gj, ge)
    backward = jitcore.last_backward_traces(jfn)[-1]
    assert ops_on_torch(backward) == [] and len(fused(str(backward))) == 1, str(backward)
    assert "logical_and.default" in str(backward) and "logical_and_" not in str(backward)


def test_a_write_into_a_local_tensor_fuses() -> None:
    def f(x, w):
        t = (x * w).abs() + 1
        t.mul_(3)
        return (t * 2 + 1).sum()  # t is not saved for the backward (an output of the forward)

    jfn = jitcore.jit(f, executors=INDUCTOR)
    check(f, torch.randn(5), torch.randn(5, requires_grad=True), jfn=jfn)
    forward = jitcore.last_traces(jfn)[-1]
    assert ops_on_torch(forward) == [] and "mul_" not in str(forward), str(forward)


def into_input(x, w):
    x.add_(1)
    return (x * w).sin()


def through_a_view(x, w):
    t = x * w
    t[0].add_(5)  # the write must reach t
    return t.cos() + 1


def viewed_later(x, w):
    t = x * w
    v = t.view(-1)
    t.add_(1)  # v sees it
    return v.sin() + t.view(-1)


def returned(x, w):
    t = x * w
    t.add_(1)
    return t


def test_writes_others_can_see_stay_in_place() -> None:
    for fn in (into_input, through_a_view, viewed_later, returned):
        jfn = jitcore.jit(fn, executors=INDUCTOR)
        check(fn, torch.randn(3, 4), torch.randn(3, 4, requires_grad=True), jfn=jfn)
        forward = jitcore.last_traces(jfn)[-1]
        assert any(op.endswith(("add_.Tensor", "add_.Scalar")) for op in ops_on_torch(forward)), (fn, forward)


def test_a_write_that_would_promote_stays_in_place() -> None:
    def f(x, w):
        t = (x * w).half() * 1
        t.add_(x)  # in place: stays half; out of place it would be float32
        return (t * 2).cos()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    x, w = torch.randn(6), torch.randn(6, requires_grad=True)
    check(f, x, w, jfn=jfn)
    assert jfn(x, w).dtype == torch.float16
    assert "add_.Tensor" in " ".join(ops_on_torch(jitcore.last_traces(jfn)[-1]))
