"""Shared pieces of the reliability tests: a strict eager-vs-jit comparison and call helpers.

``same(actual, expected)`` is stricter than ``==``: types must match exactly (``1`` is not ``True``),
floats by sign of zero and NaN-ness, tensors by dtype, shape, device, requires_grad, inference-ness
and values (NaNs equal); exceptions by type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def outcome(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """``("ok", value)`` or ``("raised", exception)`` for one call."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the outcome is compared, not handled
        return "raised", exc


def same(actual: Any, expected: Any, where: str = "output") -> None:
    """Assert ``actual`` is what eager gave (see the module docstring); the message says where not."""
    assert type(actual) is type(expected), f"{where}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, BaseException):
        return
    if isinstance(expected, torch.Tensor):
        for attr in ("dtype", "shape", "device", "requires_grad"):
            assert getattr(actual, attr) == getattr(expected, attr), (
                f"{where}.{attr}: {getattr(actual, attr)} != {getattr(expected, attr)}"
            )
        assert actual.is_inference() == expected.is_inference(), f"{where}: is_inference differs"
        assert torch.equal(actual.isnan(), expected.isnan()) if actual.is_floating_point() else True, (
            f"{where}: NaNs differ"
        )
        torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{where}: {m}")
        return
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            same(a, e, f"{where}[{i}]")
        return
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys differ"
        for (ka, a), (ke, e) in zip(actual.items(), expected.items()):
            same(ka, ke, f"{where} key")
            same(a, e, f"{where}[{ke!r}]")
        return
    if isinstance(expected, float):
        if math.isnan(expected):
            assert math.isnan(actual), f"{where}: {actual} is not NaN"
            return
        assert actual == expected and math.copysign(1, actual) == math.copysign(1, expected), (
            f"{where}: {actual!r} != {expected!r}"
        )
        return
    assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def same_outcome(actual: tuple[str, Any], expected: tuple[str, Any], where: str = "output") -> None:
    assert actual[0] == expected[0], (
        f"{where}: jit {actual[0]} {actual[1]!r}, eager {expected[0]} {expected[1]!r}"
    )
    same(actual[1], expected[1], where)
