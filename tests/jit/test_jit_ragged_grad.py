"""Nested jagged tensors (NJTs) under autograd over changing ragged structures: ops that are given
the ragged size (``flatten(-2)`` of an NJT records ``reshape(t, (B, j0, D))``) with a backward
outside or inside the function, and what a warm call of a symbolic NJT entry runs under grad.

Differential: on every call the loss, the values' gradient and every parameter's gradient equal
eager's (Notes [Ragged sizes under autograd], jitcore/dispatch/flatten.py, and [Nested ints in the
replay], jitcore/transforms/grad.py). No call runs eagerly (a jitcore warning is an error).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import jitcore

_STRUCTURES = ((5, 5, 4, 1), (5, 2, 2, 5), (3, 3, 1, 3), (4, 4, 4, 1), (3, 3, 5, 1), (2, 4, 5, 5),
               (1, 1, 6, 2), (6, 1, 1, 1))


def _offsets(lengths: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])


@contextlib.contextmanager
def _njt_dispatches(counted: bool = True) -> Iterator[list[str]]:
    """The ops NestedTensor's ``__torch_dispatch__`` is given inside the block (none counted, and the
    class left as it is, where ``counted`` is False)."""
    from torch.nested._internal.nested_tensor import NestedTensor

    dispatched: list[str] = []
    original = NestedTensor.__dict__["__torch_dispatch__"]

    def counting(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        dispatched.append(str(func))
        return original.__func__(cls, func, types, args, kwargs)

    if counted:
        NestedTensor.__torch_dispatch__ = classmethod(counting)
    try:
        yield dispatched
    finally:
        NestedTensor.__torch_dispatch__ = original


def _heads_merged(x: torch.Tensor) -> torch.Tensor:
    """Split the last dimension into heads and merge them back: ``flatten(-2)`` passes the NJT's
    ragged size to ``reshape``."""
    return x.unflatten(-1, [2, -1]).transpose(1, 2).transpose(1, 2).flatten(-2)


def _from_offsets(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    x = torch.nested.nested_tensor_from_jagged(values, offsets)
    return _heads_merged(model(x)).values().square().mean()


def _from_lengths(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    made = F.pad(offsets.diff().cumsum(0), (1, 0))  # offsets computed inside: their own nested int
    x = torch.nested.nested_tensor_from_jagged(values, made)
    return _heads_merged(model(x).relu()).values().sum(-1).square().mean()


def _from_an_njt(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    return _heads_merged(model(_heads_merged(model(torch.nested.nested_tensor_from_jagged(
        values, offsets))))).values().mean()


_LOSSES = [_from_offsets, _from_lengths, _from_an_njt]
_IDS = ["offsets", "offsets-made-inside", "twice"]


def _models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager, traced = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    traced.load_state_dict(eager.state_dict())
    return eager, traced


def _compare(jitted: Callable[..., Any], program: Callable[..., Any], *, inside: bool) -> None:
    eager, traced = _models()
    for lengths in _STRUCTURES:
        values, offsets = torch.randn(sum(lengths), 8), _offsets(lengths)
        ours, theirs = values.clone().requires_grad_(), values.clone().requires_grad_()
        got, expected = jitted(traced, ours, offsets), program(eager, theirs, offsets)
        if not inside:
            got.backward()
            expected.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(ours.grad, theirs.grad)
        for a, b in zip(traced.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("loss_of", _LOSSES, ids=_IDS)
def test_a_ragged_size_passed_on_with_a_backward_outside(loss_of: Callable[..., Any]) -> None:
    """Before: "view(): cannot view shape (4, j2, 2, 4) as [4, s2, 8]" on the second structure."""
    jitted = jitcore.jit(loss_of)
    _compare(jitted, loss_of, inside=False)
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("loss_of", _LOSSES, ids=_IDS)
def test_a_ragged_size_passed_on_with_a_backward_inside(loss_of: Callable[..., Any]) -> None:
    """Before: 'vr must not be None for symbol s1' on the second structure."""
    def step(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        loss = loss_of(model, values, offsets)
        (grad,) = torch.autograd.grad(loss, values, retain_graph=True)
        loss.backward()
        return loss.detach() + grad.sum() * 0

    jitted = jitcore.jit(step)
    _compare(jitted, step, inside=True)
    # the second call misses on the parameters' gradients too; an entry per structure before
    # (Note [The gradient of a leaf with symbolic sizes], jitcore/jit/autograd_calls.py)
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("loss_of", _LOSSES, ids=_IDS)
def test_a_ragged_size_passed_on_without_grad(loss_of: Callable[..., Any]) -> None:
    eager, traced = _models()
    jitted = jitcore.jit(loss_of)
    with torch.no_grad():
        for lengths in _STRUCTURES:
            values, offsets = torch.randn(sum(lengths), 8), _offsets(lengths)
            torch.testing.assert_close(jitted(traced, values, offsets), loss_of(eager, values, offsets))
    assert jitcore.cache_misses(jitted) <= 3, jitcore.miss_reasons(jitted)


class _Heads(torch.nn.Module):
    """Multi-head attention over an NJT (SDPA on CPU splits by lengths read from the offsets)."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.out = (torch.nn.Linear(8, 8) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (p(x).unflatten(-1, [2, -1]).transpose(1, 2) for p in (self.q, self.k, self.v))
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).values().flatten(-2))


