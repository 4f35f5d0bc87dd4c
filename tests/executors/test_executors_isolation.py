"""A region compiled by inductor on jitcore's background thread does not disturb the program's
other threads (jitcore/executors/isolation.py, Note [Torch's process-global state while
compiling]): a torch.compile'd model keeps working and gives eager's values, random draws are
eager's stream, and the compile sees the configuration of the thread that made the entry hot.

Deterministic: the compile thread is held *inside* AOTAutograd's trace of the region (FX's tracing
flag set, the RNG state saved) until the main thread has done its part."""

from __future__ import annotations

import random
import threading

import pytest
import torch
from executor_helpers import check, fused, lowered_trace

import jitcore
from jitcore.executors import BACKGROUND_ENV, wait_for_compiles
from jitcore.executors.background import on_compile_thread


@pytest.fixture(autouse=True)
def background(monkeypatch):
    monkeypatch.setenv(BACKGROUND_ENV, "1")
    yield
    assert wait_for_compiles(120)


class Held:
    """Holds the compile thread at its first FX node for ``aten.atan2`` (the region's own op, traced
    by AOTAutograd under its saved RNG state) until ``release``."""

    def __init__(self, monkeypatch) -> None:
        self.inside, self.gate = threading.Event(), threading.Event()
        create_proxy = torch.fx.proxy.TracerBase.create_proxy
        held = self

        def holding(self, kind, target, *args, **kwargs):
            if on_compile_thread() and target is torch.ops.aten.atan2.default and not held.inside.is_set():
                held.inside.set()
                assert held.gate.wait(120), "the test never released the compile"
            return create_proxy(self, kind, target, *args, **kwargs)

        monkeypatch.setattr(torch.fx.proxy.TracerBase, "create_proxy", holding)

    def release(self) -> None:
        self.gate.set()


def _program():
    # a constant of its own: no disk-cache hit skips AOTAutograd's trace; drawn from the OS, since
    # tests before may have seeded ``random`` (the OpInfo harness does), which made it a constant a
    # former run had compiled already
    c = 1 + random.SystemRandom().random()

    def f(x, y):
        return (torch.atan2(x * c, y) + 1).sin() * 2

    return f


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 2 - x


def test_a_torch_compiled_model_and_random_draws_on_the_main_thread_are_eagers_while_a_region_compiles(
        monkeypatch) -> None:
    model = Model()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(4, 8)
    torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)  # compiled before jitcore's
    f = _program()
    jfn = jitcore.jit(f, fuse_after=1)
    held = Held(monkeypatch)
    for _ in range(2):  # the second call is hot: the region compiles in the background
        check(f, torch.randn(6), torch.randn(6), jfn=jfn)
    assert held.inside.wait(120), "the background compile never traced the region"
    try:
        from torch._dynamo.convert_frame import compile_lock

        assert torch.fx._symbolic_trace._is_fx_tracing_flag  # set process-wide by the compile thread
        taken = compile_lock.acquire(blocking=False)
        if taken:
            compile_lock.release()
        assert not taken  # held by the compile thread: a torch.compile here would wait, not overlap
        torch.manual_seed(1234)
        during = torch.rand(20)
        for i in range(5):
            xi = x + i
            torch.testing.assert_close(compiled(xi), model(xi), rtol=0, atol=0)
            check(f, torch.randn(6), torch.randn(6), jfn=jfn)  # on torch meanwhile
        during = torch.cat([during, torch.rand(20)])
    finally:
        held.release()
    assert wait_for_compiles(120)
    after = torch.rand(40)
    torch.manual_seed(1234)
    eager = [torch.rand(20), *(torch.randn(6) for _ in range(10)), torch.rand(20), torch.rand(40)]
    torch.testing.assert_close(torch.cat([during, after]), torch.cat([eager[0], eager[-2], eager[-1]]),
                               rtol=0, atol=0)
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)
    check(f, torch.randn(6), torch.randn(6), jfn=jfn)  # fused now
    torch.testing.assert_close(compiled(x * 3), model(x * 3), rtol=0, atol=0)


def test_the_background_compile_sees_the_settings_of_the_thread_that_made_the_entry_hot() -> None:
    seen: list[str] = []

    def custom_pass(graph: torch.fx.Graph) -> None:  # inductor's hook for a user's post-grad pass
        seen.append(threading.current_thread().name)

    f = _program()
    jfn = jitcore.jit(f, fuse_after=1)
    check(f, torch.randn(5), torch.randn(5), jfn=jfn)
    with torch._inductor.config.patch(post_grad_custom_post_pass=custom_pass):
        check(f, torch.randn(5), torch.randn(5), jfn=jfn)  # hot: handed over with this setting
    assert wait_for_compiles(120)
    assert seen == ["jitcore-compile"], seen
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)
    check(f, torch.randn(5), torch.randn(5), jfn=jfn)


def test_a_torch_compile_on_another_thread_waits_for_the_region_and_then_compiles(monkeypatch) -> None:
    """Dynamo's compile lock, held by jitcore's compile, is taken by a new torch.compile graph on
    another thread: it compiles after the region (no deadlock, no overlap), with eager's values."""
    model, x = Model(), torch.randn(3, 8)
    f = _program()
    jfn = jitcore.jit(f, fuse_after=1)
    held = Held(monkeypatch)
    for _ in range(2):
        check(f, torch.randn(6), torch.randn(6), jfn=jfn)
    assert held.inside.wait(120), "the background compile never traced the region"
    results: list[torch.Tensor] = []
    other = threading.Thread(target=lambda: results.append(torch.compile(model, backend="eager")(x)))
    try:
        other.start()  # its first call compiles: it waits for Dynamo's lock
    finally:
        held.release()
    other.join(120)
    assert not other.is_alive() and wait_for_compiles(120)
    torch.testing.assert_close(results[0], model(x), rtol=0, atol=0)
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)
