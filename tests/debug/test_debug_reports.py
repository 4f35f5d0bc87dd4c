"""Error reports: the user's frames and lines, the original exception, one note; jitcore.report."""

from __future__ import annotations

import io
import os
import sys
import traceback

import debug_programs as P
import pytest
import torch
import traceback_lines
from debug_subclass import Wrapped

import jitcore
from jitcore.diagnostics.context import context_of
from jitcore.interpreter import UnsupportedConstruct

JITCORE_DIR = os.path.dirname(jitcore.__file__)
PROGRAMS = P.__file__
EXAMPLES = os.path.join(os.path.dirname(JITCORE_DIR), "examples")


def raise_from(fn, *args, jit_options=None):
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("expected an exception")


frames = traceback_lines.frames  # the suite's own wrapper frames (tests/conftest.py) left out


def assert_user_frames(exc, expected):
    """The traceback is this test's frame, then exactly ``expected`` (function, source text) frames."""
    shown = traceback.extract_tb(exc.__traceback__)
    assert not any(f.filename.startswith(JITCORE_DIR) or f.filename.startswith("<jitcore") for f in shown), (
        shown
    )
    user = [(f.name, f.line) for f in shown if f.filename == PROGRAMS]
    assert user == expected, user


def test_shape_error_two_helpers_deep_matches_eager():
    x, w = torch.randn(4, 8), torch.randn(5, 3)
    eager = raise_from(P.shape_error_model, x, w)
    jitted = raise_from(jitcore.jit(P.shape_error_model), x, w)
    assert type(jitted) is type(eager) is RuntimeError
    assert str(jitted) == str(eager)
    assert frames(jitted)[1:] == frames(eager)[1:]  # the same user frames, lines and functions
    assert_user_frames(
        jitted,
        [
            ("shape_error_model", "return block(x, w) + 1"),
            ("block", "return project(h, w)"),
            ("project", "return h @ w"),
        ],
    )
    (note,) = jitted.__notes__
    assert (
        "shape_error_model" in note
        and "torch.matmul" in note
        and "cpu f32[4, 8]" in note
        and "cpu f32[5, 3]" in note
    )
    eager_lines = traceback_lines.printed_lines(eager)
    jit_lines = traceback_lines.printed_lines(jitted)
    assert len(jit_lines) <= len(eager_lines) + len(note.splitlines())


MATMUL_HINT = (
    "in a matrix product, the left operand's last size (8) must equal the right operand's "
    "second-to-last size (5)"
)


def run_script(path, *argv):
    """Run a script as ``__main__``; the traceback lines CPython would print for its error."""
    import runpy

    old = sys.argv
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
    except Exception as exc:  # noqa: BLE001
        shown = exc
    else:
        raise AssertionError("expected an exception")
    finally:
        sys.argv = old
    lines = traceback_lines.printed_lines(shown)
    return [line for line in lines if "test_debug_reports.py" not in line and "runpy" not in line]


def test_shape_error_line_count_of_the_example():
    """The example script run as a program: eager's traceback lines plus the note, nothing more."""
    script = os.path.join(EXAMPLES, "debug_shape_error.py")
    eager, jitted = run_script(script, "--eager"), run_script(script)
    message = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 5x3)"
    assert eager[-1] == message
    note = jitted[jitted.index(message) + 1 :]
    recording = "recording torch.matmul(t0: cpu f32[4, 8], w: cpu f32[5, 3]) from "
    assert len(note) == 2 and note[0].startswith(
        f"jitcore: raised while tracing model (trace attempt 1), {recording}"
    )
    assert note[1] == f"hint: {MATMUL_HINT}"
    assert len(jitted) <= len(eager) + len(note), (eager, jitted)
    assert not any("jitcore/" in line for line in jitted[: -len(note)])


def test_dtype_error_keeps_torch_message():
    x, i = torch.randn(2, 2), torch.ones(2, 2, dtype=torch.int64)
    eager = raise_from(P.mixed_dtypes, x, i)
    jitted = raise_from(jitcore.jit(P.mixed_dtypes), x, i)
    assert type(jitted) is type(eager) and str(jitted) == str(eager)
    assert_user_frames(jitted, [("mixed_dtypes", "return torch.mm(x, i)")])
    assert (
        "mixed_dtypes" in jitted.__notes__[0]
    )  # found while tracing or, if the fake tensors allow it, running


