"""NumPy programs over arrays whose shapes change between calls: eager's results on every call, and
one entry for the first shape plus one with symbolic sizes for the rest, as for tensors
(jitcore/numpy/bridge.py, Note [Placeholders of symbolic sizes])."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_numpy_support import assert_no_wrappers, assert_same, copy_inputs

import jitcore


def _norms(x: np.ndarray) -> np.ndarray:
    return np.linalg.norm(x, axis=-1) + np.mean(x) * np.std(x)


def _masked_sum(x: np.ndarray) -> np.generic:
    return x[x > 0.1].sum()


def _clipped_cumsum(x: np.ndarray) -> np.ndarray:
    y = np.cumsum(x, axis=0)
    return np.where(y > 0, y, 0.0).astype(np.float32)


def _gram(x: np.ndarray) -> np.ndarray:
    return np.einsum("ij,kj->ik", x, x) / x.shape[1]


def _sorted_views(x: np.ndarray) -> tuple:
    s = np.sort(x, axis=1)
    return s[:, ::-1][:, :2], np.argsort(x, axis=0)


def _strided_concat(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, x**2], axis=1).reshape(-1)[::3]


def _scalar_steers(x: np.ndarray) -> tuple:
    m = x.max()
    return (x / m if m > 0 else x), float(m)


def _histogram(x: np.ndarray) -> np.ndarray:
    return np.histogram(x, bins=4, range=(-2, 2))[0]


def _rfft(x: np.ndarray) -> np.ndarray:
    return np.fft.rfft(x, axis=-1).real


def _stacked_means(x: np.ndarray) -> np.ndarray:
    return np.stack([np.tanh(x), np.exp(-(x**2))]).mean(axis=(1, 2))


PROGRAMS: dict[str, Callable] = {
    f.__name__.lstrip("_"): f
    for f in (_norms, _masked_sum, _clipped_cumsum, _gram, _sorted_views, _strided_concat, _scalar_steers,
              _histogram, _rfft, _stacked_means)
}


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_numpy_program_over_changing_shapes_traces_twice(name: str, dtype: type) -> None:
    fn = PROGRAMS[name]
    jitted = jitcore.jit(fn)
    for rows in (4, 5, 6, 7, 9):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(dtype)
        assert_same(jitted(*copy_inputs((x,))), fn(x))
    assert_no_wrappers(jitted)
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)[-1]
