"""functools.lru_cache inside jitted code, continued (jitcore/jit/lru_caches.py, Note [What keys an entry]):
keys holding the caller's tensors or C-hashed containers. Each program runs eagerly and under jitcore on
twin caches over several calls, with the caches cleared and their globals changed between calls as a
step of the run; values, what the cached function did, ``cache_info()`` and the cache's keys are compared
after every call."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore
from jitcore.jit.lru_caches import cache_dict

CLEAR = object()  # a step of a run: both twins' caches cleared, their scale changed


def _keys(cached: Any) -> list:
    """The cache's keys, their tensors as (type, values): a proxy of a pass is not the caller's tensor."""
    def leaf(k: Any) -> Any:
        return ("tensor", type(k), k.tolist()) if isinstance(k, torch.Tensor) else k

    return [tuple(map(leaf, k)) if type(k) is tuple else leaf(k) for k in cache_dict(cached)]


def _run_twins(make: Callable[[], tuple], steps: list) -> tuple[Any, list[str]]:
    """``make()`` gives (program, cached function, log, scale): the program runs eagerly on one twin and
    jitted on the other. Returns the jitted program and jitcore's warnings."""
    eager, eager_cached, eager_log, eager_scale = make()
    program, cached, log, scale = make()
    jitted = jitcore.jit(program)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in steps:
            if step is CLEAR:
                eager_cached.cache_clear(), cached.cache_clear()
                eager_scale[0] = scale[0] = eager_scale[0] + 1.0
                continue
            expected, out = eager(*step), jitted(*step)
            assert_same(out, expected)
            assert log == eager_log
            assert cached.cache_info() == eager_cached.cache_info()
            assert _keys(cached) == _keys(eager_cached)
    return jitted, [str(w.message) for w in caught if "jitcore" in str(w.message)]


def _by_tensor() -> tuple:
    log: list = []
    scale = [2.0]

    @functools.lru_cache(maxsize=2)
    def scaled(t: torch.Tensor, n: int) -> torch.Tensor:
        log.append(n)
        return t * scale[0] + n

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x + scaled(w, 1) * scaled(w, 2)

    return f, scaled, log, scale


def test_a_tensor_key_is_the_callers_tensor() -> None:
    """C hashes a tensor by identity: the entry is keyed by the caller's tensor, guarded as that very
    tensor. Before, 3.11 ran such calls eagerly (the net), and 3.12+ stored the pass's proxy in the
    program's cache and kept the first answer after a clear (a constant no guard watched)."""
    w, v, x = torch.ones(2), torch.full((2,), 3.0), torch.ones(2)
    jitted, warned = _run_twins(_by_tensor, [(x, w), (x, w), CLEAR, (x, w), (x, v), (x, w), (x, w)])
    assert not warned
    assert jitcore.cache_misses(jitted) == 4  # w; w again after the clear; v; w again, evicted by v


def _mutated_result() -> tuple:
    log: list = []

    @functools.cache
    def offsets(t: torch.Tensor) -> torch.Tensor:
        log.append("offsets")
        return torch.zeros(2) + t

    def f(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        table = offsets(k)
        out = x + table
        table.add_(1.0)  # the cached tensor itself: the next hit sees it
        return out

    return f, offsets, log, [0.0]


def test_a_cached_tensor_the_program_mutates_is_read_each_call() -> None:
    """A hit returns the cached tensor object, which the program mutates: each call reads it anew (it was
    the first call's value on 3.12+)."""
    k, x = torch.ones(2), torch.ones(2)
    jitted, warned = _run_twins(_mutated_result, [(x, k), (x, k), (x, k), CLEAR, (x, k), (x, k)])
    assert not warned
    assert jitcore.cache_misses(jitted) == 2


def _by_frozenset() -> tuple:
    log: list = []
    scale = [2.0]

    @functools.cache
    def weight(names: frozenset) -> float:
        log.append(sorted(names))
        return len(names) * scale[0]

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * weight(frozenset({"q", "k"}))

    return f, weight, log, scale


def test_a_frozenset_key_is_a_value() -> None:
    """A frozenset of plain values is hashed by C alone, as a tuple is: the entry is read by value (3.13
    kept the first answer after a clear; 3.11 ran the call eagerly)."""
    x = torch.ones(2)
    jitted, warned = _run_twins(_by_frozenset, [(x,), (x,), CLEAR, (x,), (x,)])
    assert not warned
    assert jitcore.cache_misses(jitted) == 2


def _by_new_tensor() -> tuple:
    log: list = []

    @functools.cache
    def twice(t: torch.Tensor) -> torch.Tensor:
        log.append("twice")
        return t * 2

    def f(x: torch.Tensor) -> torch.Tensor:
        return twice(x + 1)

    return f, twice, log, [0.0]


def test_a_tensor_the_program_made_keys_an_eager_call() -> None:
    """A tensor made by the program is a new key on every call (eager misses each time): the call runs
    eagerly, the cache holds the tensors eager made (3.12+ stored the pass's proxy in it)."""
    x = torch.ones(2)
    _jitted, warned = _run_twins(_by_new_tensor, [(x,), (x,), (x,)])
    assert len(warned) == 1 and "the program made" in warned[0]
    assert all(type(k[0]) is torch.Tensor for k in _keys_of_new(_by_new_tensor))


def _keys_of_new(make: Callable[[], tuple]) -> list:
    program, cached, _log, _scale = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jitcore.jit(program)(torch.ones(2))
    return list(cache_dict(cached))


def _module_with_a_parameter_key() -> tuple:
    log: list = []
    scale = [1.0]

    @functools.cache
    def spectral(weight: torch.Tensor) -> torch.Tensor:
        log.append("spectral")
        return torch.linalg.matrix_norm(weight.detach(), ord=2) * scale[0]

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) / spectral(self.linear.weight)

    return Layer(), spectral, log, scale


