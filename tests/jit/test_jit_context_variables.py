"""``contextvars`` inside jitted code (jitcore/jit/context_variables.py, Note [Context variables]): each
program runs eagerly and jitted over several calls, the caller setting the variable between calls; every
value and the variable after each call are compared."""

from __future__ import annotations

import contextvars
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore

SCALE: contextvars.ContextVar = contextvars.ContextVar("scale", default=1.0)
CONFIG: contextvars.ContextVar = contextvars.ContextVar("config")
TABLE: contextvars.ContextVar = contextvars.ContextVar("table")


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE.get()


def _scaled_unbound(x: torch.Tensor) -> torch.Tensor:
    return x * contextvars.ContextVar.get(SCALE, 0.5)


def _counted(x: torch.Tensor) -> torch.Tensor:
    SCALE.set(SCALE.get() + 1)
    return x * SCALE.get()


def _set_and_reset(x: torch.Tensor) -> torch.Tensor:
    token = SCALE.set(5.0)
    y = x * SCALE.get()
    SCALE.reset(token)
    return y + SCALE.get()


def _in_a_copy(x: torch.Tensor) -> torch.Tensor:
    return x * contextvars.copy_context().run(SCALE.get)


def _configured(x: torch.Tensor) -> torch.Tensor:
    return x * CONFIG.get().scale + TABLE.get()


def _runs(fn: Callable[[torch.Tensor], Any], change: Callable[[int], None], calls: int = 6) -> Any:
    """``fn`` eagerly then jitted on the same inputs, ``change(i)`` before each call; the variable's value
    after each call compared."""
    jitted = jitcore.jit(fn)
    xs = [torch.randn(3) for _ in range(calls)]
    seen = []
    for run in (fn, jitted):
        SCALE.set(1.0)
        CONFIG.set(types.SimpleNamespace(scale=2.0))
        TABLE.set(torch.ones(3))
        out = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, x in enumerate(xs):
                change(i)
                out.append((run(x), SCALE.get()))
        seen.append(out)
    for (expected, scale), (actual, jit_scale) in zip(*seen):
        assert_same(actual, expected)
        assert jit_scale == scale
    return jitted


def _set_between(i: int) -> None:
    if i % 2:
        SCALE.set(float(i))


def _config_changed(i: int) -> None:
    if i == 2:
        CONFIG.get().scale = 3.0
    if i == 3:
        CONFIG.set(types.SimpleNamespace(scale=4.0))
    if i == 4:
        TABLE.set(torch.full((3,), 2.0))


@pytest.mark.parametrize("fn", [_scaled, _scaled_unbound, _in_a_copy])
def test_a_variable_the_program_reads_is_each_calls(fn: Any) -> None:
    """Before (/tmp/eff54-probes/cv_read.py): ``SCALE.get()`` was a constant of the trace: after the caller
    set 2.0, eager 2.0, jit 1.0."""
    _runs(fn, _set_between)


def test_an_object_and_a_tensor_in_variables_are_each_calls() -> None:
    _runs(_configured, _config_changed)


@pytest.mark.parametrize("fn", [_counted, _set_and_reset])
def test_a_variable_the_program_sets_is_set_on_every_call(fn: Any) -> None:
    """Before (/tmp/eff54-probes/wide4.py "contextvar counter"): the pass made the set once, cached calls
    never: eager 2, 3, 4, ..., jit 2 on every call and the variable stuck. Now the calls run eagerly, one
    eager entry whatever the variable holds."""
    jitted = _runs(fn, lambda i: None, calls=8)
    assert jitcore.cache_misses(jitted) == 1


COLLECTOR: contextvars.ContextVar = contextvars.ContextVar("collector", default=None)


def _layer(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    collected = COLLECTOR.get()
    if collected is not None:
        collected.append(y.sum())
    return y + 1


def _collected(x: torch.Tensor) -> tuple:
    token = COLLECTOR.set([])  # transformers' output capturing: set around the forward, reset after
    try:
        y = _layer(_layer(x))
    finally:
        out = COLLECTOR.get()
        COLLECTOR.reset(token)
    return y, out


def test_a_variable_set_and_reset_inside_the_call_keeps_one_entry() -> None:
    """Note [Context variables]: the context is left as the call found it, the reads between read the
    program's own list: the trace stands."""
    jitted = jitcore.jit(_collected)
    for _ in range(5):
        x = torch.randn(3)
        assert_same(jitted(x), _collected(x))
        assert COLLECTOR.get() is None
    assert jitcore.cache_misses(jitted) == 1
    assert jitted.fallback_reason is None
