"""Modes the caller enters around a call of a jitted function (Note [Modes around the call],
jitcore/jit/caller_modes.py): eagerly such a mode is offered every op of every call. Such calls are traced
under the modes (their rewrites in the trace, their state effects replayed on the caller's instance), in
entries of their own: a cache entry made outside a mode is neither used under it nor changed by it.
Each program runs eagerly and jitted on equal inputs; values, what the mode saw and the misses are
compared. Before, every call under such a mode ran eagerly (one warning)."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.testing._internal.logging_tensor import LoggingTensorMode, capture_logs
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import jitcore


class DoubleLinear(TorchFunctionMode):
    """Rewrites ``F.linear``'s result, as a quantization or debugging mode does."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is F.linear else out


class CountOps(TorchDispatchMode):
    """Lists the aten ops it sees (its state is replayed on the caller's instance by cached calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))


def test_an_entry_traced_outside_a_mode_is_not_used_under_it() -> None:
    """Before: the cached entry answered under the mode, without its rewrite."""
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced: no "runs eagerly" warning
        for _ in range(2):
            with DoubleLinear():
                expected, got = model(x), jitted(x)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 4)


def test_a_call_under_a_mode_leaves_no_entry_for_calls_outside_it() -> None:
    """Before: the first call, traced under the mode, kept its rewrite for every later call."""
    weight = torch.nn.Parameter(torch.randn(5, 3))  # under grad: traced by the grad transform

    def f(x):
        return F.linear(x, weight)

    jitted = jitcore.jit(f)
    x = torch.randn(2, 3)
    with DoubleLinear():
        for _ in range(2):
            torch.testing.assert_close(jitted(x), f(x), rtol=0, atol=0)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), f(x), rtol=0, atol=0)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)


def test_a_dispatch_mode_around_the_call_sees_every_calls_ops() -> None:
    """The model's parameters require grad: the entry runs pass 1 under torch's autograd (Note [A
    dispatch mode under autograd]), the mode's forward ops replayed. Before: the call ran eagerly."""
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    jitted(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced: no "runs eagerly" warning
        for _ in range(3):
            eager_mode, jit_mode = CountOps(), CountOps()
            with eager_mode:
                expected = model(x)
            with jit_mode:
                got = jitted(x)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            assert jit_mode.ops == eager_mode.ops and jit_mode.ops
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)


def test_flop_counting_around_a_jitted_model_counts_as_eagerly() -> None:
    """FlopCounterMode's module tracker registers module-wide hooks anew per counter: around a module's
    call, the call runs eagerly (Note [Modes around the call])."""
    model, x = _model(), torch.randn(4, 8)
    jitted = jitcore.jit(model)
    jitted(x)
    eager_counter, jit_counter = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with eager_counter:
        model(x).sum().backward()
    with jit_counter:
        jitted(x).sum().backward()
    assert jit_counter.get_total_flops() == eager_counter.get_total_flops() > 0


def test_a_default_device_context_is_not_a_mode_that_stops_caching() -> None:
    def f(x):
        return x + torch.ones(3)

    jitted = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs eagerly" warning
        with torch.device("cpu"):
            for _ in range(3):
                torch.testing.assert_close(jitted(torch.zeros(3)), f(torch.zeros(3)))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


class Count(TorchFunctionMode):
    """Counts the torch calls it is offered in ``self.n``."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


class MulToAdd(TorchDispatchMode):
    """Rewrites ``aten.mul`` into ``aten.add``."""

    def __init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.mul.Tensor:
            func = torch.ops.aten.add.Tensor
        return func(*args, **(kwargs or {}))


class Doubling(TorchFunctionMode):
    """Doubles ``torch.relu``'s result where its flag is on (the trace reads the flag)."""

    def __init__(self, on: bool) -> None:
        super().__init__()
        self.on = on

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return out * 2 if self.on and func is torch.relu else out


def _program(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x * y) + x.sum()


def _state(mode: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(mode).items() if not k.startswith("old_")}


def _run_under(modes: list[Any], fn: Callable[..., Any], *args: Any) -> Any:
    with contextlib.ExitStack() as stack:
        for mode in modes:
            stack.enter_context(mode)
        return fn(*args)


@pytest.mark.parametrize("kinds", [[CountOps], [Count], [MulToAdd], [CountOps, Count],
                                   [Count, MulToAdd, CountOps]],
                         ids=lambda kinds: "+".join(k.__name__ for k in kinds))