def test_user_exception_is_caught_as_eager():
    jfn = jitcore.jit(P.missing_key)
    with pytest.raises(KeyError) as info:
        jfn(torch.randn(2))
    assert info.value.args == ("b",)
    assert_user_frames(
        info.value, [("missing_key", 'return x * lookup({"a": 1}, "b")'), ("lookup", "return table[name]")]
    )
    assert info.value.__notes__ == ["jitcore: raised while tracing missing_key (trace attempt 1)"]


def test_data_dependent_control_flow():
    with pytest.raises(jitcore.DataDependentError) as info:
        jitcore.jit(P.branch_on_values, fullgraph=True)(torch.randn(3))
    exc = info.value
    assert exc.code == "JC-T002" and exc.hints
    assert_user_frames(exc, [("branch_on_values", "if x.sum() > 0:")])
    assert "__bool__" in exc.__notes__[0]


def test_unsupported_operation():
    with pytest.raises(jitcore.UnsupportedOperationError) as info:
        jitcore.jit(P.registers_a_hook, fullgraph=True)(torch.randn(3, requires_grad=True))
    assert info.value.code == "JC-T001" and "register_hook" in str(info.value)
    assert_user_frames(info.value, [("registers_a_hook", "x.register_hook(print)")])


def test_unsupported_construct(monkeypatch):
    """An interpreter error kind (an opcode it does not run) reaches the user with their frames."""
    from jitcore.jit.printing import Prints

    def refuse_print(self, *objects, **options):
        raise UnsupportedConstruct("opcode LEN_TEST is not supported: testing", "debug_programs.py")

    monkeypatch.setattr(Prints, "print", refuse_print)
    with pytest.raises(UnsupportedConstruct) as info:  # without fullgraph: an eager entry instead
        jitcore.jit(P.uses_print, fullgraph=True)(torch.randn(2))
    assert info.value.code == "JC-I001"
    # The interpreter's own refusals name the user's line in their message and show the user's frames.
    assert "debug_programs.py" in str(info.value)
    assert not any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(info.value.__traceback__))
    assert [f.name for f in traceback.extract_tb(info.value.__traceback__) if f.filename == PROGRAMS] == [
        "uses_print"
    ]
    assert "See docs/errors/JC-I001.md" in render(info.value)


def test_error_inside_torch_dispatch():
    a, b = Wrapped(torch.randn(3)), Wrapped(torch.randn(3))
    eager = raise_from(P.subclass_subtract, a, b)
    jitted = raise_from(jitcore.jit(P.subclass_subtract), a, b)
    assert type(jitted) is ValueError and str(jitted) == str(eager)
    assert frames(jitted)[1:] == frames(eager)[1:]
    assert [f.name for f in traceback.extract_tb(jitted.__traceback__)][-1] == "__torch_dispatch__"
    assert "torch.sub(a: Wrapped[cpu f32[3]]" in jitted.__notes__[0]


def test_subclass_breaking_the_flatten_protocol():
    class Broken(Wrapped):
        def __tensor_flatten__(self):
            return ["missing"], None

    with pytest.raises(AttributeError) as info:
        jitcore.jit(P.scale_shift)(Broken(torch.randn(3)))
    assert "flatten protocol" in info.value.__notes__[0]
    assert not any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(info.value.__traceback__))


def test_execution_error_maps_to_user_line():
    jfn = jitcore.jit(P.gather_rows)
    jfn(torch.randn(4, 3), torch.tensor([1, 2]))  # traced with valid indices
    bad = (torch.randn(4, 3), torch.tensor([10, 2]))
    eager = raise_from(P.gather_rows, *bad)
    jitted = raise_from(jfn, *bad)
    assert type(jitted) is type(eager) is IndexError and str(jitted) == str(eager)
    assert frames(jitted)[1:] == frames(eager)[1:]
    assert_user_frames(
        jitted, [("gather_rows", "return pick(y, i)"), ("pick", "return x.index_select(0, i)")]
    )
    context = context_of(jitted)
    assert context.phase == "execution" and context.entry == 1 and "index_select" in context.statement
    assert "running the compiled trace of gather_rows" in jitted.__notes__[0]


