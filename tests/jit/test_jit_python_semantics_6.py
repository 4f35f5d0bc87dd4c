"""Python semantics under ``jitcore.jit`` found by the differential probes of issue 14 (2026-12-05):
programs run eagerly and jitted, their values and exception chains compared. Each test fails before
its fix.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

import jitcore


class _Index:
    """An index object whose ``__index__`` returns the number it holds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


def test_a_modules_builtin_given_to_c_runs_its_lookaside() -> None:
    """``sorted(objs, key=operator.index)``, ``map(operator.index, objs)`` and
    ``max(..., key=operator.index)`` over objects whose ``__index__`` returns a number the jit made
    dynamic raised "__index__ returned non-int (type NumberProxy)" from the call where ``n`` became
    dynamic: the C builtin called ``operator.index`` natively. A module's builtin with a lookaside is
    now called through the interpreter (Note [A module's builtin with a lookaside, called by C])."""

    def program(x: torch.Tensor, n: int) -> Any:
        objs = [_Index(n + 1), _Index(n), _Index(n + 2)]
        return ([o.n for o in sorted(objs, key=operator.index)], list(map(operator.index, objs)),
                max(objs, key=operator.index).n, min(objs, key=operator.index).n,
                list(filter(operator.index, [_Index(0), _Index(n)])) != [], x + n)

    jfn = jitcore.jit(program)
    for n in (2, 3, 1, 4, 2):
        expected, got = program(torch.ones(2), n), jfn(torch.ones(2), n)
        assert got[:5] == expected[:5], (n, got, expected)
        assert all(type(v) is int for v in got[1]), got[1]
        assert torch.equal(got[5], expected[5])