def test_a_parameter_keys_a_cached_norm() -> None:
    x = torch.randn(2, 3)
    jitted, warned = _run_twins(_module_with_a_parameter_key, [(x,), (x,), CLEAR, (x,), (x,)])
    assert not warned
    assert jitcore.cache_misses(jitted) == 2


def _clearing(order: str) -> Callable[[], tuple]:
    def make() -> tuple:
        log: list = []
        scale = [2.0]

        @functools.cache
        def table(n: int) -> torch.Tensor:
            log.append(n)
            return torch.full((2,), n * scale[0])

        def f(x: torch.Tensor) -> torch.Tensor:
            if order == "clear first":
                table.cache_clear()
                return x * table(2)
            y = x * table(2)
            table.cache_clear()
            return y + table(3) if order == "between" else y

        return f, table, log, scale

    return make


@pytest.mark.parametrize("order", ["clear first", "clear after", "between"])
def test_a_cache_cleared_inside_the_program_runs_eagerly(order: str) -> None:
    """``cache_clear()`` inside the jitted function (Note [A cache cleared inside the program]): the clear
    first, the trace kept the first result and never ran the function again (eager runs it on every call;
    after CLEAR, which changes its scale, the answer differed too); the clear after a lookup of a tensor,
    the computation's first run read the entry the clear had removed (a crash); with floats, every call
    traced again. Now one eager entry, whose calls run as eager's, with eager's cache_info()."""
    x = torch.ones(2)
    jitted, warned = _run_twins(_clearing(order), [(x,), (x,), CLEAR, (x,), (x,)])
    assert len(warned) == 1 and "cache_clear()" in warned[0]
    assert jitcore.cache_misses(jitted) == 1


class _Config:
    """A key of the program's with its own ``__hash__``/``__eq__`` (by value)."""

    def __init__(self, width: int) -> None:
        self.width = width

    def __hash__(self) -> int:
        return hash(("config", self.width))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Config) and other.width == self.width


def _by_config() -> tuple:
    log: list = []
    scale = [2.0]

    @functools.lru_cache(maxsize=2)
    def widths(config: _Config) -> torch.Tensor:
        log.append(config.width)
        return torch.full((config.width,), scale[0])

    def f(x: torch.Tensor, config: _Config) -> torch.Tensor:
        return x + widths(config) + widths(_Config(3)).sum()

    return f, widths, log, scale


