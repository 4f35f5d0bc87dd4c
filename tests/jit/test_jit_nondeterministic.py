"""Calls whose value changes per call (clocks, Python's random generators) give eager's values on every
call (jitcore/jit/nondeterministic.py). They were constants of the trace: every cached call returned
the first call's ``time.time()`` and took the first call's side of ``random.random() < p``. Clock reads
and random draws that give numbers are recorded and made anew by every call (Note [Clock reads and
random draws on every call]); the others, and numbers whose value the program needs, make the call
run eagerly (JC-T001).
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
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.errors import UnsupportedOperationError
from jitcore.jit import nondeterministic

X = torch.arange(3.0)
_FRACTIONS = [i / 10**4 for i in range(10**4)]


def _calls(fn: Callable[..., Any], seed: int, n: int = 4) -> tuple[list[Any], list[str]]:
    """``n`` calls from a seeded generator; the warnings (an eager entry's) they gave."""
    random.seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [fn(X + i) for i in range(n)]
    return results, [str(w.message) for w in caught]


def _eager_entry(messages: list[str]) -> bool:
    return any("runs eagerly" in m and "new value on every call" in m for m in messages)


def _branch_on_random(x):
    value = random.random()
    return (x * 2 if value > 0.5 else x - 1), value


def _scaled_by_random(x):
    return x * random.uniform(1.0, 2.0) + random.randint(0, 10**9) % 7


def _random_scalar_under_arithmetic(x):
    return torch.relu(x - random.random()) * (1 + random.random() ** 2)


@pytest.mark.parametrize("f", [_branch_on_random, _scaled_by_random, _random_scalar_under_arithmetic])
def test_python_random_draws_are_made_on_every_call(f: Callable[..., Any]) -> None:
    """Traced (no eager entry): the draws are the computation's, in program order, so the values and
    the generator's state after each call are eager's; a branch on a draw is checked by its outcome,
    and a call taking the other side puts the generator back before it runs another entry."""
    expected, _ = _calls(f, seed=3, n=12)
    eager_state = random.getstate()
    jf = jitcore.jit(f)
    got, messages = _calls(jf, seed=3, n=12)
    assert_same(got, expected)
    assert random.getstate() == eager_state
    assert not _eager_entry(messages)
    assert jitcore.cache_hits(jf) >= 12 - 4  # a few entries: one per branch outcome (randint's loop too)


@pytest.mark.parametrize("draw", [
    lambda: random.choice(range(10**9)),  # indexes with a draw: its value is needed
    lambda: _FRACTIONS[random.sample(range(10**4), 1)[0]],  # a sampled index: its value is needed
])
def test_python_random_draws_whose_values_are_needed_run_eagerly(draw: Callable[[], Any]) -> None:
    def f(x):
        value = draw()
        return (x * 2 if value > 0.5 else x - 1), value

    expected, _ = _calls(f, seed=3)
    got, messages = _calls(jitcore.jit(f), seed=3)
    assert_same(got, expected)
    assert len({v for _, v in got}) == len(got)  # a new draw per call
    assert _eager_entry(messages)


def _sorted_draws(x):
    draws = [(random.randrange(2000), i) for i in range(600)]
    ordered = sorted(draws)
    return x * ordered[300][0], ordered[:5]


def test_many_branches_on_draws_run_eagerly() -> None:
    """Note [Many branches on per-call values]: a sort of 600 draws branches on them some 5,000 times.
    Each branch was an outcome check of the trace (14 s a call here; CPython's test_heapq.test_nlargest
    took 514 s jitted), which no other call's draws would follow; past MAX_BRANCHES the call runs eagerly
    (JC-T001) with eager's values and generator state."""
    expected, _ = _calls(_sorted_draws, seed=5, n=2)
    eager_state = random.getstate()
    got, messages = _calls(jitcore.jit(_sorted_draws), seed=5, n=2)
    assert_same(got, expected)
    assert random.getstate() == eager_state
    assert _eager_entry(messages) and any("branched on such values" in m for m in messages)


def test_random_methods_are_drawn_whole() -> None:
    """Note [Draws made whole]: gauss (its gauss_next kept between calls), randint, choice over numbers
    and the variates are one per-call read each: eager's numbers and generator state on every call,
    with a dynamic mean, and no entry per loop outcome."""

    def f(x, mu):
        a = random.gauss(mu, 1.0)
        b = random.randint(1, 6)
        c = random.choice([0.5, 1.0, 2.0])
        d = random.normalvariate(0.0, 2.0) + random.expovariate(1.5) + random.triangular(0.0, 1.0, None)
        return x * a + b * c + d, (a, b, c, d)

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced: no eager entry
        for i in range(8):
            random.seed(i % 3)
            expected, eager_state = f(X, 0.1 * i), random.getstate()
            random.seed(i % 3)
            assert_same(jf(X, 0.1 * i), expected)
            assert random.getstate() == eager_state
        random.seed(7)
        expected = [f(X, 0.0)[1] for _ in range(5)]  # gauss hands out its second number on the next call
        random.seed(7)
        assert [jf(X, 0.0)[1] for _ in range(5)] == expected
    assert jitcore.cache_misses(jf) == 2  # mu specialized, then dynamic


def test_a_random_generator_passed_in() -> None:
    def f(x, rng):
        return x * rng.random()

    jf = jitcore.jit(f)
    eager_rng, jit_rng = random.Random(5), random.Random(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced
        for _ in range(3):
            assert_same(jf(X, jit_rng), f(X, eager_rng))
    assert jit_rng.getstate() == eager_rng.getstate()
    assert jitcore.cache_hits(jf) == 2


@pytest.mark.parametrize("clock", [time.time, time.perf_counter, time.monotonic_ns])
def test_clocks_are_read_on_every_call(clock: Callable[[], Any]) -> None:
    def f(x):
        return x + 1, clock()

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced
        first = jf(X)[1]
        time.sleep(0.002)
        second = jf(X)[1]
    assert type(first) is type(clock())
    assert second > first
    assert jitcore.cache_hits(jf) == 1


def test_an_elapsed_time_logged_as_text() -> None:
    log: list[str] = []

    def f(x):
        start = time.perf_counter()
        y = x.exp().sum()
        log.append(f"{time.perf_counter() - start >= 0} {time.perf_counter() > start:d}")
        return y

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            assert_same(jf(X), f(X))
    assert log == ["True 1"] * 6
    assert jitcore.cache_hits(jf) == 2


@pytest.mark.parametrize("clock", [
    lambda: datetime.datetime.now().microsecond, lambda: datetime.date.today().year, lambda: time.localtime(),
    lambda: uuid.uuid4().hex, lambda: os.urandom(8)[0], lambda: range(10)[time.time_ns() % 10],
    lambda: {time.time_ns() % 10: 0},  # a key: its hash needs the value (a trace per value before)
])
def test_clocks_and_system_randomness_whose_values_are_needed_run_eagerly(clock: Callable[[], Any]) -> None:
    def f(x):
        return x + 1, clock()

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = jf(X)[1]
        time.sleep(0.002)
        jf(X)
    assert type(first) is type(clock())
    assert _eager_entry([str(w.message) for w in caught])


def test_fullgraph_refuses_with_the_reason() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"now\(\) gives a new value on every call"):
        jitcore.jit(lambda x: x.sum() + datetime.datetime.now().microsecond, fullgraph=True)(X)
    jf = jitcore.jit(lambda x: x * time.time(), fullgraph=True)  # a read on every call, not a split
    assert jf(X)[1] > 0


def test_a_clock_that_moved_on_since_tracing_gives_eagers_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch on the clock may take another side on the first run than while tracing (tracing takes
    time): that call runs eagerly, where a nondeterministic computation would raise JC-T002. A counter
    stands in for the clock, so that the first run always reads a later time than tracing did."""
    ticks = itertools.count().__next__  # a C callable: 0, 1, 2, ...
    monkeypatch.setattr(nondeterministic, "_CLOCKS", nondeterministic._CLOCKS | {ticks})
    monkeypatch.setattr(nondeterministic, "_NUMBER_CLOCKS", nondeterministic._NUMBER_CLOCKS | {ticks})

    def f(x):
        return x + 1 if ticks() > 0 else x - 1

    assert_same(jitcore.jit(f)(X), X + 1)  # traced with 0 (x - 1), run with 1, eagerly with 2


def test_draws_under_grad() -> None:
    def f(x):
        return (x * random.random()).sum()

    x = torch.randn(3, requires_grad=True)
    random.seed(1)
    f(x).backward()
    expected = x.grad
    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced: the trace runs under torch's autograd
        for _ in range(2):
            random.seed(1)
            x.grad = None
            jf(x).backward()
            torch.testing.assert_close(x.grad, expected)
    assert jitcore.cache_hits(jf) == 1


def test_draws_with_subclasses_under_grad_run_eagerly() -> None:
    """The grad transform of a subclass program makes its numbers constants: such a call runs eagerly."""
    def f(x):
        return x * random.random()

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    random.seed(2)
    expected = f(x)
    random.seed(2)
    got, messages = _calls(lambda _: jitcore.jit(f)(x), seed=2, n=1)
    assert_same(got[0].a, expected.a)
    assert _eager_entry(messages)


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


# --- Note [Values made anew on every call], Note [Seeds, samples and shuffles] -----------------------
_STATE: dict[str, Any] = {}


@pytest.mark.parametrize("make", [
    lambda: datetime.datetime.now(), lambda: datetime.datetime.now(datetime.UTC),
    lambda: datetime.datetime.utcnow(), lambda: datetime.date.today(), lambda: uuid.uuid4(),
    lambda: uuid.uuid1(), lambda: os.urandom(8),
])
def test_values_made_anew_on_every_call_are_traced(make: Callable[[], Any]) -> None:
    """``datetime.now()``, ``uuid.uuid4()``, ``os.urandom(n)`` returned and stored into state: each call
    makes its own, as eagerly, from one cache entry (they made every call an eager entry)."""
    def f(x):
        value = make()
        _STATE["last"] = value
        return x + 1, value

    jf = jitcore.jit(f)
    _STATE["last"] = None
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        got = []
        for i in range(4):
            out, value = jf(X + i)
            assert_same(out, X + i + 1)
            assert type(value) is type(make()) and _STATE["last"] is value
            got.append(value)
            time.sleep(0.002)
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 3
    if not isinstance(got[0], datetime.date) or isinstance(got[0], datetime.datetime):
        assert len(set(got)) == len(got)  # a new value per call (today() is the same day)


def test_a_time_formatted_into_text_is_each_calls() -> None:
    def f(x):
        return x * 2, f"step at {datetime.datetime.now():%H:%M:%S.%f}"

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        texts = []
        for _ in range(3):
            texts.append(jf(X)[1])
            time.sleep(0.002)
    assert len(set(texts)) == 3 and all(t.startswith("step at ") for t in texts)
    assert jitcore.cache_misses(jf) == 1


def _seeded(x, seed):
    random.seed(seed)
    a = random.random()
    picked = random.sample(range(100), 3)
    order = [1.0, 2.0, 3.0, 4.0, 5.0]
    random.shuffle(order)
    return x * a + picked[0] - order[0], picked, order, random.random()


def _listed(x):
    values = x.tolist()
    random.shuffle(values)
    return values, x * values[0] + random.sample(values, 2)[1]


def _shuffled_argument(x, items):
    random.shuffle(items)
    return x + 1


def _reseeded(x):
    random.seed()  # the system's entropy, as eagerly: only the generator's state after it is compared
    return x * 2


@pytest.mark.parametrize("seed", [0, 7])
def test_seed_sample_and_shuffle_give_eagers_sequences(seed: int) -> None:
    """The same seed before an eager and a jitted run gives the same draws, samples, shuffles and
    generator state, on every call (they made every call an eager entry)."""
    jf = jitcore.jit(_seeded)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        for i in range(4):
            random.seed(1000 + i)
            expected, eager_state = _seeded(X + i, seed), random.getstate()
            random.seed(1000 + i)
            assert_same(jf(X + i, seed), expected)
            assert random.getstate() == eager_state
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_hits(jf) == 3


def test_shuffles_of_read_numbers_and_of_a_callers_list() -> None:
    jf, jg = jitcore.jit(_listed), jitcore.jit(_shuffled_argument)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        for i in range(5):
            x = torch.randn(4, generator=torch.Generator().manual_seed(i))
            random.seed(i)
            expected = _listed(x)
            random.seed(i)
            assert_same(jf(x), expected)
            eager_items, jit_items = [1, 2, 3, 4, 5], [1, 2, 3, 4, 5]
            random.seed(i)
            _shuffled_argument(X, eager_items)
            random.seed(i)
            jg(X, jit_items)
            assert jit_items == eager_items
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_misses(jg) == 1


def test_a_seed_from_the_system_and_under_grad() -> None:
    def g(x):
        random.seed(5)
        return (x * 2).sum()

    jf, jg = jitcore.jit(_reseeded), jitcore.jit(g)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        states = set()
        for _ in range(3):
            assert_same(jf(X), X * 2)
            states.add(random.random())
        assert len(states) == 3  # reseeded from the system on every call
        for _ in range(3):
            x = torch.ones(2, requires_grad=True)
            random.seed(100)
            g(x).backward()
            expected = random.random()
            random.seed(100)
            jg(x).backward()
            assert random.random() == expected and x.grad.tolist() == [4.0, 4.0]
    assert jitcore.cache_misses(jf) == 1 and jitcore.cache_misses(jg) == 1


_EPOCH = datetime.datetime(2000, 1, 1)


@pytest.mark.parametrize("use", [
    lambda: datetime.datetime.now() > _EPOCH,  # with a value of the program's: needs the value
    lambda: _EPOCH < datetime.datetime.now(),
    lambda: (datetime.datetime.now() - _EPOCH).days > 0,
    lambda: (_EPOCH - datetime.datetime.now()).days < 0,
    lambda: datetime.datetime.now() != None,  # noqa: E711 - the operator, not identity
    lambda: (datetime.datetime.now() - datetime.datetime.now()).days <= 0,  # between two: recorded
    lambda: datetime.datetime.now() <= datetime.datetime.now(),  # a branch on a recorded comparison
])
def test_values_made_anew_with_other_values_give_eagers_answers(use: Callable[[], Any]) -> None:
    def f(x):
        return x + 1 if use() else x - 1

    jf = jitcore.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an eager entry where the value is needed
        for _ in range(3):
            assert_same(jf(X), f(X))


def _gauss(seed: int) -> tuple:
    rng = random.Random(seed)
    return rng.gauss(0, 1), rng.gauss(0, 1), rng.random()


def test_a_generator_made_in_the_function_draws_as_eager() -> None:
    # random.Random(s).gauss(0, 1) raised AttributeError ('gauss_next'): Random.__init__ seeds the
    # generator before it sets gauss_next, and the jit's snapshot of the generator read it
    jfn = jitcore.jit(_gauss)
    for seed in (1, 2, 3, 2):
        assert_same(jfn(seed), _gauss(seed))


def _patched_draws(x: torch.Tensor) -> tuple[float, list[float], int, torch.Tensor]:
    """Variates of a generator whose ``random`` is not its own: the class's patched with a mock that lists
    the draws, an instance's replaced by a list's ``pop``, and a variate the one drawn calls patched
    (test_random's TestDistributions)."""
    from unittest import mock

    with mock.patch("random.Random.random") as drawn:
        drawn.side_effect = [0.45, 0.2, 0.3, 0.9, 0.1, 0.6]
        variate = random.gammavariate(1.1, 2.3)
        calls = drawn.call_count
    with mock.patch("random.Random.gammavariate") as gamma:
        gamma.side_effect = [0.0, 0.5, 0.25]
        betas = [random.betavariate(2.7, 3.1), random.betavariate(2.7, 3.1)]
    rng = random.Random(5)
    rng.random = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3].pop
    popped = [rng.expovariate(1.5), rng.paretovariate(5.0), rng.weibullvariate(1.0, 3.0), *betas]
    return variate, popped, calls, x + 1


def test_a_generator_whose_random_is_not_its_own_gives_eagers_draws() -> None:
    """A variate drawn whole is made twice on the first call (tracing, then the computation after the
    generator's state was put back): a ``random`` that is not the generator's own state (a mock's
    ``side_effect``, an instance's ``pop``) gave its next numbers the second time, a wrong value or JC-T002
    (test_random's TestDistributions jitted; Note [A generator whose draws are its own])."""
    eager = _patched_draws(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager entry's
        jitted = jitcore.jit(_patched_draws)(X)
    assert jitted[:3] == eager[:3]
    torch.testing.assert_close(jitted[3], eager[3])


# --- Note [An iterator of state advanced by its methods]

def _counting():
    n = 0
    while True:
        got = yield n
        n += got or 1


@pytest.mark.parametrize("advance", [lambda g: g.send(2), lambda g: g.__next__(), lambda g: g.send(None)],
                         ids=["send", "__next__", "send_none"])
def test_a_generator_of_state_advanced_by_its_methods_advances_on_every_call(advance) -> None:
    """``g.send(2)`` of a generator kept across calls: its answer was a constant of the trace (eager 2, 4, 6,
    8; jit 2, 2, 2, 2) and the generator stopped advancing. Such a call now runs eagerly, as ``next(g)``."""
    runs = []
    for jit in (False, True):
        g = _counting()
        next(g)
        fn = (lambda x, g=g: x * advance(g))
        fn = jitcore.jit(fn) if jit else fn
        runs.append([float(fn(torch.ones(1))) for _ in range(4)] + [next(g)])
    assert runs[1] == runs[0]
