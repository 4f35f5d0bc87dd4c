"""Functions the program makes and returns or stores (Note [A closure over a call's objects],
jitcore/jit/outputs.py): a closure whose cells hold this call's objects is eager's on every call; one
over constants and fixed state stays traced.

Differential: each program runs several calls eagerly and jitted; the caller uses the closures it got
after each call, and everything they reach is compared.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import jitcore

LOG = [0]


class Holder:
    callback: Any = None


def _run(fn: Any, calls: int = 3) -> tuple[list, list]:
    """Each call's output and what the caller sees after using the closures the call handed out."""
    seen, log = [], []
    for k in range(calls):
        out = fn(log, torch.full((2,), float(k)))
        for closure in (out[1], Holder.callback):
            if callable(closure):
                seen.append(closure(-k))
        seen.append((out[0].tolist(), list(log)))
    return seen, log


def _both(program: Any) -> tuple[Any, Any, Any]:
    Holder.callback = None
    eager = _run(program)
    Holder.callback = None
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _run(jitted)
    return eager, got, jitted


def test_a_stored_closure_over_a_list_argument_appends_to_the_callers_list():
    """``HOLD.cb = lambda g: log.append(g)``: the stored function's cell held the pass's list, so what the
    caller appended through it after the call was lost ([1, 1, 1] where eager has [1, -1, 1, -2, ...])."""

    def program(log, x):
        f = lambda g: log.append(g)  # noqa: E731
        f(1)
        Holder.callback = f
        return x + 1, None

    eager, got, _ = _both(program)
    assert got == eager


def test_a_returned_closure_over_a_list_it_made_is_each_calls_own():
    """Each eager call makes a new ``acc``; the pass's closure was handed to every call, one list for all."""

    def program(log, x):
        acc: list = []
        return x * 2, lambda v: (acc.append(v), len(acc))[1]

    eager, got, _ = _both(program)
    assert got == eager


def test_a_closure_over_constants_and_fixed_state_stays_traced():
    """Nothing of the call's in its cells: the one function is eager's answer on every call too."""

    def program(log, x):
        k = 3
        return x + k, lambda v: LOG.append(v * k)

    eager, got, jitted = _both(program)
    assert got == eager
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def test_closures_that_call_each_other_are_looked_at_once():
    """Two inner functions holding each other (mutual recursion) looped in the check of their cells."""

    def program(log, x):
        def even(n: int) -> bool:
            return True if n == 0 else odd(abs(n) - 1)

        def odd(n: int) -> bool:
            return False if n == 0 else even(abs(n) - 1)

        Holder.callback = even
        return x - 1, None

    eager, got, jitted = _both(program)
    assert got == eager
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


class _State:
    def __init__(self) -> None:
        self.log: list = []
        self.cb: Any = None


def _store_a_closure_over_the_argument(s: _State, x: torch.Tensor) -> torch.Tensor:
    s.cb = lambda g: s.log.append(g)
    s.cb(x.sum())
    return x * 2


def test_a_closure_over_an_argument_stored_into_it_does_not_trace_every_call() -> None:
    """Note [Eager whatever the contents] (jit/eager_entries.py): its eager entry guarded ``s.log``'s length
    and ``s.cb``'s identity, new on every call, so each call traced again (20 in 20); the closures work as
    eager's."""
    eager, state = _State(), _State()
    jitted = jitcore.jit(_store_a_closure_over_the_argument)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(20):
            x = torch.full((2,), float(k))
            assert torch.equal(jitted(state, x), _store_a_closure_over_the_argument(eager, x))
            state.cb(-k), eager.cb(-k)
            assert [float(v) for v in state.log] == [float(v) for v in eager.log]
    assert jitcore.cache_misses(jitted) == 1


def _returns_the_closure(log: list, x: torch.Tensor) -> Any:
    f = lambda v: log.append(v)  # noqa: E731
    return x + 1, f


def _stores_the_closure(log: list, x: torch.Tensor) -> Any:
    f = lambda v: log.append(v)  # noqa: E731
    Holder.callback = f
    return x + 1, None


def _calls_then_returns_it(log: list, x: torch.Tensor) -> Any:
    f = lambda v: log.append(v)  # noqa: E731
    f(x.sum())
    return x * 2, f


def _returns_it_made_there(log: list, x: torch.Tensor) -> Any:
    return x - 1, (lambda v: log.extend([v, v]))


