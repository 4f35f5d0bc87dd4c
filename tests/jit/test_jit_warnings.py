"""``warnings.warn`` inside a jitted function warns on every call as eagerly (jitcore/jit/warning_calls.py).

Before, the warning was issued while tracing only: under ``simplefilter("always")`` a cached call warned
nothing (1 warning in 12 calls where eager gives 12), and a message made from each call's numbers was the
traced call's. Each test runs the same calls eagerly and jitted and compares what was warned: message,
category, file and line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import jitcore


def _always(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("always here", UserWarning, stacklevel=1)
    return x + 1


def _every_fourth(x: torch.Tensor, i: int) -> torch.Tensor:
    if i % 4 == 0:
        warnings.warn(f"call {i}", DeprecationWarning, stacklevel=1)
    return x + i


def _loss_text(x: torch.Tensor, i: int) -> torch.Tensor:
    loss = x.sum()
    warnings.warn(f"loss {loss.item():.3f}", RuntimeWarning, stacklevel=1)
    return loss * 2


def _helper_blames_caller() -> None:
    warnings.warn("from the helper", FutureWarning, stacklevel=2)


def _stacklevel(x: torch.Tensor, i: int) -> torch.Tensor:
    _helper_blames_caller()
    return x - 1


def _warned(fn: Callable, args: Callable[[int], tuple], calls: int, action: str) -> list:
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter(action)
        for i in range(calls):
            value = fn(*args(i))
            out.append(value)
    return [(str(w.message), w.category, w.filename, w.lineno) for w in caught], out


@pytest.mark.parametrize("action", ["always", "default"])
@pytest.mark.parametrize("program", [_always, _every_fourth, _loss_text, _stacklevel])
def test_a_warning_is_issued_on_every_call_as_eagerly(program: Callable, action: str) -> None:
    def args(i: int) -> tuple:
        x = torch.randn(3, generator=torch.Generator().manual_seed(i))
        return (x,) if program is _always else (x, i)

    eager = _warned(program, args, 12, action)
    jitted = jitcore.jit(program)
    got = _warned(jitted, args, 12, action)
    assert got[0] == eager[0]
    for a, b in zip(got[1], eager[1]):
        torch.testing.assert_close(a, b)
    assert jitcore.cache_hits(jitted) >= 6


def test_a_warning_made_an_error_raises_at_its_line_and_can_be_caught() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
        try:
            warnings.warn("strict", UserWarning, stacklevel=1)
        except UserWarning:
            return x * 0, True
        return x + 1, False

    jitted = jitcore.jit(f)
    for action in ("error", "always", "error"):
        with warnings.catch_warnings(record=True):
            warnings.simplefilter(action)
            eager, got = f(torch.ones(2)), jitted(torch.ones(2))
        torch.testing.assert_close(got[0], eager[0])
        assert got[1] is eager[1] is (action == "error")


def _ignored_inside(x: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("hidden", UserWarning, stacklevel=1)
    return x + 1


def _recorded_inside(x: torch.Tensor) -> tuple[torch.Tensor, list]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("kept by the program", FutureWarning, stacklevel=1)
    return x * 2, [(str(w.message), w.category) for w in caught]


def _raised_inside(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            warnings.warn("strict inside", UserWarning, stacklevel=1)
        except UserWarning:
            return x - 1, True
    return x, False


@pytest.mark.parametrize("program", [_ignored_inside, _recorded_inside, _raised_inside])
def test_a_warning_under_the_programs_own_filters_goes_where_eager_sends_it(program: Callable) -> None:
    """Note [Warnings under the program's own filters]: the program's catch_warnings decides, not the
    caller's filters after the computation (an ignored warning was shown, a recorded one was lost)."""
    def args(i: int) -> tuple:
        return (torch.full((2,), float(i)),)

    eager = _warned(program, args, 4, "always")
    jitted = jitcore.jit(program)
    got = _warned(jitted, args, 4, "always")
    # a recorded one runs the call eagerly (jitcore says so once, with a warning of its own)
    assert [w for w in got[0] if not w[0].startswith("jitcore: ")] == eager[0]
    for a, b in zip(got[1], eager[1]):
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        torch.testing.assert_close(a[0], b[0])
        assert a[1:] == b[1:]
