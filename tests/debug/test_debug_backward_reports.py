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


# A stand-in for a bug in jitcore's own code that the backward's recording runs: the recording's call
# handler failing on an attribute (its code compiled as that jitcore file's), or calling None.
_ATTRIBUTE_BUG = "def resolve_flat(symbol, args, kwargs):\n    return symbol.no_such_attribute\n"


def _scaled_sum(x):
    return (x * 3).sum()


def _exp_sum(x):
    return x.exp().sum()


def _with_jitcore_bug(monkeypatch, bug):
    import jitcore.transforms.backward_checks as checks

    if bug == "attribute":
        namespace = {}
        exec(compile(_ATTRIBUTE_BUG, checks.__file__, "exec"), namespace)  # noqa: S102 - the stand-in
        monkeypatch.setattr(checks, "resolve_flat", namespace["resolve_flat"])
    else:
        monkeypatch.setattr(checks, "resolve_flat", None)


@pytest.mark.parametrize(("bug", "subclass"), [("attribute", False), ("attribute", True), ("none", False)])
def test_jitcores_own_error_while_recording_a_backward_says_it_is_jitcores(monkeypatch, bug, subclass):
    """Issue 14: an error jitcore's code raised while it recorded a backward was raised by backward()
    'as eagerly: autograd raised it', as if the user's backward had. It is jitcore's (JC-I002), names
    the user's line whose backward was being derived, and keeps the original as its cause; the
    forward still computes eager's value, and the cached entry's backward raises it again."""
    from jitcore.interpreter.errors import JitcoreInterpreterError

    def make():
        x = torch.rand(3, generator=torch.Generator().manual_seed(0))
        return E.NoCos(x).requires_grad_() if subclass else x.requires_grad_()

    _with_jitcore_bug(monkeypatch, bug)
    jfn = jitcore.jit(_scaled_sum)
    line = f"{__file__}:{_scaled_sum.__code__.co_firstlineno + 1}"
    for _call in range(2):
        x = make()
        out = jfn(x)
        expected = _scaled_sum(make())
        plain = (lambda t: t.inner) if subclass else (lambda t: t)
        assert type(out) is type(expected) and torch.equal(plain(out).detach(), plain(expected).detach())
        with pytest.raises(JitcoreInterpreterError) as raised:
            out.backward()
        exc = raised.value
        assert exc.code == "JC-I002" and "jitcore's own code raised" in str(exc) and line in str(exc)
        assert isinstance(exc.__cause__, AttributeError if bug == "attribute" else TypeError)
        notes = "\n".join(getattr(exc, "__notes__", ()))
        assert "jitcore's own code failed" in notes and "as eagerly" not in notes
    assert jfn.misses == 1


@pytest.mark.parametrize("case", ["binary", "key", "attribute", "int", "aten", "len"])
def test_the_programs_errors_while_recording_a_backward_stay_eagers(case):
    """The other side of the classification: what a ``__torch_dispatch__`` raises in the backward
    (through jitcore's interpreter and its call sites) is still eager's own error."""

    class Raising(E.NoCos):
        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mul.Tensor:  # exp's backward, not its forward
                if case == "binary":
                    None + 1  # noqa: B018
                elif case == "key":
                    {}["k"]  # noqa: B018
                elif case == "attribute":
                    cls.no_such_attribute  # noqa: B018
                elif case == "int":
                    int("q")
                elif case == "aten":
                    torch.mm(torch.ones(2, 3), torch.ones(2, 3))
                else:
                    len(5)
            unwrap = lambda a: a.inner if isinstance(a, E.NoCos) else a  # noqa: E731
            out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
            return Raising(out) if isinstance(out, torch.Tensor) else out

    def run(fn):
        out = fn(Raising(torch.rand(3)).requires_grad_())
        try:
            out.backward()
        except Exception as exc:  # noqa: BLE001 - compared with eager's
            return type(exc), str(exc)
        return None

    eager = run(_exp_sum)
    assert eager is not None
    assert run(jitcore.jit(_exp_sum)) == eager