@pytest.mark.parametrize("program", [_returns_the_closure, _stores_the_closure, _calls_then_returns_it,
                                     _returns_it_made_there], ids=lambda p: p.__name__.strip("_"))
def test_a_closure_over_a_list_argument_handed_out_is_traced_once(program: Any) -> None:
    """Note [A closure over a list argument handed out] (jit/closure_appends.py): ``f = lambda v:
    log.append(v); return f`` with ``log`` an argument was an eager entry on every call ("whose cells hold
    objects of this call's"); the caller appends to ``log`` between calls. Now one trace; each call's
    closure appends to that call's list, as eager's."""
    Holder.callback = None
    eager, eager_log, eager_cells = [], [], []
    jitted_log: list = []
    jitted = jitcore.jit(program)
    got, got_cells = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for runner, log, seen, cells in ((program, eager_log, eager, eager_cells),
                                         (jitted, jitted_log, got, got_cells)):
            for k in range(4):
                out = runner(log, torch.full((2,), float(k)))
                closure = out[1] if out[1] is not None else Holder.callback
                cells.append(closure.__closure__[0].cell_contents is log)
                closure(10 * k)
                log.append(-k)  # the caller's own append between calls
                seen.append((out[0].tolist(), [float(v) for v in log]))
    assert got == eager
    assert got_cells == eager_cells == [True] * 4
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def test_a_handed_out_closure_that_reads_the_list_argument_reads_the_callers_list() -> None:
    """A closure that reads the list (``len(log)``, ``log[-1]``) is no appending closure: the list is bound
    whole (a trace per length), and each call's closure reads the list that call passes, as eager's."""

    def program(log: list, x: torch.Tensor) -> Any:
        log.append(len(log))
        return x + len(log), lambda v: (log.append(v), len(log), log[-2])[1:]

    eager, got, _ = _both(program)
    assert got == eager


class _Config:
    def __init__(self, log: list) -> None:
        self.log = log


def _over_an_item(x: torch.Tensor, cfg: dict) -> Any:
    log = cfg["log"]
    return (lambda v: log.append(v)), x + 1


def _over_an_attribute(x: torch.Tensor, cfg: _Config) -> Any:
    log = cfg.log
    return (lambda v: log.append(v)), x + 1


def _over_a_keyword(x: torch.Tensor, *, log: list) -> Any:
    return (lambda v: log.append(v)), x + 1


_PASSES = {_over_an_item: lambda x, log: ((x, {"log": log}), {}),
           _over_an_attribute: lambda x, log: ((x, _Config(log)), {}),
           _over_a_keyword: lambda x, log: ((x,), {"log": log})}


@pytest.mark.parametrize("program", list(_PASSES), ids=lambda p: p.__name__.strip("_"))
def test_a_cached_call_handing_out_a_closure_over_a_passed_list_performs_no_effects(
        program: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [Effects that perform nothing] (jit/effects.py), Note [A passed object read where the plan
    runs] (jit/copy_plans.py): the program writes nothing, so a cached call goes from the computation to
    the output's rebuild, which reads the list this call passes from its arguments (before: each cached
    call diffed no effects in ``Effects._finish`` and read the list through ``Path.get``, 4.2x eager's
    time). Each call's closure appends to that call's list, as eager's."""
    from jitcore.jit.effects import Effects
    from jitcore.prologue import Path

    jitted = jitcore.jit(program)
    seen: dict[str, int] = {"finish": 0, "get": 0}
    finish, get = Effects._finish, Path.get

    def counted(name: str, real: Any) -> Any:
        def run(*args: Any) -> Any:
            seen[name] += 1
            return real(*args)

        return run

    results = []
    for runner in (program, jitted):
        got = []
        for k in range(4):
            if k == 1 and runner is jitted:  # the calls after the pass
                monkeypatch.setattr(Effects, "_finish", counted("finish", finish))
                monkeypatch.setattr(Path, "get", counted("get", get))
            log: list = []
            args, kwargs = _PASSES[program](torch.full((2,), float(k)), log)
            closure, y = runner(*args, **kwargs)
            closure(10 * k)
            got.append((y.tolist(), log, closure.__closure__[0].cell_contents is log))
        results.append(got)
    assert results[1] == results[0]
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1
    assert seen == {"finish": 0, "get": 0}
