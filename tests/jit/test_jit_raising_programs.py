"""Note [A program that raises] (jitcore/jit/eager_entries.py): a program that raises after making
effects keeps them, as eagerly. Differential: each program runs eagerly and jitted over the same
calls; every call's exception (type and message), every mutated object, the input tensors, what was
printed and the RNG streams afterwards must be eager's."""

from __future__ import annotations

import contextlib
import io
import random

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import jitcore


class Box:
    def __init__(self) -> None:
        self.n = 0


def run_calls(fn, calls: int = 3, threshold: float = 0.5):
    """Run ``fn`` ``calls`` times over fresh state; what eager or the jit must agree on."""
    state = {"log": [], "box": Box(), "x": torch.zeros(2)}
    torch.manual_seed(0)
    random.seed(0)
    out = io.StringIO()
    seen = []
    with contextlib.redirect_stdout(out):
        for _ in range(calls):
            try:
                seen.append(("returned", fn(state["x"], state["log"], state["box"], threshold).tolist()))
            except ValueError as exc:
                seen.append(("raised", str(exc)))
    return seen, state["log"], state["box"].n, state["x"].tolist(), out.getvalue(), \
        torch.rand(1).item(), random.random()


def appends_then_raises(x, log, box, threshold):
    log.append(x.sum().item())
    box.n += 1
    x.add_(1)
    if x.sum() > threshold:
        raise ValueError(f"positive after {len(log)} calls, box at {box.n}")
    return x * 2


def prints_then_raises(x, log, box, threshold):
    print("call", len(log))
    log.append(0)
    if len(log) >= 2:
        raise ValueError(f"called {len(log)} times")
    return x + 1


def draws_then_raises(x, log, box, threshold):
    noise = torch.rand(2)
    pick = random.random()
    log.append(round(pick, 6))
    if noise.sum() > threshold:
        raise ValueError("noisy")
    return x + noise


def raises_without_effects(x, log, box, threshold):
    if x.shape[0] == 2:
        raise ValueError(f"two elements, threshold {threshold}")
    return x


@pytest.mark.parametrize("program", [appends_then_raises, prints_then_raises, draws_then_raises,
                                     raises_without_effects], ids=lambda p: p.__name__)
def test_a_raising_program_keeps_eagers_effects(program):
    assert run_calls(jitcore.jit(program)) == run_calls(program)


def test_the_exception_says_the_call_ran_eagerly_and_a_pure_one_names_the_op():
    with pytest.raises(ValueError, match="positive after 1 calls") as info:
        jitcore.jit(appends_then_raises)(torch.zeros(2), [], Box(), 0.5)
    assert "ran as eager runs it" in info.value.__notes__[-1]
    with pytest.raises(ValueError, match="two elements") as info:
        jitcore.jit(raises_without_effects)(torch.zeros(2), [], Box(), 0.5)
    assert info.value.__notes__[-1].startswith("jitcore: raised while tracing raises_without_effects")


def test_a_call_that_does_not_raise_is_still_traced_and_cached():
    jitted = jitcore.jit(appends_then_raises)
    log, box = [], Box()
    x = torch.full((2,), -10.0)
    for _ in range(3):
        jitted(x, log, box, 0.5)
    assert log == [-20.0, -18.0, -16.0] and box.n == 3 and jitcore.cache_misses(jitted) == 1


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["append", "attr", "inplace", "print", "draw"]), max_size=4),
       st.floats(-3, 3), st.integers(1, 4))
def test_effects_before_a_raise_match_eager(effects, threshold, calls):
    def program(x, log, box, threshold):
        for effect in effects:
            if effect == "append":
                log.append(len(log))
            elif effect == "attr":
                box.n += 2
            elif effect == "inplace":
                x.mul_(2).add_(1)
            elif effect == "print":
                print("effect", box.n)
            else:
                log.append(torch.rand(()).item() > 0.5)
        if x.sum() > threshold:
            raise ValueError(f"{len(log)} {box.n} {x.sum().item():.3f}")
        return x - 1

    assert run_calls(jitcore.jit(program), calls, threshold) == run_calls(program, calls, threshold)


