"""Sizes, dims and split sizes given as one-element integer tensors (``torch.div(n, w,
rounding_mode="trunc")`` in Hugging Face's LED attention): torch reads their values as it parses the
arguments, so the jitted function must compute and raise what eager does for every value, across
the cache entries that values make (Note [A number of outputs that values decide],
jitcore/jit/value_reads.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore

BODIES: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "reshape, sizes spread out": lambda x, n: x.reshape(2, n, 4),
    "view, sizes spread out": lambda x, n: x.view(2, n, 4),
    "reshape, a tuple": lambda x, n: x.reshape((2, n, 4)),
    "permute, dims spread out": lambda x, n: x.reshape(4, 4).permute(n - 1, 0),
    "expand": lambda x, n: x[:4].expand(n, 4),
    "new_zeros": lambda x, n: x.new_zeros(n, 3),
    "split": lambda x, n: x.split(n),
    "tensor_split": lambda x, n: torch.tensor_split(x, n),
    "split then stack": lambda x, n: torch.stack([c.sum() for c in x.split(n)]),
}


def _outcome(fn: Callable[..., Any], k: int) -> Any:
    try:
        return fn(torch.arange(16.0), k)
    except Exception as exc:  # noqa: BLE001 - the exception type is part of the outcome
        return type(exc)


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_size_held_by_a_tensor_as_eagerly(name: str) -> None:
    body = BODIES[name]

    def f(x: torch.Tensor, k: int) -> Any:
        n = torch.div(k, 4, rounding_mode="trunc")
        return body(x, n)

    jitted = jitcore.jit(f)
    for k in (8, 8, 12, 4, 16, 12, 8):
        expected, got = _outcome(f, k), _outcome(jitted, k)
        if isinstance(expected, type) or isinstance(got, type):
            assert got is expected, (k, got, expected)
        else:
            torch.testing.assert_close(got, expected)


def test_a_tensor_size_out_of_range_raises_eagers_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(4, 4).permute(torch.tensor(2), 0)

    with pytest.raises(IndexError, match="Dimension out of range"):
        f(torch.arange(16.0))
    with pytest.raises(IndexError, match="Dimension out of range"):
        jitcore.jit(f)(torch.arange(16.0))
