"""Symbolic ragged sizes (jitcore/jit/ragged.py): a jitted function over nested jagged tensors (NJTs)
whose batches have other lengths reuses one cache entry, as torch.compile does.

Differential: every call is compared with eager (the values, an NJT output's offsets object, lengths
and outer shape, gradients of the parameters and of the NJT). Each program runs over six ragged
structures of one batch size: at most two traces (the first structure, then a symbolic one for all
others). Calls the entry cannot serve (another batch size, dtype, a maximum length a branch read,
values with other strides where the trace relied on them) trace again and give eager's answer.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nested._internal.nested_tensor import NestedTensor

import jitcore

# six ragged structures of 4 sequences: the total length, the shortest and the longest all change
_STRUCTURES = ((5, 5, 4, 1), (5, 2, 2, 5), (3, 3, 1, 3), (4, 4, 4, 1), (3, 3, 5, 1), (2, 4, 5, 5))


def _njt(lengths: tuple[int, ...], dim: int = 8, requires_grad: bool = False,
         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.randn(n, dim, dtype=dtype) for n in lengths],
                                      layout=torch.jagged, requires_grad=requires_grad)


def _same(actual: Any, expected: Any, inputs: tuple = ()) -> None:
    """Equal outputs; an NJT output has eager's offsets object (the input's when eager's is),
    lengths, batch size and values."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e, inputs)
    elif isinstance(expected, NestedTensor):
        assert actual.shape[0] == expected.shape[0] and actual.dim() == expected.dim()
        torch.testing.assert_close(actual.values(), expected.values())
        torch.testing.assert_close(actual.offsets(), expected.offsets())
        for n in inputs:
            if isinstance(n, NestedTensor):
                assert (actual._offsets is n._offsets) == (expected._offsets is n._offsets)
        assert (actual.lengths() is None) == (expected.lengths() is None)
        if expected.lengths() is not None:
            torch.testing.assert_close(actual.lengths(), expected.lengths())
        for a, e in zip(actual.unbind(), expected.unbind(), strict=True):
            torch.testing.assert_close(a, e)
    else:
        torch.testing.assert_close(actual, expected)