def _inside_no_grad(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return x[i] * 2


def _inside_autocast_and_no_grad(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        return (x[i] @ x[i].T).float()


@pytest.mark.parametrize("fn", [_inside_no_grad, _inside_autocast_and_no_grad])
def test_a_computation_raising_inside_no_grad_puts_the_settings_back(fn) -> None:
    """An op that raises on values inside ``with torch.no_grad():`` (autocast too) on a cached call: the
    block's exit puts the settings back eagerly; the computation left grad mode off for good (Note [A
    computation that raises inside no_grad], jitcore/jit/read_rollback.py)."""
    x = torch.arange(9.0).reshape(3, 3)
    jf = jitcore.jit(fn)
    assert torch.equal(jf(x, torch.tensor([1])), fn(x, torch.tensor([1])))
    for call in (fn, jf):
        with pytest.raises(IndexError):
            call(x, torch.tensor([5]))
        assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert jitcore.cache_misses(jf) == 1  # the raising call ran the cached computation


def _grad_off_then_index(x, i):
    torch.set_grad_enabled(False)  # a call, not a ``with``: nothing puts the mode back
    return x[i] * 2


def _grad_off_index_then_on(x, i):
    with torch.no_grad():
        y = x * 2
    torch._C._set_grad_enabled(False)
    z = y[i] + 1
    torch.set_grad_enabled(True)
    return z


@pytest.mark.parametrize("fn", [_grad_off_then_index, _grad_off_index_then_on])
def test_a_computation_raising_after_grad_mode_was_set_leaves_it_as_eager(fn) -> None:
    """``torch.set_grad_enabled(False)`` outside a ``with`` block, then an op that raises on values:
    eagerly grad mode stays off after the error; the jitted call put it back (Note [A raising call
    that leaves grad mode changed], jitcore/jit/raising_calls.py)."""
    x = torch.arange(9.0).reshape(3, 3).requires_grad_()
    try:
        jf = jitcore.jit(fn)
        for i in (torch.tensor([1]), torch.tensor([5]), torch.tensor([2]), torch.tensor([7])):
            modes = []
            for call in (fn, jf):
                torch.set_grad_enabled(True)
                try:
                    out = call(x, i)
                except IndexError:
                    out = None
                value = None if out is None else (out.detach(), out.requires_grad)
                modes.append((torch.is_grad_enabled(), value))
            assert modes[0][0] == modes[1][0], (i, modes)
            assert (modes[0][1] is None) == (modes[1][1] is None), (i, modes)
            if modes[0][1] is not None:
                assert torch.equal(modes[0][1][0], modes[1][1][0]) and modes[0][1][1] == modes[1][1][1]
        assert jitcore.cache_misses(jf) == 1  # the raising calls ran the cached computation first
    finally:
        torch.set_grad_enabled(True)


def _autocast_nesting() -> int:
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


def test_autocast_blocks_a_raising_call_entered_are_left():
    """The traced call's value read (the probe) and a cached call raising inside ``torch.autocast``
    left torch's autocast nesting count raised, so the thread's cast cache was never cleared: a later
    eager ``autocast(float16)`` Linear reused the bfloat16 cast of its weight and raised "mat1 and mat2
    must have the same dtype" (Note [The autocast nesting put back], jitcore/langctx/thread_state.py)."""
    lin = torch.nn.Linear(3, 3)

    def f(x, i):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return lin(x)[i]

    jf = jitcore.jit(f)
    x = torch.ones(2, 3)
    assert torch.equal(jf(x, torch.tensor([1])), f(x, torch.tensor([1])))
    assert _autocast_nesting() == 0
    with pytest.raises(IndexError):
        jf(x, torch.tensor([5]))
    assert _autocast_nesting() == 0
    with torch.autocast("cpu", dtype=torch.float16):
        assert lin(x).dtype == torch.float16
