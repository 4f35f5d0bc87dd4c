"""Round trips of views in backward traces (Note [View round trips in a backward],
jitcore/transforms/view_round_trips.py): ``t(t(a))`` read as ``a`` and ``detach(detach(a))`` as
``detach(a)`` where a later op reads them, unread ones dropped, the output untouched; unread views
dropped from forward traces (Note [Unread views in a forward]). Each program
runs eagerly and jitted; outputs, gradients (values, strides, view-ness as a hook sees them) are
compared, and the backward trace is read for the round trips it still runs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import jitcore

_T = "torch.ops.aten.t.default"
_DETACH = "torch.ops.aten.detach.default"


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 8))


def _mlp_loss(m, x, y):
    return F.mse_loss(m(x), y)


def _user_round_trips(m, x, y):
    w = m[0].weight
    out = (x @ w.t().t().t()).relu().detach().detach() * m(x)[:, :1]
    return out.sum() + m[2].bias.t().t().sum()


class _ScaleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad.clone().t().t().mul_(2)


def _in_place_backward(m, x, y):
    return _ScaleInPlace.apply(m(x)).sum()


def _unread_views(m, x, y):
    """Activations that save their result (their forward detaches it), and views nothing reads."""
    x.t()
    h = torch.sigmoid(m[0](x))
    h.detach().t()
    out = m[4](m[3](m[2](h)).relu())
    out.t()
    return F.mse_loss(out, y) + h.t().t().sum()


def _writes_through_round_trip(m, x, y):
    """An in-place data write through a round trip (it writes the base too), the round trip read
    after it and returned as a saved value."""
    h = m(x) * 1
    u = h.t().t()
    u.mul_(2)
    return (u * h).sum() + (x @ m[0].weight.t().t().t()).sum() + u.t().t().sum()


def _reshapes_a_round_trip_in_place(m, x, y):
    """``t_`` changes the round trip's metadata only: reading ``h`` for ``u`` after it would be wrong."""
    h = m(x) * 1
    u = h.t().t()
    u.t_()
    return (u @ h).sum() + (x @ m[0].weight.t().t().t()).sum()


def _step(m, x, y):
    """A training step jitted whole: its forward holds the backward and the SGD update (``add_``)."""
    out = F.mse_loss(m(x), y)
    out.backward()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(p.grad, alpha=-0.1)
            p.grad = None
    return out.detach()


def _round_trips_left(trace) -> list[str]:
    """Round trips the backward still runs where an op (not the output) reads them, and round-trip
    ops whose results nothing reads."""
    made = {id(b.output): b for b in trace.bound_symbols}
    read = {id(p) for b in trace.bound_symbols for p in jitcore.ir.proxies_in((b.args, b.kwargs))}
    read |= {id(p) for p in jitcore.ir.proxies_in(trace.output)}
    left = []
    for b in trace.bound_symbols:
        if b.symbol.id in (_T, _DETACH):
            inner = made.get(id(b.args[0]))
            if inner is not None and inner.symbol.id == b.symbol.id and b.symbol.id == _DETACH:
                left.append(f"detach of detach: {b.output.name}")
            if id(b.output) not in read:
                left.append(f"unread: {b.output.name}")
        for a in jitcore.ir.proxies_in((b.args, b.kwargs)):
            inner = made.get(id(a))
            if inner is not None and inner.symbol.id == _T and id(inner.args[0]) in made:
                if made[id(inner.args[0])].symbol.id == _T:
                    left.append(f"t of t read by {b.symbol.name}: {a.name}")
    return left


@pytest.mark.parametrize("program", [_mlp_loss, _user_round_trips, _in_place_backward, _unread_views,
                                     _writes_through_round_trip, _reshapes_a_round_trip_in_place])
