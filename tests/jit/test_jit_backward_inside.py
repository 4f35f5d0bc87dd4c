"""Autograd inside a jitted function (jitcore/jit/autograd_calls.py): ``loss.backward()``,
``torch.autograd.backward`` and ``torch.autograd.grad`` in the traced program.

Differential: each program runs eagerly and jitted on twin copies of its state over several calls;
outputs, parameters, ``.grad`` of every leaf and optimizer state are compared after every call.
"""

from __future__ import annotations

import traceback

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same, training_step

import jitcore


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _same_params_and_grads(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for p, q in zip(a.parameters(), b.parameters()):
        assert_same(p.detach(), q.detach())
        if q.grad is None:
            assert p.grad is None
        else:
            assert_same(p.grad, q.grad)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_a_whole_training_step(optimizer):
    def setup():
        model = _mlp()
        return model, getattr(torch.optim, optimizer)(model.parameters(), lr=0.05)

    step = training_step(lambda model, x, y: torch.nn.functional.mse_loss(model(x), y))

    eager_model, eager_opt = setup()
    model, opt = setup()
    jitted = jitcore.jit(step)
    for i in range(5):
        g = torch.Generator().manual_seed(i)
        x, y = torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g)
        assert_same(jitted(model, opt, x, y), step(eager_model, eager_opt, x, y))
        _same_params_and_grads(model, eager_model)
    assert jitcore.cache_misses(jitted) <= 3  # no gradients yet; gradients; optimizer state made


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from(["backward", "zero", "none", "scaled"]), min_size=1, max_size=5))
def test_gradients_accumulate_as_eagerly(calls):
    """Backward into existing gradients accumulates in place; into none, sets them; zero_grad in
    both forms; a gradient argument scales the seed."""

    def f(model, x, how):
        if how == "zero":
            model.zero_grad(set_to_none=False)
        elif how == "none":
            model.zero_grad(set_to_none=True)
        out = model(x).sum()
        if how == "scaled":
            torch.autograd.backward([out], [torch.tensor(0.5)])
        else:
            out.backward()
        return out.detach()

    eager, model = _mlp(), _mlp()
    jf = jitcore.jit(f)
    for i, how in enumerate(calls):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(i))
        assert_same(jf(model, x, how), f(eager, x, how))
        _same_params_and_grads(model, eager)


def test_the_caller_sees_gradient_tensors_updated_in_place():
    model = _mlp()
    held = []

    def f(x):
        model(x).sum().backward()
        return model[0].weight.grad * 1

    jf = jitcore.jit(f)
    jf(torch.ones(1, 3))
    held.append(model[0].weight.grad)  # eager's AccumulateGrad writes this very tensor next time
    before = held[0].clone()
    out = jf(torch.ones(1, 3))
    assert model[0].weight.grad is held[0]
    assert_same(held[0], before * 2)
    assert_same(out, before * 2)


def test_autograd_grad_inside():
    def f(w, x):
        y = (x @ w).tanh().sum()
        (g,) = torch.autograd.grad(y, [w])
        return w - 0.1 * g.detach(), g

    w = torch.randn(3, 2, requires_grad=True)
    jf = jitcore.jit(f)
    for i in range(3):
        x = torch.randn(4, 3, generator=torch.Generator().manual_seed(i))
        got, expected = jf(w, x), f(w, x)
        for a, b in zip(got, expected):
            assert_same(a.detach(), b.detach())
    assert w.grad is None


