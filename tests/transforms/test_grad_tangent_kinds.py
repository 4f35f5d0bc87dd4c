"""Gradients of another kind than the backward was traced for (issue 15), differential against eager.

The backward trace is recorded for each output's own tangent kind (class, flatten context, inner
tensors). A gradient of another kind — plain where the output is a subclass, a subclass where it is
plain, another ctx — gets a backward derived for it (Note [A backward for other tangent kinds],
jitcore/transforms/backward_deriver.py), once per kinds. Subclasses nested in others get gradients of eager's
structure. Each test compares gradient types, flatten contexts and inner tensors with eager.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from tests.dispatch.subclass_zoo import TaggedTensor
from tests.transforms.test_grad_programs import Scaled  # its ctx (a scale) changes with ``* number``


def assert_same(got, expected) -> None:
    """Same type, same flatten ctx, same inner tensors (recursively), same values."""
    assert type(got) is type(expected), f"{type(got).__name__} != {type(expected).__name__}"
    if hasattr(expected, "__tensor_flatten__") and type(expected) is not torch.Tensor:
        names, ctx = expected.__tensor_flatten__()
        got_names, got_ctx = got.__tensor_flatten__()
        assert got_names == names and got_ctx == ctx, (got_ctx, ctx)
        for name in names:
            assert_same(getattr(got, name), getattr(expected, name))
        return
    torch.testing.assert_close(got, expected)


def two(a: torch.Tensor, b: torch.Tensor, requires_grad: bool = True) -> TwoTensor:
    return TwoTensor(a.clone(), b.clone()).requires_grad_(requires_grad)


def _grads(fn, make_inputs, run_backward):
    """x.grad of each input, eager then jitted (the jitted function called twice, fresh inputs)."""
    results = []
    jf = jitcore.jit(fn)
    for f in (fn, jf, jf):
        inputs = make_inputs()
        run_backward(f(*inputs))
        results.append([x.grad for x in inputs])
    return results, jf


def _check(fn, make_inputs, run_backward, derived: int = 1):
    (eager, *jitted), jf = _grads(fn, make_inputs, run_backward)
    for grads in jitted:
        for got, expected in zip(grads, eager):
            assert_same(got, expected)
    assert jitcore.cache_misses(jf) == 1
    # the backward for the other kind was derived once, the second call reused it
    assert len(jitcore.last_rederived_traces(jf)) == derived
    return jf


torch.manual_seed(0)
A, B, C = torch.randn(3), torch.randn(3), torch.randn(3)


def test_a_plain_gradient_to_a_subclass_output() -> None:
    jf = _check(lambda x: (x * 2).sin(), lambda: [two(A, B)], lambda out: out.backward(torch.ones(3)))
    (trace,) = jitcore.last_rederived_traces(jf)
    assert "output 0: a Tensor" in str(trace)  # the header names the kinds it was derived for


def test_a_subclass_gradient_to_a_plain_output() -> None:
    _check(lambda x: x.sin() * 2, lambda: [A.clone().requires_grad_()],
           lambda out: out.backward(TwoTensor(torch.ones(3), torch.full((3,), 2.0))))


def test_a_subclass_gradient_made_by_autograd_downstream() -> None:
    """``(out * TwoTensor).sum().backward()``: autograd itself hands a TwoTensor to a plain output."""
    weight = TwoTensor(C.clone(), C * 3)
    _check(lambda x, y: (x * y).exp(), lambda: [A.clone().requires_grad_(), B.clone().requires_grad_()],
           lambda out: (out * weight).sum().backward())


def test_autograd_grad_with_grad_outputs_of_another_kind() -> None:
    def fn(x):
        return x.cos() * 3

    grads = []
    jf = jitcore.jit(fn)
    for f in (fn, jf, jf):
        x = two(A, B)
        (g,) = torch.autograd.grad(f(x), x, grad_outputs=torch.full((3,), 0.5))
        grads.append(g)
    assert_same(grads[1], grads[0])
    assert_same(grads[2], grads[0])
    assert len(jitcore.last_rederived_traces(jf)) == 1


def test_a_gradient_of_another_flatten_context() -> None:
    """Scaled's ctx (its scale) changes with each ``* number``: the output's is 12.0, the gradient's 5.0."""
    data, g = torch.randn(2, 3), torch.randn(3, 2)
    _check(lambda x: x.t() * 3.0, lambda: [Scaled(data.clone(), 4.0).requires_grad_()],
           lambda out: out.backward(Scaled(g.clone(), 5.0)))


