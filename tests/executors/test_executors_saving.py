"""Saved tensors chosen for fusion (jitcore/transforms/mincut.py): when the inductor executor fuses
the grad transform's traces, the forward saves the cheapest values from which the backward
recomputes the cheap ops it fuses; gradients stay eager's, the torch executor's pair is unchanged,
and each call's backward takes what that call's forward saved."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, executor_log, fused

import jitcore
from jitcore.executors import BACKGROUND_ENV, InductorExecutor, is_lowered


def chain(x, w):
    y = x @ w
    for _ in range(3):
        y = (torch.where(y > 0, y * 2, y * 0.5) - 1).clamp(-2, 2) * y
    return y.sum()


def transcendental_chain(x, w):
    y = x @ w
    for _ in range(3):
        y = ((y.sin() * 2).cos() + 1).tanh()
    return y.sum()


def normalized(x):
    y = (x * 1.5).relu() + 1
    return (y / y.sum(-1, keepdim=True) - 0.5).square().mean()


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
    # saving.py's choice: the input, the matmul's output, 3 values and 2 masks of the chain; for
    # fusion: the input and the matmul's output, the chain recomputed in the fused backward
    assert [(tuple(t.shape), t.dtype) for t in saved_torch].count(((8, 16), torch.bool)) == 2
    assert [tuple(t.shape) for t in saved_torch] == [(8, 16)] * 7
    assert [tuple(t.shape) for t in saved_fused] == [(8, 16)] * 2
    assert (nbytes(saved_torch), nbytes(saved_fused)) == (2816, 1024)
    forward = jitcore.last_traces(on_inductor)[-1]
    assert [p.name for p in forward.output[1]] == ["x", "t2"]
    backward = str(jitcore.last_backward_traces(on_inductor)[-1])
    note = "saved for fusion: 2 values (1024 bytes) instead of 7 (2816 bytes); the backward recomputes 20 ops"
    assert f"# {note}" in backward
    # the recomputed ops run inside the backward's one fused region (clamp's backward's logical_and_
    # runs out of place: test_executors_out_of_place.py)
    on_torch_ops = [b.symbol.id for b in jitcore.last_backward_traces(on_inductor)[-1].bound_symbols
                    if not is_lowered(b)]
    assert on_torch_ops == [] and len(fused(backward)) == 1, backward
    (we,) = torch.autograd.grad(chain(x, w), w)
    for jfn in (on_torch, on_inductor):
        (wj,) = torch.autograd.grad(jfn(x, w), w)
        torch.testing.assert_close(wj, we)


def test_the_torch_executor_runs_the_grad_transforms_own_choice() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    jfn = jitcore.jit(chain, executor="torch")
    jfn(x, w)
    forward = jitcore.last_traces(jfn)[-1]
    assert forward.name == "forward" and len(forward.output[1]) == 7
    assert "saved for fusion" not in str(forward) + str(jitcore.last_backward_traces(jfn)[-1])


def test_transcendental_ops_on_cpu_are_saved_not_recomputed() -> None:
    # Note [Recomputing on CPU]: sin, cos and tanh cost more to recompute than to save on CPU
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    on_torch = jitcore.jit(transcendental_chain, executor="torch")
    on_inductor = jitcore.jit(transcendental_chain, executors=INDUCTOR)
    assert nbytes(saved_by_call(on_inductor, x, w)) == nbytes(saved_by_call(on_torch, x, w)) == 8 * 512
    forward = str(jitcore.last_traces(on_inductor)[-1])
    assert fused(forward) and "saved for fusion" not in forward
    (wj,) = torch.autograd.grad(on_inductor(x, w), w)
    (we,) = torch.autograd.grad(transcendental_chain(x, w), w)
    torch.testing.assert_close(wj, we)


def test_a_reduction_is_saved_and_the_pointwise_ops_around_it_recomputed() -> None:
    x = torch.randn(4, 32, requires_grad=True)
    jfn = jitcore.jit(normalized, executors=INDUCTOR)
    saved = saved_by_call(jfn, x)
    # x (the caller's) and the row sums (4 x 1): relu, the division and the square's input are
    # recomputed (saving.py's choice keeps 3 (4, 32) values and the row sums)
    assert [tuple(t.shape) for t in saved] == [(4, 32), (4, 1)], [t.shape for t in saved]
    assert saved[0] is x
    (gj,) = torch.autograd.grad(jfn(x), x)
    (ge,) = torch.autograd.grad(normalized(x), x)
    torch.testing.assert_close(gj, ge)


def test_each_backward_takes_what_its_own_forward_saved_across_the_switch(monkeypatch) -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16, requires_grad=True)
    monkeypatch.setenv(BACKGROUND_ENV, "0")  # lowered on the hot call
    jfn = jitcore.jit(chain, executors=INDUCTOR, fuse_after=1)
    with executor_log() as log:
        before = jfn(x, w)  # run 0: the torch executor's pair (7 values saved)
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
    assert len(saved_by_call(jfn, x, w)) == 7
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
