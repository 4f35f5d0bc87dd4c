"""Shared checks for the NumPy bridge tests: run eagerly and under jitcore, compare exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import optree
import torch

import jitcore

WRAPPER_NAMES = ("ndarray", "_numpy", "numpy", "tnp", "np.")


def copy_inputs(args: tuple) -> tuple:
    return tuple(
        a.copy() if isinstance(a, np.ndarray) else a.clone() if isinstance(a, torch.Tensor) else a
        for a in args
    )


def assert_same(got: Any, expected: Any) -> None:
    """Same structure; each leaf of the same type, dtype, shape and value (NaN equal to NaN)."""
    got_leaves, got_spec = optree.tree_flatten(got, none_is_leaf=True)
    exp_leaves, exp_spec = optree.tree_flatten(expected, none_is_leaf=True)
    assert got_spec == exp_spec, f"structure {got_spec} != {exp_spec}"
    for g, e in zip(got_leaves, exp_leaves):
        assert type(g) is type(e), f"type {type(g)} != {type(e)}"
        if isinstance(e, (np.ndarray, np.generic)):
            assert g.dtype == e.dtype, f"dtype {g.dtype} != {e.dtype}"
            assert np.shape(g) == np.shape(e), f"shape {np.shape(g)} != {np.shape(e)}"
            tol = {"rtol": 1e-3, "atol": 1e-3} if e.dtype in (np.float16, np.float32, np.complex64) else {}
            np.testing.assert_allclose(
                g, e, equal_nan=True, **tol
            ) if e.dtype.kind in "fc" else np.testing.assert_array_equal(g, e)
        elif isinstance(e, torch.Tensor):
            assert g.dtype == e.dtype and g.shape == e.shape
            torch.testing.assert_close(g, e, equal_nan=True)
        else:
            assert g == e


def check(fn: Any, *args: Any, calls: int = 2) -> jitcore.JittedFunction:
    """``fn`` under jitcore gives what it gives eagerly (twice: traced, then cached); the trace has
    no ndarray wrapper operations."""
    jfn = jitcore.jit(fn)
    for _ in range(calls):
        expected = fn(*copy_inputs(args))
        got = jfn(*copy_inputs(args))
        assert_same(got, expected)
    assert_no_wrappers(jfn)
    assert jitcore.cache_misses(jfn) == 1
    return jfn


def assert_no_wrappers(jfn: Any) -> None:
    for trace in jitcore.last_traces(jfn):
        body = "\n".join(line.split("#")[0] for line in str(trace).splitlines())  # code, not comments
        for name in WRAPPER_NAMES:
            assert name not in body, f"{name!r} in the trace:\n{body}"
