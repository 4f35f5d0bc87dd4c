"""User executors and the options that choose executors: the documented operator-executor example
(docs/executors.md), the registry, ``executor=`` / ``executors=`` / ``fuse_after`` and the default
policy (an entry is lowered once it is hot)."""

from __future__ import annotations

import pytest
import torch
from executor_helpers import check, executor_log, fused, lowered_trace

import jitcore
from jitcore.executors import BACKGROUND_ENV, get_executor, register_executor, registered_executors
from jitcore.executors.plan import DEFAULT_FUSE_AFTER, FUSE_AFTER_ENV, executors_from_options
from jitcore.ir import BoundSymbol


class TanhAsExp:
    """The docs' example: an operator executor running ``torch.tanh`` as ``1 - 2 / (exp(2x) + 1)``."""

    name = "tanh_as_exp"

    def __init__(self) -> None:
        self.calls = 0

    def claim(self, bsym: BoundSymbol) -> str | None:
        return None if bsym.symbol.id == "torch.tanh" else "not tanh"

    def implement(self, bsym: BoundSymbol):
        def tanh(x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            return 1 - 2 / (torch.exp(2 * x) + 1)

        return tanh


def test_an_operator_executor_runs_its_op_and_torch_runs_the_rest() -> None:
    mine = TanhAsExp()

    def f(x):
        return torch.tanh(x * 2).sum() + x.tanh().mean()

    jfn = jitcore.jit(f, executors=(mine, "torch"))
    check(f, torch.randn(5), jfn=jfn)
    check(f, torch.randn(5), jfn=jfn)
    assert mine.calls == 4  # two tanh calls per call (the method form is the same symbol)
    text = lowered_trace(jfn)
    assert "  t1 = tanh_as_exp_tanh0(t0)" in text, text
    assert "    # t1 = torch.tanh(t0)" in text  # the original call stays visible as a subsymbol


def test_an_operator_executor_before_inductor_takes_its_op_out_of_the_fusion() -> None:
    mine = TanhAsExp()

    def f(x):
        return ((x + 1).sin().tanh() * 3).cos()

    jfn = jitcore.jit(f, executors=(mine, "inductor", "torch"))
    check(f, torch.randn(6), jfn=jfn)
    text = lowered_trace(jfn)
    assert len(fused(text)) == 2 and "tanh_as_exp_tanh" in text, text


def test_the_registry() -> None:
    mine = TanhAsExp()
    mine.name = "tanh_as_exp_registered"
    assert register_executor(mine) is mine
    assert get_executor("tanh_as_exp_registered") is mine
    assert "tanh_as_exp_registered" in registered_executors()
    jfn = jitcore.jit(lambda x: x.tanh() + 1, executors=("tanh_as_exp_registered", "torch"))
    check(lambda x: x.tanh() + 1, torch.randn(3), jfn=jfn)
    assert mine.calls == 1
    with pytest.raises(ValueError, match="already registered"):
        other = TanhAsExp()
        other.name = "tanh_as_exp_registered"
        register_executor(other)
    with pytest.raises(TypeError, match="needs name, claim"):
        register_executor(object())
    with pytest.raises(ValueError, match="unknown executor 'nope'"):
        jitcore.jit(lambda x: x, executors=("nope",))


def test_options() -> None:
    assert executors_from_options("torch", None, None).lowers is False
    chosen = executors_from_options(None, ("inductor", "torch"), None)
    assert chosen.name == "inductor,torch" and chosen.fuse_after == 0
    with pytest.raises(ValueError, match="not both"):
        executors_from_options("torch", ("torch",), None)
    with pytest.raises(TypeError, match="sequence of names"):
        executors_from_options(None, "inductor", None)
    with pytest.raises(ValueError, match="non-negative"):
        executors_from_options(None, None, -3)


def test_the_default_policy_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FUSE_AFTER_ENV, raising=False)
    assert executors_from_options(None, None, None).fuse_after == DEFAULT_FUSE_AFTER
    monkeypatch.setenv(FUSE_AFTER_ENV, "7")
    assert executors_from_options(None, None, None).fuse_after == 7
    monkeypatch.setenv(FUSE_AFTER_ENV, "never")
    assert executors_from_options(None, None, None).lowers is False
    monkeypatch.setenv(FUSE_AFTER_ENV, "soon")
    with pytest.raises(ValueError, match="number of calls or 'never'"):
        executors_from_options(None, None, None)


def test_by_default_an_entry_is_fused_once_hot(monkeypatch) -> None:
    def f(x):
        return ((x * 2).sin() + 1).exp()

    monkeypatch.setenv(BACKGROUND_ENV, "0")  # lowered on the hot call (test_executors_background.py)
    jfn = jitcore.jit(f, fuse_after=3)
    x = torch.randn(4)
    with executor_log() as log:
        for call in range(5):
            check(f, x, jfn=jfn)
            assert ("fusion" in lowered_trace(jfn)) == (call >= 3), (call, log)
    assert len([m for m in log if "lowered" in m]) == 1


def test_executor_torch_never_lowers() -> None:
    def f(x):
        return ((x * 2).sin() + 1).exp()

    jfn = jitcore.jit(f, executor="torch", fuse_after=1)
    for _ in range(3):
        check(f, torch.randn(4), jfn=jfn)
    assert "fusion" not in lowered_trace(jfn)
