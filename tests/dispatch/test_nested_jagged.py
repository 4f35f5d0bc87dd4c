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
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nested._internal.nested_tensor import NestedTensor

import jitcore


def _njt(lengths: tuple[int, ...], dim: int = 3, requires_grad: bool = False) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.randn(n, dim) for n in lengths], layout=torch.jagged,
                                      requires_grad=requires_grad)


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, NestedTensor):
        assert actual.shape[0] == expected.shape[0] and actual.dim() == expected.dim()
        for a, e in zip(actual.unbind(), expected.unbind(), strict=True):
            torch.testing.assert_close(a, e)
    else:
        torch.testing.assert_close(actual, expected)


@contextlib.contextmanager
def _dispatch_calls() -> Iterator[list[str]]:
    """The operators NestedTensor.__torch_dispatch__ is called with inside the block."""
    calls: list[str] = []
    original = NestedTensor.__dict__["__torch_dispatch__"]

    def counting(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        calls.append(str(func))
        return original.__func__(cls, func, types, args, kwargs)

    NestedTensor.__torch_dispatch__ = classmethod(counting)
    try:
        yield calls
    finally:
        NestedTensor.__torch_dispatch__ = original


def _traced(program: Callable[..., Any], make: Callable[[tuple[int, ...]], tuple]) -> jitcore.JittedFunction:
    """Run ``program`` on arguments of two ragged structures, each twice: traced (no eager entry),
    equal to eager, the second call of each a hit that runs no NestedTensor dispatch."""
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # no call runs eagerly
        for i, lengths in enumerate(((2, 5), (2, 5), (4, 1, 3), (4, 1, 3))):
            args = make(lengths)
            hits = jitcore.cache_hits(jitted)
            with _dispatch_calls() as calls:
                out = jitted(*args)
            _same(out, program(*args))
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
], ids=["pointwise", "linear", "softmax-ragged", "softmax-last", "sum-dense", "sum-ragged",
        "to_padded_tensor", "padded-then-dense"])
def test_an_njt_input_is_traced(program: Callable[..., Any]) -> None:
    _traced(program, lambda lengths: (_njt(lengths),))


def test_the_output_shares_the_inputs_offsets_as_eagerly() -> None:
    jitted = jitcore.jit(lambda n: n.cos() + 1)
    for _ in range(2):
        n = _njt((3, 1))
        out, expected = jitted(n), n.cos() + 1
        _same(out, expected)
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
    a = _njt((2, 5))
    for _ in range(2):
        b = a.cos()  # the same offsets object: the same nested int
        _same(jitted(a, b), f(a, b))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
    _no_eager_entry(jitted)
    other = _njt((2, 5))  # equal lengths, another offsets tensor: eager refuses
    for call in (f, jitted):
        with pytest.raises(RuntimeError, match="cannot call binary pointwise function mul.Tensor"):
            call(a, other)


def test_another_ragged_structure_with_the_same_sizes() -> None:
    """(2, 5) and (5, 2) have the same total, batch and extreme lengths: one entry answers both, and
    softmax over the ragged dimension reads the call's offsets."""
    jitted = jitcore.jit(lambda n: n.softmax(dim=1) * 2)
    for lengths in ((2, 5), (5, 2), (2, 5)):
        n = _njt(lengths)
        _same(jitted(n), n.softmax(dim=1) * 2)
    assert jitcore.cache_misses(jitted) == 1
    _no_eager_entry(jitted)


_METADATA = {"prim.layout.default", "aten.sym_size.default", "aten.sym_stride.default",
             "aten.sym_numel.default", "aten.sym_storage_offset.default", "aten.dim.default"}


def test_gradients_through_an_njt() -> None:
    def f(n: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (n * w).sin()

    jitted = jitcore.jit(f)
    for _ in range(2):
        n, w = _njt((2, 5), requires_grad=True), torch.randn(3, requires_grad=True)
        n2, w2 = n.detach().requires_grad_(True), w.detach().requires_grad_(True)
        with _dispatch_calls() as calls:
            out = jitted(n, w)
        expected = f(n2, w2)
        if jitcore.cache_hits(jitted):  # warm: autograd.Function.apply asks the output's metadata,
            assert calls and set(calls) <= _METADATA, calls  # no operation reaches NestedTensor
        _same(out, expected)
        out.values().sum().backward()
        expected.values().sum().backward()
        torch.testing.assert_close(w.grad, w2.grad)
        _same(n.grad, n2.grad)
    assert jitcore.cache_hits(jitted) == 1


def test_gradients_of_a_linear_layer_over_an_njt() -> None:
    linear = torch.nn.Linear(3, 4)
    eager = torch.nn.Linear(3, 4)
    eager.load_state_dict(linear.state_dict())
    jitted = jitcore.jit(lambda n: linear(n).relu())
    for _ in range(2):
        n = _njt((2, 5))
        out, expected = jitted(n), eager(n).relu()
        _same(out, expected)
        out.values().sum().backward()
        expected.values().sum().backward()
        for p, q in zip(linear.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert jitcore.cache_hits(jitted) == 1
    _no_eager_entry(jitted)


def test_sdpa_still_runs_eagerly() -> None:
    """SDPA on an NJT splits it by its offsets' values (the math backend on CPU): a value read in
    dispatch code, so the call is an eager entry (JC-J002), equal to eager."""
    def f(q: torch.Tensor) -> torch.Tensor:
        q = q.transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2)

    jitted = jitcore.jit(f)
    q = torch.nested.nested_tensor([torch.randn(n, 2, 4) for n in (2, 5)], layout=torch.jagged)
    with pytest.warns(UserWarning, match="runs eagerly for this call"):
        _same(jitted(q), f(q))
    _same(jitted(q), f(q))
    assert jitted.entries[0].eager_reason is not None


def test_with_dynamic_shapes() -> None:
    """``dynamic=True``: the NJT's inner tensors keep static sizes (subclass inputs do), its ragged
    size stays a nested int; the call is traced all the same."""
    f = lambda n: (n * 2).softmax(dim=-1)  # noqa: E731
    jitted = jitcore.jit(f, dynamic=True)
    for lengths in ((2, 5), (2, 5), (3, 3)):
        n = _njt(lengths)
        _same(jitted(n), f(n))
    assert jitcore.cache_hits(jitted) == 1
    _no_eager_entry(jitted)
