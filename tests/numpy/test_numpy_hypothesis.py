"""Hypothesis: random shapes, dtypes and small NumPy programs agree with eager NumPy under jitcore."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_numpy_support import check

DTYPES = st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.bool_])
# A fast profile by default; JITCORE_NUMPY_EXAMPLES=200 for a longer search.
SETTINGS = settings(max_examples=int(os.environ.get("JITCORE_NUMPY_EXAMPLES", "8")), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

UNARY = {
    "negative": lambda a: -a if a.dtype != np.bool_ else ~a,
    "abs": np.abs,
    "square": np.square,
    "exp": lambda a: np.exp(np.clip(a, -5, 5)),
    "sign": lambda a: np.sign(a) if a.dtype != np.bool_ else a,
    "sum": np.sum,
    "mean": np.mean,
    "astype": lambda a: a.astype(np.float32),
    "transpose": np.transpose,
    "cumsum": lambda a: np.cumsum(a, axis=-1) if a.ndim else a,
}
BINARY = {
    "add": np.add,
    "multiply": lambda a, b: a * b,
    "maximum": np.maximum,
    "where": lambda a, b: np.where(a > b, a, b),
    "compare": lambda a, b: a >= b,
    "true_divide": lambda a, b: a / (np.abs(b) + 1),
}


def _arrays(shape):
    return DTYPES.flatmap(
        lambda dtype: hnp.arrays(
            dtype, shape,
            elements=st.integers(-100, 100) if np.dtype(dtype).kind in "iu"
            else st.booleans() if dtype is np.bool_ else st.floats(-100, 100, width=32),
        )
    )


@SETTINGS
@given(
    data=st.data(),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
    op=st.sampled_from(sorted(UNARY)),
)
def test_unary_programs(data, shape, op) -> None:
    a = data.draw(_arrays(shape))
    check(UNARY[op], a)


@SETTINGS
@given(data=st.data(), shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4),
       op=st.sampled_from(sorted(BINARY)))
def test_binary_programs_with_broadcasting(data, shapes, op) -> None:
    a = data.draw(_arrays(shapes.input_shapes[0]))
    b = data.draw(_arrays(shapes.input_shapes[1]))
    check(BINARY[op], a, b)


@SETTINGS
@given(
    data=st.data(),
    shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
    keepdims=st.booleans(),
    reduction=st.sampled_from(["sum", "mean", "max", "min", "prod", "argmax", "std"]),
)
def test_reductions_over_an_axis(data, shape, keepdims, reduction) -> None:
    a = data.draw(_arrays(shape))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    fn = getattr(np, reduction)
    if reduction == "argmax":
        check(lambda a: fn(a, axis=axis), a)
    else:
        check(lambda a: fn(a, axis=axis, keepdims=keepdims), a)


@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
def test_basic_and_integer_array_indexing(data, shape) -> None:
    a = data.draw(_arrays(shape))
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    check(lambda a: a[index], a)
    rows = data.draw(hnp.arrays(np.int64, st.integers(1, 3), elements=st.integers(-shape[0], shape[0] - 1)))
    check(lambda a, rows: (a[rows], a[rows, ...]), a, rows)


@SETTINGS
@given(
    data=st.data(), shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=4)
)
def test_mixed_tensor_and_array_programs(data, shapes) -> None:
    import torch

    x = torch.from_numpy(data.draw(_arrays(shapes.input_shapes[0])))
    a = data.draw(_arrays(shapes.input_shapes[1]))

    def f(x, a):
        b = x.numpy() + a
        return torch.from_numpy(np.asarray(b)) * 2, np.sum(b), b.astype(np.float64)

    check(f, x, a)
