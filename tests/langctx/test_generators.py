"""``torch.Generator`` objects in jitted functions (jitcore/langctx/generators.py, Note [Generators
the caller passes] in jitcore/jit/provenance.py): draws equal eager's, the caller's generator is
advanced as eagerly, a generator made per call neither retraces nor continues an old stream."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

import jitcore
from jitcore.errors import UnsupportedOperationError

sys.path.insert(0, str(Path(__file__).parent.parent / "jit"))
from jit_helpers import check_eager_entry  # noqa: E402


def _states_equal(a: torch.Generator, b: torch.Generator) -> bool:
    return torch.equal(a.get_state(), b.get_state())


def _draws(x, g):
    return x + torch.randn(3, generator=g), torch.randint(0, 100, (4,), generator=g)


def test_a_generator_passed_anew_per_call_is_one_entry() -> None:
    jf = jitcore.jit(_draws)
    x = torch.zeros(3)
    for seed in range(4):
        eager, jitted = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expected, actual = _draws(x, eager), jf(x, jitted)
        assert all(torch.equal(a, e) and a.dtype == e.dtype for a, e in zip(actual, expected))
        assert _states_equal(jitted, eager)  # the caller's generator advanced as eagerly
    assert len(jf.entries) == 1


def test_the_same_generator_across_calls_continues_its_stream() -> None:
    jf = jitcore.jit(_draws)
    eager, jitted = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    x = torch.zeros(3)
    for _ in range(3):
        assert all(torch.equal(a, e) for a, e in zip(jf(x, jitted), _draws(x, eager)))
    assert _states_equal(jitted, eager)
    assert len(jf.entries) == 1


def test_one_generator_passed_twice_and_a_keyword() -> None:
    def f(x, g1, g2, *, gen):
        return x + torch.rand(3, generator=g1) + torch.rand(3, generator=g2) + torch.rand(3, generator=gen)

    jf = jitcore.jit(f)
    x = torch.zeros(3)
    e, j = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(jf(x, j, j, gen=j), f(x, e, e, gen=e))
    e1, e2, j1, j2 = (torch.Generator().manual_seed(s) for s in (2, 3, 2, 3))
    assert torch.equal(jf(x, j1, j2, gen=j1), f(x, e1, e2, gen=e1))  # traced with one: retraced
    assert _states_equal(j1, e1) and _states_equal(j2, e2)


def _seeded_inside(x, seed):
    g = torch.Generator().manual_seed(seed)
    return x * torch.rand(3, generator=g), torch.randperm(5, generator=g), g.initial_seed()


def test_a_generator_made_inside_starts_again_every_call() -> None:
    jf = jitcore.jit(_seeded_inside)
    x = torch.ones(3)
    for seed in (3, 3, 3, 4):  # the same seed again: the cached call must not continue the stream
        expected, actual = _seeded_inside(x, seed), jf(x, seed)
        assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
        assert actual[2] == expected[2]
    assert len(jf.entries) == 2  # an int argument is specialized, one entry per seed


def test_a_dynamic_seed_is_one_entry() -> None:
    def f(x, seed):
        g = torch.Generator()
        g.manual_seed(seed)
        return x + torch.randn(3, generator=g)

    jf = jitcore.jit(f, dynamic_numbers=["seed"])
    x = torch.zeros(3)
    for seed in range(4):
        assert torch.equal(jf(x, seed), f(x, seed))
    assert len(jf.entries) == 1


def test_generators_under_autograd() -> None:
    def f(w, g, seed):
        noise = torch.randn(3, generator=g)
        mine = torch.Generator().manual_seed(seed)
        return (w * noise + torch.rand(3, generator=mine)).sum()

    w_e, w_j = torch.randn(3, requires_grad=True), None
    w_j = w_e.detach().clone().requires_grad_()
    jf = jitcore.jit(f)
    for seed in (0, 0):
        ge, gj = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        expected, actual = f(w_e, ge, seed), jf(w_j, gj, seed)
        expected.backward()
        actual.backward()
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(w_j.grad, w_e.grad)
    assert len(jf.entries) == 1


def test_a_value_read_after_draws_does_not_advance_the_callers_generator() -> None:
    def f(x, g):
        y = x + torch.rand(3, generator=g)
        if y.sum() > 1.5:  # a value read: the probe draws from a copy of g
            y = y * torch.rand(3, generator=g)
        return y

    jf = jitcore.jit(f)
    x = torch.zeros(3)
    for seed in range(4):
        e, j = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(jf(x, j), f(x, e))
        assert _states_equal(j, e)


def test_a_generator_made_inside_can_be_returned() -> None:
    def f(x):
        g = torch.Generator().manual_seed(11)
        return x + torch.rand(2, generator=g), g

    out, g = jitcore.jit(f)(torch.zeros(2))
    eager_out, eager_g = f(torch.zeros(2))
    assert type(g) is torch.Generator and torch.equal(out, eager_out) and _states_equal(g, eager_g)


def test_a_differentiable_draw_from_a_generator_made_inside_runs_eagerly() -> None:
    def f(mean):
        g = torch.Generator().manual_seed(0)
        return torch.normal(mean, 1.0, generator=g)

    check_eager_entry(f, torch.zeros(3, requires_grad=True), error=UnsupportedOperationError,
                      match="not differentiated")


_G = torch.Generator().manual_seed(5)


def _restored(x):
    state = torch.get_rng_state()
    a = torch.rand(3)
    torch.set_rng_state(state)
    return x + a - torch.rand(3)


def _forked(x):
    with torch.random.fork_rng():
        torch.manual_seed(7)
        a = torch.rand(3)
    return x + a + torch.rand(3)


def _default_generator_seeded(x):
    torch.default_generator.manual_seed(2)
    return x + torch.rand(3)


PROGRAMS_OF_STATE = {  # Note [The state of torch's default generator]: (program, takes a generator)
    "get_and_set_rng_state": (_restored, False),
    "fork_rng": (_forked, False),
    "initial_seed": (lambda x: x + torch.initial_seed(), False),
    "default_generator.manual_seed": (_default_generator_seeded, False),
    "global_generator.initial_seed": (lambda x: x + _G.initial_seed(), False),
    "argument.initial_seed": (lambda x, g: x + g.initial_seed(), True),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS_OF_STATE))
def test_the_random_state_read_or_set_inside_is_eagers_on_every_call(name: str) -> None:
    # Each ran natively once while tracing and left nothing in the trace: get/set_rng_state around a
    # draw gave a != b on the first call, initial_seed() kept the traced call's seed, a caller's
    # generator answered its placeholder's seed (67280421310721, not 1).
    fn, takes_generator = PROGRAMS_OF_STATE[name]
    jf = jitcore.jit(fn)
    for seed in (1, 2, 1, 3):
        results = []
        for f in (fn, jf):
            torch.manual_seed(seed)
            _G.manual_seed(seed + 10)
            generator = (torch.Generator().manual_seed(seed),) if takes_generator else ()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the call runs eagerly (JC-T001)
                out = f(torch.zeros(3), *generator)
            results.append((out, torch.rand(2), torch.rand(2, generator=_G)))  # streams after the call
        for e, j in zip(*results):
            assert torch.equal(e, j), (name, seed)


@pytest.mark.parametrize("method", ["exponential_", "cauchy_", "log_normal_", "geometric_", "uniform_"])
def test_an_in_place_draw_from_the_callers_generator(method: str) -> None:
    # exponential_, cauchy_, log_normal_, geometric_ raised AssertionError('generator is not supported
    # in refs') while tracing: their shadows got a generator, which torch's refs refuse.
    def f(x, g):
        args = (0.5,) if method == "geometric_" else ()
        return getattr(x, method)(*args, generator=g)

    jf = jitcore.jit(f)
    for seed in (1, 2, 1):
        eager, jitted = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        assert torch.equal(jf(torch.empty(4), jitted), f(torch.empty(4), eager))
        assert _states_equal(jitted, eager)
    assert len(jf.entries) == 1


def _forked_unseeded(x):
    before = torch.rand(2)
    with torch.random.fork_rng():
        a = torch.rand(3)
    return x + a + torch.rand(3), before


def _dropout_replayed(x):
    state = torch.get_rng_state()
    y1 = torch.nn.functional.dropout(x, 0.5)
    torch.set_rng_state(state)
    return y1, torch.nn.functional.dropout(x * 2, 0.5)


def _frozen(x):
    from torch.testing._utils import freeze_rng_state  # reads the state under no_dispatch()

    with freeze_rng_state():
        torch.manual_seed(42)  # OpInfo's wrapper_set_seed
        a = torch.nn.functional.dropout(x, 0.5)
    return a, torch.rand(2)


def _caller_generator_restored(x, g):
    state = g.get_state()
    a = torch.rand(3, generator=g)
    g.set_state(state)
    return x + a - torch.rand(3, generator=g), torch.rand(3)


def _global_generator_restored(x):
    state = _G.get_state()
    a = torch.rand(3, generator=_G)
    _G.set_state(state)
    return x + a + torch.rand(3, generator=_G)


def _state_returned(x):
    return x + torch.rand(3), torch.get_rng_state(), torch.Generator().manual_seed(3).get_state()


def _state_set_from_argument(x, state):
    torch.set_rng_state(state)
    return x + torch.rand(3)


TRACED_STATE_PROGRAMS = {  # Note [The state of torch's default generator]: (program, its extra argument)
    "get_and_set_rng_state": (_restored, None),
    "fork_rng_seeded": (_forked, None),
    "fork_rng": (_forked_unseeded, None),
    "dropout_replayed": (_dropout_replayed, None),
    "freeze_rng_state": (_frozen, None),
    "caller_generator": (_caller_generator_restored, "generator"),
    "global_generator": (_global_generator_restored, None),
    "state_returned": (_state_returned, None),
    "state_set_from_argument": (_state_set_from_argument, "state"),
}


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", sorted(TRACED_STATE_PROGRAMS))
def test_the_random_state_read_or_set_inside_is_traced(name: str, requires_grad: bool) -> None:
    # get_state/set_state of a generator were refused (JC-T001, every call ran eagerly), and before that
    # ran once at trace time. Now they are records in program order with the draws: every draw, the
    # states after the call and the gradients equal eager's on every call, in one traced entry.
    fn, extra = TRACED_STATE_PROGRAMS[name]
    jf = jitcore.jit(fn, fullgraph=True)  # a refusal raises instead of running eagerly
    for seed in (1, 2, 1, 3):
        results = []
        for f in (fn, jf):
            torch.manual_seed(seed + 100)
            saved = torch.get_rng_state()
            torch.manual_seed(seed)
            _G.manual_seed(seed + 10)
            generator = torch.Generator().manual_seed(seed + 20)
            arguments = {"generator": (generator,), "state": (saved,), None: ()}[extra]
            x = torch.ones(3, requires_grad=requires_grad)
            out = f(x, *arguments)
            out = out if isinstance(out, tuple) else (out,)
            grads = ()
            if requires_grad:
                out[0].sum().backward()
                grads = (x.grad,)
            results.append((*out, *grads, torch.rand(2), torch.rand(2, generator=_G), generator.get_state()))
        for e, j in zip(*results):
            assert type(e) is type(j) and e.dtype == j.dtype and torch.equal(e, j), (name, seed)
    assert (jitcore.cache_misses(jf), len(jf.entries)) == (1, 1)
