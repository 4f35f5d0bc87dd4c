"""Breadth: more of NumPy's API under jitcore, each compared with eager NumPy (types, dtypes, values)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_numpy_support import assert_same, check

import jitcore

RNG = np.random.default_rng(3)
A = RNG.standard_normal((3, 4))
M = RNG.standard_normal((4, 4)) + 4 * np.eye(4)
V = RNG.standard_normal(4)


def _setitem(a):
    a = a.copy()
    a[0] = 1.0
    a[:, 1] += 2
    return a


def _set_through_mask(a):
    a = a.copy()
    a[a > 0] = 0.0  # a masked write keeps the shape: traceable
    return a


PROGRAMS = {
    "linalg": (
        lambda m: (
            np.linalg.svd(m)[1],
            np.linalg.qr(m)[1].shape,
            np.linalg.eigvalsh(m + m.T),
            np.linalg.matrix_rank(m),
            np.linalg.slogdet(m)[1],
        ),
        (M,),
    ),
    "fft": (lambda v: (np.fft.fft(v), np.abs(np.fft.rfft(v)), np.fft.ifft(np.fft.fft(v)).real), (V,)),
    "contractions": (
        lambda a, m: (
            np.einsum("ij,jk->ik", a, m),
            np.tensordot(a, m, axes=1),
            np.matmul(a, m),
            np.inner(a, a),
        ),
        (A, M),
    ),
    "setitem": (_setitem, (A,)),
    "masked_write": (_set_through_mask, (A,)),
    "iteration": (lambda a: [r.sum() for r in a], (A,)),
    "constant_from_numpy": (
        lambda a: a[0, :2] * np.interp([1.5, 2.5], [1.0, 2.0, 3.0], [10.0, 20.0, 30.0]),
        (A,),
    ),
    "scalar_types_called": (lambda a: (np.float64(a.sum()), np.float32(a[0]), np.int64(3) + a), (A,)),
    "sorting_and_statistics": (
        lambda a: (
            np.sort(a, axis=1),
            np.argsort(a, axis=0),
            np.median(a),
            np.percentile(a, 50.0),
            np.quantile(a, 0.5),
        ),
        (A,),
    ),
    "misc": (
        lambda a: (
            np.isnan(a).any(),
            np.round(a, 2),
            np.floor(a),
            np.diff(a),
            np.tile(a, 2),
            np.repeat(a, 2, axis=0),
        ),
        (A,),
    ),
    "splitting": (lambda a: (np.split(a, 2, axis=1), np.array_split(a, 3), np.meshgrid(a[0], a[1])), (A,)),
    "integers": (
        lambda a: (
            (a * 10).astype(np.int32) // 3,
            np.remainder((a * 10).astype(np.int64), 4),
            np.power(2, np.arange(4)),
            2**a,
        ),
        (A,),
    ),
    "scalar_arithmetic": (
        lambda a: (a.sum() / a.size, a.max() - a.min(), np.sqrt(a.sum() ** 2), -a.sum(), abs(a.sum())),
        (A,),
    ),
    "arg_reductions": (lambda a: (np.argmax(a), a.argmin(), np.argmax(a, axis=1)), (A,)),
    "booleans": (lambda a: (np.all(a > -10), np.any(a > 10), (a > 0).sum(), np.count_nonzero(a > 0)), (A,)),
    "complex": (lambda a: (np.exp(1j * a), (a + 1j).real.dtype == np.float64), (A,)),
    "dtype_arguments": (
        lambda a: (
            np.sum(a, dtype=np.float32),
            np.zeros((2, 2), dtype="int32"),
            np.ones(3, np.float32),
            np.arange(5, dtype=np.int8),
        ),
        (A,),
    ),
    "tensor_of_array": (lambda a: (torch.as_tensor(a) + 1, torch.tensor(a) * 2, torch.asarray(a) - 1), (A,)),
    "array_of_tensor": (lambda x: (np.asarray(x) + 1, np.array(x) * 2), (torch.randn(3, 4),)),
    "ufunc_methods": (
        lambda a: (
            np.add.reduce(a),
            np.multiply.reduce(a, axis=1),
            np.maximum.reduce(a, 1),
            np.add.accumulate(a),
            np.logical_or.reduce(a > 0, axis=None),
            np.add.reduce(a.astype(np.int32), keepdims=True),
        ),
        (A,),
    ),
    "metadata": (
        lambda a: (a.shape, a.ndim, a.size, len(a), a.T.shape, a.itemsize, a.nbytes, a.strides),
        (A,),
    ),
}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # eager np.asarray(tensor) warns about copy=
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program(name: str) -> None:
    fn, args = PROGRAMS[name]
    check(fn, *args)


def test_module_holding_an_array() -> None:
    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = np.full(4, 2.0)

        def forward(self, x):
            return torch.from_numpy(x.numpy() * self.w)

    module = Scale()
    jmodule = jitcore.jit(module)
    x = torch.randn(4, dtype=torch.float64)
    assert_same(jmodule(x), module(x))
    module.w[:] = 3.0  # the array is an input: read again on each call
    assert_same(jmodule(x), module(x))
