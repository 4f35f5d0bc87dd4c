"""torch's ``return_and_correct_aliasing`` under the jit: answered without interpretation only for an
op that aliases nothing (jitcore/dispatch/aliasing.py); view ops, in-place ops, in-place view ops and a
patched torch still run torch's body, and every program agrees with eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils import _python_dispatch

import jitcore
from jitcore.dispatch import aliasing

aten = torch.ops.aten


def _two(seed: int = 0) -> TwoTensor:
    g = torch.Generator().manual_seed(seed)
    return TwoTensor(torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g))


def _assert_same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same(a, e)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    assert actual.dtype == expected.dtype
    if isinstance(expected, TwoTensor):
        torch.testing.assert_close(actual.a, expected.a)
        torch.testing.assert_close(actual.b, expected.b)
    else:
        torch.testing.assert_close(actual, expected)


PROGRAMS: dict[str, Callable[[TwoTensor], Any]] = {
    "chain": lambda x: ((x + 1) * 0.5).sin().cos() - 0.25,
    "view": lambda x: x.view(12) * 2,
    "t_then_add": lambda x: x.t() + 1,
    "inplace_returns_its_input": lambda x: (x.add_(1) is x, x * 2),
    "inplace_view": lambda x: (x.t_().shape, x + 1),
    "view_writes_through": lambda x: (x.view(12).mul_(3), x * 1),
    "split": lambda x: tuple(p * 2 for p in x.split(2, dim=1)),
}


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_twotensor_programs_match_eager(program: str) -> None:
    fn = PROGRAMS[program]
    x_eager, x_jit = _two(), _two()
    jf = jitcore.jit(fn)
    _assert_same(jf(x_jit), fn(x_eager))
    _assert_same(x_jit, x_eager)  # what the program did to its argument
    x_eager, x_jit = _two(1), _two(1)
    _assert_same(jf(x_jit), fn(x_eager))  # the cached call
    _assert_same(x_jit, x_eager)
    assert jitcore.cache_misses(jf) == 1


@pytest.mark.parametrize(("op", "answered"), [
    (aten.sin.default, True),
    (aten.add.Tensor, True),
    (aten.mm.default, True),
    (aten.t.default, False),  # a view: the output's storage is aliased to the input's
    (aten.view.default, False),
    (aten.add_.Tensor, False),  # writes its input: the input is returned
    (aten.t_.default, False),  # an in-place view op: the wrapper's metadata is redone
    (aten.sin, False),  # an OpOverloadPacket, not an OpOverload
])
def test_only_an_op_that_aliases_nothing_is_answered(op: Any, answered: bool) -> None:
    assert aliasing._aliases_nothing(op, (torch.ones(2, 2),)) is answered


def test_arguments_not_a_tuple_are_not_answered() -> None:
    assert not aliasing._aliases_nothing(aten.sin.default, [torch.ones(2)])


def test_an_op_that_aliases_nothing_returns_its_output_as_torch_does() -> None:
    x, out = torch.ones(2), torch.zeros(2)
    assert aliasing.return_and_correct_aliasing(aten.sin.default, (x,), {}, out) is out
    assert _python_dispatch.return_and_correct_aliasing(aten.sin.default, (x,), {}, out) is out


def test_a_patched_helper_runs_torchs_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program (or a library) that replaced ``get_alias_info`` gets its replacement called, as eagerly."""
    asked: list[Any] = []
    original = _python_dispatch.get_alias_info

    def get_alias_info(func: Any) -> Any:
        asked.append(func)
        return original(func)

    monkeypatch.setattr(_python_dispatch, "get_alias_info", get_alias_info)
    assert not aliasing._unpatched()
    fn = PROGRAMS["chain"]
    expected = fn(_two())
    eager_asked = len(asked)
    asked.clear()
    _assert_same(jitcore.jit(fn)(_two()), expected)
    assert eager_asked == 5
    assert len(asked) == eager_asked  # each op's body interpreted: the replacement asked once per op
