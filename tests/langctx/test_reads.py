"""Boolean-mask indexing through jitcore/langctx/reads.py, which indexes with the mask's coordinates
(``nonzero``): a mask whose shape is not the indexed dimensions' raises eager's IndexError (the
coordinates alone index any tensor their values fit), on the first and the cached call."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore


def _mask(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


CASES: dict[str, tuple[Callable[..., Any], tuple]] = {
    "shorter": (lambda x, m: x[m], (torch.arange(3.0), torch.tensor([True, False]))),
    "after_slice": (lambda x, m: x[:, m], (torch.zeros(2, 3, 4), _mask(2))),
    "after_ellipsis": (lambda x, m: x[..., m], (torch.zeros(2, 3, 4), _mask(2))),
    "after_none_and_int": (lambda x, m: x[None, 0, m], (torch.zeros(2, 3, 4), _mask(3, 5))),
    "two_dims": (lambda x, m: x[m], (torch.zeros(2, 3, 4), _mask(2, 2))),
    "second_of_two": (lambda x, m: x[m, m], (torch.zeros(2, 3, 4), _mask(2))),
    "before_an_int": (lambda x, m: x[m, 1], (torch.zeros(3, 3, 4), _mask(2))),
    "fits_after_none_and_int": (lambda x, m: x[None, 0, m], (torch.zeros(2, 3, 4), _mask(3, 4))),
    "fits_two_dims": (lambda x, m: x[m], (torch.zeros(2, 3), _mask(2, 3))),
    "fits_before_ellipsis": (lambda x, m: x[m, ..., None], (torch.zeros(2, 3, 4), _mask(2, 3))),
    "masked_select_message": (lambda x, m: x.masked_select(m), (torch.zeros(3), _mask(2))),
}


def _outcome(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*(a.clone() for a in args))
    except Exception as exc:  # noqa: BLE001 - compared with eager's
        return type(exc), str(exc)


@pytest.mark.parametrize("name", list(CASES))
def test_a_mask_index_of_another_shape_raises_as_eagerly(name: str) -> None:
    fn, args = CASES[name]
    expected = _outcome(fn, args)
    jf = jitcore.jit(fn)
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _outcome(jf, args)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected), got
        else:
            assert got == expected


@pytest.mark.parametrize("dynamic", [True, None])
def test_a_mask_of_another_shape_raises_with_symbolic_sizes(dynamic: bool | None) -> None:
    """With symbolic sizes (``dynamic=True``, or after a second shape) the mask's and the tensor's sizes
    are symbols: they are compared through the ShapeEnv (its guard checked by the prologue), where a
    mismatch returned a value (ops43, /tmp/ops43-probes/g2_mask_sym.py)."""
    def f(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return x[m] * 2

    jf = jitcore.jit(f, dynamic=dynamic)
    for n, k in ((4, 4), (5, 5), (6, 4), (3, 2), (7, 7), (3, 2)):
        args = (torch.arange(float(n)), torch.arange(k) % 2 == 0)
        expected, got = _outcome(f, args), _outcome(jf, args)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected), (n, k, got)
        else:
            assert got == expected, (n, k)