def test_a_key_with_its_own_hash_answers_as_eagerly() -> None:
    """A key hashed by the program's own ``__hash__`` is left to the net (Note [What keys an entry]): its
    answers, effects and cache_info() are eager's, a clear and a changed global included."""
    x, a, b = torch.ones(2), _Config(2), _Config(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_twins(_by_config, [(x, a), (x, b), CLEAR, (x, a), (x, _Config(2))])


# --- ``cache_info()`` read inside the program (Note [A cached function's counts], jitcore/jit/lru_caches.py)

def _counted(bounded: bool) -> Callable[[], tuple]:
    def make() -> tuple:
        log: list = []
        scale = [2.0]
        cache = functools.lru_cache(maxsize=4) if bounded else functools.cache

        @cache
        def table(n: int) -> float:
            log.append(n)
            return n * scale[0]

        def program(x: torch.Tensor, n: int) -> tuple:
            before = table.cache_info()
            y = x * table(n)
            after = table.cache_info()
            log.append((after.hits - before.hits, after.misses - before.misses))
            return y * after.hits + after.currsize, before.hits, after.misses, after.maxsize

        return program, table, log, scale

    return make


@pytest.mark.parametrize("bounded", [False, True], ids=["cache", "lru_cache_4"])
def test_cache_info_read_inside_the_program_is_each_calls(bounded: bool) -> None:
    """Before: ``cache_info()`` was a constant of the trace (``hits`` the first call's on every cached
    call)."""
    x = torch.randn(3)
    steps = [(x, 2)] * 6 + [(x, 3)] * 3 + [CLEAR] + [(x, 2)] * 3
    jitted, warned = _run_twins(_counted(bounded), steps)
    assert not warned
    assert jitcore.cache_misses(jitted) <= 4  # n=2, n=3, n=2 after the clear (missed, then hit)


def _branching() -> tuple:
    log: list = []
    scale = [1.0]

    @functools.cache
    def table(n: int) -> float:
        return n * scale[0]

    def program(x: torch.Tensor) -> torch.Tensor:
        y = x * table(2)
        if table.cache_info().hits % 2:
            log.append("odd")
            return y + 1
        return y - 1

    return program, table, log, scale


def test_a_branch_on_cache_info_takes_each_calls_side() -> None:
    x = torch.randn(3)
    jitted, warned = _run_twins(_branching, [(x,)] * 8)
    assert not warned
    assert jitcore.cache_misses(jitted) <= 3


def _read_after_the_call() -> tuple:
    log: list = []
    scale = [1.0]

    @functools.lru_cache(maxsize=2)
    def table(n: int) -> float:
        log.append(n)
        return n * scale[0]

    def program(x: torch.Tensor) -> torch.Tensor:
        y = x * table(2) + table(3)
        if x.sum() > 0:  # a value read: a call of the other sign fails this check after the two calls
            return y + 1
        return y - 1

    return program, table, log, scale


def test_calls_an_entry_tried_before_made_are_made_once() -> None:
    """Note [Calls an entry tried before made]. Before: each call whose value check failed in the entry
    tried first counted its hits twice (eager's ``hits`` 2, 4, 6, ...; jit's 4, 8, 10, ...)."""
    steps = [(torch.full((3,), (-1.0) ** i),) for i in range(8)]
    jitted, warned = _run_twins(_read_after_the_call, steps)
    assert not warned
    assert jitcore.cache_misses(jitted) == 2


def _counts_shown() -> tuple:
    log: list = []
    scale = [1.0]

    @functools.cache
    def table(n: int) -> float:
        return n * scale[0]

    def program(x: torch.Tensor) -> torch.Tensor:
        y = x * table(2)
        log.append(repr(table.cache_info()))  # its text needs the counts: calls like it run eagerly
        return y

    return program, table, log, scale


def test_a_count_the_program_needs_is_the_first_calls_own() -> None:
    """Note [A cached function that raised, caught]: the pass read the counts as eager does at that
    point; its trace answers the first call. Before (/tmp/eff52-probes/lru_eager_double.py): the call ran
    again eagerly, whose lookup hit the entry the pass's miss had made (``hits=1`` where eager has 0, and
    one more on every call after it)."""
    x = torch.randn(3)
    jitted, warned = _run_twins(_counts_shown, [(x,)] * 4)
    assert len(warned) == 1 and "cache_info" in warned[0]
    assert jitcore.cache_misses(jitted) == 1


def _cleared_after_reads() -> tuple:
    log: list = []
    scale = [1.0]

    @functools.cache
    def table(n: int) -> float:
        log.append(n)
        return n * scale[0]

    def program(x: torch.Tensor) -> torch.Tensor:
        before = len(log)
        y = x * table(2) + table(2)
        hits = table.cache_info().hits
        table.cache_clear()
        return y + hits + before + table(3)

    return program, table, log, scale


def test_a_cache_cleared_inside_the_program_is_answered_on_its_first_call() -> None:
    """Note [A cache cleared inside the program]. Before (/tmp/eff53-probes/lru_clear_variants.py): the
    first call was run again eagerly after its pass: the lookups the pass had made natively hit (``hits``
    one more), and the function's append to the log the program had read was undone and not made again."""
    x = torch.ones(2)
    jitted, warned = _run_twins(_cleared_after_reads, [(x,), (x,), CLEAR, (x,), (x,)])
    assert len(warned) == 1 and "cache_clear()" in warned[0]
    assert jitcore.cache_misses(jitted) == 1
