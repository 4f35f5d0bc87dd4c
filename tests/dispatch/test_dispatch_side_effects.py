"""Python side effects inside a tensor subclass's ``__torch_dispatch__`` happen on every call, as eagerly.

A counter kept on the class or in a global, or a log appended to, advanced only while tracing: cached
calls skip the dispatch (the trace holds its aten ops), so the counter stopped. Subclass code that is
not a library's is now state-tracked like the program's own code (jitcore/jit/interpretation.py): its
reads of globals, class attributes and items are bound, its writes replayed (jitcore/jit/effects.py), a
read-modify-write number replayed as arithmetic on each call's value.
"""

from __future__ import annotations

from typing import Any

import torch

import jitcore

LOG: list[str] = []
COUNTS: dict[str, int] = {}
TOTAL = [0]


class Counting(torch.Tensor):
    """A wrapper whose dispatch counts calls on its class, per op in a global dict, and logs ops."""

    calls = 0

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Counting:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, outer_size: Any, outer_stride: Any) -> Counting:
        return Counting(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        cls.calls += 1
        TOTAL[0] += 1
        COUNTS[str(func)] = COUNTS.get(str(func), 0) + 1
        LOG.append(f"{func}")
        unwrapped = [a.inner if isinstance(a, Counting) else a for a in args]
        out = func(*unwrapped, **(kwargs or {}))
        return Counting(out) if isinstance(out, torch.Tensor) else out


def _reset() -> None:
    Counting.calls, TOTAL[0] = 0, 0
    COUNTS.clear()
    LOG.clear()


def _state() -> tuple:
    return Counting.calls, TOTAL[0], dict(COUNTS), list(LOG)


def test_counters_and_logs_inside_dispatch_advance_on_every_call() -> None:
    def f(t):
        return (t * 2 + 1).sin()

    runs = []
    for fn in (f, jitcore.jit(f)):
        _reset()
        outs = [fn(Counting(torch.full((3,), float(i)))) for i in range(5)]
        runs.append(([o.inner for o in outs], _state()))
    (eager_outs, eager_state), (jit_outs, jit_state) = runs
    for a, b in zip(eager_outs, jit_outs):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    assert jit_state == eager_state
    assert eager_state[0] == 15


def test_the_counters_are_computation_inputs_not_guards() -> None:
    def f(t):
        return t * 3

    _reset()
    jf = jitcore.jit(f)
    for i in range(6):
        jf(Counting(torch.ones(2) * i))
    assert Counting.calls == 6 and TOTAL[0] == 6
    assert jitcore.cache_misses(jf) <= 2  # COUNTS has no key on the first call, one on the second


class Switched(torch.Tensor):
    """A wrapper whose dispatch reads a class setting: the setting is guarded, as the program's reads are."""

    unwrap_outputs = False

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Switched:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, outer_size: Any, outer_stride: Any) -> Switched:
        return Switched(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        out = func(*[a.inner if isinstance(a, Switched) else a for a in args], **(kwargs or {}))
        return out if cls.unwrap_outputs or not isinstance(out, torch.Tensor) else Switched(out)


def test_a_class_setting_read_in_dispatch_is_guarded() -> None:
    """Changing the setting after tracing gave the traced answer (a Switched where eager returns a plain
    tensor): the dispatch code's reads were not guarded."""
    jf = jitcore.jit(lambda t: t * 2)
    x = Switched(torch.ones(2))
    try:
        assert type(jf(x)) is Switched
        Switched.unwrap_outputs = True
        assert type(jf(x)) is torch.Tensor and type(x * 2) is torch.Tensor
    finally:
        Switched.unwrap_outputs = False
    assert type(jf(x)) is Switched
    assert jitcore.cache_misses(jf) == 2


def test_under_grad_counters_in_dispatch_advance_on_every_call() -> None:
    """With an input that requires grad the grad transform makes the entry's numbers constants: the
    counters kept in dispatch code were once taken as they were while tracing (they advanced on the
    traced call only, 3 where eager counts 12 over 4 calls); guarded by value, every call would trace
    again. They are computed beside the forward on every call (Note [Counters under grad]), and the
    cache hits. Forward only: eager's backward runs the class's dispatch for backward ops, a cached
    backward runs plain aten ops."""

    def f(t, w):
        return (t * w).sin().sum()

    runs = []
    for jitted in (False, True):
        _reset()
        fn = jitcore.jit(f) if jitted else f
        states = []
        for i in range(4):
            out = fn(Counting(torch.full((3,), float(i))), torch.ones(3, requires_grad=True))
            assert out.requires_grad
            states.append((_state(), out.inner.detach()))
        runs.append(states)
    for (eager_state, eager_out), (jit_state, jit_out) in zip(*runs):
        assert jit_state == eager_state
        torch.testing.assert_close(jit_out, eager_out, rtol=0, atol=0)
    assert runs[0][-1][0][0] == 12


class Tallying(torch.Tensor):
    """A wrapper whose dispatch keeps a class counter, a global total and a log (no per-op dict)."""

    calls = 0

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> Tallying:
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)  # noqa: SLF001

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, meta: Any, outer_size: Any, outer_stride: Any) -> Tallying:
        return Tallying(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any, kwargs: Any = None) -> Any:
        cls.calls += 1
        TOTAL[0] += 1
        LOG.append(f"{func}")
        out = func(*[a.inner if isinstance(a, Tallying) else a for a in args], **(kwargs or {}))
        return Tallying(out) if isinstance(out, torch.Tensor) else out


def _tallies() -> tuple:
    return Tallying.calls, TOTAL[0], list(LOG)


def test_under_grad_the_backward_and_its_cache_hits_stay() -> None:
    """A backward after each call: the gradients are eager's, the entry is traced once, and each call's
    forward counts and logs as eager's forward does (a cached backward runs plain aten ops: the backward
    ops eager hands the class are not handed to it)."""

    def f(t, w):
        return (t * w).sin().sum()

    for i in range(4):
        Tallying.calls, TOTAL[0] = 0, 0
        LOG.clear()
        expected = torch.ones(3, requires_grad=True)
        f(Tallying(torch.full((3,), float(i))), expected)
        forward = _tallies()
        if i == 0:
            jf, before = jitcore.jit(f), None
        Tallying.calls, TOTAL[0] = 0, 0
        LOG.clear()
        w = torch.ones(3, requires_grad=True)
        out = jf(Tallying(torch.full((3,), float(i))), w)
        assert _tallies() == forward
        out.backward()
        f(Tallying(torch.full((3,), float(i))), expected).backward()
        torch.testing.assert_close(w.grad, expected.grad)
    assert before is None and forward[0] == 3
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 3)


def test_a_subclass_input_that_requires_grad_is_under_grad_too() -> None:
    """The wrapper itself requires grad, its inner tensor does not: the program runs under the grad
    transform all the same; its gradients are eager's, the entry is traced once, and the class counter
    keeps counting on every call (the forward's ops, and the ones the caller's backward hands the
    output: ``ones_like`` of its gradient)."""

    def f(t):
        return (t * 2).sin().sum()

    jf = jitcore.jit(f)
    deltas = []
    for i in range(4):
        values = torch.full((3,), float(i))
        t, expected = Tallying(values).requires_grad_(), Tallying(values.clone()).requires_grad_()
        start = Tallying.calls
        jf(t).backward()
        deltas.append(Tallying.calls - start)
        f(expected).backward()
        assert type(t.grad) is type(expected.grad)
        torch.testing.assert_close(t.grad.inner, expected.grad.inner)
    assert len(set(deltas)) == 1 and deltas[0] > 3, deltas
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 3)
