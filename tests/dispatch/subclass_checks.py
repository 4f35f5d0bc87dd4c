"""Comparing tensor-subclass values that eager and jitcore returned (shared by the dispatch tests)."""

from __future__ import annotations

from typing import Any

import torch


def inner_values(t: torch.Tensor) -> dict[str, Any]:
    """What a value holds: its flatten protocol's inner tensors and ctx, the tensor a wrapper without
    one wraps, or its data."""
    if type(t) is torch.Tensor:
        return {"data": t}
    if hasattr(type(t), "__tensor_flatten__"):
        names, ctx = t.__tensor_flatten__()
        return {"ctx": ctx, **{n: getattr(t, n) for n in names}}
    for name in ("t", "diag", "values", "indices"):
        if isinstance(vars(t).get(name), torch.Tensor):
            return {name: vars(t)[name]}
    with torch._C.DisableTorchFunctionSubclass():
        return {"data": t.as_subclass(torch.Tensor)}


def assert_same_values(actual: Any, expected: Any) -> None:
    """Types, shapes, dtypes, ``requires_grad``, inner tensors (recursively) and flatten contexts equal;
    other values equal."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_values(a, e)
    elif isinstance(expected, torch.Tensor):
        assert (actual.shape, actual.dtype, actual.requires_grad) == (
            expected.shape, expected.dtype, expected.requires_grad)
        got, want = inner_values(actual), inner_values(expected)
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                assert_same_values(got[key], value)
            elif isinstance(value, torch.Tensor):
                torch.testing.assert_close(got[key].detach(), value.detach())
            else:
                assert got[key] == value
    else:
        assert actual == expected