def _over_structures(program: Callable[..., Any], make: Callable[[tuple[int, ...]], tuple],
                     **options: Any) -> jitcore.JittedFunction:
    """``program`` jitted, called on arguments of each of the six structures, compared with eager;
    no call runs eagerly and at most two are traced."""
    jitted = jitcore.jit(program, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # no call runs eagerly
        for lengths in _STRUCTURES:
            args = make(lengths)
            _same(jitted(*args), program(*args), args)
    assert jitcore.cache_misses(jitted) <= 2, jitcore.miss_reasons(jitted)
    assert jitcore.cache_hits(jitted) == len(_STRUCTURES) - jitcore.cache_misses(jitted)
    assert all(entry.eager_reason is None for entry in jitted.entries)
    return jitted


_linear = torch.nn.Linear(8, 4).requires_grad_(False)


@pytest.mark.parametrize("program", [
    lambda n: n.sin() * 2 + n,
    lambda n: _linear(n),
    lambda n: F.relu(_linear(n)).softmax(-1) * 2,
    lambda n: n.softmax(dim=1),  # over the ragged dimension
    lambda n: n.sum(dim=-1),
    lambda n: n.amax(dim=-1),
    lambda n: n.mean(dim=-1, keepdim=True),
    lambda n: n.sum(dim=1),  # over the ragged dimension: a dense result
    lambda n: torch.nested.to_padded_tensor(n, 0.0),
    lambda n: n.to_padded_tensor(-1.0).relu().sum(dim=1),
], ids=["pointwise", "linear", "linear-relu-softmax", "softmax-ragged", "sum-last", "amax-last",
        "mean-keepdim", "sum-ragged", "to_padded_tensor", "padded-then-dense"])
def test_an_njt_input_of_changing_lengths(program: Callable[..., Any]) -> None:
    _over_structures(program, lambda lengths: (_njt(lengths),))


def test_the_symbolic_entry_reads_the_calls_sizes() -> None:
    """The last five structures are answered by one entry whose sizes are symbols."""
    jitted = _over_structures(lambda n: n.cos() * 3, lambda lengths: (_njt(lengths),))
    assert jitcore.cache_misses(jitted) == 2
    trace = str(jitcore.last_traces(jitted)[-1])
    assert "x__values" not in trace or "f32[s0, 8]" in trace
    assert "[s0, 8]" in trace, trace


def test_with_dynamic_true_one_entry() -> None:
    jitted = _over_structures(lambda n: (n * 2).softmax(dim=-1), lambda lengths: (_njt(lengths),),
                              dynamic=True)
    assert jitcore.cache_misses(jitted) == 1


def test_an_njt_made_inside_from_values_and_offsets() -> None:
    def f(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return torch.nested.nested_tensor_from_jagged(values, offsets).sin() * 3

    def make(lengths: tuple[int, ...]) -> tuple:
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        return torch.randn(sum(lengths), 8), offsets

    jitted = _over_structures(f, make)
    values, offsets = make((2, 5, 1, 1))
    assert jitted(values, offsets)._offsets is offsets


def test_an_njt_with_lengths() -> None:
    """A non-contiguous NJT (offsets and lengths): the output keeps the call's lengths."""
    def make(lengths: tuple[int, ...]) -> tuple:
        offsets = torch.tensor([0, *torch.tensor([n + 1 for n in lengths]).cumsum(0).tolist()])
        values = torch.randn(int(offsets[-1]), 8)
        return (torch.nested.nested_tensor_from_jagged(values, offsets, lengths=torch.tensor(lengths)),)

    _over_structures(lambda n: n.cos() + 1, make)


def test_forward_and_backward() -> None:
    """A linear layer over an NJT that requires grad: the parameters' gradients and the NJT's are
    eager's on every call (the entry runs its torch-level calls under torch's autograd)."""
    linear = torch.nn.Linear(8, 8)
    eager = copy.deepcopy(linear)
    jitted = jitcore.jit(lambda n: F.relu(linear(n)).softmax(-1) * 2)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for lengths in _STRUCTURES:
            components = [torch.randn(k, 8) for k in lengths]
            n1 = torch.nested.nested_tensor(components, layout=torch.jagged, requires_grad=True)
            n2 = torch.nested.nested_tensor(components, layout=torch.jagged, requires_grad=True)
            out, expected = jitted(n1), F.relu(eager(n2)).softmax(-1) * 2
            _same(out, expected)
            assert out._offsets is n1._offsets and expected._offsets is n2._offsets
            (out.values() ** 2).sum().backward()
            (expected.values() ** 2).sum().backward()
            for p, q in zip(linear.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad)
            torch.testing.assert_close(n1.grad.values(), n2.grad.values())
    assert jitcore.cache_misses(jitted) <= 2
    assert all(entry.eager_reason is None for entry in jitted.entries)


def test_parameters_gradients_with_an_njt_that_needs_none() -> None:
    linear = torch.nn.Linear(8, 4)
    eager = copy.deepcopy(linear)
    jitted = jitcore.jit(lambda n: linear(n).to_padded_tensor(0.0).sum(dim=1))
    for lengths in _STRUCTURES:
        n = _njt(lengths)
        out, expected = jitted(n), eager(n).to_padded_tensor(0.0).sum(dim=1)
        torch.testing.assert_close(out, expected)
        out.square().sum().backward()
        expected.square().sum().backward()
        for p, q in zip(linear.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert jitcore.cache_misses(jitted) <= 2


def test_another_batch_size_or_dtype_traces_again() -> None:
    f = lambda n: n.softmax(dim=-1) * 2  # noqa: E731
    jitted = _over_structures(f, lambda lengths: (_njt(lengths),))
    misses = jitcore.cache_misses(jitted)
    for n in (_njt((3, 1, 2)), _njt((3, 1, 2, 2, 5)), _njt((2, 2, 1, 4), dtype=torch.float64)):
        _same(jitted(n), f(n), (n,))
    assert jitcore.cache_misses(jitted) == misses + 3


def test_a_branch_on_the_longest_length_is_guarded() -> None:
    """``_get_max_seqlen()`` compared in Python: the entry holds for the lengths it was traced with."""
    f = lambda n: n * 2 if n._get_max_seqlen() > 3 else n * 3  # noqa: E731
    jitted = jitcore.jit(f)
    for lengths in ((5, 1, 2, 2), (4, 4, 1, 3), (2, 2, 1, 3), (5, 5, 5, 5), (1, 1, 1, 1)):
        n = _njt(lengths)
        _same(jitted(n), f(n), (n,))
    # the first structure, then one symbolic entry per side of the branch (5 before)
    assert jitcore.cache_misses(jitted) == 3, jitcore.miss_reasons(jitted)


def test_the_longest_length_as_a_size_follows_the_call() -> None:
    f = lambda n: n.to_padded_tensor(0.0, output_size=(4, n._get_max_seqlen() + 1, 8))  # noqa: E731
    _over_structures(f, lambda lengths: (_njt(lengths),))


def test_values_with_other_strides_are_not_served() -> None:
    """A trace that relied on the values' strides (``view``) does not answer a call whose values are a
    transposed view: eager raises there, and so does jitcore."""
    def make(lengths: tuple[int, ...], transposed: bool = False) -> torch.Tensor:
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        values = torch.randn(8, sum(lengths)).t() if transposed else torch.randn(sum(lengths), 8)
        return torch.nested.nested_tensor_from_jagged(values, offsets)

    f = lambda n: n.values().view(-1) * 2  # noqa: E731
    jitted = jitcore.jit(f)
    for lengths in _STRUCTURES[:3]:
        n = make(lengths)
        torch.testing.assert_close(jitted(n), f(n))
    n = make((2, 2, 3, 1), transposed=True)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(n)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        jitted(n)
    f2 = lambda n: n.sin() + 1  # noqa: E731  (no reliance on strides: served)
    jitted2 = jitcore.jit(f2)
    for lengths in _STRUCTURES[:3]:
        n = make(lengths, transposed=lengths == _STRUCTURES[2])
        _same(jitted2(n), f2(n), (n,))


@pytest.mark.parametrize("program", [
    lambda n: [t.sum(0) for t in n.unbind()],
    lambda n: n[1] * 2,
], ids=["unbind", "select"])
def test_code_reading_the_offsets_values_gets_each_calls(program: Callable[..., Any]) -> None:
    """Offsets' values read while tracing are checked per call: structures with the same sizes and
    other lengths never get another structure's answer."""
    jitted = jitcore.jit(program)
    for lengths in (*_STRUCTURES, (5, 4, 1, 5), (1, 5, 4, 5)):
        n = _njt(lengths)
        _same(jitted(n), program(n), (n,))


def test_sdpa_over_changing_lengths() -> None:
    def attention(q: torch.Tensor) -> torch.Tensor:
        q = q.transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q).transpose(1, 2) * 2

    jitted = jitcore.jit(attention)
    for lengths in _STRUCTURES:
        q = torch.nested.nested_tensor([torch.randn(k, 2, 4) for k in lengths], layout=torch.jagged)
        _same(jitted(q), attention(q), (q,))


def test_empty_and_single_sequences() -> None:
    """Lengths 0 and 1 (shortest 0 or 1) are sizes like any other: no entry per such value."""
    jitted = jitcore.jit(lambda n: n.softmax(dim=-1) + 1)
    for lengths in ((3, 0, 2, 2), (1, 4, 2, 2), (0, 1, 5, 2), (3, 3, 1, 2), (2, 0, 0, 4)):
        n = _njt(lengths)
        _same(jitted(n), n.softmax(dim=-1) + 1, (n,))
    assert jitcore.cache_misses(jitted) <= 2


# Note [Reads of spliced subclass code in a symbolic pass] (jitcore/jit/value_reads.py): NJT attention
# on CPU splits each of q/k/v by its lengths, read from the offsets; once those change between calls
# they are unbacked symbols, so a multi-head attention over changing lengths is one entry, its split
# checked against the values' size on every call. Before, each list of lengths was its own entry.
_MORE_STRUCTURES = (*_STRUCTURES, (1, 1, 6, 2), (6, 1, 1, 1))


def _offsets(lengths: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])


class _Heads(torch.nn.Module):
    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = (torch.nn.Linear(dim, dim) for _ in range(4))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (p(x).unflatten(-1, [self.heads, -1]).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).values().flatten(-2))


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_multi_head_attention_over_changing_lengths_is_one_entry() -> None:
    torch.manual_seed(0)
    model = _Heads()
    jitted = jitcore.jit(model)
    with torch.no_grad():
        for lengths in _MORE_STRUCTURES:
            x = torch.nested.nested_tensor_from_jagged(torch.randn(sum(lengths), 8), _offsets(lengths))
            _same(jitted(x), model(x), (x,))
    assert jitcore.cache_misses(jitted) <= 4, jitcore.miss_reasons(jitted)  # 8 before


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
def test_multi_head_attention_trains_over_changing_lengths() -> None:
    torch.manual_seed(0)
    eager, traced = _Heads(), _Heads()
    traced.load_state_dict(eager.state_dict())

    def loss_of(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = torch.nested.nested_tensor_from_jagged(values, offsets)  # made inside: its values' gradient
        return model(x).square().mean()

    jitted = jitcore.jit(loss_of)
    for lengths in _MORE_STRUCTURES:
        values = torch.randn(sum(lengths), 8)
        offsets = _offsets(lengths)
        ours, theirs = values.clone().requires_grad_(), values.clone().requires_grad_()
        loss = jitted(traced, ours, offsets)
        expected = loss_of(eager, theirs, offsets)
        torch.testing.assert_close(loss, expected)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(ours.grad, theirs.grad)
        for a, b in zip(traced.parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None
    assert jitcore.cache_misses(jitted) <= 4, jitcore.miss_reasons(jitted)  # 8 before


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
@pytest.mark.parametrize(("grad", "most"), [(False, 2), (True, 2)], ids=["no_grad", "grad"])
def test_multi_head_attention_learns_its_lengths_in_the_miss_that_sees_them_change(grad: bool,
                                                                                   most: int) -> None:
    """Note [A symbolic pass that learnt its counts] (jitcore/jit/api.py): the symbolic pass that pins
    other lengths than the pass before runs again at once with them symbols (4 and 3 misses before).
    Without grad the first static pass reads the split's lengths as counts too (Note [The counts of a
    split in a subclass's code], jitcore/jit/value_reads.py: 3 misses before)."""
    torch.manual_seed(0)
    model = _Heads()
    jitted = jitcore.jit(model)
    with torch.set_grad_enabled(grad):
        for lengths in _MORE_STRUCTURES:
            x = torch.nested.nested_tensor_from_jagged(torch.randn(sum(lengths), 8), _offsets(lengths))
            _same(jitted(x), model(x), (x,))
    assert jitcore.cache_misses(jitted) == most, jitcore.miss_reasons(jitted)


@pytest.mark.filterwarnings("error:jitcore")  # no call runs eagerly
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_attention_over_njts_built_from_lists_is_one_entry(grad: bool) -> None:
    """An NJT built from a list caches its extreme lengths, which SDPA's output keeps (Note [The
    output's cached lengths], jitcore/dispatch/jagged_attention.py): before, every structure was an
    entry of its own."""
    torch.manual_seed(0)
    model = _Heads()
    jitted = jitcore.jit(model)
    with torch.set_grad_enabled(grad):
        for lengths in _MORE_STRUCTURES:
            components = [torch.randn(n, 8) for n in lengths]
            x = torch.nested.nested_tensor(components, layout=torch.jagged)
            assert x._maybe_max_seqlen is not None
            _same(jitted(x), model(x), (x,))
    assert jitcore.cache_misses(jitted) <= 4, jitcore.miss_reasons(jitted)  # 8 before
