"""What the NumPy bridge cannot trace fails with jitcore's errors, naming the function and the line."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import jitcore
from jitcore.numpy import UnsupportedNumPyError

A = np.random.default_rng(1).standard_normal((3, 4))


def _raises(error: type, fn, *args) -> Exception:
    with pytest.raises(error) as info:
        jitcore.jit(fn, fullgraph=True)(*args)
    return info.value


def test_boolean_mask_indexing_is_data_dependent_with_fullgraph() -> None:
    # The result's shape depends on the mask's values: fullgraph=True refuses it (docs/numpy.md).
    error = _raises(jitcore.DataDependentError, lambda a: a[a > 0], A)
    assert error.code == "JC-T002"


def test_other_value_dependent_shapes_and_python_values_with_fullgraph() -> None:
    _raises(jitcore.DataDependentError, lambda a: np.nonzero(a), A)
    _raises(jitcore.DataDependentError, lambda a: np.unique(a), A)
    _raises(jitcore.DataDependentError, lambda a: float(np.sum(a)), A)
    _raises(jitcore.DataDependentError, lambda a: a * 2 if a.sum() > 0 else a, A)
    _raises(jitcore.DataDependentError, lambda a: a.tolist(), A)


@pytest.mark.parametrize("fn", [
    lambda a: a[a > 0], lambda a: np.nonzero(a), lambda a: np.unique(a), lambda a: float(np.sum(a)),
    lambda a: a * 2 if a.sum() > 0 else a,
], ids=["mask", "nonzero", "unique", "float", "branch"])
def test_value_reads_match_numpy_on_every_call(fn) -> None:
    # By default such reads are checked reads (docs/user-guide.md, "Value reads"), cached calls included.
    jfn = jitcore.jit(fn)
    for a in (A, A, -A, A[::-1].copy(), -A):
        got, expected = jfn(a), fn(a)
        assert type(got) is type(expected)
        for g, e in zip(
            got if isinstance(got, tuple) else (got,),
            expected if isinstance(expected, tuple) else (expected,),
        ):
            np.testing.assert_array_equal(g, e)


def test_eager_fallback_for_boolean_masks() -> None:
    jfn = jitcore.jit(lambda a: a[a > 0], fallback="eager", fullgraph=True)
    with pytest.warns(UserWarning, match="runs eagerly"):
        out = jfn(A)
    np.testing.assert_array_equal(out, A[A > 0])


@pytest.mark.parametrize("fn, make", [
    (lambda a: a + np.random.rand(3, 4), lambda i: (A,)),
    (lambda a: a * float(np.random.randn()), lambda i: (A,)),
    (lambda a: np.interp(a, [0.0, 1.0], [0.0, 10.0]), lambda i: (A * i,)),
    (lambda a: np.nanmean(a, axis=0), lambda i: (A + i,)),
    (lambda a: a + np.array([1, 2, 3, 4], dtype=object), lambda i: (A,)),
    (lambda a: a[::-1], lambda i: (np.array(["x", "y"]),)),
], ids=["np.random", "np.random-scalar", "interp", "nanmean", "object-dtype", "string-input"])
def test_without_fullgraph_what_cannot_be_traced_runs_eagerly(fn, make) -> None:
    """JC-N001 is an eager entry (one warning, eager's values and draws), as other refusals are; it
    raised on every call before."""
    jfn = jitcore.jit(fn)
    for i in range(3):
        np.random.seed(i)
        expected = fn(*make(i))
        np.random.seed(i)
        with pytest.warns(UserWarning, match="runs eagerly") if i == 0 else contextlib.nullcontext():
            got = jfn(*make(i))
        assert type(got) is type(expected)
        np.testing.assert_array_equal(got, expected)
    assert isinstance(jfn.fallback_reason, UnsupportedNumPyError)
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 2)


def test_without_fullgraph_a_generator_passed_in_draws_as_eagerly() -> None:
    fn = lambda a, rng: a + rng.normal(size=(3, 4))  # noqa: E731
    eager_rng, jit_rng = np.random.default_rng(0), np.random.default_rng(0)
    jfn = jitcore.jit(fn)
    with pytest.warns(UserWarning, match="runs eagerly"):
        jfn(A, jit_rng)
    fn(A, eager_rng)
    for _ in range(2):
        np.testing.assert_array_equal(jfn(A, jit_rng), fn(A, eager_rng))
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 2)


def test_numpy_random_inside_is_unsupported_with_the_line() -> None:
    def f(a):
        return a + np.random.rand(3, 4)

    error = _raises(UnsupportedNumPyError, f, A)
    assert error.code == "JC-N001"
    assert "np.random.rand" in str(error)
    assert f"test_numpy_errors.py:{f.__code__.co_firstlineno + 1}" in str(error)


def test_generator_objects_are_unsupported() -> None:
    error = _raises(
        UnsupportedNumPyError, lambda a, rng: a + rng.normal(size=(3, 4)), A, np.random.default_rng(0)
    )
    assert "np.random.Generator.normal" in str(error)


def test_ufunc_methods_without_a_function_form_name_the_function_forms() -> None:
    error = _raises(UnsupportedNumPyError, lambda a: np.subtract.outer(a, a), A)
    assert "np.subtract.outer" in str(error) and "np.sum" in str(error)


def test_function_missing_from_torch_numpy() -> None:
    error = _raises(UnsupportedNumPyError, lambda a: np.interp(a, a[0], a[1]), A)
    assert "np.interp" in str(error) and "test_numpy_errors.py" in str(error)


def test_missing_function_on_constants_runs_natively() -> None:
    jfn = jitcore.jit(lambda a: a * np.interp(2.5, [1.0, 2.0, 3.0], [10.0, 20.0, 30.0]))
    out = jfn(A)
    np.testing.assert_allclose(out, A * 25.0)


def test_unimplemented_argument_of_a_covered_function() -> None:
    error = _raises(UnsupportedNumPyError, lambda a: np.prod(a, axis=(0, 1)), A)
    assert "np.prod" in str(error)


def test_object_and_string_dtypes() -> None:
    _raises(UnsupportedNumPyError, lambda a: a + np.array([1, "x", None], dtype=object), A)
    _raises(UnsupportedNumPyError, lambda a: np.array(["a", "b"]), A)
    error = _raises(UnsupportedNumPyError, lambda a: a, np.array(["x"]))
    assert "<U1" in str(error) and "args[0]" in str(error)
    _raises(UnsupportedNumPyError, lambda a: a, np.array([1, None], dtype=object))
    _raises(UnsupportedNumPyError, lambda a: a.astype(np.str_), A)


def test_array_subclasses_are_rejected_as_inputs() -> None:
    class MyArray(np.ndarray):
        pass

    _raises(UnsupportedNumPyError, lambda a: a, A.view(MyArray))


def test_numpy_of_a_tensor_requiring_grad_raises_like_torch() -> None:
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        x.numpy()
    _raises(RuntimeError, lambda x: x.numpy(), x)


def test_numpy_of_a_bfloat16_tensor_raises_like_torch() -> None:
    with pytest.raises(TypeError, match="BFloat16"):
        torch.ones(2, dtype=torch.bfloat16).numpy()
    _raises(TypeError, lambda x: x.numpy(), torch.ones(2, dtype=torch.bfloat16))


def test_shape_errors_are_torchs() -> None:
    # NumPy raises ValueError; torch._numpy (and so jitcore) raises torch's RuntimeError (docs/numpy.md).
    with pytest.raises(ValueError):
        np.concatenate([A, A[:, :2]], axis=0)
    _raises(RuntimeError, lambda a: np.concatenate([a, a[:, :2]], axis=0), A)
    _raises(RuntimeError, lambda a: a + a[:2, :3], A)


@pytest.mark.parametrize("program", [
    lambda x: (x.numpy().tobytes(), x + 1),
    lambda x: (np.frombuffer(x.numpy().tobytes(), dtype=np.float32).sum(), x * 2),
    lambda x: (hasattr(x.numpy(), "tobytes"), getattr(x.numpy(), "no_such_attribute", 7), x + 1),
], ids=["tobytes", "frombuffer", "hasattr"])
def test_an_array_attribute_torch_numpy_lacks_runs_eagerly(program) -> None:
    """``a.tobytes()``: NumPy's arrays have it, torch's NumPy layer's do not. The program raised
    AttributeError under jit where eager returns; now JC-N001 (an eager entry), and an attribute NumPy's
    arrays lack reads as eagerly."""
    jfn = jitcore.jit(program)
    for i in range(3):
        x = torch.arange(4.0) / (i + 3)
        with pytest.warns(UserWarning, match="runs eagerly") if i == 0 else contextlib.nullcontext():
            got = jfn(x)
        for want, have in zip(program(x), got, strict=True):
            assert type(have) is type(want)
            assert torch.equal(have, want) if isinstance(want, torch.Tensor) else have == want
    assert isinstance(jfn.fallback_reason, UnsupportedNumPyError)
