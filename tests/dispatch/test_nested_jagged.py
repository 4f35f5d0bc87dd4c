"""Nested jagged tensors (``torch.nested.nested_tensor(..., layout=torch.jagged)``) traced, not run
eagerly (issue 15), differentially against eager: each program runs eagerly and under jitcore on
equal arguments and the outputs are compared (type, values through ``unbind()``, the offsets object
shared with the input as eagerly). A warm call runs no ``NestedTensor.__torch_dispatch__``: the
executed trace holds plain tensors and aten ops, the output is rebuilt by ``__tensor_unflatten__``.
Other ragged structures (lengths) miss and trace again, never answer wrongly; NJT inputs traced
sharing one offsets tensor do not answer calls whose inputs do not (eager raises there).

Each test here failed before (every NJT call was an eager entry, JC-J002)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import assert_same_nested, nested_dispatch_calls, nested_jagged

import jitcore


def _traced(program: Callable[..., Any], make: Callable[[tuple[int, ...]], tuple]) -> jitcore.JittedFunction:
    """Run ``program`` on arguments of two ragged structures, each twice: traced (no eager entry),
    equal to eager, the second call of each a hit that runs no NestedTensor dispatch."""
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # no call runs eagerly
        for i, lengths in enumerate(((2, 5), (2, 5), (4, 1, 3), (4, 1, 3))):
            args = make(lengths)
            hits = jitcore.cache_hits(jitted)
            with nested_dispatch_calls() as calls:
                out = jitted(*args)
            assert_same_nested(out, program(*args))
            if i % 2:  # a warm call
                assert jitcore.cache_hits(jitted) == hits + 1
                assert calls == [], calls
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
    _no_eager_entry(jitted)
    return jitted


def _no_eager_entry(jitted: jitcore.JittedFunction) -> None:
    assert jitted.entries and all(entry.eager_reason is None for entry in jitted.entries)


_linear = torch.nn.Linear(3, 4).requires_grad_(False)


@pytest.mark.parametrize("program", [
    lambda n: n.sin() * 2 + n,
    lambda n: _linear(n),
    lambda n: n.softmax(dim=1),  # over the ragged dimension
    lambda n: F.softmax(n, dim=-1),
    lambda n: n.sum(dim=-1),
    lambda n: n.sum(dim=1),  # over the ragged dimension: a dense result
    lambda n: torch.nested.to_padded_tensor(n, 0.0),
    lambda n: n.to_padded_tensor(-1.0).relu(),
    lambda n: (n @ _linear.weight.T).relu(),  # NJT's matmul asks is_nested: False raised before
    lambda n: (n.is_nested, n.sin()),
], ids=["pointwise", "linear", "softmax-ragged", "softmax-last", "sum-dense", "sum-ragged",
        "to_padded_tensor", "padded-then-dense", "matmul-dense", "is_nested"])
def test_an_njt_input_is_traced(program: Callable[..., Any]) -> None:
    _traced(program, lambda lengths: (nested_jagged(lengths, dim=3),))


def test_the_output_shares_the_inputs_offsets_as_eagerly() -> None:
    jitted = jitcore.jit(lambda n: n.cos() + 1)
    for _ in range(2):
        n = nested_jagged((3, 1), dim=3)
        out, expected = jitted(n), n.cos() + 1
        assert_same_nested(out, expected)
        assert out._offsets is n._offsets and expected._offsets is n._offsets
        assert out.shape[1] == n.shape[1]  # the same nested int (j), as eagerly
    assert jitcore.cache_hits(jitted) == 1
    _no_eager_entry(jitted)


def test_an_njt_made_inside_from_a_list() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor([a, b], layout=torch.jagged).cos()

    _traced(f, lambda lengths: (torch.randn(lengths[0], 3), torch.randn(lengths[-1], 3)))


def test_an_njt_made_inside_from_values_and_offsets() -> None:
    def f(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(values, offsets).sin() * 3

    def make(lengths: tuple[int, ...]) -> tuple:
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        return torch.randn(sum(lengths), 3), offsets

    jitted = _traced(f, make)
    values, offsets = make((2, 5))
    assert jitted(values, offsets)._offsets is offsets


def test_njt_inputs_sharing_offsets() -> None:
    f = lambda a, b: a * b + 1  # noqa: E731
    jitted = jitcore.jit(f)
    a = nested_jagged((2, 5), dim=3)
    for _ in range(2):
        b = a.cos()  # the same offsets object: the same nested int
        assert_same_nested(jitted(a, b), f(a, b))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
    _no_eager_entry(jitted)
    other = nested_jagged((2, 5), dim=3)  # equal lengths, another offsets tensor: eager refuses
    for call in (f, jitted):
        with pytest.raises(RuntimeError, match="cannot call binary pointwise function mul.Tensor"):
            call(a, other)


def test_another_ragged_structure_with_the_same_sizes() -> None:
    """(2, 5) and (5, 2) have the same total, batch and extreme lengths: one entry answers both, and
    softmax over the ragged dimension reads the call's offsets."""
    jitted = jitcore.jit(lambda n: n.softmax(dim=1) * 2)
    for lengths in ((2, 5), (5, 2), (2, 5)):
        n = nested_jagged(lengths, dim=3)
        assert_same_nested(jitted(n), n.softmax(dim=1) * 2)
    assert jitcore.cache_misses(jitted) == 1
    _no_eager_entry(jitted)


