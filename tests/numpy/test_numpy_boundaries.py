"""NumPy values at the boundaries: arrays as inputs (prologue), state and outputs (epilogue), caching."""

from __future__ import annotations

import numpy as np
import torch
from test_numpy_support import assert_no_wrappers, assert_same, check

import jitcore

RNG = np.random.default_rng(2)
A = RNG.standard_normal((3, 4))
WEIGHTS = RNG.standard_normal(4)


def test_cached_call_hits_and_reads_the_new_array() -> None:
    jfn = jitcore.jit(lambda a: np.sum(a * 2, axis=0))
    jfn(A)
    b = RNG.standard_normal((3, 4))
    assert_same(jfn(b), np.sum(b * 2, axis=0))
    assert jitcore.cache_hits(jfn) == 1 and jitcore.cache_misses(jfn) == 1


def test_shape_and_dtype_changes_retrace_with_reasons() -> None:
    jfn = jitcore.jit(lambda a: a + 1)
    jfn(A)
    assert_same(jfn(A[:2]), A[:2] + 1)
    assert_same(jfn(A.astype(np.float32)), A.astype(np.float32) + 1)
    assert jitcore.cache_misses(jfn) == 3
    reasons = [str(r) for miss in jitcore.miss_reasons(jfn) for r in miss]
    assert any("shape" in r for r in reasons) and any("dtype" in r for r in reasons)


def test_a_tensor_and_an_array_in_the_same_position_are_different_entries() -> None:
    def f(a):
        return a * 2

    jfn = jitcore.jit(f)
    assert_same(jfn(A), f(A))
    t = torch.from_numpy(A.copy())
    assert_same(jfn(t), f(t))
    assert_same(jfn(A), f(A))
    assert jitcore.cache_misses(jfn) == 2


def test_prologue_reads_arrays_through_from_numpy() -> None:
    jfn = jitcore.jit(lambda a: a + 1)
    jfn(A)
    text = str(jitcore.last_prologue_traces(jfn)[-1])
    # the array's type is checked, then the tensor read from it (a bound converter) like any tensor
    assert "type(v0) is not __ndarray" in text
    assert "shape != (3, 4)" in text and "dtype is not" in text


def test_global_array_is_an_input_not_a_constant() -> None:
    def f(a):
        return a @ WEIGHTS

    jfn = check(f, A)
    WEIGHTS[0] += 1.0  # mutated in place: the next call reads it
    assert_same(jfn(A), f(A))
    assert_no_wrappers(jfn)


def test_arrays_in_containers_and_keywords() -> None:
    def f(arrays, *, scale):
        return {"sum": arrays[0] + arrays[1], "scaled": scale * arrays[0]}

    jfn = jitcore.jit(f)
    for _ in range(2):
        assert_same(
            jfn([A, A.T.copy().T], scale=np.float64(2.0)), f([A, A.T.copy().T], scale=np.float64(2.0))
        )


def test_the_same_array_twice_is_one_input() -> None:
    jfn = jitcore.jit(lambda a, b: a + b)
    jfn(A, A)
    assert len(jitcore.last_traces(jfn)[-1].args) == 1


def test_non_contiguous_read_only_and_negatively_strided_arrays() -> None:
    strided = A[:, ::2]
    read_only = A.copy()
    read_only.flags.writeable = False
    flipped = A[::-1]
    for array in (strided, read_only, flipped, np.asfortranarray(A)):
        check(lambda a: (a * 3, np.sum(a, axis=1)), array)


def _add_in_place(a):
    a += 1
    return a


def test_zero_d_and_empty_arrays() -> None:
    check(lambda a: (a + 1, a * a), np.array(3.0))
    check(_add_in_place, np.array(3.0))  # an in-place result stays a 0-d array
    check(lambda a: np.add(a, 1, out=np.zeros_like(a)), np.array(3.0))
    check(lambda a: (a + 1, np.sum(a)), np.zeros((0, 3)))


def test_numpy_scalar_inputs_are_specialised_like_python_numbers() -> None:
    jfn = jitcore.jit(lambda a, s: a * s)
    assert_same(jfn(A.astype(np.float32), np.float64(2.0)), A.astype(np.float32) * np.float64(2.0))
    assert_same(jfn(A.astype(np.float32), np.float32(2.0)), A.astype(np.float32) * np.float32(2.0))
    assert_same(jfn(A.astype(np.float32), np.float32(2.0)), A.astype(np.float32) * np.float32(2.0))
    assert jitcore.cache_misses(jfn) == 2


def test_outputs_returned_as_numpy_types() -> None:
    def f(x):
        a = x.numpy()
        return a, a.sum(), (a > 0).any(), a.shape, a.dtype == np.float32, [a.mean(axis=0)]

    jfn = jitcore.jit(f)
    x = torch.randn(3, 4)
    got, expected = jfn(x), f(x)
    assert_same(got[:5], expected[:5])
    assert_same(got[5], expected[5])
    assert type(got[2]) is np.bool_


def test_in_place_on_tensor_numpy_view_reaches_the_tensor() -> None:
    def f(x):
        a = x.numpy()
        a *= 2
        return x + 1

    jfn = jitcore.jit(f)
    x, y = torch.ones(3), torch.ones(3)
    assert_same(jfn(x), f(y))
    assert_same(x, y)


def test_isinstance_and_type_see_numpy_types() -> None:
    def f(a):
        s = np.sum(a)
        return (
            isinstance(a, np.ndarray),
            isinstance(s, np.ndarray),
            isinstance(s, np.floating),
            isinstance(a[0], (np.ndarray, int)),
            type(a) is np.ndarray,
            type(s).__name__,
            type(a[0, 0]) is np.float64,
        )

    check(f, A)