def test_backward_through_an_op_whose_fake_kernel_is_stricter_than_eager():
    """``F.grouped_mm`` in float32 on CPU (Mixtral's experts): its fake kernel demands bfloat16, its CPU
    kernel takes float32, so its outputs' metadata come from eager's kernel (Note [Fake kernels
    stricter than eager]). That stand-in once made the output a leaf of the shadows' graph: a backward
    inside the function then gave no gradient to the input and the weight (eager gives both)."""

    def f(x, w, offs):
        loss = torch.nn.functional.grouped_mm(x, w, offs=offs).square().sum()
        loss.backward()
        return loss.detach()

    offs = torch.tensor([2, 5, 8], dtype=torch.int32)
    jf = jitcore.jit(f)
    for i in range(3):
        torch.manual_seed(i)
        x, w = torch.randn(8, 8, requires_grad=True), torch.randn(3, 8, 16, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        assert_same(jf(x, w, offs), f(x2, w2, offs))
        assert x.grad is not None and w.grad is not None
        assert_same(x.grad, x2.grad)
        assert_same(w.grad, w2.grad)
    assert jitcore.cache_misses(jf) == 1


def test_backward_with_inputs_and_a_leaf_made_inside():
    def f(a, b):
        c = torch.ones(3, requires_grad=True)
        loss = (a * b * c).sum()
        loss.backward(inputs=[a, c])
        return c.grad * 2

    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    jf = jitcore.jit(f)
    for _ in range(2):
        assert_same(jf(a2, b2), f(a, b))
        assert_same(a2.grad, a.grad)
        assert b.grad is None and b2.grad is None


def test_refusals_and_eager_errors():
    w = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        jitcore.jit(lambda w: (w * 2).backward())(w)
    with pytest.raises(RuntimeError, match="does not require grad"):
        jitcore.jit(lambda x: x.sum().backward())(torch.randn(3))
    assert torch.is_grad_enabled()


def test_gradient_penalty_training_step():
    """A WGAN-GP critic step: ``autograd.grad(create_graph=True)`` on the inputs, a penalty on the
    gradient's norm, ``backward()`` through it into the parameters, an optimizer step."""

    def step(critic, opt, real, fake):
        opt.zero_grad()
        mix = (0.3 * real + 0.7 * fake).requires_grad_(True)
        grad, = torch.autograd.grad(critic(mix).sum(), mix, create_graph=True)
        penalty = ((grad.norm(dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        loss.backward()
        opt.step()
        return loss.detach(), penalty.detach()

    def setup():
        critic = _mlp(1)
        return critic, torch.optim.Adam(critic.parameters(), lr=0.01)

    eager_critic, eager_opt = setup()
    critic, opt = setup()
    jitted = jitcore.jit(step)
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        real, fake = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
        assert_same(jitted(critic, opt, real, fake), step(eager_critic, eager_opt, real, fake))
        _same_params_and_grads(critic, eager_critic)
    assert jitcore.cache_misses(jitted) <= 3


def test_hessian_vector_product_and_backward_with_create_graph():
    def hvp(x, v):
        g, = torch.autograd.grad((x ** 3).sin().sum(), x, create_graph=True)
        h, = torch.autograd.grad(g, x, grad_outputs=v)
        return g.detach(), h

    def second(x):
        (x.sin() * x).sum().backward(create_graph=True)
        return x.grad * 2

    jitted_hvp, jitted_second = jitcore.jit(hvp), jitcore.jit(second)
    for i in range(2):
        g = torch.Generator().manual_seed(i)
        x, v = torch.randn(5, generator=g), torch.randn(5, generator=g)
        assert_same(jitted_hvp(x.clone().requires_grad_(), v), hvp(x.clone().requires_grad_(), v))
        jx, ex = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, expected = jitted_second(jx), second(ex)
        assert_same(got, expected)
        assert got.requires_grad and expected.requires_grad
        got.sum().backward()  # through the gradient: the second derivative accumulates into .grad
        expected.sum().backward()
        assert_same(jx.grad, ex.grad)
    assert "create_graph=True" in str(jitcore.last_traces(jitted_hvp)[0])


def _twice(retain):
    def f(x):
        y = (x.sin() * x).sum()
        y.backward(retain_graph=retain)
        if retain is None:
            torch.autograd.grad(y, x)  # frees nothing more: the first backward freed the buffers
        y.backward()
        return x.grad * 1
    return f


@pytest.mark.parametrize("retain", [None, False, True])
def test_a_second_backward_through_freed_buffers_raises_as_eagerly(retain):
    """Without retain_graph eager frees the graph's saved tensors: a second backward through them
    raises, at the user's line; with it, gradients accumulate."""
    f = _twice(retain)
    if retain:
        x, ex = torch.arange(3.0, requires_grad=True), torch.arange(3.0, requires_grad=True)
        assert_same(jitcore.jit(f)(x), f(ex))
        return
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as eager_error:
        f(torch.arange(3.0, requires_grad=True))
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as jit_error:
        jitcore.jit(f)(torch.arange(3.0, requires_grad=True))
    assert type(jit_error.value) is type(eager_error.value)
    assert "test_jit_backward_inside.py" in "".join(traceback.format_exception(jit_error.value))


@pytest.mark.parametrize("how", ["backward", "autograd_backward", "sgd_step"])
def test_a_backward_inside_into_a_subclass_parameter(how):
    """The gradient of a TwoTensor leaf is set by the replay to the computed TwoTensor; it was the
    gradient's shadow (a TwoTensor over fake tensors) that escaped to the caller."""
    from torch.testing._internal.two_tensor import TwoTensor

    def step(w, x):
        loss = (w * x).sin().sum()
        if how == "autograd_backward":
            torch.autograd.backward(loss)
        else:
            loss.backward()
        if how == "sgd_step":
            with torch.no_grad():
                w.sub_(0.1 * w.grad)
        return loss.detach()

    torch.manual_seed(0)
    a, b = torch.randn(3), torch.randn(3)
    eager_w, jit_w = (TwoTensor(a.clone(), b.clone()).requires_grad_() for _ in range(2))
    jf = jitcore.jit(step)
    for i in range(3):
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        assert_same(jf(jit_w, x), step(eager_w, x))
        assert type(jit_w.grad) is TwoTensor and type(jit_w.grad.a) is torch.Tensor
        assert_same((jit_w.grad.a, jit_w.grad.b), (eager_w.grad.a, eager_w.grad.b))
        assert_same((jit_w.a.detach(), jit_w.b.detach()), (eager_w.a.detach(), eager_w.b.detach()))


def test_jacobian_and_hessian_vectorized_inside():
    """``torch.autograd.functional.jacobian``/``hessian(..., vectorize=True)`` call
    ``torch.autograd.grad(is_grads_batched=True)``: traced (one backward per row), not an eager call."""
    def jac(x, w):
        return torch.autograd.functional.jacobian(lambda a, b: (a.sin() * b).cumsum(0), (x, w),
                                                  vectorize=True)

    def hess(x):
        return torch.autograd.functional.hessian(lambda a: (a ** 3).sin().sum(), x, vectorize=True)

    def jac_create_graph(x):
        j = torch.autograd.functional.jacobian(lambda a: a.tanh() * a.sum(), x, vectorize=True,
                                               create_graph=True)
        return j.square().sum()

    for fn, make in ((jac, lambda g: (torch.randn(4, generator=g), torch.randn(4, generator=g))),
                     (hess, lambda g: (torch.randn(3, generator=g),))):
        jf = jitcore.jit(fn)
        for i in range(2):
            args = make(torch.Generator().manual_seed(i))
            assert_same(jf(*args), fn(*args))
        assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1
    jf = jitcore.jit(jac_create_graph)
    x = torch.randn(3, requires_grad=True)
    ex = x.detach().clone().requires_grad_()
    got, expected = jf(x), jac_create_graph(ex)
    assert_same(got.detach(), expected.detach())
    assert_same(torch.autograd.grad(got, x), torch.autograd.grad(expected, ex))
    assert jf.fallback_reason is None


def test_autograd_grad_with_batched_grad_outputs():
    def f(x, v):
        y = x.sin() * x.sum()
        return torch.autograd.grad(y, x, v, is_grads_batched=True)

    def unused(x, z, v):
        return torch.autograd.grad(x.exp(), (x, z), v, is_grads_batched=True, allow_unused=True)

    jf, ju = jitcore.jit(f), jitcore.jit(unused)
    x, z = torch.randn(3, requires_grad=True), torch.randn(2, requires_grad=True)
    for rows in (2, 5):
        v = torch.randn(rows, 3)
        assert_same(jf(x, v), f(x, v))
        assert_same(ju(x, z, v), unused(x, z, v))
    assert jf.fallback_reason is None and ju.fallback_reason is None


def test_a_backward_inside_through_a_non_leaf_input():
    """``loss.backward()`` inside the function when an input is an activation the caller computed
    (requires grad, no leaf): the gradient goes on into the caller's graph, as eagerly; the call runs
    eagerly (JC-J002). Before, it raised "Tried to backward() through example input" while tracing.
    ``torch.autograd.grad`` with respect to that input stops there and stays traced."""
    import warnings

    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)

    def step(x):
        loss = linear(x).square().sum()
        loss.backward()
        return loss.detach()

    def input_grad(x):
        return torch.autograd.grad(linear(x).square().sum(), x)[0]

    jitted, jitted_grad = jitcore.jit(step), jitcore.jit(input_grad)
    for _ in range(2):
        base = torch.randn(4, 3, requires_grad=True)
        linear.zero_grad()
        got = jitted(base * 2)
        got_grads = base.grad, [p.grad for p in linear.parameters()]
        base.grad = None
        linear.zero_grad()
        expected = step(base * 2)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(got_grads[0], base.grad)
        for g, p in zip(got_grads[1], linear.parameters()):
            torch.testing.assert_close(g, p.grad)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="jitcore")  # traced
            torch.testing.assert_close(jitted_grad(base * 2), input_grad(base * 2))
    assert isinstance(jitted.fallback_reason, jitcore.errors.EagerOnlyValue)
    assert jitcore.cache_hits(jitted_grad) == 1


@pytest.mark.parametrize("accumulate", [False, True], ids=["fresh", "accumulated"])
def test_a_backward_inside_into_leaves_of_changing_sizes_is_one_entry(accumulate: bool) -> None:
    """Note [The gradient of a leaf with symbolic sizes] (jitcore/jit/autograd_calls.py): the leaf's
    ``.grad`` while tracing no longer guards its sizes, so a batch of another size hits the symbolic
    entry (an entry per size before); ``x.grad`` and ``w.grad`` are eager's on every call."""
    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        loss = (x * w).tanh().sum() + x.square().mean()
        loss.backward()
        return loss.detach()

    jitted = jitcore.jit(step)
    w_eager, w_jit = torch.randn(4, requires_grad=True), None
    w_jit = w_eager.detach().clone().requires_grad_()
    for n in (3, 4, 5, 6, 7, 2):
        x = torch.randn(n, 4)
        x_eager, x_jit = x.clone().requires_grad_(), x.clone().requires_grad_()
        if accumulate:  # a gradient already there: accumulated into, as eagerly
            x_eager.grad, x_jit.grad = torch.ones(n, 4), torch.ones(n, 4)
        assert_same(jitted(x_jit, w_jit), step(x_eager, w_eager))
        assert_same(x_jit.grad, x_eager.grad)
        assert_same(w_jit.grad, w_eager.grad)
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)  # 6 before
