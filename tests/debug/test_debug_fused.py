"""The debugger and ``diff`` through fused regions: stepping the trace that runs shows a region's
ops, ``diff`` at a region compares its outputs with its ops run one by one on torch, and the
whole-call ``diff`` matches each region output at the line of the op that makes it.

Most tests fuse with ``GraphFusion``: a fusion executor that runs a region as its FX graph (the same
partitioning and execution trace as inductor's, without a C++ compile); ``Skewed`` adds 0.5 to one
output of each region, a wrong executor the tools must point at."""

from __future__ import annotations

import io

import pytest
import torch

import jitcore
from jitcore.debug.debugger import Debugger
from jitcore.debug.diff import region_divergence
from jitcore.debug.shell import DebuggerShell
from jitcore.executors import InductorExecutor, Region, is_lowered
from jitcore.executors.fx_graph import region_graph


class GraphFusion:
    """Claims what inductor claims; runs each region as its FX graph."""

    name = "fx_graph"
    min_region = 2

    def __init__(self) -> None:
        self._claims = InductorExecutor()

    def claim(self, bsym):
        return self._claims.claim(bsym)

    def fuse(self, region: Region):
        return region_graph(region)


class Skewed(GraphFusion):
    """A wrong fusion executor: the region's output ``skew`` is off by 0.5."""

    name = "skewed"

    def __init__(self, skew: str) -> None:
        super().__init__()
        self.skew = skew

    def fuse(self, region: Region):
        graph = region_graph(region)
        names = [p.name for p in region.outputs]

        def run(*inputs):
            return [o + 0.5 if n == self.skew else o for n, o in zip(names, graph(*inputs))]

        return run


def f(x, y):
    z = x * 2 + y
    w = z.sin().sum(0)
    return w, z.exp()  # not a view: a view a region returns runs after it (regions.py)


LINE_Z = f.__code__.co_firstlineno + 1
LINE_W = f.__code__.co_firstlineno + 2


def run_shell(debugger, commands):
    out = io.StringIO()
    DebuggerShell(debugger, stdin=io.StringIO("\n".join(commands) + "\n"), stdout=out).cmdloop()
    return out.getvalue()


def inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(3, 4)


def test_the_trace_that_runs_steps_into_a_region_op_by_op() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=(GraphFusion(), "torch"))
    jfn(x, y)
    d = Debugger(jfn, (x, y), executed=True)
    region = d.current
    assert is_lowered(region) and region.symbol.name == "fusion0"
    assert [b.symbol.id for b in region.subsymbols] == [
        "torch.mul", "torch.add", "torch.sin", "torch.sum", "torch.exp"]
    d.step()
    assert d.depth == 1 and d.current.symbol.id == "torch.mul"
    d.next()
    torch.testing.assert_close(d.values["t0"], x * 2)
    out = d.run_to_end()
    for got, want in zip(out, f(x, y)):
        torch.testing.assert_close(got, want)
    # the default stays the torch-level trace
    assert Debugger(jfn, (x, y)).current.symbol.id == "torch.mul"


def test_diff_at_a_region_matches_its_ops_on_torch() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=(GraphFusion(), "torch"))
    jfn(x, y)
    report = Debugger(jfn, (x, y), executed=True).diff_region()
    assert not report.diverges and [o.name for o in report.outputs] == ["t3", "t4"]
    assert str(report).startswith("fusion0 (5 ops): its 2 outputs match its ops run one by one on torch")


def test_diff_at_a_wrong_region_names_the_output_and_the_line_that_makes_it() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=(Skewed("t3"), "torch"))
    jfn(x, y)
    d = Debugger(jfn, (x, y), executed=True)
    report = d.diff_region()
    assert report.diverges
    (bad,) = [o for o in report.outputs if not o.close]
    assert bad.name == "t3" and bad.maker.symbol.id == "torch.sum" and bad.max_abs_diff == pytest.approx(0.5)
    torch.testing.assert_close(bad.lowered_value, bad.torch_value + 0.5)
    expected = f"t3 = torch.sum(...), made at {__file__}:{LINE_W} in f: max |fusion0 - torch| = 0.5"
    assert expected in str(report)
    # the whole call against eager: the region is the op that diverges, at t3's line
    found = d.diff()
    assert found is not None and found.index == 0 and found.name == "t3"
    assert found.max_abs_diff == pytest.approx(0.5)


def test_the_whole_call_diff_through_regions_finds_no_divergence_when_there_is_none() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=(Skewed("none"), "torch"))
    jfn(x, y)
    assert Debugger(jfn, (x, y), executed=True).diff() is None


def test_the_shell_switches_traces_and_diffs_the_region() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=(Skewed("t4"), "torch"))
    jfn(x, y)
    text = run_shell(Debugger(jfn, (x, y)), ["trace run", "diff", "s", "diff all", "trace torch", "q"])
    assert "restarted on the trace that runs: 1 ops" in text
    assert "-> [0] (t3, t4) = fusion0(x, y)" in text and "(5 subsymbols: 's' steps into them" in text
    assert "fusion0 (5 ops) differs from its ops run one by one on torch:" in text
    assert f"t4 = torch.exp(...), made at {__file__}:{LINE_W + 1} in f: max |fusion0 - torch| = 0.5" \
        in text
    assert "  -> [0.] t0 = torch.mul(x, 2)" in text  # 's' stepped into the region
    assert "op 0 (skewed.fusion0 -> t4) diverges" in text, text
    assert "restarted on the torch-level trace: 5 ops" in text


def test_diff_region_refuses_an_op_no_executor_made() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executor="torch")
    jfn(x, y)
    d = Debugger(jfn, (x, y))
    with pytest.raises(ValueError, match="is not a call an executor made"):
        d.diff_region()
    with pytest.raises(ValueError):
        region_divergence(d.current, d.values)


def test_an_inductor_region_matches_its_ops_on_torch() -> None:
    x, y = inputs()
    jfn = jitcore.jit(f, executors=("inductor", "torch"))
    jfn(x, y)
    d = Debugger(jfn, (x, y), executed=True)
    report = d.diff_region()
    assert report.bound_symbol.symbol.id == "inductor.fusion0" and not report.diverges, str(report)
    assert d.diff() is None
