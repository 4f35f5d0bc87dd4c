"""The default policy's measurement (jitcore/executors/trial.py, plan.py Note [Lowering only what is
faster]): a hot entry's lowered computation is timed against its torch one on the entry's own runs
and the faster is kept. Timings are injected (a fake clock), never measured, so no test is timed."""

from __future__ import annotations

import pytest
import torch
from executor_helpers import INDUCTOR, check, executor_log, lowered_trace

import jitcore
from jitcore.executors import BACKGROUND_ENV
from jitcore.executors.plan import DEFAULT_FUSE_AFTER, executors_from_options
from jitcore.executors.trial import DEFAULT_TRIAL_RUNS, Trial, is_close, keeps_lowered, untimed
from jitcore.ir import BoundSymbol
from jitcore.jit.inspection import as_jitted


class FakeClock:
    """A clock that moves only when told to: a candidate's cost is what its code adds."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class SlowTanh:
    """An operator executor running ``torch.tanh`` as torch does, adding ``cost`` to the fake clock."""

    name = "slow_tanh"

    def __init__(self, clock: FakeClock, cost: int) -> None:
        self.clock, self.cost, self.calls = clock, cost, 0

    def claim(self, bsym: BoundSymbol) -> str | None:
        return None if bsym.symbol.id == "torch.tanh" else "not tanh"

    def implement(self, bsym: BoundSymbol):
        def tanh(x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            self.clock.now += self.cost
            return torch.tanh(x)

        return tanh


def f(x):
    return (x * 2).tanh() + 1


def test_keeps_lowered_given_timings() -> None:
    assert not keeps_lowered([[30, 25, 40]], [[26, 50]])  # the fastest calls: 25 on torch, 26 lowered
    assert keeps_lowered([[30]], [[30]])  # a tie keeps the lowered one
    assert not keeps_lowered([[30, 25]], [[26, 31]])  # torch's fastest call is faster
    assert keeps_lowered([[30, 25]], [[24, 90]])
    # forward and backward: the sum of each callable's fastest call
    assert not keeps_lowered([[10], [20]], [[5], [26]])
    assert keeps_lowered([[10], [20]], [[5], [24]])
    # a backward never run by one of them does not count
    assert not keeps_lowered([[10], []], [[12], [1]])
    assert keeps_lowered([[], []], [[], []])  # nothing timed: the lowered one, as asked for


def test_a_trial_alternates_whole_candidates_then_returns_the_chosen_untimed() -> None:
    clock = FakeClock()
    ran: list[str] = []

    def make(name: str, cost: int):
        def fn(x):
            ran.append(name)
            clock.now += cost
            return x

        return fn

    on_torch = (make("torch forward", 10), make("torch backward", 10))
    lowered = (make("lowered forward", 4), make("lowered backward", 30))
    withdrawn: list[bool] = []
    trial = Trial(on_torch, lowered, "f", runs=3, clock=clock, withdraw=[lambda: withdrawn.append(True)])
    for _ in range(6):
        forward, backward = trial.pick()
        assert untimed(forward) in (on_torch[0], lowered[0])
        forward(1)
        backward(1)
    assert ran[:4] == ["lowered forward", "lowered backward", "torch forward", "torch backward"]
    assert ran.count("torch forward") == ran.count("lowered forward") == 3
    chosen = trial.pick()
    assert chosen is on_torch and trial.pick() is on_torch  # 20 < 34, and no wrapper from then on
    assert withdrawn == [True]


def test_a_trial_keeps_the_faster_lowered_one_and_withdraws_nothing() -> None:
    clock = FakeClock()

    def cost(n: int):
        def fn():
            clock.now += n

        return fn

    on_torch, lowered = cost(9), cost(3)
    withdrawn: list[bool] = []
    trial = Trial(on_torch, lowered, "f", runs=2, clock=clock, withdraw=[lambda: withdrawn.append(True)])
    for _ in range(4):
        trial.pick()()
    assert trial.pick() is lowered and withdrawn == []


def test_only_the_default_policy_measures() -> None:
    assert executors_from_options(None, None, None).trial_runs == DEFAULT_TRIAL_RUNS
    assert executors_from_options(None, None, None).fuse_after == DEFAULT_FUSE_AFTER
    assert executors_from_options(None, None, 5).trial_runs == 0  # fuse_after= asked for lowering
    assert executors_from_options(None, INDUCTOR, None).trial_runs == 0


def _measured(jfn, clock: FakeClock, runs: int):
    executors = as_jitted(jfn).executor
    executors.trial_runs, executors.clock = runs, clock
    return jfn


@pytest.mark.parametrize("cost, kept", [(5, "torch"), (0, "lowered")])
def test_an_entry_keeps_what_was_measured_faster(monkeypatch, cost: int, kept: str) -> None:
    """The lowered computation costing ``cost`` more than torch's (injected) is kept only when it is
    not slower; a kept torch computation's lowered trace is withdrawn from ``last_traces``; every
    call equals eager, during the trial and after it."""
    monkeypatch.setenv(BACKGROUND_ENV, "0")
    clock = FakeClock()
    slow = SlowTanh(clock, cost)
    jfn = _measured(jitcore.jit(f, executors=(slow, "torch"), fuse_after=2), clock, runs=3)
    with executor_log() as log:
        for _ in range(3 + 6):  # runs 0-2 on torch (lowered at run 2), then the trial's 3 runs of each
            check(f, torch.randn(5), jfn=jfn)
        assert "slow_tanh" in lowered_trace(jfn)  # shown while it is tried
        assert slow.calls == 3
        for _ in range(4):
            check(f, torch.randn(5), jfn=jfn)
    assert slow.calls == (3 if kept == "torch" else 7)
    assert ("slow_tanh" in lowered_trace(jfn)) == (kept == "lowered")
    assert len(jitcore.last_traces(jfn)) == (1 if kept == "torch" else 2)
    decided = [m for m in log if "per run" in m]
    assert len(decided) == 1 and decided[0].endswith(
        "keeps running on torch" if kept == "torch" else "keeps the lowered one"), decided


def test_a_trial_of_a_grad_pair_gives_eager_gradients_on_every_call(monkeypatch) -> None:
    """The forward of each trial run saves what that run's backward takes, with the torch and the
    lowered pair (inductor; its forward saves other values, chosen for fusion) alternating."""
    monkeypatch.setenv(BACKGROUND_ENV, "0")

    def loss(x, w):
        h = (x @ w).sin() * 2
        return (h.cos() + h.tanh()).sum()

    clock = FakeClock()
    jfn = _measured(jitcore.jit(loss, executors=INDUCTOR, fuse_after=1), clock, runs=3)
    for _ in range(1 + 6 + 2):
        x, w = torch.randn(4, 3), torch.randn(3, 5)
        xe, we = x.clone().requires_grad_(), w.clone().requires_grad_()
        xj, wj = x.clone().requires_grad_(), w.clone().requires_grad_()
        loss(xe, we).backward()
        out = jfn(xj, wj)
        out.backward()
        torch.testing.assert_close(out, loss(xe.detach(), we.detach()))
        torch.testing.assert_close((xj.grad, wj.grad), (xe.grad, we.grad))
    assert "fused by inductor" in lowered_trace(jfn)  # the fake clock never moved: a tie


_CHOOSING = ("saved_values.py", "executors/plan.py", "executors/trial.py")  # files of choosing a pair


@pytest.mark.parametrize("cost, kept", [(5, "torch"), (0, "lowered")])
def test_a_decided_grad_pair_runs_without_choosing_and_gives_eager_gradients(monkeypatch, cost, kept) -> None:
    """Once the trial decided (Note [A settled choice], plan.py), a call runs the kept pair without
    a frame of the plan's select, the saved values' tracking or the trial, and its forward saves what
    the kept backward takes: outputs and gradients equal eager's on every call, before and after."""
    from jit_helpers import calls_entered

    monkeypatch.setenv(BACKGROUND_ENV, "0")

    def g(x, w):
        return ((x @ w).tanh() * 2).sum()

    class SlowAtenTanh(SlowTanh):  # the grad transform's forward calls aten's tanh
        def claim(self, bsym: BoundSymbol) -> str | None:
            return None if bsym.symbol.id == "torch.ops.aten.tanh.default" else "not tanh"

    clock = FakeClock()
    slow = SlowAtenTanh(clock, cost)
    jfn = _measured(jitcore.jit(g, executors=(slow, "torch"), fuse_after=2), clock, runs=3)

    def call() -> None:
        x, w = torch.randn(4, 3), torch.randn(3, 5)
        xe, we = x.clone().requires_grad_(), w.clone().requires_grad_()
        xj, wj = x.clone().requires_grad_(), w.clone().requires_grad_()
        expected, out = g(xe, we), jfn(xj, wj)
        expected.backward()
        out.backward()
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close((xj.grad, wj.grad), (xe.grad, we.grad))

    def choosing() -> list[tuple[str, str]]:
        x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
        frames = calls_entered(lambda: jfn(x, w))
        return [f for f in frames if f[0].endswith(_CHOOSING)]

    for _ in range(3 + 5):  # runs 0-2 on torch (lowered at run 2), then the trial's runs but its last
        call()
    assert choosing()  # the trial's last run: still timed
    for _ in range(3):
        call()
    assert not choosing()
    assert slow.calls == (3 if kept == "torch" else 3 + 3 + 1)  # the trial ran the lowered one 3 times


