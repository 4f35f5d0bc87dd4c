"""Bad input gets the exception eager raises, or a clear jitcore error naming the argument.

Wrong argument counts, unexpected or duplicate keywords, unsupported input types, sparse tensors
(meta tensors are ordinary inputs: tests/reliability/test_reliability_meta.py), 0-dim and empty tensors, huge
integers, NaN and infinities — on the first call (tracing)
and on later calls (cached), never an interpreter crash or a hang.
"""

from __future__ import annotations

import math

import pytest
import torch
from reliability_helpers import outcome, same_outcome

import jitcore


def h(x, n=1, *, k=2):
    return x * n + k


X = torch.ones(2)
CASES = [
    ((), {}),
    ((X, 1, 2), {}),
    ((X,), {"z": 1}),
    ((X, 1), {"n": 2}),
    ((X,), {"k": 1, "n": 2}),
    ((torch.tensor(3.0),), {}),
    ((torch.ones(0),), {}),
    ((torch.ones(0, 3),), {"n": 2.5}),
    ((X, 10**30), {}),
    ((X, 10**5000), {}),
    ((X, -(2**63)), {}),
    ((X, float("nan")), {}),
    ((X, float("inf")), {}),
    ((X, -float("inf")), {}),
    ((X, -0.0), {}),
    ((X, {1, 2}), {}),
    ((X, (i for i in range(2))), {}),
    ((X, None), {}),
    ((X, "s"), {}),
    ((X, object()), {}),
    ((X, torch.ones(3)), {}),
    ((X, 1j), {}),
    ((torch.ones(2, dtype=torch.complex64), 2), {}),
    ((torch.ones(2, 2).t(),), {}),
    ((torch.ones(2, 2)[:, 0],), {}),
    ((torch.tensor([1, 2]),), {"n": 2**62}),
    ((torch.tensor([1, 2]),), {"n": 2**64}),
    ((torch.tensor([True]),), {"n": True}),
    ((X,), {"k": torch.ones(2, 2)}),
    (([X],), {}),
    (({"a": X},), {}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_like_eager_on_first_and_cached_calls(case: int) -> None:
    args, kwargs = CASES[case]
    jf = jitcore.jit(h)
    for _ in range(2):
        same_outcome(outcome(jf, *args, **kwargs), outcome(h, *args, **kwargs))


def test_a_good_call_after_bad_ones_still_works() -> None:
    jf = jitcore.jit(h)
    for args, kwargs in CASES:
        outcome(jf, *args, **kwargs)
    same_outcome(outcome(jf, X, 3), outcome(h, X, 3))


def test_argument_errors_keep_eager_messages() -> None:
    jf = jitcore.jit(h)
    for args, kwargs in [((), {}), ((X,), {"z": 1}), ((X, 1), {"n": 2})]:
        expected, actual = outcome(h, *args, **kwargs), outcome(jf, *args, **kwargs)
        assert str(actual[1]) == str(expected[1])


@pytest.mark.parametrize(
    "tensor, words",
    [(torch.ones(2).to_sparse(), "layout torch.sparse_coo")],
)
def test_untraced_tensors_run_eagerly_naming_the_argument(tensor, words) -> None:
    jf = jitcore.jit(h)
    with pytest.warns(UserWarning, match="runs eagerly for this call"):  # Note [Eager entries]
        same_outcome(outcome(jf, X, k=tensor), outcome(h, X, k=tensor))
    message = str(jf.fallback_reason)
    assert isinstance(jf.fallback_reason, jitcore.UnsupportedInputError)  # JC-J002's EagerOnlyValue
    assert words in message and "'k'" in message and "kwargs['k']" in message
    same_outcome(outcome(jf, X), outcome(h, X))  # dense calls are traced as before


def test_nan_and_signed_zero_are_separate_specializations() -> None:
    def g(x, c):
        return x * math.copysign(1.0, c) if c == c else x * 0, c  # noqa: PLR0124 - a NaN test

    jf = jitcore.jit(g)
    for c in (0.0, -0.0, float("nan"), 0.0, -0.0, float("nan"), float("inf"), -float("inf"), float("inf")):
        same_outcome(outcome(jf, X, c), outcome(g, X, c), repr(c))
    assert jitcore.cache_misses(jf) == 5