def test_execution_error_with_grad_maps_to_user_line():
    """With inputs that require grad the forward trace of the grad transform runs: its ops carry the
    user stack of the op they were replayed from."""
    jfn = jitcore.jit(P.gather_rows)
    jfn(torch.randn(4, 3, requires_grad=True), torch.tensor([1, 2]))
    assert jitcore.last_backward_traces(jfn)  # the grad transform ran
    bad = (torch.randn(4, 3, requires_grad=True), torch.tensor([10, 2]))
    eager = raise_from(P.gather_rows, *bad)
    jitted = raise_from(jfn, *bad)
    assert type(jitted) is type(eager) is IndexError and str(jitted) == str(eager)
    assert_user_frames(
        jitted, [("gather_rows", "return pick(y, i)"), ("pick", "return x.index_select(0, i)")]
    )
    assert context_of(jitted).phase == "execution"


def test_error_raised_by_the_backward_trace_maps_to_the_forward_user_line():
    """A backward op that fails at run time (planted here: a backward op given a bad argument) is
    reported at the user line of the forward op it differentiates, with jitcore's frames hidden."""
    import dataclasses

    from jitcore.ir import compile_trace

    jfn = jitcore.jit(P.gather_rows)
    x = torch.randn(4, 3, requires_grad=True)
    jfn(x, torch.tensor([1, 2])).sum().backward()
    computation = jfn.entries[0].computation
    backward = computation.traces.backward
    index = next(
        i for i, b in enumerate(backward.bound_symbols) if b.source and b.source[-1].function == "gather_rows"
    )
    planted = backward.bound_symbols[index]
    backward.bound_symbols[index] = dataclasses.replace(
        planted, args=("not a tensor",) + tuple(planted.args[1:])
    )
    forward, planted_backward = computation.select()[0], compile_trace(backward)
    computation.select = lambda: (forward, planted_backward)  # each call's (forward, backward)
    out = jfn(x, torch.tensor([1, 2])).sum()
    exc = raise_from(out.backward)
    assert type(exc) in (TypeError, RuntimeError)
    shown = traceback.extract_tb(exc.__traceback__)
    assert not any(f.filename.startswith(JITCORE_DIR) or f.filename.startswith("<jitcore") for f in shown), (
        shown
    )
    assert [(f.name, f.line) for f in shown if f.filename == PROGRAMS] == [("gather_rows", "y = x * 2")]
    assert context_of(exc).phase == "execution" and "gather_rows" in exc.__notes__[0]


def test_show_internal_frames(monkeypatch):
    x, w = torch.randn(4, 8), torch.randn(5, 3)
    shown = raise_from(jitcore.jit(P.shape_error_model, show_internal_frames=True), x, w)
    assert any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(shown.__traceback__))
    monkeypatch.setenv("JITCORE_SHOW_INTERNAL_FRAMES", "1")
    shown = raise_from(jitcore.jit(P.shape_error_model), x, w)
    assert any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(shown.__traceback__))
    hidden = raise_from(jitcore.jit(P.shape_error_model, show_internal_frames=False), x, w)
    assert not any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(hidden.__traceback__))


def test_no_note_twice_on_reraise():
    jfn = jitcore.jit(P.missing_key)
    exc = raise_from(jfn, torch.randn(2))
    again = raise_from(jfn, torch.randn(2))
    assert len(exc.__notes__) == 1 and len(again.__notes__) == 1


def render(exc, color=False):
    buffer = io.StringIO()
    jitcore.report(exc, buffer, color=color)
    return buffer.getvalue()


def test_report_plain_text():
    exc = raise_from(jitcore.jit(P.shape_error_model), torch.randn(4, 8), torch.randn(5, 3))
    text = render(exc)
    assert text.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert "Your stack (innermost last):" in text and "return project(h, w)" in text
    assert "Failing expression:\n      return h @ w\n             ^^^^^" in text
    assert "Inputs of torch.matmul:\n  t0: cpu f32[4, 8]\n  w: cpu f32[5, 3]" in text
    assert "\x1b[" not in text


def test_report_rich():
    exc = raise_from(jitcore.jit(P.shape_error_model), torch.randn(4, 8), torch.randn(5, 3))
    text = render(exc, color=True)
    assert (
        "\x1b[" in text and "inputs of torch.matmul" in text and "project" in text and "cpu f32[5, 3]" in text
    )