_METADATA = {"prim.layout.default", "aten.sym_size.default", "aten.sym_stride.default",
             "aten.sym_numel.default", "aten.sym_storage_offset.default", "aten.dim.default"}


def test_gradients_through_an_njt() -> None:
    def f(n: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (n * w).sin()

    jitted = jitcore.jit(f)
    for _ in range(2):
        n, w = nested_jagged((2, 5), requires_grad=True, dim=3), torch.randn(3, requires_grad=True)
        n2, w2 = n.detach().requires_grad_(True), w.detach().requires_grad_(True)
        with nested_dispatch_calls() as calls:
            out = jitted(n, w)
        expected = f(n2, w2)
        if jitcore.cache_hits(jitted):  # warm: autograd.Function.apply asks the output's metadata,
            assert calls and set(calls) <= _METADATA, calls  # no operation reaches NestedTensor
        assert_same_nested(out, expected)
        out.values().sum().backward()
        expected.values().sum().backward()
        torch.testing.assert_close(w.grad, w2.grad)
        assert_same_nested(n.grad, n2.grad)
    assert jitcore.cache_hits(jitted) == 1


@pytest.mark.parametrize("program", [
    lambda n, m: n.clone(),
    lambda n, m: n + m,
    lambda n, m: n.unsqueeze(-1).float(),
], ids=["clone", "add", "unsqueeze"])
def test_a_gradient_the_backward_passes_through_needs_no_grad(program: Callable[..., Any]) -> None:
    """A backward that hands the output's gradient on as it is (``clone``, ``add``) gives gradients that
    require no grad, as eagerly. The gradient jitcore records its backward for was made with the
    output's own flatten ctx, whose ``requires_grad`` (True) the input's gradient then had
    (the NJT OpInfo sweep, tests/dispatch/test_njt_opinfo.py)."""
    jitted = jitcore.jit(program)
    for _ in range(2):
        n, m = nested_jagged((2, 5), dim=3, requires_grad=True), nested_jagged((2, 5), dim=3)
        m = torch.nested.nested_tensor_from_jagged(m.values(), n.offsets()).requires_grad_(True)
        n2, m2 = (torch.nested.nested_tensor_from_jagged(t.values().detach().clone(), n.offsets())
                  .requires_grad_(True) for t in (n, m))
        grads = torch.autograd.grad(jitted(n, m).values().sum(), [n, m], allow_unused=True)
        expected = torch.autograd.grad(program(n2, m2).values().sum(), [n2, m2], allow_unused=True)
        for g, e in zip(grads, expected, strict=True):
            assert (g is None) == (e is None)
            if e is not None:
                assert_same_nested(g, e)
    assert jitcore.cache_hits(jitted) == 1


def _index_put(n: torch.Tensor) -> torch.Tensor:
    return torch.index_put(n, [torch.tensor([0, 1])], torch.tensor(1.0))


@pytest.mark.parametrize("program", [_index_put, lambda n: n.clone(), lambda n: (n * 2).sin()],
                         ids=["index_put", "clone", "mul_sin"])
def test_an_expanded_gradient_reaches_the_backward_as_eagerly(program: Callable[..., Any]) -> None:
    """``out.values().sum()`` hands the NJT output an expanded gradient (its values' strides are 0): the
    backward sees it so, as eagerly. ``index_put``'s backward refuses such an NJT eagerly ("only works on
    contiguous NJTs"); the jitted one raises the same, where before it computed a gradient from the
    contiguous tangent it was recorded for (Note [An expanded inner gradient], transforms/tangents.py).
    Other ops give eager's gradients, which hand the expanded values on as eagerly."""
    jitted = jitcore.jit(program)
    for _ in range(2):
        n = nested_jagged((2, 5), dim=3, requires_grad=True)
        n2 = torch.nested.nested_tensor_from_jagged(n.values().detach().clone(), n.offsets())
        n2.requires_grad_(True)
        try:
            expected: Any = torch.autograd.grad(program(n2).values().sum(), [n2])
        except RuntimeError as error:
            expected = error
        if isinstance(expected, RuntimeError):
            with pytest.raises(RuntimeError, match="only works on contiguous NJTs"):
                torch.autograd.grad(jitted(n).values().sum(), [n])
            continue
        grads = torch.autograd.grad(jitted(n).values().sum(), [n])
        assert_same_nested(grads, expected)
        assert grads[0].values().stride() == expected[0].values().stride()
    assert jitcore.cache_hits(jitted) == 1


def test_gradients_of_a_linear_layer_over_an_njt() -> None:
    linear = torch.nn.Linear(3, 4)
    eager = torch.nn.Linear(3, 4)
    eager.load_state_dict(linear.state_dict())
    jitted = jitcore.jit(lambda n: linear(n).relu())
    for _ in range(2):
        n = nested_jagged((2, 5), dim=3)
        out, expected = jitted(n), eager(n).relu()
        assert_same_nested(out, expected)
        out.values().sum().backward()
        expected.values().sum().backward()
        for p, q in zip(linear.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert jitcore.cache_hits(jitted) == 1
    _no_eager_entry(jitted)


def test_a_backward_inside_into_an_njt_input() -> None:
    """``loss.backward()`` inside the function with an NJT leaf of the caller's: its ``.grad`` is set
    as eagerly, over the caller's offsets (it raised while tracing: torch's ``.grad`` setter compared
    the caller's nested int with the pass's symbolic one)."""
    linear = torch.nn.Linear(3, 4)

    def step(n: torch.Tensor) -> torch.Tensor:
        loss = linear(n).relu().values().sum()
        loss.backward()
        return n.grad * 2  # the gradient read back inside the function

    jitted = jitcore.jit(step)
    for lengths in ((2, 5), (2, 5), (4, 1, 3)):
        n = nested_jagged(lengths, dim=3, requires_grad=True)
        n2 = n.detach().requires_grad_(True)
        linear.zero_grad()
        expected, expected_grads = step(n2), [p.grad.clone() for p in linear.parameters()]
        linear.zero_grad()
        out = jitted(n)
        assert_same_nested(out, expected)
        assert_same_nested(n.grad, n2.grad)
        assert n.grad.offsets() is n.offsets() and type(n.grad.values()) is torch.Tensor
        for p, grad in zip(linear.parameters(), expected_grads):
            torch.testing.assert_close(p.grad, grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)
    _no_eager_entry(jitted)


def _heads(lengths: tuple[int, ...], heads: int = 2, dim: int = 4) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.randn(n, heads, dim) for n in lengths], layout=torch.jagged)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)


