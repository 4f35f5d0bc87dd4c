"""Autograd through the inductor executor: the forward and backward traces of the grad transform are
lowered separately; gradients match eager's; a trace that runs under torch's own autograd (its inputs
require grad) is compiled for autograd (forward and backward through AOTAutograd), or not lowered by
an executor that does not compile for autograd."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, clone_tree, executor_log, fused, lowered_trace

import jitcore


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = (torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4), torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def test_training_steps_of_a_small_mlp_match_eager() -> None:
    eager, jitted = _mlp(), _mlp()
    step = jitcore.jit(jitted, executors=INDUCTOR)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(jitted.parameters(), lr=0.1)
    x, target = torch.randn(5, 8), torch.randn(5, 4)
    for _ in range(3):
        for _model, fn, opt in ((eager, eager, opt_e), (jitted, step, opt_j)):
            opt.zero_grad()
            loss = ((fn(x) - target) ** 2).mean()
            loss.backward()
            opt.step()
        for pe, pj in zip(eager.parameters(), jitted.parameters()):
            torch.testing.assert_close(pj.grad, pe.grad)
            torch.testing.assert_close(pj, pe)
    forward = lowered_trace(step)
    backward = str(jitcore.last_backward_traces(step)[-1])
    assert forward.startswith("# Constructed by jitcore.jit") and "def forward(" in forward
    assert fused(forward) and fused(backward), (forward, backward)


def test_forward_and_backward_are_lowered_separately() -> None:
    def f(x, w):
        return (torch.nn.functional.gelu(x @ w) * 2).tanh().sum()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    with executor_log() as log:
        (wj,) = torch.autograd.grad(jfn(x, w), w)
    (we,) = torch.autograd.grad(f(x, w), w)
    torch.testing.assert_close(wj, we)
    assert any(m.startswith("forward lowered: fusion") for m in log), log
    assert any(m.startswith("backward lowered: fusion") for m in log), log
    assert "fusion" in str(jitcore.last_backward_traces(jfn)[-1])


def test_a_trace_run_under_torch_autograd_is_fused_for_autograd() -> None:
    """A dynamic number keeps the trace under torch's autograd (Note [Dynamic numbers under
    autograd]): its region is compiled with AOTAutograd (forward and backward), never as an
    inference graph that would cut the autograd graph."""
    def f(x, n):
        return (x * n).sin().cos()

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("n",))
    for n in (3, 5):
        x = torch.randn(4, requires_grad=True)
        out = jfn(x, n)
        assert out.requires_grad and "Compiled" in type(out.grad_fn).__name__
        (gj,) = torch.autograd.grad(out.sum(), x)
        (ge,) = torch.autograd.grad(f(x, n).sum(), x)
        torch.testing.assert_close(gj, ge)
    assert "fusion0(x, n)" in lowered_trace(jfn)


def test_an_executor_that_does_not_train_leaves_a_trace_under_autograd_on_torch() -> None:
    class TanhOnly:
        name = "tanh_only"

        def claim(self, bsym):
            return None if bsym.symbol.id == "torch.tanh" else "not tanh"

        def implement(self, bsym):
            return bsym.symbol.fn

    def f(x, n):
        return (x * n).tanh()

    jfn = jitcore.jit(f, executors=(TanhOnly(), "torch"), dynamic_numbers=("n",))
    x = torch.randn(4, requires_grad=True)
    with executor_log() as log:
        out = jfn(x, 3)
    (gj,) = torch.autograd.grad(out.sum(), x)
    (ge,) = torch.autograd.grad(f(x, 3).sum(), x)
    torch.testing.assert_close(gj, ge)
    assert any("not lowered: its inputs x require grad" in m for m in log), log
    assert "tanh_only" not in lowered_trace(jfn)


def test_gradients_of_several_inputs_and_outputs() -> None:
    def f(a, b):
        c = a * b + a.exp()
        return c.sum(0), (c / (b.abs() + 1)).mean()

    a, b = torch.randn(3, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        ea, eb = clone_tree((a, b))
        ja, jb = clone_tree((a, b))
        oe, oj = f(ea, eb), jfn(ja, jb)
        grads_e = torch.autograd.grad((oe[0].sum() + oe[1]), (ea, eb))
        grads_j = torch.autograd.grad((oj[0].sum() + oj[1]), (ja, jb))
        for ge, gj in zip(grads_e, grads_j):
            torch.testing.assert_close(gj, ge)


def summation_tolerance(terms: torch.Tensor, dim: int) -> torch.Tensor:
    """Per output, how far two float32 sums of ``terms`` over ``dim`` in different orders may be from
    each other: each is within n * eps * sum(|terms|) of the exact sum (recursive summation's bound),
    so they are within twice that (Note [Fusion and summation order], docs/executors.md)."""
    n = terms.shape[dim]
    return 2 * n * torch.finfo(torch.float32).eps * terms.abs().sum(dim)


def test_a_broadcast_weights_gradient_is_within_the_summation_tolerance() -> None:
    """The gradient of a weight broadcast over rows is a sum over the rows: eager's kernel sums them in
    a cascade, inductor's fused region row after row (as torch.compile's does), so the two differ by
    rounding that grows with the row count, within the documented bound (Note [Fusion and summation
    order]); at 4000 rows an element of w's gradient (about 2.3, its terms summing to thousands in
    absolute value) differs by more than the default float32 tolerance allows."""
    def f(x, w, b):
        return (x * w + b).sin().sum()

    torch.manual_seed(0)
    x = torch.randn(4000, 16)
    w, b = torch.randn(16, requires_grad=True), torch.randn(16, requires_grad=True)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        got = torch.autograd.grad(jfn(x, w, b), (w, b))
    want = torch.autograd.grad(f(x, w, b), (w, b))
    assert "fusion" in str(jitcore.last_backward_traces(jfn)[-1])
    with torch.no_grad():
        per_element = (x * w + b).cos()  # the gradient of the sum at each element
        terms = (per_element * x, per_element)
    for g, e, t in zip(got, want, terms, strict=True):
        bound = summation_tolerance(t, 0) + 1e-5  # + the pointwise ops' ulps (sin, cos)
        assert ((g - e).abs() <= bound).all(), ((g - e).abs().max(), bound.min())


def test_views_returned_under_grad_are_eager_views() -> None:
    """Note [Views an autograd call returns] (transforms/view_outputs.py) with the forward lowered: the
    base is the node's output, the views are made after it, an in-place op on one rebases the base's
    history as eagerly (before: "Output 1 of JitcoreFunction is a view and is being modified")."""
    def f(x):
        z = (x * 2).sin()
        return z, z.view(-1)[::2], z[1]

    jfn = jitcore.jit(f, executors=INDUCTOR)
    for seed in range(3):
        results = []
        for fn in (f, jfn):
            x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)).requires_grad_()
            z, v, r = fn(x)
            seen = [v._base is z, r._base is z, type(v.grad_fn).__name__, type(r.grad_fn).__name__]
            seen.append(v.stride())
            v.mul_(3)
            seen.append(type(z.grad_fn).__name__)
            (z.sum() + v.sum() + r.sum()).backward()
            results.append((seen, x.grad, z.detach().clone()))
        assert results[1][0] == results[0][0]
        torch.testing.assert_close(results[1][1:], results[0][1:])
    assert jitcore.cache_misses(jfn) == 1
    assert fused(lowered_trace(jfn))