def test_modes_around_the_call_are_traced_and_a_fresh_instance_per_call_hits(kinds: list[type]) -> None:
    """Before: every call ran eagerly (0 misses, 0 hits, a warning)."""
    jitted = jitcore.jit(_program)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            x, y = torch.randn(3), torch.randn(3)
            eager_modes, jit_modes = [k() for k in kinds], [k() for k in kinds]
            expected, got = _run_under(eager_modes, _program, x, y), _run_under(jit_modes, jitted, x, y)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            assert [_state(m) for m in jit_modes] == [_state(m) for m in eager_modes]
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)
    assert torch._C._len_torch_function_stack() == torch._C._len_torch_dispatch_stack() == 0  # noqa: SLF001


def test_calls_with_no_mode_other_modes_and_nested_modes_each_answer_as_eagerly() -> None:
    """One jitted function called with no mode, one mode, another type, two nested: each is its own
    entry (a guarded miss), and each repeated call hits. Before: every call under a mode ran eagerly."""
    jitted = jitcore.jit(_program)
    x, y = torch.randn(3), torch.randn(3)
    sequence = [[], [CountOps], [Count], [CountOps, Count], [], [CountOps], [MulToAdd], [Count],
                [CountOps, Count]]
    for kinds in sequence:
        eager_modes, jit_modes = [k() for k in kinds], [k() for k in kinds]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            expected, got = _run_under(eager_modes, _program, x, y), _run_under(jit_modes, jitted, x, y)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert [_state(m) for m in jit_modes] == [_state(m) for m in eager_modes]
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (5, 4)


def test_a_flag_of_the_mode_that_the_trace_read_is_guarded() -> None:
    jitted = jitcore.jit(_program)
    x, y = torch.randn(3), torch.randn(3)
    for on in (True, False, True, False):
        expected, got = _run_under([Doubling(on)], _program, x, y), _run_under([Doubling(on)], jitted, x, y)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)