def test_sdpa_is_traced() -> None:
    """SDPA on NJTs (the math backend on CPU) splits q/k/v by their offsets' values: the lengths are
    read while tracing and checked on every call (jitcore/dispatch/jagged_attention.py)."""
    jitted = _traced(lambda q: _attention(q, q, q), lambda lengths: (_heads(lengths),))
    assert jitted(_heads((5, 2)))._offsets is not None  # the same sizes, other lengths: a miss
    assert jitcore.cache_misses(jitted) == 3


def test_sdpa_with_other_lengths_gives_eagers_answer() -> None:
    """(2, 5) and (5, 2) have the same sizes: the entry traced for one must not answer the other."""
    f = lambda q, k: _attention(q, k, k) * 2  # noqa: E731
    jitted = jitcore.jit(f)
    for i, (q_lengths, k_lengths) in enumerate((((2, 5), (3, 3)), ((2, 5), (3, 3)), ((5, 2), (3, 3)),
                                                ((2, 5), (1, 5)))):
        q, k = _heads(q_lengths), _heads(k_lengths)
        with nested_dispatch_calls() as calls:
            out = jitted(q, k)
        assert_same_nested(out, f(q, k))
        assert out._offsets is q._offsets
        if i == 1:
            assert calls == []  # a hit
    # the third call fails the first entry's checks of the lengths, read as counts, so they are symbols
    # from then on and the fourth call is a hit (Note [The counts of a split in a subclass's code])
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
    _no_eager_entry(jitted)


