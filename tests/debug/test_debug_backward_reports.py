"""Issue 18.2: tracebacks under jitcore, line by line against eager, forward and backward.

Each program of ``debug_errors`` raises on plain tensors, on a tensor subclass (in its
``__torch_dispatch__``) or in an ``autograd.Function``. The traceback CPython prints for the
jitted call must be eager's, followed only by jitcore's note.
"""

from __future__ import annotations

import io
import os
import traceback

import debug_errors as E
import pytest
import torch
from traceback_lines import printed_lines

import jitcore

JITCORE_DIR = os.path.dirname(jitcore.__file__)


def printed(fn, x, backward):
    """The exception and the lines CPython prints for it, from ``out = fn(x)`` (and ``out.backward()``)."""
    try:
        out = fn(x)
        if backward:
            out.backward()
    except Exception as exc:  # noqa: BLE001
        return exc, printed_lines(exc)
    raise AssertionError("expected an exception")


CASES = {
    "forward, plain tensors": (E.matmul_mismatch, lambda: torch.rand(3, 4), False),
    "forward, __torch_dispatch__": (E.subclass_subtract, lambda: E.NoCos(torch.rand(3)), False),
    "forward, __torch_dispatch__, requires grad": (
        E.subclass_subtract, lambda: E.NoCos(torch.rand(3)).requires_grad_(), False
    ),
    "forward, autograd.Function": (
        E.function_forward_raises, lambda: torch.rand(3, requires_grad=True), False
    ),
    "backward, plain tensors": (E.no_derivative, lambda: torch.rand(3, requires_grad=True), True),
    "backward, __torch_dispatch__": (E.sin_sum, lambda: E.NoCos(torch.rand(3)).requires_grad_(), True),
    "backward, autograd.Function, an exception copy cannot rebuild": (
        E.coded_backward_raises, lambda: torch.rand(3, requires_grad=True), True
    ),
    "backward, autograd.Function": (
        E.function_backward_raises, lambda: torch.rand(3, requires_grad=True), True
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_traceback_matches_eager_line_by_line(case):
    fn, make, backward = CASES[case]
    eager, eager_lines = printed(fn, make(), backward)
    jfn = jitcore.jit(fn)
    for call in ("first call", "cached call"):
        jitted, jit_lines = printed(jfn, make(), backward)
        assert type(jitted) is type(eager) and str(jitted) == str(eager), call
        note = jitted.__notes__[-1].splitlines()
        assert jit_lines == eager_lines + note, (call, "\n".join(jit_lines))
        assert note[0].startswith("jitcore: raised")
    if backward:
        assert jfn.misses == 1  # the second backward ran the cached entry's backward


def test_backward_error_names_the_backward_in_its_note():
    _exc, lines = printed(jitcore.jit(E.function_backward_raises), torch.rand(3, requires_grad=True), True)
    assert lines[-1].startswith("jitcore: raised in the backward of function_backward_raises (cache entry 1)")
    assert not any("raise_backward_error" in line for line in lines)


@pytest.mark.parametrize("fn", [E.function_backward_raises, E.sin_sum])
def test_show_internal_frames_keeps_the_user_frame_of_a_backward_error(monkeypatch, fn):
    monkeypatch.setenv("JITCORE_SHOW_INTERNAL_FRAMES", "1")
    x = E.NoCos(torch.rand(3)).requires_grad_() if fn is E.sin_sum else torch.rand(3, requires_grad=True)
    exc, _lines = printed(jitcore.jit(fn), x, True)
    shown = traceback.extract_tb(exc.__traceback__)
    assert any(f.filename.startswith(JITCORE_DIR) for f in shown)  # jitcore's frames, as asked
    assert shown[-1].filename == E.__file__ and shown[-1].name in ("backward", "__torch_dispatch__")


def test_report_points_at_the_user_backward_line():
    exc, _lines = printed(jitcore.jit(E.function_backward_raises), torch.rand(3, requires_grad=True), True)
    buffer = io.StringIO()
    jitcore.report(exc, buffer, color=False)
    text = buffer.getvalue()
    stack = text.split("Your stack (innermost last):\n", 1)[1]
    innermost = stack.split("Failing expression:")[0].splitlines()[-1]
    assert 'raise ValueError("BadBackward has no backward")' in innermost
    assert "user_fn(self, *args)" not in text.split("Failing expression:")[1]