def test_each_kind_of_gradient_is_derived_once() -> None:
    data, g = torch.randn(2, 3), torch.randn(3, 2)
    fn = lambda x: x.t() * 3.0  # noqa: E731
    jf = jitcore.jit(fn)
    for scale in (5.0, 5.0, 7.0, 12.0, 7.0):  # 12.0: the traced kind
        grads = []
        for f in (fn, jf):
            x = Scaled(data.clone(), 4.0).requires_grad_()
            f(x).backward(Scaled(g.clone(), scale))
            grads.append(x.grad)
        assert_same(grads[1], grads[0])
    assert len(jitcore.last_rederived_traces(jf)) == 2
    assert jitcore.cache_misses(jf) == 1


def test_several_outputs_one_gradient_of_another_kind() -> None:
    def fn(x, y):
        return x * y, (x + y).sin()

    def backward(outs):
        torch.autograd.backward(outs, [torch.ones(3), TwoTensor(torch.ones(3), torch.full((3,), -1.0))])

    _check(fn, lambda: [two(A, B), C.clone().requires_grad_()], backward)


def test_nested_subclass_gradients_have_eager_structure() -> None:
    """A TwoTensor of TwoTensors: its gradient's inner tensors are TwoTensors of plain tensors, as
    eagerly (the traced tangent was a TwoTensor of plain tensors before, so the gradient came back a
    level too deep: ``x.grad.a.a`` a TwoTensor)."""

    def nested():
        return TwoTensor(TwoTensor(A.clone(), B.clone()), TwoTensor(C.clone(), A * 2)).requires_grad_()

    _check(lambda x: (x * x).sum(), lambda: [nested()], lambda out: out.backward(), derived=0)
    _check(lambda x: x.sin() * 2, lambda: [nested()], lambda out: out.backward(torch.ones(3)))


def test_a_nested_gradient_to_a_plain_output() -> None:
    grad = TwoTensor(TwoTensor(A.clone(), B.clone()), TwoTensor(C.clone(), torch.ones(3)))
    _check(lambda x: x.exp(), lambda: [A.clone().requires_grad_()], lambda out: out.backward(grad))