def test_sdpa_under_grad_is_traced() -> None:
    """q requires grad: the split by lengths is made static by reading them (checked), so autograd
    differentiates it; gradients of q and of a weight are eager's."""
    def f(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _attention(q * w, q, q) * 2

    jitted = jitcore.jit(f)
    for i, lengths in enumerate(((2, 5), (2, 5), (5, 2))):
        q = _heads(lengths)
        q1, q2 = q.detach().requires_grad_(True), q.detach().requires_grad_(True)
        w1 = torch.randn(4, requires_grad=True)
        w2 = w1.detach().requires_grad_(True)
        with nested_dispatch_calls() as calls:
            out = jitted(q1, w1)
        expected = f(q2, w2)
        assert_same_nested(out, expected)
        out.values().sum().backward()
        expected.values().sum().backward()
        torch.testing.assert_close(w1.grad, w2.grad)
        assert_same_nested(q1.grad, q2.grad)
        if i == 1:  # warm: autograd.Function.apply asks the output's metadata only
            assert set(calls) <= _METADATA, calls
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)
    _no_eager_entry(jitted)


def test_sdpa_with_dropout_runs_eagerly() -> None:
    """With dropout, torch's math branch draws one mask over a strided nested tensor, which jitcore
    does not trace (per component, the draws would differ from eager's): the call runs eagerly."""
    f = lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)  # noqa: E731
    jitted = jitcore.jit(f)
    q = _heads((2, 5)).transpose(1, 2)
    for i in range(2):
        torch.manual_seed(0)
        warns = pytest.warns(UserWarning, match="runs eagerly for this call")  # once: the entry is kept
        with warns if i == 0 else contextlib.nullcontext():
            out = jitted(q)
        torch.manual_seed(0)
        assert_same_nested(out, f(q))
    assert "strided" in str(jitted.entries[0].eager_reason)


@pytest.mark.parametrize("program", [
    lambda n: [t.sum(0) for t in n.unbind()],
    lambda n: torch.stack([t.amax() for t in n.unbind()]) * 2,
    lambda n: n[1] * 2,  # a batch index: unbind()[1]
    lambda n: [c.sin() for c in n.chunk(2, dim=0)],
    # another offsets tensor: another nested int, so copy_ goes component by component
    lambda n: n.clone().copy_(torch.nested.nested_tensor_from_jagged(n.values().cos(), n.offsets().clone())),
], ids=["unbind", "unbind-stack", "select", "chunk", "copy-across-nested-ints"])
def test_njt_code_reading_the_offsets_values_is_traced(program: Callable[..., Any]) -> None:
    """NJT code that reads its offsets' values (``offsets.diff().tolist()`` in unbind, the lengths'
    sums in chunk) reads them while tracing, checked on every call: another ragged structure misses."""
    jitted = _traced(program, lambda lengths: (nested_jagged(lengths, dim=3),))
    n = nested_jagged((5, 2, 1, 4), dim=3)  # (4, 1, 3) traced: the same total and batch, other lengths
    assert_same_nested(jitted(n), program(n))
    assert jitcore.cache_misses(jitted) == 3


def test_with_dynamic_shapes() -> None:
    """``dynamic=True``: the NJT's ragged sizes (its values' total length, its shortest and longest
    lengths) are symbolic from the first call, the other sizes of its inner tensors static, its ragged
    size a nested int (jitcore/jit/ragged.py): another ragged structure of the batch size is a hit."""
    f = lambda n: (n * 2).softmax(dim=-1)  # noqa: E731
    jitted = jitcore.jit(f, dynamic=True)
    for lengths in ((2, 5), (2, 5), (3, 3), (1, 4)):
        n = nested_jagged(lengths, dim=3)
        assert_same_nested(jitted(n), f(n))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)
    _no_eager_entry(jitted)
