"""Calls whose value changes per call (clocks, Python's random generators) run eagerly, as eager
computes them (jitcore/jit/nondeterministic.py). They were constants of the trace: every cached call
returned the first call's ``time.time()`` and took the first call's side of ``random.random() < p``.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import os
import random
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore
from jitcore.errors import UnsupportedOperationError

X = torch.arange(3.0)


def _calls(fn: Callable[..., Any], seed: int, n: int = 4) -> list[Any]:
    random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager entry's warning
        return [fn(X + i) for i in range(n)]


@pytest.mark.parametrize("draw", [
    lambda: random.random(),
    lambda: random.randint(0, 10**9),
    lambda: random.choice(range(10**9)),
    lambda: random.gauss(0.0, 1.0),
])
def test_python_random_draws_are_eagers_on_every_call(draw: Callable[[], Any]) -> None:
    def f(x):
        value = draw()
        return (x * 2 if value > 0.5 else x - 1), value

    expected = _calls(f, seed=3)
    got = _calls(jitcore.jit(f), seed=3)
    assert_same(got, expected)
    assert len({v for _, v in got}) == len(got)  # a new draw per call


def test_a_random_generator_passed_in() -> None:
    def f(x, rng):
        return x * rng.random()

    jf = jitcore.jit(f)
    eager_rng, jit_rng = random.Random(5), random.Random(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            assert_same(jf(X, jit_rng), f(X, eager_rng))
    assert jit_rng.getstate() == eager_rng.getstate()


@pytest.mark.parametrize("clock", [
    time.time, time.perf_counter, time.monotonic_ns, lambda: datetime.datetime.now(),
    lambda: datetime.date.today(), lambda: time.localtime(), lambda: uuid.uuid4(), lambda: os.urandom(8),
])
def test_clocks_and_system_randomness_are_read_on_every_call(clock: Callable[[], Any]) -> None:
    def f(x):
        return x + 1, clock()

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = jf(X)[1]
        time.sleep(0.002)
        second = jf(X)[1]
    assert type(first) is type(clock())
    if not isinstance(first, (datetime.date, time.struct_time)):  # (those change once a day, a second)
        assert first != second
    assert any("runs eagerly" in str(w.message) and "new value on every call" in str(w.message)
               for w in caught)


def test_fullgraph_refuses_with_the_reason() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"time\.time\(\) gives a new value on every call"):
        jitcore.jit(lambda x: x * time.time(), fullgraph=True)(X)


def test_the_time_of_a_given_timestamp_is_traced() -> None:
    def f(x, stamp):
        return x * time.localtime(stamp).tm_year

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager entry
        assert_same(jf(X, 0.0), f(X, 0.0))
        assert_same(jf(X, 0.0), f(X, 0.0))
    assert jitcore.cache_hits(jf) == 1


def test_log_records_stay_traced() -> None:
    """logging reads the clock for each record's creation time: those calls are exempt (the record's
    time is the trace's), so a function that logs is still traced."""
    logger = logging.getLogger("jitcore.tests.nondeterministic")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False

    def f(x):
        logger.warning("step")
        return x * 2

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            assert_same(jf(X), f(X))
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)


_IDS = itertools.count()
_SCALES = itertools.cycle([1.0, 2.0, 3.0])


def _made_before():
    yield from range(100)


_NUMBERS = _made_before()


@pytest.mark.parametrize("take", [lambda: next(_IDS), lambda: next(_SCALES), lambda: next(_NUMBERS)])
def test_iterators_of_state_advanced_in_c_run_eagerly(take: Callable[[], Any]) -> None:
    """``next()`` of a module-level ``itertools.count()``, ``cycle`` or a generator made before the
    call: every cached call returned the first call's item."""

    def f(x):
        return x * take()

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [jf(X) for _ in range(3)]
    assert [float(g[1]) for g in got] != [float(got[0][1])] * 3  # the iterator advanced every call
    assert any("runs eagerly" in str(w.message) for w in caught)


def test_iterators_the_program_makes_are_traced() -> None:
    model = torch.nn.Linear(3, 2)

    def f(x, xs):
        return x * next(iter(xs)) + next(model.parameters()).sum()

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            assert_same(jf(X, [2.0, 3.0]), f(X, [2.0, 3.0]))
    assert jitcore.cache_hits(jf) == 1