def test_gradients_match_eager(program):
    eager_model = _mlp()
    jit_model = copy.deepcopy(eager_model)
    seen: dict[str, list] = {"eager": [], "jit": []}
    for key, model in (("eager", eager_model), ("jit", jit_model)):
        for p in model.parameters():
            p.register_hook(lambda g, key=key: seen[key].append((g._is_view(), g.stride())))
    jitted = jitcore.jit(program)
    for step in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
        y = torch.zeros(4, 8)
        expected, got = program(eager_model, x, y), jitted(jit_model, x, y)
        torch.testing.assert_close(got, expected)
        expected.backward()
        got.backward()
        for pe, pj in zip(eager_model.parameters(), jit_model.parameters()):
            torch.testing.assert_close(pj.grad, pe.grad)
            assert pj.grad.stride() == pe.grad.stride()
    assert sorted(seen["jit"]) == sorted(seen["eager"])
    assert jitcore.cache_misses(jitted) == 1


def test_mlp_backward_runs_no_round_trip():
    """The MLP's backward read ``t(t(w))`` for each Linear's input gradient and detached the
    activation twice (relu, tanh), and its forward saved values through dropped round trips: 4
    round trips read by ops before, none now; the gradients it hands autograd stay the round trips
    eager's hooks see."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted = jitcore.jit(_mlp_loss)
    jitted(model, x, y).backward()
    backward = jitcore.last_backward_traces(jitted)[-1]
    assert _round_trips_left(backward) == []


def test_an_in_place_backward_is_left_as_it_is():
    """A backward whose in-place op writes a round trip keeps it (the op returns its first argument:
    Note [In-place ops and round trips])."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted = jitcore.jit(_in_place_backward)
    jitted(model, x, y).backward()
    backward = jitcore.last_backward_traces(jitted)[-1]
    assert any(b.symbol.id == _T for b in backward.bound_symbols)
    assert any("inplace" in b.symbol.tags for b in backward.bound_symbols)


@pytest.mark.parametrize("program", [_mlp_loss, _unread_views])
def test_forward_runs_no_unread_view(program):
    """The forward detached each activation that saves its result (relu, tanh, sigmoid) for a
    backward that recomputes the detach itself, and ran the program's unread views: none of them
    runs now (2 unread detaches in the MLP's forward before)."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted = jitcore.jit(program)
    jitted(model, x, y).backward()
    forward = jitcore.last_traces(jitted)[-1]
    assert forward.name == "forward"
    read = {id(p) for b in forward.bound_symbols for p in jitcore.ir.proxies_in((b.args, b.kwargs))}
    read |= {id(p) for p in jitcore.ir.proxies_in(forward.output)}
    views = [b for b in forward.bound_symbols if b.symbol.id in (_T, _DETACH)]
    unread = [b.output.name for b in views if id(b.output) not in read]
    assert unread == []


def test_a_jitted_step_runs_no_round_trip():
    """The step's forward read ``t(t(w))`` for the second Linear's input gradient and detached the
    relu twice; its SGD ``add_`` (an in-place data write) kept the whole trace from being collapsed
    before. Parameters and losses equal eager's over 3 steps."""
    eager_model = _mlp()
    jit_model = copy.deepcopy(eager_model)
    jitted = jitcore.jit(_step)
    for step in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step))
        y = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 + step))
        torch.testing.assert_close(jitted(jit_model, x, y), _step(eager_model, x, y))
        for pe, pj in zip(eager_model.parameters(), jit_model.parameters()):
            torch.testing.assert_close(pj, pe)
            assert pj.grad is None and pe.grad is None
    forward = jitcore.last_traces(jitted)[-1]
    assert forward.name == "forward" and any("inplace" in b.symbol.tags for b in forward.bound_symbols)
    assert _round_trips_left(forward) == []
    assert jitcore.cache_misses(jitted) == 1


def test_a_round_trip_whose_metadata_changes_in_place_is_left_as_it_is():
    """``t_`` on a round trip: the forward keeps every round trip (also ``w.t().t()`` elsewhere)."""
    model, x, y = _mlp(), torch.randn(4, 8), torch.randn(4, 8)
    jitted = jitcore.jit(_reshapes_a_round_trip_in_place)
    jitted(model, x, y).backward()
    forward = jitcore.last_traces(jitted)[-1]
    left = _round_trips_left(forward)
    assert any(b.symbol.id == "torch.ops.aten.t_.default" for b in forward.bound_symbols)
    # ``x @ w.t().t().t()``'s last t and its mm run as one linear of the round trip (executors/composites.py)
    assert [entry for entry in left if entry.startswith(("t of t read by mm", "t of t read by linear"))], left
