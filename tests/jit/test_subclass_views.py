"""Tensor-subclass outputs that are views, without grad (Note [Subclass views without grad],
jit/subclass_views.py): eager vs ``jitcore.jit`` over three calls of TwoTensor programs, for each:
``_is_view()``, which object each output's ``_base`` is, layout and values, then the values of the
outputs and of the input after the caller's in-place op on one output."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optree
import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402


def _twice(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin()


def _narrow(x: torch.Tensor) -> Any:
    z = _twice(x)
    return z, z.narrow(1, 2, 3)


def _transpose_of_the_input(x: torch.Tensor) -> Any:
    return x.T, x * 2


def _split_of_an_intermediate(x: torch.Tensor) -> Any:
    return _twice(x).split([1, 3])


def _dict_of_views(x: torch.Tensor) -> Any:
    z = _twice(x)
    return {"base": z, "rows": z[1:], "diagonal": z.diagonal()}


def _list_around_the_base(x: torch.Tensor) -> Any:
    z = _twice(x)
    return [z[0], z, z.unfold(1, 2, 2)]


def _base_written_after_the_view(x: torch.Tensor) -> Any:
    z = _twice(x)
    v = z[:, :3]
    z.add_(1)
    return z, v


def _view_of_a_size(x: torch.Tensor) -> Any:
    z = _twice(x)
    return z, z[: x.shape[0] // 2]


def _view_of_a_view(x: torch.Tensor) -> Any:
    z = _twice(x)
    return z, z.view(-1)[::3]


# name: (program, the output the caller writes in place, the rows of the three calls)
CASES: dict[str, tuple[Callable[..., Any], int, tuple[int, ...]]] = {
    "narrow": (_narrow, 1, (4, 4, 4)),
    "transpose of the input": (_transpose_of_the_input, 0, (4, 4, 4)),
    "split of an intermediate": (_split_of_an_intermediate, 1, (4, 4, 4)),
    "dict of views": (_dict_of_views, 1, (4, 4, 4)),
    "list around the base": (_list_around_the_base, 0, (4, 4, 4)),
    "base written after the view": (_base_written_after_the_view, 1, (4, 4, 4)),
    "view of a size (changing sizes)": (_view_of_a_size, 1, (4, 6, 10)),
    "view of a view (changing sizes)": (_view_of_a_view, 1, (4, 6, 10)),
}


def _input(seed: int, rows: int) -> TwoTensor:
    g = torch.Generator().manual_seed(seed)
    return TwoTensor(torch.randn(rows, 8, generator=g), torch.randn(rows, 8, generator=g))


def _sums(t: torch.Tensor) -> tuple[float, float]:
    return round(float(t.a.sum()), 4), round(float(t.b.sum()), 4)


def _describe(fn: Callable[..., Any], written: int, seed: int, rows: int) -> list[Any]:
    x = _input(seed, rows)
    outs = optree.tree_leaves(fn(x))

    def which(t: torch.Tensor | None) -> Any:
        if t is None:
            return None
        if t is x:
            return "x"
        return next((k for k, o in enumerate(outs) if t is o), type(t).__name__)

    seen: list[Any] = [
        (type(o).__name__, o._is_view(), which(o._base), tuple(o.shape), o.stride(), o.storage_offset(),
         _sums(o))
        for o in outs
    ]
    versions = [o._version for o in outs]
    outs[written].mul_(3)  # the caller's write reaches the base and every view of it, as eagerly
    seen.append([_sums(o) for o in outs])
    seen.append(_sums(x))
    # the write bumps the version of the outputs sharing the written one's counter (a view's is its
    # base's); a version the program's own write left on an intermediate is not compared (a rebuilt
    # wrapper starts at 0)
    seen.append(([o._version - v for o, v in zip(outs, versions)], x._version))
    return seen


_JITTED = {name: jitcore.jit(fn) for name, (fn, _written, _rows) in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_subclass_view_output_without_grad_is_eagers_view(name: str) -> None:
    fn, written, rows = CASES[name]
    jitted = _JITTED[name]
    for seed, r in enumerate(rows):
        expected = _describe(fn, written, seed, r)
        got = _describe(jitted, written, seed, r)
        assert got == expected, f"call {seed} (rows {r})"


def test_an_intermediate_base_is_returned_by_the_flat_trace() -> None:
    """The split outputs' base, an intermediate, is rebuilt once and returned after the output."""
    jitted = _JITTED["split of an intermediate"]
    jitted(_input(0, 4))
    flat = jitted.entries[0].traces[-1]
    output, extras = flat.output
    assert len(output) == 2 and len(extras) == 1
    first, second = jitted(_input(1, 4))
    assert first._base is second._base and type(first._base) is TwoTensor


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cached_call_makes_its_views_without_the_class(name: str) -> None:
    """Note [A subclass view made without its class] (jit/subclass_views.py): no TwoTensor dispatch."""
    _fn, _written, rows = CASES[name]
    jitted = _JITTED[name]
    for seed, r in enumerate(rows):
        jitted(_input(seed, r))
    x = _input(7, rows[-1])
    with protocol_calls(TwoTensor) as calls:
        outs = optree.tree_leaves(jitted(x))
    assert calls == []
    assert any(o._is_view() for o in outs)
