"""Ragged sizes of nested jagged tensors (NJTs) made inside the function from plain tensors whose
lengths change: one symbolic entry across the lengths, as torch.compile keeps one.

``torch.nested.as_nested_tensor([a, b], layout=torch.jagged)`` (and ``nested_tensor``) computes the
offsets with ``torch.tensor`` of the components' lengths and caches the shortest and longest length:
before, those lengths were baked into the trace and every length was an entry of its own (Note [A tensor
made from named numbers], jitcore/langctx/number_tensors.py). Differential: each call is compared with
eager (output type, offsets, values, dtypes, gradients), and the number of traces is counted.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.nested._internal.nested_tensor import NestedTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402

# the second component's lengths; the first has 2 rows, so the shortest stays 2 and the longest changes
_LENGTHS = (3, 4, 6, 5, 9, 7)


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected, strict=True):
            _same(a, e)
        return
    assert actual.dtype == expected.dtype and actual.requires_grad == expected.requires_grad
    if isinstance(expected, NestedTensor):
        torch.testing.assert_close(actual.offsets(), expected.offsets())
        torch.testing.assert_close(actual.values(), expected.values())
        assert actual._maybe_max_seqlen == expected._maybe_max_seqlen
        assert actual._maybe_min_seqlen == expected._maybe_min_seqlen
        for a, e in zip(actual.unbind(), expected.unbind(), strict=True):
            torch.testing.assert_close(a, e)
    else:
        torch.testing.assert_close(actual, expected)


def _over_lengths(program: Callable[..., Any], make: Callable[[int], tuple], **options: Any
                  ) -> jitcore.JittedFunction:
    """``program`` jitted and called on arguments of each length, compared with eager; no call runs
    eagerly."""
    jitted = jitcore.jit(program, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")
        for n in _LENGTHS:
            args = make(n)
            _same(jitted(*args), program(*args))
    assert all(entry.eager_reason is None for entry in jitted.entries)
    return jitted


def _components(n: int) -> tuple:
    return torch.randn(2, 4), torch.randn(n, 4)


_PROGRAMS = {
    "as_nested_tensor": lambda a, b: torch.nested.as_nested_tensor([a, b], layout=torch.jagged).sin(),
    "nested_tensor": lambda a, b: torch.nested.nested_tensor([a, b], layout=torch.jagged).softmax(-1),
    "padded": lambda a, b: torch.nested.as_nested_tensor([a, b], layout=torch.jagged).cos()
    .to_padded_tensor(0.0),
    "values": lambda a, b: torch.nested.as_nested_tensor((a, b), layout=torch.jagged).exp().values(),
}


@pytest.mark.parametrize("program", list(_PROGRAMS.values()), ids=list(_PROGRAMS))
def test_an_njt_built_from_a_list_is_one_symbolic_entry(program: Callable[..., Any]) -> None:
    """The first length, then one symbolic entry for all others (6 entries before)."""
    jitted = _over_lengths(program, _components)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)
    args = _components(8)
    expected = program(*args)
    with protocol_calls(NestedTensor) as seen:
        out = jitted(*args)
    _same(out, expected)
    assert seen == []  # a call from the cache runs no NestedTensor op
    assert jitcore.cache_misses(jitted) == 2


def test_a_length_marked_dynamic_is_one_entry() -> None:
    def make(n: int) -> tuple:
        a, b = _components(n)
        jitcore.mark_dynamic(b, 0)
        return a, b

    jitted = _over_lengths(_PROGRAMS["as_nested_tensor"], make)
    assert jitcore.cache_misses(jitted) == 1, jitcore.miss_reasons(jitted)


def test_the_trace_computes_the_offsets_from_the_calls_lengths() -> None:
    jitted = _over_lengths(_PROGRAMS["padded"], _components)
    trace = str(jitcore.last_traces(jitted)[-1])
    assert "torch.tensor([2, s0]" in trace and "builtins.max(2, s0)" in trace, trace  # the longest, per call


def test_forward_and_backward_over_changing_lengths() -> None:
    """Components and a weight requiring grad: the output NJT and every gradient are eager's."""
    def f(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        njt = torch.nested.as_nested_tensor([a, b], layout=torch.jagged)
        return torch.nn.functional.linear(njt, w).relu()

    jitted = jitcore.jit(f)
    torch.manual_seed(0)
    for n in _LENGTHS:
        args = (torch.randn(2, 4, requires_grad=True), torch.randn(n, 4, requires_grad=True),
                torch.randn(5, 4, requires_grad=True))
        twins = tuple(a.detach().clone().requires_grad_() for a in args)
        out, expected = jitted(*args), f(*twins)
        _same(out, expected)
        out.values().square().sum().backward()
        expected.values().square().sum().backward()
        for a, e in zip(args, twins, strict=True):
            torch.testing.assert_close(a.grad, e.grad)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)