def test_torchs_logging_tensor_mode_around_the_call_logs_as_eagerly() -> None:
    def f(x):
        return (x * 2).sin()

    jitted = jitcore.jit(f)
    logger = logging.getLogger("LoggingTensor")
    level, propagate = logger.level, logger.propagate
    try:
        for _ in range(3):
            x = torch.randn(3)
            with capture_logs() as eager_logs, LoggingTensorMode():
                expected = f(x)
            with capture_logs() as jit_logs, LoggingTensorMode():
                got = jitted(x)
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            assert jit_logs == eager_logs and len(jit_logs) == 2
    finally:  # capture_logs leaves the logger at INFO, not propagating (test_subclasses_by_others_7.py)
        logger.setLevel(level)
        logger.propagate = propagate
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def _mlp_program(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.linear(torch.relu(F.linear(x, w1)), w2).softmax(-1)


def _counts(counter: FlopCounterMode) -> dict[str, dict[str, int]]:
    return {k: {str(op): n for op, n in v.items()} for k, v in counter.get_flop_counts().items()}


def _state_of(mode: Any) -> Any:
    return _counts(mode) if isinstance(mode, FlopCounterMode) else _state(mode)


def test_torchs_logging_tensor_mode_under_grad_logs_as_eagerly() -> None:
    """LoggingTensorMode formats each op's tensors as it logs them, below autograd: the outputs have no
    grad_fn yet. Replayed after a computation run under autograd, its log lines showed grad_fn (found
    while making dispatch modes under grad traced): such a call runs eagerly, with its reason."""
    weight = torch.randn(3, requires_grad=True)

    def f(x):
        return (x * weight).sin().sum()

    jitted = jitcore.jit(f)
    logger = logging.getLogger("LoggingTensor")
    level, propagate = logger.level, logger.propagate
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                x = torch.randn(3)
                results = []
                for fn in (f, jitted):
                    weight.grad = None
                    with capture_logs() as logs, LoggingTensorMode():
                        out = fn(x)
                        out.backward()
                    results.append((out.detach(), weight.grad, logs))
                (expected, expected_grad, expected_logs), (got, grad, logs) = results
                torch.testing.assert_close(got, expected, rtol=0, atol=0)
                torch.testing.assert_close(grad, expected_grad, rtol=0, atol=0)
                assert logs == expected_logs and "aten.cos.default" in "".join(logs)
    finally:  # capture_logs leaves the logger at INFO, not propagating
        logger.setLevel(level)
        logger.propagate = propagate
    assert sum("that logs or prints" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize("program", [_program, _mlp_program], ids=["pointwise", "mlp"])
@pytest.mark.parametrize("kind", [CountOps, lambda: FlopCounterMode(display=False)],
                         ids=["CountOps", "flops"])
def test_a_dispatch_mode_over_tensors_requiring_grad_sees_eagers_forward_and_backward_ops(
        program: Callable[..., Any], kind: Callable[[], Any]) -> None:
    """Eagerly a dispatch mode runs below autograd and, with ``backward()`` run under it, is handed the
    backward's ops too. The entry runs pass 1 under torch's autograd (Note [A dispatch mode under
    autograd]): the mode's forward state is replayed, and the backward, eager's own graph, hands it
    eager's ops. Before: every call ran eagerly (a JC-T001 warning)."""
    jitted = jitcore.jit(program)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced: no "runs eagerly" warning
        for _ in range(4):
            if program is _program:
                inputs = [torch.randn(3, requires_grad=True), torch.randn(3)]
            else:
                inputs = [torch.randn(4, 8), torch.randn(16, 8, requires_grad=True),
                          torch.randn(8, 16, requires_grad=True)]
            results = []
            for fn in (program, jitted):
                mode, given = kind(), [t.detach().requires_grad_(t.requires_grad) for t in inputs]
                with mode:
                    out = fn(*given)
                    (out * torch.arange(out.numel()).view(out.shape)).sum().backward()
                results.append((out.detach(), [t.grad for t in given], _state_of(mode)))
            (expected, expected_grads, expected_state), (got, grads, state) = results
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            torch.testing.assert_close(grads, expected_grads, rtol=0, atol=0)
            assert state == expected_state and (state or program is _program)  # no flops pointwise
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def test_a_dispatch_mode_that_rewrites_an_op_under_grad_runs_eagerly_and_says_why() -> None:
    """Eagerly autograd differentiates ``aten.mul`` while the mode runs ``aten.add`` for it (and rewrites
    the backward's ``mul`` too): pass 1 would hold ``add`` and differentiate that, so the call runs
    eagerly."""
    jitted = jitcore.jit(_program)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x, y = torch.randn(3, requires_grad=True), torch.randn(3)
            with MulToAdd():
                expected = _program(x, y)
                expected.sum().backward()
            expected_grad, x.grad = x.grad, None
            with MulToAdd():
                got = jitted(x, y)
                got.sum().backward()
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            torch.testing.assert_close(x.grad, expected_grad, rtol=0, atol=0)
    assert sum("something else than that operation's own result" in str(w.message) for w in caught) == 1


def test_flop_counting_around_a_jitted_function_counts_as_eagerly_and_hits() -> None:
    """FlopCounterMode's dispatch is torch's code, whose state jitcore took as it was (a library's): the
    first call counted while tracing, cached calls counted nothing; its counts are a defaultdict with a
    lambda of each counter's own, guarded by identity (a miss per counter). Now: 1 miss, 3 hits."""
    w1, w2 = torch.randn(16, 8), torch.randn(8, 16)
    jitted = jitcore.jit(_mlp_program)
    for _ in range(4):
        x = torch.randn(4, 8)
        eager_counter, jit_counter = FlopCounterMode(display=False), FlopCounterMode(display=False)
        with eager_counter, torch.no_grad():
            expected = _mlp_program(x, w1, w2)
        with jit_counter, torch.no_grad():
            got = jitted(x, w1, w2)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert _counts(jit_counter) == _counts(eager_counter) and jit_counter.get_total_flops() == 2048
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def test_flop_counting_around_a_function_that_runs_a_module_traces_once_then_runs_eagerly() -> None:
    """A function that runs a module reads the module-wide hook dicts, whose hooks FlopCounterMode's
    tracker registers anew per counter: traced, every call with a fresh counter missed (12 misses in 12
    calls, an eager entry too under grad). After the first miss such calls run eagerly (Note
    [Module-wide hooks under the caller's modes]); counts equal eager's on every call."""
    model = _model()

    def f(x):
        return model(x).relu()

    for grad in (False, True):
        jitted = jitcore.jit(f)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(5):
                x = torch.randn(4, 8)
                counts = []
                for fn in (f, jitted):
                    counter = FlopCounterMode(display=False)
                    with counter, torch.set_grad_enabled(grad):
                        out = fn(x)
                        if grad:
                            out.sum().backward()
                    counts.append((out.detach(), _counts(counter)))
                (expected, expected_counts), (got, got_counts) = counts
                torch.testing.assert_close(got, expected, rtol=0, atol=0)
                assert got_counts == expected_counts and got_counts
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 0)
        assert sum("around a call that runs modules" in str(w.message) for w in caught) == 1


def _scaled(x: torch.Tensor, n: float) -> torch.Tensor:
    return x * n + 1


@pytest.mark.parametrize("kind", [CountOps, Count])
def test_dynamic_numbers_named_are_dynamic_under_a_mode(kind: type) -> None:
    """``dynamic_numbers=("n",)`` was not passed to the calls under a mode: one entry per value (4 misses
    in 5 calls). Now as without a mode: one entry for ``n`` passed by position, one by keyword."""
    jitted = jitcore.jit(_scaled, dynamic_numbers=("n",))
    for n in (1.5, 2.5, 3.5, 4.5, 5.5):
        x = torch.randn(3)
        eager_mode, jit_mode = kind(), kind()
        with eager_mode:
            expected = _scaled(x, n)
        with jit_mode:
            got = jitted(x, n=n) if n > 4 else jitted(x, n)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert _state(jit_mode) == _state(eager_mode)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 3)