def test_report_of_jitcore_error_lists_hints_and_page():
    exc = raise_from(jitcore.jit(P.branch_on_values, fullgraph=True), torch.randn(3))
    text = render(exc)
    assert "hint: jitcore.jit(fn, fallback='eager')" in text and "See docs/errors/JC-T002.md" in text
    assert os.path.exists(os.path.join(os.path.dirname(JITCORE_DIR), "docs", "errors", "JC-T002.md"))


def test_report_hook(monkeypatch, capsys):
    before = sys.excepthook
    hook = jitcore.install_report_hook()
    try:
        assert sys.excepthook is hook and jitcore.install_report_hook() is hook
        exc = raise_from(jitcore.jit(P.missing_key), torch.randn(2))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        assert "KeyError: 'b'" in capsys.readouterr().err
    finally:
        jitcore.install_report_hook(False)
    assert sys.excepthook is before


def test_every_error_code_has_a_page():
    """Every ``code = "JC-..."`` in jitcore's sources has docs/errors/<code>.md.

    The codes known when this test was written must have one; a code added since only warns, so
    that work in progress elsewhere never turns this test red (the warning names the page to add).
    """
    import pathlib
    import re
    import warnings

    root = pathlib.Path(JITCORE_DIR)
    pattern = re.compile(r'^\s+code = "(JC-[A-Z0-9]+)"', re.MULTILINE)
    codes = {m for path in root.rglob("*.py") for m in pattern.findall(path.read_text())}
    known = {
        "JC-0000",
        "JC-T001",
        "JC-T002",
        "JC-J001",
        "JC-N001",
        "JC-G001",
        "JC-I000",
        "JC-I001",
        "JC-I002",
        "JC-I003",
    }
    pages = root.parent / "docs" / "errors"
    assert sorted(code for code in known if not (pages / f"{code}.md").exists()) == []
    for code in sorted(codes - known):
        if not (pages / f"{code}.md").exists():
            warnings.warn(f"error code {code} has no page: add docs/errors/{code}.md", stacklevel=1)


def test_an_error_of_jitcore_itself_says_so(monkeypatch):
    from jitcore.diagnostics.logs import configure
    from jitcore.jit.interpretation import Pass

    # A hook that fails inside jitcore's own code (configure rejects the name) stands for a bug.
    monkeypatch.setattr(Pass, "_load_global", lambda self, frame, name, value: configure("no-such-component"))
    exc = raise_from(jitcore.jit(P.shape_error_model), torch.randn(4, 8), torch.randn(5, 3))
    assert type(exc) is ValueError and "unknown JITCORE_LOGS component" in str(exc)
    assert "may be a jitcore bug" in exc.__notes__[0] and "JITCORE_SHOW_INTERNAL_FRAMES=1" in exc.__notes__[0]
    assert not any(f.filename.startswith(JITCORE_DIR) for f in traceback.extract_tb(exc.__traceback__))
    jfn = jitcore.jit(P.shape_error_model, show_internal_frames=True)
    shown = raise_from(jfn, torch.randn(4, 8), torch.randn(5, 3))
    assert traceback.extract_tb(shown.__traceback__)[-1].name == "configure"


def test_a_failed_trace_is_not_numbered_as_a_cache_entry():
    """Issue 18.8: three failed traces said "cache entry 3" while ``repr(jf)`` said 0 entries. A trace
    that raised keeps a raising entry (Note [Raising entries]): the calls after it name that entry."""
    jfn = jitcore.jit(P.missing_key)
    notes = [raise_from(jfn, torch.randn(2)).__notes__ for _ in range(3)]
    assert "1 cache entries" in repr(jfn) and jitcore.cache_misses(jfn) == 1
    assert notes[0] == ["jitcore: raised while tracing missing_key (trace attempt 1)"]
    assert notes[2][0].startswith("jitcore: raised while running missing_key (cache entry 1) eagerly: ")
    jfn = jitcore.jit(P.shape_error_model)
    jfn(torch.randn(4, 5), torch.randn(5, 3))  # cache entry 1
    exc = raise_from(jfn, torch.randn(4, 8), torch.randn(5, 3))
    assert len(jfn.entries) == 2 and "2 cache entr" in repr(jfn)  # the second a raising entry
    assert exc.__notes__[0].startswith("jitcore: raised while tracing shape_error_model (trace attempt 2), ")
    assert "cache entry 2" not in exc.__notes__[0]