def test_a_length_below_the_other_is_guarded() -> None:
    """The shortest length is cached by the NJT: a call where the other component becomes the
    shortest is served by another entry, with eager's cached lengths."""
    jitted = jitcore.jit(_PROGRAMS["as_nested_tensor"])
    for n in (5, 6, 3, 7, 2, 8):
        args = (torch.randn(4, 4), torch.randn(n, 4))
        _same(jitted(*args), _PROGRAMS["as_nested_tensor"](*args))
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_tensor_of_sizes_is_computed_per_call(dynamic: bool | None) -> None:
    """``torch.tensor`` of symbolic sizes, without NJTs: one symbolic entry (before: one per size)."""
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tensor([a.shape[0], b.shape[0]], device=a.device).cumsum(0) * 2

    jitted = _over_lengths(f, _components, dynamic=dynamic)
    assert jitcore.cache_misses(jitted) == (1 if dynamic else 2), jitcore.miss_reasons(jitted)


def test_a_tensor_of_dynamic_numbers_is_one_entry() -> None:
    """``torch.tensor`` of a dynamic number keeps it a name: one entry, eager's values and dtypes,
    a one-element tensor's ``item()`` reads each call's value."""
    def f(x: torch.Tensor, k: int) -> tuple:
        t = torch.tensor([k])
        return (x * t.item(), t + 1, torch.tensor([k, 2]).cumsum(0) * x.sum(),
                torch.tensor((k, 2.5)), torch.tensor([k, 1], dtype=torch.float64))

    jitted = jitcore.jit(f, dynamic_numbers=("k",))
    for k in range(3, 9):
        x = torch.randn(3)
        _same(jitted(x, k), f(x, k))
    assert jitcore.cache_misses(jitted) == 1, jitcore.miss_reasons(jitted)


def test_a_number_of_another_type_is_another_entry() -> None:
    """The numbers' types decide the dtype: an int then a float is two entries, each eager's dtype."""
    def f(x: torch.Tensor, k: int | float) -> torch.Tensor:
        return torch.tensor([k, 2]) * x

    jitted = jitcore.jit(f, dynamic_numbers=("k",))
    for k in (3, 4, 2.5, 7, 1.5):
        x = torch.ones(2, dtype=torch.int64)
        _same(jitted(x, k), f(x, k))
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)


# both components' lengths change, the shorter one first or second (equal lengths and a length of 1
# are other entries, as in torch.compile: ``as_nested_tensor`` branches on them)
_PAIRS = ((3, 5), (2, 7), (5, 3), (8, 9), (6, 4), (9, 2))


def test_lengths_in_either_order_share_one_entry() -> None:
    """``min``/``max`` of the lengths (the NJT's cached shortest and longest) are sizes computed per call,
    not guarded orders (Note [The least of symbolic sizes], jitcore/langctx/python.py), and an NJT
    whose feature size is a symbol too keeps it (Note [Subclass values' sizes], jitcore/jit/shapes.py):
    one entry with ``dynamic=True`` (before: static shapes, an entry per structure)."""
    program = _PROGRAMS["as_nested_tensor"]
    jitted = jitcore.jit(lambda a, b, w: (program(a, b) * w).relu(), dynamic=True)
    for i, (m, n) in enumerate(_PAIRS):
        args = (torch.randn(m, 4), torch.randn(n, 4), torch.randn(4))
        with protocol_calls(NestedTensor) as seen:
            out = jitted(*args)
        _same(out, (program(*args[:2]) * args[2]).relu())
        assert seen == [] or i == 0  # a call from the cache runs no NestedTensor op
    assert jitcore.cache_misses(jitted) == 1, jitcore.miss_reasons(jitted)


def test_lengths_in_either_order_under_grad_run_no_njt_op() -> None:
    """Under grad, the symbolic entry goes through the grad transform: ``torch.tensor`` of the lengths
    runs in the forward as recorded (Note [A tensor of named numbers, replayed],
    jitcore/transforms/grad.py) and ``Min``/``Max`` of sizes are computed there. Before, the entry ran
    pass 1 under torch's autograd: every cached call ran NestedTensor's ``mul`` and ``relu``."""
    def f(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (torch.nested.as_nested_tensor([a, b], layout=torch.jagged) * w).relu()

    jitted = jitcore.jit(f)
    torch.manual_seed(0)
    for i, (m, n) in enumerate(_PAIRS):
        args = (torch.randn(m, 4, requires_grad=True), torch.randn(n, 4, requires_grad=True),
                torch.randn(4, requires_grad=True))
        twins = tuple(a.detach().clone().requires_grad_() for a in args)
        with protocol_calls(NestedTensor) as seen:
            out = jitted(*args)
        expected = f(*twins)
        _same(out, expected)
        if i >= 2:  # the second call traced the symbolic entry
            assert not [op for op in seen if "aten.mul" in op or "aten.relu" in op], seen
        out.values().square().sum().backward()
        expected.values().square().sum().backward()
        for a, e in zip(args, twins, strict=True):
            torch.testing.assert_close(a.grad, e.grad)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)
