"""functools.lru_cache calls a pass made natively, and the call's other runs (jitcore/jit/lru_reruns.py,
jitcore/jit/lru_caches.py: Notes [A hit made later], [What a cached function writes], [A pass's cached
calls, run again eagerly]). Each program runs eagerly and under jitcore on twin state over several calls;
every call's value (or exception), the cached function's log, the program's state and ``cache_info()`` are
compared after each call."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore

BOUNDS = [pytest.param(128, id="lru_cache"), pytest.param(None, id="cache")]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        out = call()
    except Exception as error:  # noqa: BLE001 - compared with eager's
        return ("raised", type(error).__name__, str(error))
    return out.detach().tolist() if isinstance(out, torch.Tensor) else out


def _run_twins(make: Callable[[list, dict], tuple], calls: int, x: torch.Tensor | None = None) -> Any:
    """``make(log, state)`` gives (program, cached function); eager on one twin, jitted on the other.
    Returns the jitted program."""
    runs = []
    for jit in (False, True):
        log: list = []
        state: dict = {"n": 0}
        program, cached = make(log, state)
        run = jitcore.jit(program) if jit else program
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(calls):
                arg = torch.ones(2) if x is None else x
                out = _outcome(functools.partial(run, arg))
                seen.append((out, list(log), dict(state), cached.cache_info()))
        runs.append((seen, run))
    (eager, _), (jitted, run) = runs
    for i, (expected, actual) in enumerate(zip(eager, jitted)):
        assert actual == expected, f"call {i}"
    return run


def _log_read_before(maxsize: int | None, counter: bool) -> Callable[[list, dict], tuple]:
    def make(log: list, state: dict) -> tuple:
        @functools.lru_cache(maxsize=maxsize)
        def table(n: int) -> float:
            log.append(n)
            return n * 1.0

        def program(x: torch.Tensor) -> torch.Tensor:
            before = len(log)
            if counter:
                state["n"] += 1  # a counter: the call is traced twice (Note [One native call per call ...])
            return x * table(2) + before

        return program, table

    return make


@pytest.mark.parametrize("maxsize", BOUNDS)
@pytest.mark.parametrize("counter", [False, True], ids=["one pass", "two passes"])
def test_a_write_of_the_function_into_an_object_read_before_is_made_once(maxsize: int | None,
                                                                         counter: bool) -> None:
    """Note [What a cached function writes]. Before (/tmp/eff54-probes/miss_read_before2.py): one pass:
    the miss's append to the log the program had read was in the pass's diff, replayed on every cached call
    (eager log [2], [2]; jit [2], [2, 2]); two passes: the first pass's restore undid it and the second took
    the call as made (jit log [] after the first call)."""
    jitted = _run_twins(_log_read_before(maxsize, counter), calls=4)
    assert jitcore.cache_misses(jitted) == 2  # the miss's trace answers its call only; the hit's is kept


def _written_before(log: list, state: dict) -> tuple:
    @functools.lru_cache
    def table(n: int) -> float:
        log.append(n)
        return n * 1.0

    def program(x: torch.Tensor) -> torch.Tensor:
        log.append(-1)
        return x * table(2)

    return program, table


def test_a_write_of_the_function_after_the_programs_own_is_made_once() -> None:
    """Note [What a cached function writes]: the program appends, then the miss's function. Before: the
    first call's log lost the function's entry or the cached calls replayed it."""
    _run_twins(_written_before, calls=4)


def _refused_after(maxsize: int | None, hit_first: bool) -> Callable[[list, dict], tuple]:
    def make(log: list, state: dict) -> tuple:
        @functools.lru_cache(maxsize=maxsize)
        def table(n: int) -> float:
            log.append(n)
            return n * 1.0

        if hit_first:
            table(2)

        def program(x: torch.Tensor) -> torch.Tensor:
            before = len(log)
            y = x * table(2) + before
            x.register_hook(lambda g: g)  # JC-T001 after the call: the pass stops, the call runs eagerly
            return y.detach()

        return program, table

    return make


@pytest.mark.parametrize("maxsize", BOUNDS)
@pytest.mark.parametrize("hit_first", [False, True], ids=["miss", "hit"])
def test_a_call_the_stopped_pass_made_is_made_once(maxsize: int | None, hit_first: bool) -> None:
    """Note [A pass's cached calls, run again eagerly], Note [A hit made later]. Before
    (/tmp/eff53-probes/lru_rerun_lost.py): the eager run after the refusal hit the entry the pass's miss had
    cached (``hits`` 1 where eager has 0) and the function's append, undone with the snapshots, was lost
    (log [] where eager has [2]); a hit the pass made was counted twice."""
    x = torch.ones(2, requires_grad=True)
    _run_twins(_refused_after(maxsize, hit_first), calls=3, x=x)


def _raises_after_a_write(maxsize: int | None) -> Callable[[list, dict], tuple]:
    def make(log: list, state: dict) -> tuple:
        @functools.lru_cache(maxsize=maxsize)
        def bad(n: int) -> float:
            log.append(n)
            raise KeyError(n)

        def program(x: torch.Tensor) -> torch.Tensor:
            state["n"] += 1
            bad(3)
            return x

        return program, bad

    return make


@pytest.mark.parametrize("maxsize", BOUNDS)
def test_a_function_raising_after_the_programs_write_runs_once(maxsize: int | None) -> None:
    """Note [A pass's cached calls, run again eagerly]. Before (/tmp/eff53-probes/lru_raise_variants.py
    "uncaught after an effect"): the program raised after a write, so the call ran again eagerly, which
    ran the function again (log [3, 3], ``misses`` 2 where eager has [3], 1)."""
    _run_twins(_raises_after_a_write(maxsize), calls=3)


def _hit_then_raise(log: list, state: dict) -> tuple:
    @functools.lru_cache
    def table(n: int) -> float:
        log.append(n)
        if n > 2:
            raise KeyError(n)
        return n * 1.0

    table(2)

    def program(x: torch.Tensor) -> torch.Tensor:
        y = x * table(2)
        info = table.cache_info()
        table(3)
        return y + info.hits

    return program, table


def test_a_hit_before_the_programs_exception_is_counted_once() -> None:
    """Note [A hit made later]: the pass finds the hit without making it; the program raises after it, and
    the call's eager run makes it (the counts read in between count it)."""
    _run_twins(_hit_then_raise, calls=3)


class _Model:
    def __init__(self) -> None:
        self.calls = 0
        self.w = 1.5

    @functools.cache  # noqa: B019 - keyed by the instance, as the programs this mirrors
    def table(self, n: int) -> float:
        self.calls += 1
        return n * self.w


@pytest.mark.parametrize("touched", [False, True], ids=["read", "written before"])
def test_a_cached_methods_write_into_its_instance_is_made_once(touched: bool) -> None:
    """Note [What a cached function writes]: ``m.calls += 0`` makes ``calls`` a counter (a second pass of the
    call) before the cached method's miss writes ``self.calls``. Before (/tmp/eff54-probes/lru_method.py):
    the second pass took the call as made and lost the write: eager 3.0 and ``calls`` 1 on every call, jit
    2.0 and 0."""
    seen = []
    for jit in (False, True):
        _Model.table.cache_clear()
        model = _Model()

        def program(x: torch.Tensor, model: _Model = model) -> torch.Tensor:
            if touched:
                model.calls += 0
            return x * model.table(2) + model.calls

        run = jitcore.jit(program) if jit else program
        seen.append([(run(torch.ones(2)).tolist(), model.calls, _Model.table.cache_info()) for _ in range(4)])
    assert seen[1] == seen[0]


def _reads_the_programs_counter(log: list, state: dict) -> tuple:
    @functools.lru_cache
    def table(n: int) -> float:
        log.append(state["n"])
        return n * 1.0 + state["n"]

    def program(x: torch.Tensor) -> torch.Tensor:
        state["n"] += 1  # a counter: a dynamic number the pass holds in the caller's dict
        return x * table(state["k"]) + state["n"]

    return program, table


def test_a_miss_reading_a_counter_the_program_wrote_reads_its_value() -> None:
    """Note [A number the program wrote, read by a miss]. Before (/tmp/eff54-probes/lru_reads_proxy.py):
    the miss read the pass's NumberProxy, which the cache and the log kept: a later call raised TypeError
    ('Tensor' and 'NumberProxy')."""
    def make(log: list, state: dict) -> tuple:
        state["k"] = 0
        return _reads_the_programs_counter(log, state)

    def switching(log: list, state: dict) -> tuple:
        program, table = make(log, state)

        def switch(x: torch.Tensor) -> torch.Tensor:
            state["k"] = state["n"] % 3 // 2  # 0, 0, 1, 0, 0, 1: a new key on the third call
            return program(x)

        return switch, table

    _run_twins(make, calls=4)
    _run_twins(switching, calls=6)