def test_a_backward_for_another_tangent_kind_takes_what_its_runs_forward_saved(monkeypatch) -> None:
    """A plain gradient to a TwoTensor output gets a backward derived for it, taking what the run's
    forward saved: the torch forward's values or the fused forward's, as the trial alternates them
    (jit_hook.py keys them by the untimed backward)."""
    from torch.testing._internal.two_tensor import TwoTensor

    monkeypatch.setenv(BACKGROUND_ENV, "0")

    def fn(x):  # the fused forward saves two values fewer than the torch one (a min-cut's choice)
        return torch.where(x > 0, x * 1.5, x * 0.1) * torch.sigmoid(x) - x.abs()

    a, b = torch.randn(3), torch.randn(3)
    expected = None
    jfn = _measured(jitcore.jit(fn, executors=INDUCTOR, fuse_after=1), FakeClock(), runs=3)
    for f in (fn, *[jfn] * (2 + 6 + 2)):
        x = TwoTensor(a.clone(), b.clone()).requires_grad_()
        f(x).backward(torch.ones(3))
        if f is fn:
            expected = x.grad
        else:
            assert type(x.grad) is type(expected)
            torch.testing.assert_close((x.grad.a, x.grad.b), (expected.a, expected.b))
    assert len(jitcore.last_rederived_traces(jfn)) == 2  # one for each forward's saved values