def _attention_loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).square().mean()


def _attention_step(model: torch.nn.Module, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    loss = _attention_loss(model, torch.nested.nested_tensor_from_jagged(values, offsets))
    loss.backward()
    return loss.detach()


# What torch's autograd Function reads of an NJT input that requires grad (its sizes, kept to make
# zeros for an undefined gradient): no op of the program. Note [Subclass inputs the autograd Function is
# given], jitcore/transforms/autograd.py; its layout is answered without dispatch (Note [The layouts of
# the applied subclass inputs]).
_INPUT_METADATA = ["aten.sym_size.default"]


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("variant", ["backward-outside", "backward-inside", "weights-only"])
def test_a_warm_call_under_grad_runs_no_njt_dispatch(variant: str) -> None:
    """Note [Symbolic sizes through the grad transform] (jitcore/transforms/symbolic_sizes.py): the
    symbolic entry's calls are differentiated by the grad transform, so a warm call runs no
    NestedTensor op (58 dispatches before: pass 1 ran under torch's autograd on every call). The
    backward inside takes the values and offsets (an NJT input that requires grad and is no leaf
    runs such a function eagerly). Only an NJT input that requires grad is given to the autograd
    Function, whose metadata it reads (Note [Subclass inputs the autograd Function is given]): with
    the backward inside or only the weights requiring grad, a warm call dispatches nothing to
    NestedTensor (before, the global NJT SDPA's backward views through and the input were read too)."""
    torch.manual_seed(0)
    eager, traced = _Heads(), _Heads()
    traced.load_state_dict(eager.state_dict())
    inside = variant == "backward-inside"
    program = _attention_step if inside else _attention_loss
    jitted = jitcore.jit(program)
    def arguments(values: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (values, offsets) if inside else (torch.nested.nested_tensor_from_jagged(values, offsets),)

    for i, lengths in enumerate(_STRUCTURES):
        values, offsets = torch.randn(sum(lengths), 8), _offsets(lengths)
        ours, theirs = values.clone(), values.clone()
        if variant != "weights-only":
            ours.requires_grad_(), theirs.requires_grad_()
        args, hits = arguments(ours, offsets), jitcore.cache_hits(jitted)
        with _njt_dispatches() as dispatched:
            got = jitted(traced, *args)
        expected = program(eager, *arguments(theirs, offsets))
        if i >= 2:  # the second structure traced the symbolic entry
            assert jitcore.cache_hits(jitted) == hits + 1, jitcore.miss_reasons(jitted)
            read = _INPUT_METADATA if variant == "backward-outside" else []
            assert sorted(dispatched) == read, dispatched
        if not inside:
            got.backward()
            expected.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(ours.grad, theirs.grad)
        for a, b in zip(traced.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)


def _returned_relu(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).relu() * 2


def _returned_softmax(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(model(x), dim=-1)  # its backward guards the values' rows (s0 >= 2)


_GRADIENTS: dict[str, Callable[[torch.Tensor], None]] = {
    "values": lambda out: out.values().sum().backward(),
    "padded": lambda out: out.to_padded_tensor(0.0).square().sum().backward(),
    "ones": lambda out: torch.autograd.backward([out], [torch.ones_like(out)]),
    "unbind": lambda out: sum(t.square().sum() for t in out.unbind()).backward(),
}


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("gradient", list(_GRADIENTS))
@pytest.mark.parametrize("program", [_returned_relu, _returned_softmax], ids=["relu", "softmax"])
def test_a_warm_call_returning_an_njt_under_grad_runs_no_njt_op(
        program: Callable[..., Any], gradient: str) -> None:
    """Note [Tangent kinds with symbolic sizes] (jitcore/transforms/tangents.py): a symbolic entry that
    returns an NJT under grad is differentiated by the grad transform, so a warm call dispatches no
    NestedTensor op (before: 10 for relu, 8 for softmax, pass 1 under torch's autograd on every call),
    only autograd's reads of the NJT input's and output's metadata. The output's gradient, taken in
    four ways, gives the input's and the parameters' gradients eager gives; rows 1 and 0 fail the
    guard softmax's backward adds (checked at the end of the forward) and go to another entry."""
    torch.manual_seed(0)
    eager, traced = _models()
    jitted = jitcore.jit(program)
    for i, lengths in enumerate((*_STRUCTURES[:5], (1, 0, 0, 0), (0, 0, 0, 0), (2, 1, 1, 1))):
        values, offsets = torch.randn(sum(lengths), 8), _offsets(lengths)
        ours, theirs = values.clone().requires_grad_(), values.clone().requires_grad_()
        x, y = (torch.nested.nested_tensor_from_jagged(v, offsets) for v in (ours, theirs))
        hits = jitcore.cache_hits(jitted)
        # counted where the symbolic entry answers (installed earlier, the counter would be traced)
        with _njt_dispatches(2 <= i < 5) as dispatched:
            got = jitted(traced, x)
        expected = program(eager, y)
        if 2 <= i < 5:
            assert jitcore.cache_hits(jitted) == hits + 1, jitcore.miss_reasons(jitted)
            assert set(dispatched) <= {"aten.sym_size.default", "prim.layout.default"}, dispatched
        assert type(got) is type(expected)
        torch.testing.assert_close(got.values(), expected.values())
        torch.testing.assert_close(got.offsets(), expected.offsets())
        _GRADIENTS[gradient](got)
        _GRADIENTS[gradient](expected)
        torch.testing.assert_close(ours.grad, theirs.grad)
        for a, b in zip(traced.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad)
            a.grad = b.grad = None


class _NormedBlock(torch.nn.Module):
    """A LayerNorm over an NJT (NestedTensor's ``layer_norm`` compares the ragged size with the
    normalized shape: Note [A guard every nested int passes], jitcore/jit/shapes.py), then attention."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.out = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.norm, self.heads = torch.nn.LayerNorm(8), _Heads()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.inp(x)).relu()
        return self.out(x) + self.heads(x).mean()


def _training_step(model: torch.nn.Module, opt: torch.optim.Optimizer, values: torch.Tensor,
                   offsets: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = F.mse_loss(model(torch.nested.nested_tensor_from_jagged(values, offsets)).values(), target)
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.filterwarnings("error:jitcore")
@pytest.mark.parametrize("optimizer", ["AdamW", "SGD"])
def test_an_njt_training_step_with_a_layer_norm_is_one_symbolic_entry(optimizer: str) -> None:
    """Before: 'EphemeralSource' object has no attribute 'base' while the symbolic pass's guards were
    printed (``Ne(s3, 8)`` over an intermediate nested int), so each ragged structure traced a static
    entry of its own (6 misses in 6 steps, each running NestedTensor's dispatch 260 to 510 times). Now
    the second step, which misses on the optimizer's state with another ragged structure, traces it
    symbolic (Note [A miss for another reason with other sizes]), so the third step on is a cache hit that
    dispatches no NestedTensor op; every step's loss and parameters equal eager's."""
    torch.manual_seed(0)
    eager = _NormedBlock()
    traced = _NormedBlock()
    traced.load_state_dict(eager.state_dict())
    make = {"AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2),
            "SGD": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)}[optimizer]
    eager_opt, traced_opt = make(eager.parameters()), make(traced.parameters())
    jitted = jitcore.jit(_training_step)
    for i, lengths in enumerate(_STRUCTURES[:6]):
        values, target = torch.randn(sum(lengths), 8), torch.randn(sum(lengths), 8)
        offsets = _offsets(lengths)
        with _njt_dispatches(i >= 2) as dispatched:
            got = jitted(traced, traced_opt, values, offsets, target)
        torch.testing.assert_close(got, _training_step(eager, eager_opt, values, offsets, target))
        for a, b in zip(traced.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a, b)
        if i >= 2:
            assert dispatched == [], dispatched
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)


@pytest.mark.filterwarnings("error:jitcore")
def test_a_layer_norm_over_an_njt_without_grad_is_one_symbolic_entry() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    jitted = jitcore.jit(model)
    with torch.no_grad():
        for lengths in _STRUCTURES:
            x = torch.nested.nested_tensor_from_jagged(torch.randn(sum(lengths), 8), _offsets(lengths))
            torch.testing.assert_close(jitted(x).values(), model(x).values())
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)



@pytest.mark.parametrize("returns_njt", [False, True])
def test_a_softmax_over_the_ragged_dim_of_an_input_requiring_grad(returns_njt: bool) -> None:
    """``torch.softmax(x, dim=1)`` over an NJT input's ragged dim caches ``_max_seqlen_tensor`` on the
    input, so the grad transform's replay met a record using a value it never produced and jitcore's
    own AssertionError reached the caller ('x is used before it is produced'), where eager computes
    (Note [A replay that loses an input's structure], transforms/jit_hook.py)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.softmax(x, dim=1) * 2
        return out if returns_njt else out.values()

    jitted = jitcore.jit(f)
    for lengths in _STRUCTURES[:4]:
        results = []
        for fn in (f, jitted):
            values = torch.randn(sum(lengths), 8, generator=torch.Generator().manual_seed(sum(lengths)))
            values.requires_grad_()
            out = fn(torch.nested.nested_tensor_from_jagged(values, _offsets(lengths)))
            out = out.values() if returns_njt else out
            out.square().sum().backward()
            results.append((out.detach(), values.grad))
        torch.testing.assert_close(results[1], results[0])