def _backward_inside(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    loss = torch.relu(x @ w).sum()
    loss.backward()
    return loss.detach()


def test_a_dispatch_mode_around_a_backward_inside_the_function_runs_eagerly_and_says_why() -> None:
    """A backward inside the jitted function is traced by jitcore (docs/autograd.md), not handed to the
    mode: traced, the mode lost the backward's ops (found while making dispatch modes under grad
    traced). Such a call runs eagerly, with its reason."""
    jitted = jitcore.jit(_backward_inside)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x, w = torch.randn(3, 4), torch.randn(4, 5)
            results = []
            for fn in (_backward_inside, jitted):
                mode, given = CountOps(), w.clone().requires_grad_()
                with mode:
                    out = fn(x, given)
                results.append((out, given.grad, mode.ops))
            (expected, expected_grad, expected_ops), (got, grad, ops) = results
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            torch.testing.assert_close(grad, expected_grad, rtol=0, atol=0)
            assert ops == expected_ops and "aten.threshold_backward.default" in ops
    assert sum("with a backward inside the function" in str(w.message) for w in caught) == 1


class Amax(TorchDispatchMode):
    """Lists each floating result's largest magnitude, read with ``float()`` (its Python state)."""

    def __init__(self) -> None:
        super().__init__()
        self.amax: list[float] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            self.amax.append(float(out.abs().max()))
        return out


class CountLarge(TorchDispatchMode):
    """Counts the results whose largest magnitude is over 2 (a branch on a value it reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.large = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.mul.Tensor and out.abs().max().item() > 2:
            self.large += 1
        return out


@pytest.mark.parametrize(("kind", "entries"), [(Amax, 1), (CountLarge, 2)], ids=["Amax", "CountLarge"])
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_a_mode_that_reads_values_is_one_entry_per_branch(kind: type, entries: int, grad: bool) -> None:
    """A number the mode reads of a tensor is a name of the computation (its value in the mode's state
    on each call), checked only where the mode branches on it: one entry, or one per branch, over six
    calls with new values, with and without grad (backward under the mode). Before, under grad the call
    ran eagerly (a dispatch mode over tensors requiring grad); traced without the names, each value
    was an entry (6 misses in 6 calls)."""
    jitted = jitcore.jit(_program)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(6):
            inputs = [torch.randn(3) * (i + 1) * 0.5, torch.randn(3)]
            results = []
            for fn in (_program, jitted):
                mode = kind()
                given = [t.clone().requires_grad_(grad and j == 0) for j, t in enumerate(inputs)]
                with mode:
                    out = fn(*given)
                    if grad:
                        out.sum().backward()
                results.append((out.detach(), given[0].grad, _state(mode)))
            (expected, expected_grad, expected_state), (got, got_grad, state) = results
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
            torch.testing.assert_close(got_grad, expected_grad, rtol=0, atol=0)
            assert state == expected_state
    assert jitcore.cache_misses(jitted) == entries and jitcore.cache_hits(jitted) == 6 - entries


def test_the_callers_modes_are_back_on_torchs_stacks_after_an_exception() -> None:
    def f(x):
        if x.shape[0] == 2:
            raise ValueError("two")
        return x + 1

    jitted = jitcore.jit(f)
    mode = CountOps()
    with mode:
        for _ in range(2):
            with pytest.raises(ValueError, match="two"):
                jitted(torch.ones(2))
        assert torch._C._get_dispatch_stack_at(0) is mode  # noqa: SLF001
        x = torch.ones(3)
        mode.ops.clear()
        got = jitted(x)
    torch.testing.assert_close(got, torch.full((3,), 2.0))
    assert mode.ops == ["aten.add.Tensor"]
