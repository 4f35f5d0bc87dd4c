"""``drop_unread`` (jitcore/ir/trace.py): the shared pass that removes ops a caller declares removable
once nothing after them reads their outputs (later ops, their subsymbols, the trace's output). Each
pruned trace is run and compared with the function it was traced from."""

from __future__ import annotations

import dataclasses

import torch
from ir_helpers import assert_same, exec_printed, trace_fn

from jitcore.ir import drop_unread


def _ids(trace) -> list[str]:
    return [b.symbol.id for b in trace.bound_symbols]


def _program(x, y):
    a = x.t()  # returned: kept
    b = x.sin()
    b.t()  # nothing reads it: dropped
    c = (x * 2).t().t()  # read by the output through the second t: kept
    y.cos().t()  # a chain nothing reads: the t goes, then the cos (removable too) it alone read
    return a, b, c


def test_unread_removable_ops_go_and_the_trace_computes_the_same():
    x, y = torch.randn(2, 3), torch.randn(3)
    trace = trace_fn(_program, x, y)
    drop_unread(trace, lambda b: b.symbol.id in ("torch.t", "torch.cos"))
    assert _ids(trace) == ["torch.t", "torch.sin", "torch.mul", "torch.t", "torch.t"]
    assert_same(exec_printed(trace)(x, y), _program(x, y))


def test_ops_the_caller_keeps_stay_even_when_unread():
    x, y = torch.randn(2, 3), torch.randn(3)
    trace = trace_fn(_program, x, y)
    drop_unread(trace, lambda b: b.symbol.id == "torch.t")
    assert _ids(trace) == ["torch.t", "torch.sin", "torch.mul", "torch.t", "torch.t", "torch.cos"]
    assert_same(exec_printed(trace)(x, y), _program(x, y))


def test_a_read_inside_a_later_ops_subsymbols_keeps_the_value():
    """A value only a subsymbol reads (a decomposition, a subclass's resolution) is still read."""
    x = torch.randn(2, 3)
    trace = trace_fn(lambda x: (x.t(), x.cos()), x)
    made_t, cos = trace.bound_symbols
    trace.output = trace.output[1]
    trace.bound_symbols[:] = [made_t, dataclasses.replace(cos, subsymbols=(dataclasses.replace(
        cos, args=(made_t.output,)),))]
    drop_unread(trace, lambda b: b.symbol.id == "torch.t")
    assert _ids(trace) == ["torch.t", "torch.cos"]
    trace.bound_symbols[1] = cos
    drop_unread(trace, lambda b: b.symbol.id == "torch.t")
    assert _ids(trace) == ["torch.cos"]
