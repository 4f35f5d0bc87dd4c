"""Reads of torch's process-wide settings inside a jitted function (jitcore/jit/settings_reads.py,
Note [Settings the program reads]): every call answers with the setting as it is at that call."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import torch

import jitcore


@contextlib.contextmanager
def _set(setter: Callable[[object], None], getter: Callable[[], object], value: object) -> Iterator[None]:
    old = getter()
    setter(value)
    try:
        yield
    finally:
        setter(old)


def _mkldnn(value: object) -> None:
    # the flag's C setter: ``torch.backends.mkldnn.enabled = v`` refuses once a test in the same
    # process called ``torch.backends.disable_global_flags()`` (torch's own test utilities do)
    torch._C._set_mkldnn_enabled(value)  # noqa: SLF001


SETTINGS = {  # name: (program, setter, getter, values over the calls)
    "deterministic_algorithms": (
        lambda x: x * (2 if torch.are_deterministic_algorithms_enabled() else 3),
        torch.use_deterministic_algorithms, torch.are_deterministic_algorithms_enabled, (False, True, False),
    ),
    "num_threads": (
        lambda x: x * torch.get_num_threads(), torch.set_num_threads, torch.get_num_threads, (1, 2, 1),
    ),
    "float32_matmul_precision": (
        lambda x: x * (1 if torch.get_float32_matmul_precision() == "highest" else 2),
        torch.set_float32_matmul_precision, torch.get_float32_matmul_precision,
        ("highest", "high", "highest"),
    ),
    "mkldnn_enabled": (
        lambda x: x * (2 if torch.backends.mkldnn.enabled else 3),
        _mkldnn, lambda: torch.backends.mkldnn.enabled, (True, False, True),
    ),
    "anomaly_enabled": (
        lambda x: x * (2 if torch.is_anomaly_enabled() else 3),
        torch.autograd.set_detect_anomaly, torch.is_anomaly_enabled, (False, True, False),
    ),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_setting_read_inside_is_the_calls_setting(name: str) -> None:
    # Before: the first call's answer was a constant of the trace; the second call (setting changed)
    # hit the cache and multiplied by the old factor.
    fn, setter, getter, values = SETTINGS[name]
    jf = jitcore.jit(fn)
    x = torch.randn(3)
    for value in values:
        with _set(setter, getter, value):
            expected, actual = fn(x), jf(x)
        assert torch.equal(actual, expected), (name, value)
    assert len(jf.entries) == 2  # one per answer: the guard sent the call with the other answer away


def test_a_setting_read_once_costs_one_entry() -> None:
    jf = jitcore.jit(lambda x: x * torch.get_num_threads())
    x = torch.randn(3)
    for _ in range(3):
        assert torch.equal(jf(x), x * torch.get_num_threads())
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)
