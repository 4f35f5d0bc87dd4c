"""functools.lru_cache / functools.cache inside jitted code (jitcore/jit/lru_caches.py): each program runs
eagerly and under jitcore on twin caches, over several calls, comparing values, what the cached function
did (how often it ran), ``cache_info()``, and the number of traces (no eager entry)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same

import jitcore
from jitcore.jit.lru_caches import KEYWORD_MARK, LRU_WRAPPER, cache_dict, lru_key


def _run_twins(make: Callable[[], tuple], calls: list[tuple]) -> tuple[Any, list]:
    """``make()`` gives (program, [cached functions], log); the program runs eagerly on one twin and
    jitted on the other. Returns the jitted program and its outputs."""
    eager, eager_cached, eager_log = make()
    program, cached, log = make()
    jitted = jitcore.jit(program)
    outputs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            expected, out = eager(*args), jitted(*args)
            assert_same(out, expected)
            assert log == eager_log
            assert [c.cache_info() for c in cached] == [c.cache_info() for c in eager_cached]
            outputs.append(out)
    assert not [str(w.message) for w in caught if "jitcore" in str(w.message)]
    return jitted, outputs


def _helpers() -> tuple:
    log: list = []

    @functools.cache
    def table(n: int) -> float:
        log.append(("table", n))
        return n * 2.0

    @functools.cache
    def mask(n: int) -> torch.Tensor:
        log.append(("mask", n))
        return torch.tril(torch.ones(n, n))

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * table(3) + mask(x.shape[0]).sum()

    return f, [table, mask], log


def test_a_missing_entry_is_traced_not_run_eagerly() -> None:
    calls = [(torch.ones(2),), (torch.ones(2),), (torch.full((2,), 3.0),), (torch.ones(2),)]
    jitted, _ = _run_twins(_helpers, calls)
    assert jitcore.cache_misses(jitted) == 1


def _bounded() -> tuple:
    log: list = []

    @functools.lru_cache(maxsize=2)
    def row(n: int) -> torch.Tensor:
        log.append(n)
        return torch.full((2,), float(n))

    def f(x: torch.Tensor, a: int, b: int) -> torch.Tensor:
        return x + row(a) * row(b)

    return f, [row], log


def test_a_bounded_cache_evicts_as_eagerly() -> None:
    x = torch.ones(2)
    calls = [(x, 1, 2), (x, 1, 2), (x, 3, 1), (x, 1, 2), (x, 2, 2), (x, 2, 2), (x, 1, 3), (x, 1, 3)]
    jitted, _ = _run_twins(_bounded, calls)
    # (1, 2) is traced again once row(2) was evicted and made anew; (2, 2) and (1, 3) trace once each
    assert jitcore.cache_misses(jitted) == 5


def _keyed() -> tuple:
    log: list = []

    @functools.lru_cache(maxsize=8, typed=True)
    def scaled(n: Any, *, scale: Any = 1) -> float:
        log.append((n, type(n), scale, type(scale)))
        return n * scale

    @functools.cache
    def named(*parts: Any, **options: Any) -> tuple:
        log.append((parts, tuple(options.items())))
        return parts + tuple(options.items())

    def f(x: torch.Tensor, n: Any) -> tuple:
        return x * scaled(n, scale=2) + scaled(n), named("a", (1, None), flag=True, n=n), named(n)

    return f, [scaled, named], log


def test_typed_and_keyword_keys() -> None:
    x = torch.ones(3)
    jitted, _ = _run_twins(_keyed, [(x, 1), (x, 1.0), (x, 1), (x, True), (x, 1.0)])
    assert jitcore.cache_misses(jitted) == 3


def test_the_cached_tensor_is_returned_itself() -> None:
    def make() -> tuple:
        @functools.cache
        def causal(n: int) -> torch.Tensor:
            return torch.ones(n, n, dtype=torch.bool).tril()

        return (lambda x: (causal(x.shape[-1]), x.masked_fill(~causal(x.shape[-1]), 0.0))), [causal], []

    x = torch.randn(2, 4, 4)
    jitted, outputs = _run_twins(make, [(x,), (x,), (x + 1,)])
    assert outputs[0][0] is outputs[1][0] is outputs[2][0]
    assert jitcore.cache_misses(jitted) == 1


def test_an_unhashable_answer_is_guarded_by_identity() -> None:
    """A cached function whose answer does not hash (``torch.overrides.get_default_nowrap_functions``
    is ``lru_cache(None)`` of a set, reached by every MaskedTensor op): its identity guard raised
    TypeError while tracing (JC-I002)."""
    def make() -> tuple:
        log: list = []

        @functools.lru_cache(None)
        def names() -> set:
            log.append("names")
            return {"a", "b"}

        @functools.cache
        def table(n: int) -> list:
            log.append(("table", n))
            return [n, n + 1]

        return (lambda x: x * len(names()) + table(2)[1]), [names, table], log

    jitted, _ = _run_twins(make, [(torch.ones(2),), (torch.ones(2),), (torch.ones(2) * 3,)])
    assert jitcore.cache_misses(jitted) == 1


SCALE = [2.0]


@functools.cache
def _factor(n: int) -> float:
    return n * SCALE[0]


def test_a_cleared_cache_is_seen() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * _factor(3)

    _factor.cache_clear()
    SCALE[0] = 2.0
    _factor(3)  # warm: the first trace hits
    jitted, x = jitcore.jit(f), torch.ones(2)
    assert torch.equal(jitted(x), x * 6.0)
    _factor.cache_clear()
    SCALE[0] = 5.0
    assert torch.equal(jitted(x), x * 15.0)
    assert torch.equal(jitted(x), x * 15.0)
    assert _factor.cache_info().hits == 1 and _factor.cache_info().misses == 1  # as eagerly, since the clear
    assert jitcore.cache_misses(jitted) == 2


def _raising() -> tuple:
    log: list = []

    @functools.cache
    def checked(n: int) -> int:
        log.append(n)
        if n < 0:
            raise ValueError(f"negative {n}")
        return n

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * checked(n)

    return f, [checked], log


def test_a_raising_function_raises_as_eagerly() -> None:
    (eager, [eager_checked], eager_log), (program, [checked], log) = _raising(), _raising()
    jitted, x = jitcore.jit(program), torch.ones(2)
    for n in (2, -1, 2, -1):
        with pytest.raises(ValueError, match="negative") if n < 0 else _nothing():
            eager(x, n)
        with pytest.raises(ValueError, match="negative") if n < 0 else _nothing():
            jitted(x, n)
        assert log == eager_log and checked.cache_info() == eager_checked.cache_info()


class _nothing:  # noqa: N801 - a context manager read as a phrase
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: Any) -> None:
        return None


def _unhandled_keys() -> tuple:
    log: list = []

    @functools.lru_cache(maxsize=0)
    def uncached(n: int) -> int:
        log.append(n)
        return n

    class Table:
        @functools.lru_cache(maxsize=4)  # noqa: B019 - the program under test
        def row(self, n: int) -> float:
            log.append(("row", n))
            return n + 0.5

    table = Table()

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * uncached(n) + table.row(n)

    return f, [uncached, Table.row], log


def test_calls_left_to_the_net_still_answer_as_eagerly() -> None:
    eager, eager_cached, eager_log = _unhandled_keys()
    program, cached, log = _unhandled_keys()
    jitted, x = jitcore.jit(program), torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (1, 1, 2):
            assert_same(jitted(x, n), eager(x, n))
            assert log == eager_log
            assert [c.cache_info() for c in cached] == [c.cache_info() for c in eager_cached]


def test_a_module_with_a_cached_mask_traces_once() -> None:
    def make() -> tuple:
        @functools.lru_cache(maxsize=4)
        def rotary(n: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
            inverse = 1.0 / 10000 ** (torch.arange(0, dim, 2) / dim)
            freqs = torch.outer(torch.arange(n, dtype=torch.float32), inverse)
            return freqs.cos(), freqs.sin()

        @functools.cache
        def causal(n: int) -> torch.Tensor:
            return torch.full((n, n), float("-inf")).triu(1)

        class Attention(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.qkv = torch.nn.Linear(8, 24)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                q, k, v = self.qkv(x).chunk(3, dim=-1)
                cos, sin = rotary(x.shape[1], 8)
                q = q * cos.repeat(1, 2) + q.flip(-1) * sin.repeat(1, 2)
                scores = q @ k.transpose(-1, -2) / 8 ** 0.5 + causal(x.shape[1])
                return scores.softmax(-1) @ v

        torch.manual_seed(0)
        module = Attention()
        return module, [rotary, causal], []

    eager, eager_cached, _ = make()
    module, cached, _ = make()
    jitted = jitcore.jit(module)
    for n in (5, 5, 5, 7, 7):
        x = torch.randn(2, n, 8)
        assert_same(jitted(x), eager(x))
        assert [c.cache_info() for c in cached] == [c.cache_info() for c in eager_cached]
    assert jitcore.cache_misses(jitted) == 2  # one entry per length: the cache is keyed by it


def test_a_transformers_model_with_an_lru_cached_helper() -> None:
    """DINOv3 ViT's forward calls ``get_patches_center_coordinates(h, w, dtype=..., device=...)``, an
    lru_cache(maxsize=32) helper returning a tensor: an eager entry before."""
    from transformers.models.dinov3_vit import modeling_dinov3_vit

    config = transformers.DINOv3ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64, image_size=16, patch_size=8,
                                          num_register_tokens=0)
    torch.manual_seed(0)
    model = transformers.DINOv3ViTModel(config).eval()
    cells = modeling_dinov3_vit.get_patches_center_coordinates.__closure__  # transformers' wrapper's
    (cached,) = [c.cell_contents for c in cells if type(c.cell_contents) is LRU_WRAPPER]
    cached.cache_clear()
    jitted = jitcore.jit(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x = torch.randn(1, 3, 16, 16)
            expected = model(pixel_values=x).last_hidden_state
            assert_same(jitted(pixel_values=x).last_hidden_state, expected)
    assert not [str(w.message) for w in caught if "jitcore" in str(w.message)]
    assert jitcore.cache_misses(jitted) == 1
    assert cached.cache_info()[:2] == (5, 1)  # six calls, eager's and the jitted model's: one miss


_PLAIN = st.recursive(
    st.one_of(st.integers(-3, 3), st.floats(-2, 2, allow_nan=False), st.booleans(), st.none(),
              st.text(max_size=3), st.sampled_from([torch.float32, torch.device("cpu")])),
    lambda inner: st.tuples(inner, inner), max_leaves=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(_PLAIN, max_size=3), st.dictionaries(st.sampled_from("abc"), _PLAIN, max_size=2),
       st.booleans(), st.sampled_from([None, 4]))
def test_keys_are_cs_keys(args: list, kwargs: dict, typed: bool, maxsize: int | None) -> None:
    @functools.lru_cache(maxsize=maxsize, typed=typed)
    def cached(*args: Any, **kwargs: Any) -> None:
        return None

    cached(*args, **kwargs)
    key = lru_key(tuple(args), kwargs, typed=typed, mark=KEYWORD_MARK)
    (stored,) = cache_dict(cached)
    assert type(stored) is type(key) and stored == key
    if type(key) is tuple:
        assert [type(k) for k in stored] == [type(k) for k in key]


def test_an_error_the_program_catches_makes_later_calls_eager() -> None:
    """Note [A cached function that raised, caught]. Before: the first call ran the function twice (while
    tracing, then eagerly): its log one entry longer than eager's, ``misses`` one more."""
    (eager, [eager_checked], eager_log), (program, [checked], log) = _raising(), _raising()

    def catching(f: Callable) -> Callable:
        def g(x: torch.Tensor, n: int) -> torch.Tensor:
            try:
                return f(x, n)
            except ValueError:
                return x

        return g

    jitted, x = jitcore.jit(catching(program)), torch.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (-1, -1, -1):
            assert_same(jitted(x, n), catching(eager)(x, n))
            assert log == eager_log
            assert checked.cache_info() == eager_checked.cache_info()
    assert "caught" in str(caught[0].message)
    assert jitcore.cache_misses(jitted) == 1


