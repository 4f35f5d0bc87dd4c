"""Pure unclaimed calls are moved out from between two fusible runs, which become one region
(regions.py, Note [Moving calls out of a region's way]); calls with effects keep their place."""

from __future__ import annotations

import pytest
import torch
from executor_helpers import INDUCTOR, assert_same, clone_tree, fused, lowered_trace

import jitcore


def _ops_in_regions(trace: str) -> int:
    header = [line for line in trace.splitlines() if line.startswith("# fusion")]
    return sum(int(line.split(": ")[1].split()[0]) for line in header)


def test_a_float_read_between_two_runs_moves_before_them() -> None:
    def f(x, y, lr):
        a = (x.sin() * 2).cos()
        c = torch.pow(y, lr)  # a float read inductor does not take: unclaimed, pure
        b = (x.tanh() + 1).exp()
        return a + b, c

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr",))
    for lr in (0.1, 0.5):
        x, y = torch.randn(4, 5), torch.rand(4, 5)
        assert_same(jfn(x, y, lr), f(x, y, lr))
    trace = lowered_trace(jfn)
    assert len(fused(trace)) == 1 and _ops_in_regions(trace) == 7, trace
    assert trace.index("torch.pow(") < trace.index("= fusion0("), trace


def test_float_arithmetic_between_two_runs_moves_out_of_the_way() -> None:
    def f(x, lr, momentum):
        return (x * 2 + 1).sin() * lr + (1 - momentum) * x.cos()

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr", "momentum"))
    for lr, m in ((0.1, 0.9), (0.3, 0.5)):
        x = torch.randn(3, 4)
        assert_same(jfn(x, lr, m), f(x, lr, m))
    trace = lowered_trace(jfn)
    assert len(fused(trace)) == 1 and "operator.sub(1, momentum)" in trace.split("= fusion0(")[0], trace


def test_a_call_that_reads_the_first_run_and_feeds_the_second_stays_between() -> None:
    def f(x, lr):
        a = (x.sin() * 2).exp()
        c = torch.pow(a, lr)
        return (c.tanh() + 1).exp()

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr",))
    x = torch.randn(4, 5)
    assert_same(jfn(x, 0.2), f(x, 0.2))
    assert len(fused(lowered_trace(jfn))) == 2


def test_an_in_place_write_between_two_runs_keeps_its_place() -> None:
    def f(x, y):
        a = (x.sin() * 2).cos()
        y.mul_(2)
        return (y.cos() + 1) * a, (x.exp() - 1).abs()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    (xe, ye), (xj, yj) = clone_tree((x, y)), clone_tree((x, y))
    assert_same(jfn(xj, yj), f(xe, ye))
    assert_same(yj, ye)
    trace = lowered_trace(jfn)
    assert len(fused(trace)) == 2, trace
    lines = trace.splitlines()
    write = next(i for i, line in enumerate(lines) if "mul_(" in line and not line.strip().startswith("#"))
    first = next(i for i, line in enumerate(lines) if "= fusion0(" in line)
    second = next(i for i, line in enumerate(lines) if "= fusion1(" in line)
    assert first < write < second, trace


def _view_relations(outputs: tuple[torch.Tensor, ...], inputs: tuple[torch.Tensor, ...]) -> list[str]:
    """For each output: whether it is a view, and of which output or input (by position)."""
    named = [*(("out", i, t) for i, t in enumerate(outputs)), *(("in", i, t) for i, t in enumerate(inputs))]
    relations = []
    for t in outputs:
        base = t._base  # noqa: SLF001
        relations.append("no view" if base is None else next(
            (f"view of {kind}{i}" for kind, i, u in named if u is base), "view of an intermediate"))
    return relations


@pytest.mark.parametrize("case", ["output", "intermediate", "input", "chain", "read_inside"])
def test_a_view_a_region_returns_is_a_view_as_eagerly(case: str) -> None:
    # Note [Views a region returns are made after it]: before, every output of a region was a fresh
    # tensor (``_base`` None) where eager's is a view of its base.
    def f(x, y):
        z = (x * 2 + y).sin()
        if case == "output":
            return z, z.view(-1)
        if case == "intermediate":
            return z.cos().view(-1), z * 3
        if case == "input":
            return z, x.t()
        if case == "chain":
            return z, z.view(-1)[::2].unsqueeze(0)
        v = z.view(-1)  # read inside the region after it is made: stays fused, aliasing kept
        return v, v.exp()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        expected, got = f(x, y), jfn(x, y)
        assert_same(got, expected)
        if case != "read_inside":
            assert _view_relations(got, (x, y)) == _view_relations(expected, (x, y))
        got[0].add_(1)  # a write through one output shows in the outputs that alias it, as eagerly
        expected[0].add_(1)
        assert_same(got, expected)
    assert len(fused(lowered_trace(jfn))) == 1