class Lopsided(torch.Tensor):
    """A pair whose ops use ``a`` when every tensor argument is Lopsided and ``b`` when one is
    plain: a plain gradient makes the backward read an inner tensor the traced one does not."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, b: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a, self.b = a, b

    def __tensor_flatten__(self):
        return ["a", "b"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Lopsided(inner["a"], inner["b"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [v for v in args if isinstance(v, torch.Tensor)]
        side = "a" if all(isinstance(v, Lopsided) for v in tensors) else "b"
        unwrapped = [getattr(v, side) if isinstance(v, Lopsided) else v for v in args]
        out = func(*unwrapped, **kwargs)
        return Lopsided(out, out) if isinstance(out, torch.Tensor) else out


def test_a_backward_that_reads_an_unsaved_value_is_an_error_naming_it() -> None:
    """The backward for a plain gradient reads ``w.b``, which the forward (traced for a Lopsided
    gradient, reading only ``w.a``) did not save: an error naming the output, the value and the line."""
    w = Lopsided(torch.randn(3), torch.randn(3))
    jf = jitcore.jit(lambda x: x * w)
    out = jf(Lopsided(torch.randn(3), torch.randn(3)).requires_grad_())
    with pytest.raises(jitcore.JitcoreError) as info:
        out.backward(torch.ones(3))
    error = info.value
    assert error.code == "JC-G001" and isinstance(error, TypeError)
    text = str(error)
    assert "output 0" in text and "is a Tensor" in text and "Lopsided" in text
    assert "did not save" in text and "hint:" in text
    assert f"{__file__}:" in text  # the user's line whose backward reads it
    # a Lopsided gradient of the traced kind still works
    out = jf(Lopsided(torch.randn(3), torch.randn(3)).requires_grad_())
    out.backward(Lopsided(torch.ones(3), torch.ones(3)))


def test_an_output_no_gradient_reaches_gives_no_gradient() -> None:
    """``backward()`` through one output of two: an input only the other reaches keeps ``.grad``
    None, as eagerly (it got zeros, or JC-G001 for a subclass output, when autograd's zeros stood in
    for the missing gradient)."""

    def fn(x, y):
        return x * 2, (y * 3).sin()

    for make in (lambda: [A.clone().requires_grad_(), B.clone().requires_grad_()],
                 lambda: [two(A, B), B.clone().requires_grad_()]):
        (eager, *jitted), _jf = _grads(fn, make, lambda outs: outs[1].sum().backward())
        assert eager[0] is None
        for grads in jitted:
            assert grads[0] is None
            assert_same(grads[1], eager[1])


def test_the_backward_takes_what_the_fused_forward_saved() -> None:
    """With fusion the forward saves the values a min-cut chose (mincut.py): the backward derived
    for a plain gradient takes exactly those."""

    def fn(x):
        return (x.sin() * 2).exp().cos()

    jf = jitcore.jit(fn, executors=("inductor", "torch"))
    for f in (fn, jf, jf):
        x = two(A, B)
        f(x).backward(torch.ones(3))
        if f is fn:
            expected = x.grad
        else:
            assert_same(x.grad, expected)
    lowered_forward = jitcore.last_traces(jf)[-1]
    assert "fusion" in str(lowered_forward)
    (derived,) = jitcore.last_rederived_traces(jf)
    saved = [p.name for p in lowered_forward.output[1]]
    assert [a.name for a in derived.args][: len(saved)] == saved
    assert len(derived.args) == len(saved) + 1  # and the plain gradient


def test_nested_subclasses_with_contexts() -> None:
    """A TwoTensor of TaggedTensors (a tag in each inner ctx, joined by ops): eager's gradient
    structure and tags, for autograd's own gradient and for a plain one."""

    def nested():
        return TwoTensor(TaggedTensor(A.clone(), "a"), TaggedTensor(B.clone(), "b")).requires_grad_()

    _check(lambda x: (x * x).sum(), lambda: [nested()], lambda out: out.backward(), derived=0)
    _check(lambda x: x * 3, lambda: [nested()], lambda out: out.backward(torch.ones(3)))


def _jagged(lengths: tuple[int, ...], seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.nested.nested_tensor([torch.randn(n, 8) for n in lengths], layout=torch.jagged,
                                      requires_grad=True)


@pytest.mark.parametrize("name", ["softmax", "relu"])
def test_an_njt_outputs_expected_kind_reads_no_size_through_its_dispatch(name: str) -> None:
    """Note [A subclass kind's outer shape unread] (jitcore/transforms/tangents.py): each call of an entry
    with symbolic ragged sizes took its output's expected tangent kind with ``output.shape``, one
    ``aten.sym_size`` through NestedTensor's ``__torch_dispatch__`` per call beyond eager's (9 against 8).
    A warm call now runs no more of its dispatches than eager, with eager's gradients. (``relu``: eager
    runs 11, so it passed before too.)"""
    from torch.nested._internal.nested_tensor import NestedTensor

    from tests.dispatch.subclass_checks import protocol_calls

    def program(x: torch.Tensor) -> torch.Tensor:
        return x.softmax(1) if name == "softmax" else (x * 2).relu()

    jitted = jitcore.jit(program)
    for i, lengths in enumerate([(3, 5), (2, 7), (4, 4), (6, 2)]):
        x, xj = _jagged(lengths, i), _jagged(lengths, i)
        with protocol_calls(NestedTensor) as eager_call:
            expected = program(x)
        with protocol_calls(NestedTensor) as eager_backward:
            expected.values().square().sum().backward()
        with protocol_calls(NestedTensor) as jit_call:
            got = jitted(xj)
        with protocol_calls(NestedTensor) as jit_backward:
            got.values().square().sum().backward()
        assert type(got) is NestedTensor and torch.equal(got.values(), expected.values())
        assert torch.equal(xj.grad.values(), x.grad.values())
        if i >= 2:  # warm: the entry with symbolic ragged sizes
            assert len(jit_call) <= len(eager_call), (jit_call, eager_call)
            # one more than eager at most: torch's engine reads the gradient's metadata for jitcore's node
            # in C++ (no jitcore frame below it: /tmp/ao56-probes/p_where2.py); before, 2 more (softmax)
            assert len(jit_backward) <= len(eager_backward) + 1, (jit_backward, eager_backward)
    assert jitcore.cache_misses(jitted) == 2
