"""Tensor subclasses as others write them, round 7 (issue 15, helper zoo27): Python protocol methods a
subclass defines for itself (a comparison answering a bool, ...), each program run eagerly and under
jitcore.jit on equal fresh arguments (subclass_checks.check_twice). Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import check_twice

# --- comparisons a subclass defines in Python -----------------------------------------------------------
# Note [A stand-in's comparison is its class's] (interpreter/protocols.py): the proxy's class keeps its
# own ``__eq__``, so ``x == y`` recorded torch's ``eq`` where eager ran the subclass's method.


class IdentityEq(torch.Tensor):
    """Compares by identity, as a tensor used as a key or a cache tag does (a bool, not a mask)."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = torch.Tensor.__hash__


class CloseEq(torch.Tensor):
    """``==`` as "all values within a tolerance", a bool; ``<`` stays torch's."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        return bool(torch.allclose(self.as_subclass(torch.Tensor), other.as_subclass(torch.Tensor)))

    __hash__ = torch.Tensor.__hash__


def _identity(x: torch.Tensor) -> tuple[Any, ...]:
    return x == x, x != x, x == 1, 1 == x, x * 2


def _branch(x: torch.Tensor) -> torch.Tensor:
    y = x
    if x == y:
        return x + 1
    return x - 1


def _close(x: torch.Tensor) -> tuple[Any, ...]:
    return x == x + 1e-9, x == x + 1, 3 == x, x < 0


def _identity_args() -> tuple[torch.Tensor]:
    return (torch.randn(3).as_subclass(IdentityEq),)


def _close_args() -> tuple[torch.Tensor]:
    return (torch.randn(3).as_subclass(CloseEq),)


@pytest.mark.parametrize(("program", "make"), [
    (_identity, _identity_args), (_branch, _identity_args), (_close, _close_args),
], ids=["identity", "branch", "tolerance"])
def test_a_comparison_the_subclass_defines(program: Callable[..., Any],
                                           make: Callable[[], tuple]) -> None:
    check_twice(program, make)
