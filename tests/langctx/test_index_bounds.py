"""Int lists in a tensor index are bounds-checked while tracing (jitcore/langctx/index_bounds.py,
Note [Int lists are bounds-checked while tracing]): the error's type and message equal eager's for each
index form, in-range lists stay traced and cached, and symbolic sizes are compared through guards."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

import jitcore

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_INDICES: dict[str, Any] = {
    "list": [5],
    "tuple_of_list": ([5],),
    "int_then_list": (0, [7]),
    "slice_then_list": (slice(None), [7]),
    "none_then_list": (None, [4]),
    "two_lists_second_out": ([1], [9]),
    "nested_list": [[1, 5]],
    "negative": ([-4],),
    "ellipsis_then_list": (Ellipsis, [4]),
    "broadcast_pairs": ([0, 1], [4, 0]),
    "sequence_read_as_tuple": [[0, 1], [4, 0]],
    "two_out_first_wins": ([5, 0], [0, 9]),
}


def _error(fn: Any, *args: Any) -> tuple[type, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - type and message are compared with eager's
            return type(exc), str(exc)
    raise AssertionError("no error")


@pytest.mark.parametrize("name", list(_INDICES))
@pytest.mark.parametrize("write", [False, True])
def test_an_int_list_out_of_range_raises_eagers_error(name: str, write: bool) -> None:
    index = _INDICES[name]

    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            if write:
                y = x.clone()
                y[index] = 1.0
                return y
            return x[index]
        except IndexError as exc:  # the handler sees eager's message
            return torch.tensor([float(len(str(exc)))])

    x = torch.zeros(3, 4)
    expected = f(x)
    got = jitcore.jit(f)(x)
    assert torch.equal(got, expected), (got, expected)
    g = (lambda t: t.clone().__setitem__(index, 1.0)) if write else (lambda t: t[index])
    assert _error(jitcore.jit(g), x) == _error(g, x)


def test_int_lists_in_range_stay_traced() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            return x[[0, 2], [1, -1]] * 2
        except IndexError:
            return torch.zeros(1)

    jf = jitcore.jit(f)
    for _ in range(2):
        assert torch.equal(jf(torch.arange(12.0).reshape(3, 4)), f(torch.arange(12.0).reshape(3, 4)))
    assert jf.fallback_reason is None and jitcore.cache_hits(jf) == 1


@pytest.mark.parametrize("dynamic", [True, None])
def test_symbolic_sizes_are_compared(dynamic: bool | None) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            return x[[4]]
        except IndexError:
            return torch.full((1,), -1.0)

    jf = jitcore.jit(f, dynamic=dynamic)
    for n in (5, 6, 3, 7, 2):
        x = torch.arange(float(n))
        assert torch.equal(jf(x), f(x)), n
