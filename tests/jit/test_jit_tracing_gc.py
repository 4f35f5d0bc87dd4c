"""The collector's threshold while a call is traced (Note [Collections while tracing],
jitcore/jit/tracing_gc.py): raised during the trace, restored after it on every path, shared safely by
nested and concurrent traces, a program's own setting kept; values and effects as eager's."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import jitcore
from jitcore.jit import tracing_gc
from jitcore.jit.api import JittedFunction


@pytest.fixture
def threshold():
    """The process's threshold, a known one for the test, restored after it."""
    old, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    yield (700, 10, 10)
    gc.set_threshold(*old)
    if not enabled:
        gc.disable()


def _seen_while_tracing(monkeypatch) -> list[tuple[int, ...]]:
    """Thresholds read by the jit's own interpretation step (not by the program) of each trace."""
    seen: list[tuple[int, ...]] = []
    interpret = JittedFunction._interpret

    def recording(self, *args, **kwargs):
        seen.append(gc.get_threshold())
        return interpret(self, *args, **kwargs)

    monkeypatch.setattr(JittedFunction, "_interpret", recording)
    return seen


def test_the_threshold_is_raised_while_tracing_and_restored_after(threshold, monkeypatch):
    seen = _seen_while_tracing(monkeypatch)
    out: list[float] = []

    def f(x):
        out.append(1.0)
        return (x * 2).sin()

    jf = jitcore.jit(f)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(jf(x), (x * 2).sin(), rtol=0, atol=0)
    assert seen == [(700 * tracing_gc.TRACING_GC_FACTOR, 10, 10)]  # one trace, two cached calls
    assert gc.get_threshold() == threshold
    assert out == [1.0, 1.0, 1.0]


def test_restored_when_the_trace_raises(threshold, monkeypatch):
    seen = _seen_while_tracing(monkeypatch)

    def f(x):
        raise KeyError("from the program")

    with pytest.raises(KeyError, match="from the program"):
        jitcore.jit(f)(torch.randn(2))
    assert seen and gc.get_threshold() == threshold


def test_a_threshold_the_program_sets_is_kept(threshold):
    def f(x):
        gc.set_threshold(123, 4, 5)  # runs while the call is traced
        return x + 1

    x = torch.randn(3)
    torch.testing.assert_close(jitcore.jit(f)(x), x + 1)
    assert gc.get_threshold() == (123, 4, 5)


@pytest.mark.parametrize("how", ["disabled", "zero"])
def test_nothing_changes_without_automatic_collection(threshold, monkeypatch, how):
    seen = _seen_while_tracing(monkeypatch)
    if how == "disabled":
        gc.disable()
    else:
        gc.set_threshold(0, 10, 10)
    before = gc.get_threshold()
    x = torch.randn(3)
    torch.testing.assert_close(jitcore.jit(lambda t: t * 3)(x), x * 3)
    assert seen == [before] and gc.get_threshold() == before


def test_nested_and_concurrent_traces_restore_the_first_value(threshold):
    raised = (700 * tracing_gc.TRACING_GC_FACTOR, 10, 10)
    entered, release = threading.Barrier(2), threading.Event()
    seen: dict[str, tuple[int, ...]] = {}

    def worker():
        with tracing_gc.fewer_collections():
            entered.wait()
            seen["worker"] = gc.get_threshold()
            release.wait(10)

    thread = threading.Thread(target=worker)
    with tracing_gc.fewer_collections():
        thread.start()
        entered.wait()
        with tracing_gc.fewer_collections():  # nested: not raised twice
            seen["nested"] = gc.get_threshold()
        seen["outer"] = gc.get_threshold()
    seen["main left, worker still tracing"] = gc.get_threshold()
    release.set()
    thread.join()
    assert seen == {"worker": raised, "nested": raised, "outer": raised,
                    "main left, worker still tracing": raised}
    assert gc.get_threshold() == threshold


def test_a_program_that_collects_while_traced_sees_its_garbage_collected(threshold):
    """gc.collect() inside the traced call still collects at once: a cycle dropped before it is gone,
    as eagerly (its weakref callback runs during the call)."""
    class Node:
        pass

    def make(log):
        a, b = Node(), Node()
        a.other, b.other = b, a
        import weakref
        return weakref.ref(a, lambda _r: log.append("collected"))

    def f(x, log):
        ref = make(log)
        gc.collect()
        return x + (1 if ref() is None else 2)

    for run in (f, jitcore.jit(f)):
        log: list[str] = []
        out = run(torch.zeros(1), log)
        assert out.item() == 1 and log == ["collected"], run
