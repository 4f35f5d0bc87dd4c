"""Activation checkpointing (``torch.utils.checkpoint``) inside a jitted function is traced as the
function it checkpoints (jitcore/jit/checkpoint.py). Before, ``use_reentrant=False`` raised torch's
fake-mode error at the backward and ``use_reentrant=True`` left the parameters without gradients.
Differential: outputs, gradients, the random stream after the call, warnings, cache hits."""

from __future__ import annotations

import copy
import functools
import warnings

import pytest
import torch
import torch.nn as nn
from jit_helpers import assert_same
from torch.utils.checkpoint import checkpoint, checkpoint_sequential, create_selective_checkpoint_contexts

import jitcore


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.3), nn.GELU(), nn.Linear(8, 2))


def _compare(step, make_args, calls: int = 3) -> jitcore.jit:
    """``step`` eagerly and jitted on copies of the same model, ``calls`` times from one seed each;
    outputs and the generator state after each call equal; no eager entry."""
    model = _model()
    eager_model, jit_model = copy.deepcopy(model), copy.deepcopy(model)
    jf = jitcore.jit(step)
    for i in range(calls):
        args = make_args(i)
        torch.manual_seed(i)
        want = step(eager_model, *args)
        want_state = torch.get_rng_state()
        torch.manual_seed(i)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*runs eagerly.*")
            got = jf(jit_model, *args)
        assert_same(got, want)
        assert torch.equal(torch.get_rng_state(), want_state)
    assert jf.fallback_reason is None
    return jf


def _step(reentrant: bool):
    def step(m, x):
        y = checkpoint(m, x, use_reentrant=reentrant)
        y.sum().backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        return y.detach(), grads

    return step


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_module_with_dropout_trains_as_eagerly(reentrant):
    """Dropout inside: the mask is the forward's draw (eager's recomputation restores the state and
    draws the same one), and the stream after the call is eager's."""
    jf = _compare(_step(reentrant), lambda i: (torch.randn(3, 4, requires_grad=reentrant),))
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)


def test_reentrant_with_no_input_requiring_grad_leaves_the_parameters_without_gradients():
    """Eagerly the reentrant Function's outputs do not require grad then: torch warns, and the
    parameters get no gradient (``backward`` of the sum raises, as a loss that needs no grad)."""

    def step(m, x):
        y = checkpoint(m, x, use_reentrant=True)
        return y, y.requires_grad, [p.grad for p in m.parameters()]

    outputs = []
    for fn in (step, jitcore.jit(step)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.manual_seed(0)
            out = fn(_model(), torch.randn(3, 4))
        assert out[1] is False and out[2] == [None] * 4
        assert any("None of the inputs have requires_grad=True" in str(w.message) for w in seen)
        outputs.append(out[0])
    assert_same(outputs[1], outputs[0])  # the returned output requires no grad either (it did, jitted)
    assert outputs[1].grad_fn is None


def test_use_reentrant_omitted_warns_as_eagerly_and_takes_the_reentrant_path():
    def step(m, x):
        y = checkpoint(m, x)
        y.sum().backward()
        return y.detach(), m[0].weight.grad.clone()

    messages = []
    for fn in (step, jitcore.jit(step)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.manual_seed(0)
            fn(_model(), torch.randn(3, 4, requires_grad=True))
        messages.append(sorted({str(w.message) for w in seen if "use_reentrant" in str(w.message)}))
    assert messages[0] and messages[0] == messages[1]


def test_checkpoint_sequential_and_keyword_arguments():
    def step(m, x, scale):
        a = checkpoint_sequential(m, 2, x, use_reentrant=False)
        b = checkpoint(lambda t, *, k: m(t) * k, x, k=scale, use_reentrant=False)
        (a.sum() + b.sum()).backward()
        g = m[3].weight.grad.clone()
        m.zero_grad()
        return a.detach(), b.detach(), g

    _compare(step, lambda i: (torch.randn(3, 4), 2.0))


def test_selective_checkpointing_contexts():
    """``context_fn`` from ``create_selective_checkpoint_contexts``: its forward context is entered."""
    policy = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.mm.default])

    def step(m, x):
        y = checkpoint(m, x, use_reentrant=False, context_fn=policy)
        y.sum().backward()
        g = m[0].weight.grad.clone()
        m.zero_grad()
        return y.detach(), g

    _compare(step, lambda i: (torch.randn(3, 4),))


