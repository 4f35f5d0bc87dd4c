"""Calls whose computation raises at run time make eager's Python effects (issue 14).

Note [Effects of a raising call] (jitcore/jit/raising_calls.py): an op whose values decide raises while
the cached computation runs (``torch.linalg.inv`` of a singular matrix, an index out of range); eager
had made the effects before it and those of the ``finally`` bodies and ``except`` handlers on the way
out. Each program alternates calls that return and calls that raise; every call's outcome, the state
the program mutates, what it prints and torch's random stream after the calls are compared with eager's.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch

import jitcore


def finally_appends(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["n"] += 1
    try:
        return torch.linalg.inv(a)
    finally:
        ST["log"].append("finally")


def handler_logs_and_reraises(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["log"].append("before")
    try:
        y = torch.linalg.inv(a)
    except torch.linalg.LinAlgError:
        ST["log"].append("caught")
        raise
    ST["n"] += 1
    return y


def draws_then_raises(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    noise = torch.rand(3, 3)
    ST["log"].append("drawn")
    return torch.linalg.inv(a + noise * 0)


def raises_inside_no_grad(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["n"] += 1
    with torch.no_grad():
        return torch.linalg.inv(a * 2)


def index_out_of_range(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["log"].append("indexing")
    return a[idx]


def prints_then_raises(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    print("call", ST["n"])
    ST["n"] += 1
    return torch.linalg.inv(a)


def writes_its_input_after_the_raise(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["n"] += 1
    try:
        y = torch.linalg.inv(a)
    finally:
        ST["log"].append("finally")
    idx.add_(1)  # an optimizer step after the forward (Note [A raise before the computation writes an input])
    return y


def finally_writes_its_input(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    try:
        return torch.linalg.inv(a)
    finally:
        idx.mul_(2)  # no Python effect: the entry's one change is this write


def finally_writes_after_an_index(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    try:
        return a[idx]
    finally:
        idx.add_(1)


def writes_its_input_then_indexes(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["n"] += 1
    idx[0] = 2  # before the raise (Note [An input written before the computation raises])
    ST["log"].append("written")
    return a[idx]


def writes_a_view_then_gathers(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    ST["n"] += 1
    idx[:1].add_(1)  # a view of the input
    return torch.gather(a, 0, idx.view(2, 1).expand(2, 3))


def rewraps_after_writing_its_input(a: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    try:
        idx[0] = 2  # no Python effect: a handler the computation skips (Note [Handlers a raising ...])
        return a[idx]
    except IndexError as error:
        raise ValueError("an index out of range") from error


ST: dict = {"n": 0, "log": []}  # a global: appending to a list in a dict argument retraces

PROGRAMS = [finally_appends, handler_logs_and_reraises, draws_then_raises, raises_inside_no_grad,
            index_out_of_range, prints_then_raises, writes_its_input_after_the_raise,
            finally_writes_its_input, finally_writes_after_an_index, writes_its_input_then_indexes,
            writes_a_view_then_gathers, rewraps_after_writing_its_input]


def _calls(fn, grad: bool) -> tuple:
    ST.update(n=0, log=[])
    torch.manual_seed(0)
    outcomes, printed = [], io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("error")  # a raising call runs eagerly without a warning
        for good in (True, False, True, False, False, True):
            a = (torch.eye(3) * 2 if good else torch.zeros(3, 3)).requires_grad_(grad)
            idx = torch.tensor([0, 1 if good else 7])
            try:
                out = fn(a, idx)
                outcomes.append(("returned", out.detach().tolist()))
            except (RuntimeError, IndexError, ValueError) as error:
                outcomes.append((type(error).__name__, str(error).splitlines()[0]))
            outcomes.append((torch.is_grad_enabled(), idx.tolist()))
    return outcomes, dict(ST), printed.getvalue(), torch.rand(2).tolist()


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_a_call_whose_computation_raises_makes_eagers_effects(program, grad: bool) -> None:
    """Before: the raising calls (cached, and the first one to raise) made none of the effects: the
    counter and the log kept only the calls that returned, the prints of the raising calls were lost;
    and so where the computation had written an input before it raised (``writes_its_input_then_indexes``,
    ``writes_a_view_then_gathers``: Note [An input written before the computation raises])."""
    jitted = jitcore.jit(program)
    assert _calls(jitted, grad) == _calls(program, grad)
    assert jitcore.cache_misses(jitted) == 1