def test_a_close_trial_runs_another_round_and_decides_on_all_of_them() -> None:
    # Note [A close trial runs again]: the first round's fastest calls are 10 on torch and 10.5
    # lowered (noise could decide that); the lowered one's later runs are faster (8), so deciding on
    # all rounds keeps it, where deciding after the first round kept torch.
    clock = FakeClock()
    lowered_costs = iter([105] * 2 + [80] * 100)

    def on_torch():
        clock.now += 100

    def lowered():
        clock.now += next(lowered_costs)

    trial = Trial(on_torch, lowered, "f", runs=2, clock=clock)
    picks = []
    while trial.chosen is None:
        picks.append(trial.pick())
        if trial.chosen is None:
            picks[-1]()
    assert trial.chosen is lowered and trial.rounds == 2, (trial.rounds, trial.times)
    assert len(picks) == 2 * 2 * 2 + 1  # two rounds of two runs each, then the decision


def test_a_clear_trial_decides_after_one_round_and_a_close_one_after_at_most_three() -> None:
    assert not is_close([[100]], [[50]]) and is_close([[100]], [[95]]) and not is_close([[0]], [[0]])
    clock = FakeClock()

    def cost(n: int):
        def fn():
            clock.now += n

        return fn

    for torch_cost, lowered_cost, rounds in ((100, 50, 1), (100, 101, 3), (100, 99, 3)):
        trial = Trial(cost(torch_cost), cost(lowered_cost), "f", runs=2, clock=clock)
        while trial.chosen is None:
            candidate = trial.pick()
            if trial.chosen is None:
                candidate()
        assert trial.rounds == rounds
        assert (trial.chosen is trial.candidates[1]) == (lowered_cost <= torch_cost)
