"""Saved tensors chosen for fusion (jitcore/transforms/mincut.py): when the inductor executor fuses
the grad transform's traces, the forward saves the cheapest values from which the backward
recomputes the cheap ops it fuses; gradients stay eager's, the torch executor's pair is unchanged,
and each call's backward takes what that call's forward saved."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, executor_log, fused

import jitcore
from jitcore.executors import InductorExecutor


def chain(x, w):
    y = x @ w
    for _ in range(3):
        y = ((y.sin() * 2).cos() + 1).tanh()
    return y.sum()


def softmaxish(x):
    y = (x * 1.5).exp()
    return (y / y.sum(-1, keepdim=True)).log1p().mean()


def saved_by_call(fn, *args) -> list[torch.Tensor]:
    """The tensors a call of ``fn`` hands to autograd to keep for the backward (a cached call:
    the first call, which traces, is made before)."""
    fn(*args)
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        fn(*args)
    return packed


def nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_a_pointwise_chain_saves_fewer_tensors_and_bytes_when_fused() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    on_torch, on_inductor = jitcore.jit(chain, executor="torch"), jitcore.jit(chain, executors=INDUCTOR)
    saved_torch, saved_fused = saved_by_call(on_torch, x, w), saved_by_call(on_inductor, x, w)
    # saving.py's choice: the input, the matmul's output and 6 values of the chain (8 x 512 bytes);
    # for fusion: the input and the matmul's output, the chain recomputed in the fused backward
    assert [tuple(t.shape) for t in saved_torch] == [(8, 16)] * 8
    assert [tuple(t.shape) for t in saved_fused] == [(8, 16)] * 2
    assert nbytes(saved_fused) * 4 == nbytes(saved_torch)
    forward = jitcore.last_traces(on_inductor)[-1]
    assert [p.name for p in forward.output[1]] == ["x", "t2"]
    backward = str(jitcore.last_backward_traces(on_inductor)[-1])
    assert "# saved for fusion: 2 values (1024 bytes) instead of 8 (4096 bytes); the backward recomputes 18 ops" \
        in backward
    assert len(fused(backward)) == 1, backward  # the recomputed ops are in the backward's one region
    (we,) = torch.autograd.grad(chain(x, w), w)
    for jfn in (on_torch, on_inductor):
        (wj,) = torch.autograd.grad(jfn(x, w), w)
        torch.testing.assert_close(wj, we)


def test_the_torch_executor_runs_the_grad_transforms_own_choice() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    jfn = jitcore.jit(chain, executor="torch")
    jfn(x, w)
    forward = jitcore.last_traces(jfn)[-1]
    assert forward.name == "forward" and len(forward.output[1]) == 8
    assert "saved for fusion" not in str(forward) + str(jitcore.last_backward_traces(jfn)[-1])


def test_a_reduction_is_saved_and_the_pointwise_ops_around_it_recomputed() -> None:
    x = torch.randn(4, 32, requires_grad=True)
    jfn = jitcore.jit(softmaxish, executors=INDUCTOR)
    saved = saved_by_call(jfn, x)
    # x (the caller's) and the row sums (4 x 1): exp, the division and log1p's input are recomputed
    assert sorted(tuple(t.shape) for t in saved) == [(4, 1), (4, 32)], [t.shape for t in saved]
    (gj,) = torch.autograd.grad(jfn(x), x)
    (ge,) = torch.autograd.grad(softmaxish(x), x)
    torch.testing.assert_close(gj, ge)


def test_each_backward_takes_what_its_own_forward_saved_across_the_switch() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    jfn = jitcore.jit(chain, executors=INDUCTOR, fuse_after=1)
    with executor_log() as log:
        before = jfn(x, w)  # run 0: the torch executor's pair (8 values saved)
        after = jfn(x, w)  # run 1: lowered, the pair chosen for fusion (2 values saved)
    assert any(m.startswith("forward lowered: fusion") for m in log), log
    (we,) = torch.autograd.grad(chain(x, w), w)
    (w_after,) = torch.autograd.grad(after, w)  # backwards in the other order than the forwards
    (w_before,) = torch.autograd.grad(before, w)
    torch.testing.assert_close(w_after, we)
    torch.testing.assert_close(w_before, we)


def test_random_ops_are_saved_not_redrawn() -> None:
    def f(x):
        y = torch.nn.functional.dropout(x.sin() * 2, 0.5).cos()
        return (y * x).sum()

    x = torch.randn(16, 16, requires_grad=True)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        torch.manual_seed(3)
        (gj,) = torch.autograd.grad(jfn(x), x)
        torch.manual_seed(3)
        (ge,) = torch.autograd.grad(f(x), x)
        torch.testing.assert_close(gj, ge)
    backward = str(jitcore.last_backward_traces(jfn)[-1])
    assert "native_dropout" not in backward and "bernoulli" not in backward, backward


def test_a_forward_that_writes_in_place_keeps_the_grad_transforms_choice() -> None:
    def f(x):
        y = x * 3
        y.add_(1)
        return y.sin().cos().sum()

    x = torch.randn(5, 5, requires_grad=True)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    (gj,) = torch.autograd.grad(jfn(x), x)
    (ge,) = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(gj, ge)
    assert "saved for fusion" not in str(jitcore.last_traces(jfn)[-1])


def test_an_inductor_executor_without_recompute_keeps_the_saved_values() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    saving = InductorExecutor("inductor_saving_all", recompute=False)
    jfn = jitcore.jit(chain, executors=(saving, "torch"))
    assert len(saved_by_call(jfn, x, w)) == 8
    forward = str(jitcore.last_traces(jfn)[-1])
    assert fused(forward) and "saved for fusion" not in forward


def test_mlp_gradients_with_the_saved_values_chosen_for_fusion() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 32),
                                torch.nn.SiLU(), torch.nn.Linear(32, 4))
    jfn = jitcore.jit(model, executors=INDUCTOR)
    x = torch.randn(6, 8)
    for _ in range(2):
        model.zero_grad()
        jfn(x).square().mean().backward()
        grads_j = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).square().mean().backward()
        for gj, p in zip(grads_j, model.parameters()):
            torch.testing.assert_close(gj, p.grad)
