"""Subclasses that jitcore runs eagerly (jitcore.errors.EagerOnlySubclass, JC-J002), differentially
against eager: a subclass holding storage of its own (``_make_subclass``) with a ``__torch_dispatch__``
(MaskedTensor reductions are traced: tests/dispatch/test_dispatch_foreign_subclasses.py; DTensor:
tests/dispatch/test_dtensor.py, where FSDP2's eager entry is tested too; nested jagged tensors:
tests/dispatch/test_nested_jagged.py). A call that meets one runs as eager runs it, with one warning per
jitted function and the reason in ``fallback_reason``; calls without one are traced as usual.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from jitcore.debug.explain import explain_text
from jitcore.errors import EagerOnlySubclass
from tests.dispatch.test_dispatch_foreign_subclasses import StorageDispatch


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        for a, e in zip(actual, expected, strict=True):
            _same(a, e)
    elif isinstance(expected, torch.Tensor) and expected.is_nested:
        for a, e in zip(actual.unbind(), expected.unbind(), strict=True):
            torch.testing.assert_close(a, e)
    elif type(expected).__name__ == "MaskedTensor":
        torch.testing.assert_close(actual.get_mask(), expected.get_mask())
        mask = expected.get_mask()
        torch.testing.assert_close(actual.get_data()[mask], expected.get_data()[mask])
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


def _runs_eagerly(fn: Callable[..., Any], *args: Any) -> jitcore.JittedFunction:
    jitted = jitcore.jit(fn)
    with pytest.warns(UserWarning, match="runs eagerly for this call"):
        _same(jitted(*args), fn(*args))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="jitcore")  # warned once per jitted function
        _same(jitted(*args), fn(*args))
    assert isinstance(jitted.fallback_reason, EagerOnlySubclass)
    # Note [Eager entries]: the second call is answered by the eager entry, not interpreted again
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
    assert jitted.entries[0].eager_reason is jitted.fallback_reason
    return jitted


def test_plain_calls_are_still_traced_after_an_eager_one() -> None:
    f = lambda t: (t * 2).sum()  # noqa: E731
    jitted = _runs_eagerly(f, StorageDispatch(torch.randn(3)))
    torch.testing.assert_close(jitted(torch.ones(3)), torch.ones(3).sum() * 2)
    assert [entry.eager_reason is None for entry in jitted.entries] == [False, True]  # eager, then traced
    text = explain_text(jitted)
    assert "a call ran eagerly" in text and "JC-J002" in text and "StorageDispatch" in text
    assert "an eager entry: the calls it accepts run the function eagerly" in text
    assert "type(args[0]) is StorageDispatch" in text

