"""Issue 18.3: ``diff`` reports no false divergences, never skips a stale op silently, and never
stops in the program's ``breakpoint()``."""

from __future__ import annotations

import sys

import debug_programs as P
import pytest
import torch

import jitcore
from jitcore.debug.debugger import Debugger


def test_dropout_in_training_mode_does_not_diverge():
    """Both runs start from the same RNG state, so dropout draws the same mask."""
    jfn = jitcore.jit(P.noisy)
    x = torch.rand(64)
    jfn(x)
    d = Debugger(jfn, (x,))
    before = torch.get_rng_state()
    assert d.diff() is None
    assert torch.equal(torch.get_rng_state(), before)  # diff leaves the RNG as it found it


def test_a_stale_op_is_reported_not_skipped(monkeypatch):
    """A class swapped after tracing: the op recorded from its old code has no eager counterpart;
    diff says so instead of skipping it and blaming the next op (``y + 1``)."""
    jfn = jitcore.jit(P.doubled_plus_one)
    x = torch.rand(3)
    jfn(x)
    d = Debugger(jfn, (x,))
    line = P.line_of(P.Doubler.__call__, "return x * 2")
    monkeypatch.setattr(P.Doubler, "__call__", lambda self, x: x * 3)
    found = d.diff()
    assert found is not None and found.unmatched and found.index == 0
    assert found.bound_symbol.symbol.id == "torch.mul"
    text = str(found)
    assert f"{P.__file__}:{line}" in text
    assert "no eager counterpart" in text and "no longer matches the program" in text


def test_diff_does_not_stop_in_the_programs_breakpoint(monkeypatch):
    stops = []
    monkeypatch.setattr(sys, "breakpointhook", lambda *a, **k: stops.append(a))
    jfn = jitcore.jit(P.with_breakpoint)
    x = torch.rand(3)
    with pytest.warns(UserWarning, match="breakpoint"):
        jfn(x)
    d = Debugger(jfn, (x,))
    assert d.diff() is None
    assert stops == [] and sys.breakpointhook is not None
    breakpoint()  # noqa: T100 - the hook diff replaced for its run is back
    assert len(stops) == 1