def test_the_backward_outside_the_jitted_function():
    """Only the forward is jitted; the gradient flows through the jitted call's output."""

    def forward(m, x):
        return checkpoint(m, x, use_reentrant=False).relu()

    model = _model()
    eager_model, jit_model = copy.deepcopy(model), copy.deepcopy(model)
    jf = jitcore.jit(forward)
    for i in range(2):
        x = torch.randn(3, 4)
        torch.manual_seed(i)
        forward(eager_model, x).sum().backward()
        torch.manual_seed(i)
        jf(jit_model, x).sum().backward()
        for p, q in zip(jit_model.parameters(), eager_model.parameters()):
            assert_same(p.grad, q.grad)
    assert jf.fallback_reason is None


def test_a_bad_determinism_check_raises_eagers_error():
    def step(m, x):
        return checkpoint(m, x, use_reentrant=False, determinism_check="all")

    with pytest.raises(ValueError, match="determinism_check should be one of") as eager:
        step(_model(), torch.randn(3, 4))
    with pytest.raises(ValueError, match="determinism_check should be one of") as traced:
        jitcore.jit(step)(_model(), torch.randn(3, 4))
    assert str(traced.value) == str(eager.value)


def test_the_backward_recomputes_a_checkpointed_region_instead_of_saving_it():
    """As eagerly, what a checkpointed block computes inside is not kept for the backward: the forward
    saves its inputs and parameters (here the residual stream, 8x16), not the 8x64 activations
    inside, which it saves without the checkpoint. Gradients equal eager's."""
    torch.manual_seed(0)
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16)) for _ in range(3)])

    def loss(x, checkpointed):
        for block in blocks:
            x = x + (checkpoint(block, x, use_reentrant=False) if checkpointed else block(x))
        return x.pow(2).mean()

    saved_shapes = {}
    for checkpointed in (False, True):
        jf = jitcore.jit(loss)
        x = torch.randn(8, 16, requires_grad=True)
        jf(x, checkpointed).backward()
        xe = x.detach().clone().requires_grad_()
        loss(xe, checkpointed).backward()
        torch.testing.assert_close(x.grad, xe.grad)
        forward = jitcore.last_traces(jf)[-1]
        inputs = {id(a) for a in forward.args}
        saved_shapes[checkpointed] = {tuple(p.shape) for p in forward.output[1] if id(p) not in inputs}
        blocks.zero_grad()
    assert (8, 64) in saved_shapes[False]
    assert saved_shapes[True] == {(8, 16)}


def test_a_checkpoint_where_nothing_requires_grad():
    """Grad mode on, no input or parameter requiring grad: the trace runs without the grad transform,
    its region markers included (they named a module the trace did not import: a NameError)."""
    frozen = _model().requires_grad_(False)

    def f(x):
        return checkpoint(frozen, x, use_reentrant=False) * 2

    jf = jitcore.jit(f)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.manual_seed(0)
        want = f(x)
        torch.manual_seed(0)
        assert_same(jf(x), want)


def test_torchs_lazily_cached_wrapper_does_not_retrace():
    """``checkpoint`` is wrapped by ``torch._disable_dynamo``, which caches its wrapper as an attribute
    of the function on first use: the first trace guarded that attribute's absence, so the next call
    after any eager checkpoint traced again. torch's functions' attributes are taken as constant."""
    for cell in checkpoint.__closure__ or ():
        if callable(cell.cell_contents) and hasattr(cell.cell_contents, "__dynamo_disable"):
            delattr(cell.cell_contents, "__dynamo_disable")
    model = _model()

    def f(x):
        return checkpoint(model, x, use_reentrant=False)

    jf = jitcore.jit(f)
    x = torch.randn(3, 4)
    for _ in range(2):
        torch.manual_seed(0)
        got = jf(x)
        torch.manual_seed(0)
        assert_same(got, f(x))  # the eager call caches the wrapper
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 1)
