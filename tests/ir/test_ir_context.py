"""The tracing context: eager outside a trace, per-thread traces, scopes restored after errors."""

from __future__ import annotations

import threading

import pytest
import torch
from ir_helpers import trace_fn

import jitcore.langctx as L
from jitcore.ir import Symbol, Trace, current_context, tracing


def test_symbols_run_eagerly_outside_a_trace() -> None:
    calls = []
    sym = Symbol("test.eager", "eager", "test", fn=lambda a: calls.append(a) or a * 2, path=None, meta=None)
    assert current_context() is None
    assert sym(3) == 6 and calls == [3]


def test_tracing_none_suspends_recording() -> None:
    calls = []

    def f(x):
        with tracing(None):
            calls.append(torch.ones(1) + 1)  # real tensors, not recorded
        return x.neg()

    trace = trace_fn(f, torch.randn(2))
    assert [b.symbol.id for b in trace.bound_symbols] == ["torch.neg"]
    assert calls[0].item() == 2.0


def test_a_failing_meta_leaves_the_scopes_as_they_were() -> None:
    def meta(a):
        torch.sin(a)  # recorded into the failing symbol's scope, then discarded with it
        raise ValueError("bad call")

    sym = Symbol("test.fails", "fails", "test", fn=None, path=None, meta=meta)
    trace = Trace(imports={"torch": torch})
    context = L.new_context(trace)
    x = context.values.input_proxy(torch.randn(2), "x")
    with tracing(context):
        with pytest.raises(ValueError, match="bad call"):
            sym(x)
        y = torch.cos(x)
    assert context.scopes == [trace.bound_symbols]
    assert [b.symbol.id for b in trace.bound_symbols] == ["torch.cos"] and trace.bound_symbols[0].output is y


def test_threads_record_into_their_own_traces() -> None:
    barrier = threading.Barrier(2)
    traces: dict[str, Trace] = {}

    def work(op: str) -> None:
        def f(x):
            barrier.wait()
            for _ in range(20):
                x = getattr(torch, op)(x)
            return x

        traces[op] = trace_fn(f, torch.randn(2))

    threads = [threading.Thread(target=work, args=(op,)) for op in ("sin", "cos")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for op, trace in traces.items():
        assert [b.symbol.id for b in trace.bound_symbols] == [f"torch.{op}"] * 20