def _caught_then_read() -> tuple:
    """A cached function that appends, then raises; the program catches it and reads what it appended,
    its counts, and the log it read before the call (Note [A cached function that raised, caught])."""
    log: list = []

    @functools.lru_cache(maxsize=4)
    def failing(n: int) -> float:
        log.append(n)
        raise KeyError(len(log))

    def f(x: torch.Tensor) -> torch.Tensor:
        before = len(log)
        try:
            failing(3)
        except KeyError as e:
            x = x * e.args[0]
        return x * (len(log) - before) + failing.cache_info().misses

    return f, [failing], log


def test_a_raise_caught_runs_the_function_once_per_call() -> None:
    """Before (/tmp/eff52-probes/lru_raise_caught.py): the first call gave 3.0 and 4.0 where eager 2.0,
    the log [3, 3] and two misses; every call after it one off."""
    (eager, [eager_failing], eager_log), (program, [failing], log) = _caught_then_read(), _caught_then_read()
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(4):
            x = torch.full((2,), float(i))
            assert_same(jitted(x), eager(x))
            assert log == eager_log
            assert failing.cache_info() == eager_failing.cache_info()
    assert jitcore.cache_misses(jitted) == 1


def test_a_cached_method_of_a_module_traces_and_sees_a_clear() -> None:
    def make() -> tuple:
        log: list = []

        class Positions(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.scale = 2.0

            @functools.lru_cache(maxsize=4)  # noqa: B019 - the program under test
            def table(self, n: int) -> torch.Tensor:
                log.append(n)
                return torch.arange(n) * self.scale

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x + self.table(x.shape[0])

        return Positions(), [Positions.table], log

    (eager, [eager_table], eager_log), (module, [table], log) = make(), make()
    jitted = jitcore.jit(module)
    for n in (3, 3, 3, 4, 3):
        x = torch.ones(n)
        assert_same(jitted(x), eager(x))
        assert log == eager_log and table.cache_info() == eager_table.cache_info()
    table.cache_clear(), eager_table.cache_clear()
    module.scale = eager.scale = 5.0
    assert_same(jitted(torch.ones(3)), eager(torch.ones(3)))
    assert log == eager_log and table.cache_info() == eager_table.cache_info()
