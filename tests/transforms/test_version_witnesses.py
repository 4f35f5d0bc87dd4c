"""An output the backward needs, written in place by the caller (Note [A saved subclass output written],
jitcore/transforms/version_witnesses.py).

Each program runs eagerly and through ``jitcore.jit`` over three calls (the first traces, the others are
cached); after each call the caller writes one output in place, then runs the backward. Compared: the
outputs' values and versions, and the backward's gradient or the error it raises. A cached call runs
no TwoTensor dispatch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import protocol_calls  # noqa: E402


def _saved_output_written(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.exp(), x * 2  # exp's backward reads its output


def _saved_intermediate_returned(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = x.exp()
    return z.sin(), z  # sin's backward reads z


# (program, the output the caller writes): the last writes an output nothing saved, which stays free
_PROGRAMS: dict[str, tuple[Callable[..., Any], int]] = {
    "saved_output_written": (_saved_output_written, 0),
    "saved_intermediate_written": (_saved_intermediate_returned, 1),
    "unsaved_output_written": (_saved_output_written, 1),
}
_JITTED = {name: jitcore.jit(fn) for name, (fn, _written) in _PROGRAMS.items()}


def _leaf(kind: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    return (TwoTensor(a, b) if kind == "two_tensor" else a).requires_grad_()


def _run(fn: Callable[..., Any], kind: str, seed: int, written: int) -> list[Any]:
    x = _leaf(kind, seed)
    outputs = fn(x)
    seen: list[Any] = [(type(o).__name__, o._version, _values(o)) for o in outputs]
    outputs[written].mul_(3)
    seen.append([o._version for o in outputs])
    try:
        sum(o.sum() for o in outputs).backward()
    except RuntimeError as exc:
        return [*seen, ("raised", str(exc).split(":")[0])]
    return [*seen, _values(x.grad)]


def _values(t: torch.Tensor) -> Any:
    """``t``'s values, rounded (each inner tensor's for a TwoTensor)."""
    if isinstance(t, TwoTensor):
        return (type(t).__name__, _values(t.a), _values(t.b))
    return torch.round(t.detach(), decimals=4).tolist()


@pytest.mark.parametrize("kind", ["two_tensor", "plain"])
@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_an_output_written_after_the_call(name: str, kind: str) -> None:
    fn, written = _PROGRAMS[name]
    for seed in range(3):
        expected = _run(fn, kind, seed, written)
        got = _run(_JITTED[name], kind, seed, written)
        assert got == expected, f"call {seed}"


def test_a_cached_call_runs_no_dispatch_for_its_witness() -> None:
    jitted = _JITTED["saved_output_written"]
    _run(jitted, "two_tensor", 0, 0)  # traced (or cached by the test above)
    x = _leaf("two_tensor", 1)
    with protocol_calls(TwoTensor) as calls:
        y, _w = jitted(x)
    assert calls == []
    y.mul_(3)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return x.softmax(1)  # softmax's backward reads its output


_JITTED_SOFTMAX = jitcore.jit(_softmax)


def _njt_run(fn: Callable[..., Any], seed: int, write: bool) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.nested.nested_tensor([torch.randn(n, 8, generator=g) for n in (3, 5)], layout=torch.jagged,
                                   requires_grad=True)
    y = fn(x)
    if write:
        y.mul_(2)
    try:
        y.values().square().sum().backward()
    except RuntimeError:  # eager's message is the NJT's error while torch formats the version error
        return ("raised", y._version)
    return _values(x.grad.values())


@pytest.mark.parametrize("write", [True, False])
def test_a_nested_tensor_output_written_after_the_call(write: bool) -> None:
    for seed in range(3):
        assert _njt_run(_JITTED_SOFTMAX, seed, write) == _njt_run(_softmax, seed, write), f"call {seed}"
