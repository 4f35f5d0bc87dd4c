"""Tensor-subclass inputs under the grad transform: which subclass values are inputs of the
computation (those bound for the call, at the path they were bound at: an argument, a module's
state, nested ones inner first) and which are not (a subclass value the program assembles from
input tensors: no op makes it, but it is not the caller's tensor). Differential: values, types,
``requires_grad`` and gradients against eager."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.complex_tensor import ComplexTensor
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


def _two(requires_grad: bool = True) -> TwoTensor:
    return TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_(requires_grad)


def _fresh(t: torch.Tensor) -> torch.Tensor:
    if isinstance(t, TwoTensor):
        return TwoTensor(t.a.clone(), t.b.clone()).requires_grad_(t.requires_grad)
    return t.detach().clone().requires_grad_(t.requires_grad)


def _outputs_and_grads(fn, args):
    """The outputs of ``fn(*args)`` (fresh copies of ``args``), and the gradients a backward
    through every output that requires grad leaves on the copies."""
    args = [_fresh(a) for a in args]
    out = fn(*args)
    outs = out if isinstance(out, tuple) else (out,)
    flags = [o.requires_grad for o in outs]
    differentiable = [o for o in outs if o.requires_grad]
    if differentiable:
        sum(((o * (i + 1)).sum() for i, o in enumerate(differentiable)), torch.zeros(())).backward()
    return outs, flags, [a.grad for a in args]


def _compare(fn, args) -> None:
    expected_outs, expected_flags, expected_grads = _outputs_and_grads(fn, args)
    outs, flags, grads = _outputs_and_grads(jitcore.jit(fn), args)
    assert flags == expected_flags
    assert [type(o) for o in outs] == [type(o) for o in expected_outs]
    torch.testing.assert_close([o.detach() for o in outs], [o.detach() for o in expected_outs])
    assert [g is None for g in grads] == [g is None for g in expected_grads]
    torch.testing.assert_close(
        [g for g in grads if g is not None], [g for g in expected_grads if g is not None]
    )


def test_a_subclass_assembled_from_an_arguments_inner_tensors_is_not_the_argument() -> None:
    # ``TwoTensor(x.a, x.b)`` uses only input tensors and no op makes it, but it is a new leaf:
    # the caller's ``x`` requires grad, the new value does not, and no gradient reaches ``x``
    _compare(lambda x: TwoTensor(x.a, x.b) * 2, [_two()])


def test_a_subclass_assembled_from_arguments_beside_the_argument_itself() -> None:
    def fn(x, w):
        return TwoTensor(x.a * w, x.b * w) * 2, x.sin()

    _compare(fn, [_two(), torch.randn(3, requires_grad=True)])


def test_a_flagged_subclass_assembled_from_an_argument_is_a_leaf() -> None:
    # no input: a leaf the program makes (GradTraces.fresh_leaves), not an output of the Function
    def fn(x, w):
        return TwoTensor(x.a, x.b).requires_grad_(), x * w

    x, w = _two(), torch.randn(3, requires_grad=True)
    expected, got = fn(_fresh(x), _fresh(w)), jitcore.jit(fn)(_fresh(x), _fresh(w))
    for e, g in zip(expected, got):
        assert (type(g), g.requires_grad, g.is_leaf) == (type(e), e.requires_grad, e.is_leaf)
        torch.testing.assert_close(g.detach(), e.detach())


@pytest.mark.parametrize("requires_grad", [True, False])
def test_subclass_arguments_and_plain_arguments(requires_grad: bool) -> None:
    args = [_two(requires_grad), _two(), torch.randn(3, requires_grad=True)]
    _compare(lambda x, y, w: (x * w + y).cos(), args)


def test_a_subclass_read_from_module_state_is_bound_at_its_path() -> None:
    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = _two()

        def forward(self, x):
            return (x * self.w).sin()

    eager, jitted = Scale(), Scale()
    jitted.w = _fresh(eager.w)
    x = torch.randn(3, requires_grad=True)
    jmodel = jitcore.jit(jitted)
    for _ in range(2):  # the second call is a cached one
        x_eager, x_jit = _fresh(x), _fresh(x)
        expected, got = eager(x_eager), jmodel(x_jit)
        assert type(got) is type(expected) and got.requires_grad == expected.requires_grad
        torch.testing.assert_close(got.detach(), expected.detach())
        expected.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(x_jit.grad, x_eager.grad)
    torch.testing.assert_close(jitted.w.grad, eager.w.grad)
    assert jitcore.cache_misses(jmodel) == 1


def test_nested_subclass_arguments() -> None:
    def nested() -> TwoTensor:
        return TwoTensor(TwoTensor(torch.randn(3), torch.randn(3)), TwoTensor(torch.randn(3), torch.randn(3)))

    def fresh(t: TwoTensor) -> TwoTensor:
        return TwoTensor(_fresh(t.a), _fresh(t.b)).requires_grad_()

    x = nested()
    x_eager, x_jit = fresh(x), fresh(x)
    fn = lambda t: (t * 2).sin()  # noqa: E731
    expected, got = fn(x_eager), jitcore.jit(fn)(x_jit)
    assert type(got) is type(expected) and type(got.a) is type(expected.a)
    torch.testing.assert_close(got.a.a.detach(), expected.a.a.detach())
    torch.testing.assert_close(got.b.b.detach(), expected.b.b.detach())
    expected.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(x_jit.grad.a.a, x_eager.grad.a.a)
    torch.testing.assert_close(x_jit.grad.b.b, x_eager.grad.b.b)


def test_a_subclass_argument_returned_as_itself_without_grad() -> None:
    fn = lambda x, y: (x, x + y)  # noqa: E731
    x, y = _two(False), _two(False)
    out = jitcore.jit(fn)(x, y)
    assert out[0] is x
    torch.testing.assert_close(out[1], fn(x, y)[1])


def _leaf_and_computed(a, b):
    x = TwoTensor(a, b).requires_grad_()
    return x, x * 2


def _subclass_from_a_plain_leaf(a, b):
    w = torch.ones(3, requires_grad=True)
    return w, TwoTensor(a, b) * w


def _subclass_from_a_returned_subclass_leaf(a, b):
    x = TwoTensor(a, b).requires_grad_()
    return x, (x * 3).sum()


def _plain_from_a_subclass_leaf(a, b):
    z = ComplexTensor(a, b).requires_grad_()
    return z, z.abs()  # ComplexTensor's abs is a plain tensor


@pytest.mark.parametrize("program", [
    _leaf_and_computed, _subclass_from_a_plain_leaf, _subclass_from_a_returned_subclass_leaf,
    _plain_from_a_subclass_leaf,
])
def test_values_computed_from_leaves_made_inside_keep_their_graph(program) -> None:
    """No input requires grad, so the subclass program ran flattened, without a graph: ``y`` came back
    a leaf, or a plain result that did not require grad, and ``y.backward()`` left the returned leaf's
    ``.grad`` None where eager fills it (or raised). Such programs run eagerly now (JC-J002)."""
    a, b = torch.randn(3), torch.randn(3)
    results = []
    for fn in (program, jitcore.jit(program)):
        leaf, computed = fn(a.clone(), b.clone())
        assert computed.requires_grad and not computed.is_leaf
        computed.sum().backward()
        results.append(leaf.grad)
    torch.testing.assert_close(results[1], results[0])
