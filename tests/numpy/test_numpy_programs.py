"""Differential tests of NumPy programs under jitcore: values, types and dtypes as NumPy gives them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_numpy_support import assert_no_wrappers, assert_same, check

import jitcore

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((3, 4)).astype(np.float32)
V = RNG.standard_normal(4)
I = RNG.integers(-5, 5, size=(3, 4))
M = RNG.standard_normal((4, 4)) + 4 * np.eye(4)


def test_elementwise_math_on_an_array_input() -> None:
    check(lambda a: np.exp(a) * np.sin(a) + np.sqrt(np.abs(a)) - a**2 / 3, A)


def test_tensor_numpy_then_numpy_calls() -> None:
    def f(x):
        a = x.numpy()
        return np.tanh(a) + np.maximum(a, 0.5), np.add(a, 1)

    check(f, torch.randn(3, 4))


def test_reductions_with_axis_and_keepdims() -> None:
    def f(a):
        return (
            np.sum(a),
            np.sum(a, axis=0),
            np.mean(a, axis=1, keepdims=True),
            a.max(axis=-1),
            np.min(a, axis=(0, 1)),
            np.argmax(a, axis=0),
            a.std(),
            np.prod(a, axis=1),
            np.cumsum(a, axis=1),
        )

    check(f, A)


def test_reductions_of_integers_promote_like_numpy() -> None:
    check(lambda i: (np.sum(i), i.mean(), np.sum(i, axis=1), i / 2, i // 2, i * 1.5), I)


def test_broadcasting() -> None:
    check(lambda a, v: (a + v, a * v[None, :], a[:, :, None] - v, np.outer(v, v)), A, V)


def test_mixed_precision_follows_numpy_promotion() -> None:
    check(
        lambda a, b: (a + b, b * 2.0, b + np.float64(1.0), b.astype(np.float64), a.astype(np.float32)), A, B
    )


def test_integer_and_bool_indexing_of_numpy_arrays() -> None:
    def f(a):
        return a[0], a[1, 2], a[:, 1], a[::2, 1:3], a[..., -1], a[None, 0]

    check(f, A)


def test_negative_step_slices() -> None:
    # torch._numpy mistranslates the bounds of these; the bridge rewrites them (jitcore/numpy/indexing.py)
    check(lambda a: (a[::-1], a[1::-1], a[:, 3:0:-2], a[None, 1, ::-2], a[..., -1:-4:-1], a[0:0:-1]), A)


def test_fancy_indexing() -> None:
    def f(a, idx):
        return a[idx], a[:, idx], a[idx, idx], np.take(a, idx, axis=1)

    check(f, A, np.array([2, 0, 1]))


def test_where_and_comparisons() -> None:
    def f(a, b):
        return np.where(a > 0, a, 0.0), np.where(a > b, a, b), (a > 0) & (b < 0), np.clip(a, -0.5, 0.5)

    check(f, A, B)


def test_concatenate_and_stack() -> None:
    def f(a, v):
        return (np.concatenate([a, a], axis=0), np.stack([v, v, v]), np.vstack([a, v]), np.hstack([v, v]),
                np.concatenate((a, a), axis=1).T)

    check(f, A, V)


def test_linalg_basics() -> None:
    def f(m, v):
        return (
            m @ v,
            np.dot(m, m),
            np.linalg.inv(m),
            np.linalg.norm(v),
            np.linalg.det(m),
            np.linalg.solve(m, v),
        )

    check(f, M, V)


def test_random_arrays_passed_in() -> None:
    def f(noise, a):
        return np.mean(noise), a + 0.1 * noise

    check(f, RNG.standard_normal((3, 4)), A)


def test_mixed_tensor_and_ndarray_program() -> None:
    def f(x, a):
        b = x.numpy() * a
        t = torch.from_numpy(b)
        return torch.relu(t) + 1, np.sum(b, axis=0)

    check(f, torch.randn(3, 4, dtype=torch.float64), A)


def test_array_creation_inside() -> None:
    def f(a):
        return (
            np.zeros_like(a) + np.ones(4),
            np.arange(4) * a,
            np.linspace(0, 1, 4),
            np.eye(3) @ a,
            np.array(2.0),
        )

    check(f, A)


def test_numpy_scalars_from_reductions_and_items() -> None:
    def f(a):
        s = np.sum(a)
        return s, s * 2, s + a[0, 0], a[0, 0] * 3, np.float32(2) * a[0]

    check(f, A)


def test_shape_functions() -> None:
    def f(a):
        return a.reshape(4, 3), np.transpose(a), a.ravel(), np.expand_dims(a, 0), a.squeeze(), np.flip(a, 0)

    check(f, A)


def test_ndarray_methods_and_operators() -> None:
    def f(a, b):
        c = a.copy()
        c += 1
        c *= b
        return -c, abs(c), c.clip(0, 1), c.sum(axis=0), c.dot(c.T), c > 0, c != b, c.astype(np.int64) % 3

    check(f, A, B)


def test_in_place_on_an_input_array_reaches_the_caller() -> None:
    def f(a):
        a += 1
        return a * 2

    jfn = jitcore.jit(f)
    a, b = A.copy(), A.copy()
    assert_same(jfn(a), f(b))
    np.testing.assert_array_equal(a, b)
    assert_same(jfn(a), f(b))
    np.testing.assert_array_equal(a, b)


def test_dtype_comparisons() -> None:
    def f(a):
        if a.dtype == np.float32:
            return a * 2
        return a - 1

    check(f, A)
    check(f, B)


def test_trace_has_only_torch_operations() -> None:
    def f(x):
        a = x.numpy()
        return np.add(a, 1), np.add(a, 2)

    jfn = jitcore.jit(f)
    jfn(torch.ones(2))
    text = str(jitcore.last_traces(jfn)[-1])
    assert_no_wrappers(jfn)
    assert "torch.add" in text
    assert text.count("= torch.") >= 2


def test_outputs_are_real_numpy_values() -> None:
    jfn = jitcore.jit(lambda x: (x.numpy() + 1, np.sum(x.numpy()), np.float64(3.0)))
    out = jfn(torch.ones(2, dtype=torch.float64))
    assert type(out[0]) is np.ndarray and out[0].dtype == np.float64
    assert type(out[1]) is np.float64 and out[1] == 2.0
    assert type(out[2]) is np.float64


def test_complex_and_integer_dtypes() -> None:
    z = (A + 1j * A).astype(np.complex64)
    check(lambda z: (np.abs(z), z.real, np.conj(z) * z, np.angle(z)), z)
    check(lambda i: (np.bitwise_and(i, 3), i << 1, np.sign(i), np.abs(i).astype(np.uint8)), I)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_])
def test_inputs_of_each_dtype(dtype) -> None:
    check(
        lambda a: (a * 2, np.sum(a, axis=0), a[0]),
        (A > 0).astype(dtype) if dtype is np.bool_ else (A * 3).astype(dtype),
    )


def _softmax(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _cross_entropy(a, labels):
    return -np.mean(np.log(_softmax(a)[np.arange(len(labels)), labels] + 1e-12))


LOGITS = RNG.standard_normal((5, 4))
LABELS = RNG.integers(0, 4, size=5)
REALISTIC = {
    "softmax": (_softmax, (LOGITS,)),
    "cross_entropy": (_cross_entropy, (LOGITS, LABELS)),
    "one_hot": (lambda labels: np.eye(4)[labels], (LABELS,)),
    "relu": (lambda a: (np.maximum(0, a), np.maximum(a, 0.0), np.where(a > 0, a, 0)), (LOGITS,)),
    "norms": (lambda a: (np.linalg.norm(a, axis=1), a / np.linalg.norm(a, axis=1, keepdims=True)), (LOGITS,)),
    "pairwise_distances": (lambda a: np.sqrt(((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)), (LOGITS,)),
    "standardize": (lambda a: (a - a.mean(0)) / (a.std(0) + 1e-8), (LOGITS,)),
    "gather_argmax": (lambda a: a[np.arange(a.shape[0]), np.argmax(a, axis=1)], (LOGITS,)),
    "special_values": (
        lambda a: (np.sqrt(a), a / 0.0, np.isclose(a, 0.5), a.astype(bool), np.nan_to_num(np.log(a))),
        (LOGITS,),
    ),
    "integer_wraparound": (
        lambda a: (a.astype(np.int32) * np.int32(2**30), np.uint8(250) + a.astype(np.uint8)),
        (LOGITS * 10,),
    ),
}


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_realistic_programs(name: str) -> None:
    fn, args = REALISTIC[name]
    check(fn, *args)
