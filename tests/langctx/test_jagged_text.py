"""The text of a nested jagged tensor inside the jitted function (jitcore/langctx/jagged_text.py):
``print(nt)`` and ``f"{nt}"`` of a caller's NJT (or of a value computed from it, which keeps its offsets)
against eager's characters on every call, in program order, with no ``__torch_dispatch__`` of NestedTensor
on a warm call and no eager entry (before: JC-T001, the call ran eagerly)."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import torch
from torch.nested._internal.nested_tensor import NestedTensor

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dispatch"))
from subclass_checks import assert_same_flattened, protocol_calls  # noqa: E402


def _program(x: torch.Tensor) -> tuple[str, torch.Tensor]:
    print("before", x.sin(), "after")
    return f"v={x}!", x + 1


def _njt(seed: int, extra: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(2 + extra, 3)], layout=torch.jagged)


def test_the_text_of_a_callers_nested_jagged_tensor_is_made_on_each_call() -> None:
    """Three calls (the second row 2, 3, 2 long: other offsets, another ragged nested int each call): the
    stdout and returned text are eager's (the caller's own ``jN``, each call's offsets), the tensors eager's;
    no warm call runs NestedTensor's dispatch and the function never runs eagerly."""
    program = _program
    jitted = jitcore.jit(program)
    warm: list[str] = []
    for i, extra in enumerate((0, 1, 0)):
        x = _njt(i, extra)  # the same NJT for both: its nested int is part of the text
        eager_out, jit_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_out):
            expected = program(x)
        misses = jitcore.cache_misses(jitted)
        with contextlib.redirect_stdout(jit_out), protocol_calls(NestedTensor) as frames:
            got = jitted(x)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert jit_out.getvalue() == eager_out.getvalue()
        assert_same_flattened(got, expected, f"call {i}")
    assert jitted.fallback_reason is None
    assert warm == []
    assert jitcore.cache_misses(jitted) == 2
