"""explain, the dispatch map, provenance in printed traces, JITCORE_LOGS and python -m jitcore."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys

import debug_programs as P
import pytest
import torch
from debug_subclass import Wrapped

import jitcore
from jitcore.__main__ import main
from jitcore.debug.explain import dispatch_map, explain_text
from jitcore.diagnostics import logs
from jitcore.ir import BoundSymbol, Symbol, Trace

PROGRAMS = P.__file__
ROOT = os.path.dirname(os.path.dirname(jitcore.__file__))
EXAMPLE = os.path.join(ROOT, "examples", "debug_mlp.py")


def test_source_records_the_whole_user_stack():
    jfn = jitcore.jit(P.mlp)
    jfn(torch.randn(4, 3), torch.randn(3, 5))
    trace = jitcore.last_traces(jfn)[-1]
    matmul = trace.bound_symbols[1]
    assert [(f.function, f.lineno) for f in matmul.source] == [
        ("mlp", P.line_of(P.mlp, "z = helper")),
        ("helper", P.line_of(P.helper, "return torch.relu")),
    ]
    inner = matmul.source[-1]
    assert inner.filename == PROGRAMS and inner.col is not None and inner.end_col > inner.col
    full = trace.python_source(source="full")
    assert f"# {PROGRAMS}:{P.line_of(P.mlp, 'z = helper')} in mlp: z = helper(y, w)\n" in full
    assert (
        f"# {PROGRAMS}:{P.line_of(P.helper, 'return torch.relu')} in helper: return torch.relu(h @ w)\n"
        in full
    )
    innermost = str(trace)
    assert "in mlp: z = helper(y, w)" not in innermost and "in helper: return torch.relu(h @ w)" in innermost
    assert PROGRAMS not in trace.python_source(source=None)


def test_source_includes_torch_dispatch_frames():
    jfn = jitcore.jit(P.scale_shift)
    jfn(Wrapped(torch.randn(3)))
    first = jitcore.last_traces(jfn)[0]
    mul = next(b for b in first.bound_symbols if b.subsymbols)
    aten_mul, rebuild = mul.subsymbols
    assert [f.function for f in aten_mul.source] == ["scale_shift", "__torch_dispatch__"]
    assert rebuild.symbol.id == "unflatten_tensor_subclass_result" and rebuild.output is mul.output
    assert [f.function for f in rebuild.source] == ["scale_shift"]


def test_explain_text():
    jfn = jitcore.jit(P.mlp)
    jfn(torch.randn(4, 3), torch.randn(3, 5))
    jfn(torch.randn(4, 3), torch.randn(3, 5))
    jfn(torch.randn(2, 3), torch.randn(3, 5))
    text = explain_text(jfn)
    assert text.startswith("jitcore.explain: mlp\n  calls answered from the cache: 1; traced: 2")
    assert "cache entry 1: accepts a call when" in text and "cache entry 2: accepts a call when" in text
    assert "  - args[0] is a Tensor of shape (4, 3), torch.float32, on cpu, requires_grad=False" in text
    assert "  - len(args) == 2" in text and "  - grad mode is True" in text
    assert "computation inputs: x = args[0], w = args[1]" in text
    assert "computation trace, pass 1:" in text and "t1 = torch.matmul(t0, w)" in text
    assert "trace 1: the first call" in text
    assert "trace 2: cache entry 1: args[0].shape[0]: expected 4, got 2" in text
    buffer = io.StringIO()
    jitcore.explain(jfn, buffer)
    assert buffer.getvalue() == text
    colored = io.StringIO()
    jitcore.explain(jfn, colored, color=True)
    assert "\x1b[" in colored.getvalue() and "accepts a call when" in colored.getvalue()
    with pytest.raises(TypeError):
        jitcore.explain(P.mlp)


def test_guard_lines_read_as_words():
    jfn = jitcore.jit(P.mlp)
    jfn(torch.randn(4, 3), torch.randn(3, 5))
    lines = jfn.entries[-1].prologue.sentences()
    assert "kwargs has keys []" in lines and "default dtype is torch.float32" in lines


def test_dispatch_map_of_a_subclass_call():
    jfn = jitcore.jit(P.scale_shift)
    jfn(Wrapped(torch.randn(3)))
    routes = dispatch_map(jitcore.last_traces(jfn)[0])
    assert [(r.op, r.subclasses) for r in routes] == [
        ("torch.mul", ("Wrapped",)),
        ("torch.add", ("Wrapped",)),
    ]
    (op, frame) = routes[0].aten_ops[0]
    assert op.endswith("aten.mul.Tensor") and frame.function == "__torch_dispatch__"
    assert routes[0].source.lineno == P.line_of(P.scale_shift, "return a * 2 + 1")
    text = explain_text(jfn)
    assert "dispatch map (user line -> torch op -> subclass -> aten ops, on which inner tensors):" in text
    assert "  -> torch.mul -> Wrapped" in text and "in __torch_dispatch__: out = func(" in text


def test_dispatch_map_of_a_hand_built_trace():
    """The map needs only bound symbols with subsymbols, whatever produced them."""
    jfn = jitcore.jit(P.mlp)
    jfn(torch.randn(4, 3), torch.randn(3, 5))
    trace = jitcore.last_traces(jfn)[-1]
    mul, matmul, *rest = trace.bound_symbols
    fused = Symbol("test.mul_matmul", "mul_matmul", "test", lambda x, w: (x * 2) @ w, None, None)
    parent = BoundSymbol(fused, tuple(trace.args), {}, matmul.output, (mul, matmul), mul.source)
    built = Trace(name="computation", args=trace.args, bound_symbols=[parent, *rest], output=trace.output)
    (route,) = dispatch_map(built)
    assert route.op == "test.mul_matmul" and route.subclasses == ()
    assert [op for op, _ in route.aten_ops] == ["torch.mul", "torch.matmul"]
    assert route.aten_ops[0][1] is None and route.aten_ops[1][1].function == "helper"  # issued elsewhere


def test_jitcore_logs(caplog):
    jitcore.jit(P.mlp)(torch.randn(4, 3), torch.randn(3, 5))
    assert not [r for r in caplog.records if r.name.startswith("jitcore.")]  # quiet by default
    assert logs.configure("traces,recompiles") == ["traces", "recompiles"]
    try:
        jfn = jitcore.jit(P.mlp)
        jfn(torch.randn(4, 3), torch.randn(3, 5))
        jfn(torch.randn(2, 3), torch.randn(3, 5))
        # (torch's own DEBUG records of the symbolic trace, torch.__trace, are torch's to configure)
        names = {r.name for r in caplog.records if r.name.startswith("jitcore")}
        assert names == {"jitcore.traces", "jitcore.recompiles"}
        assert any("args[0].shape[0]: expected 4, got 2" in r.getMessage() for r in caplog.records)
        assert logs.configure("all") == list(logs.COMPONENTS)
        caplog.clear()
        jitcore.jit(P.mlp)(torch.randn(4, 3), torch.randn(3, 5))
        guards = [r.getMessage() for r in caplog.records if r.name == "jitcore.guards"]
        assert guards and "args[0] is a Tensor of shape (4, 3)" in guards[0]
        with pytest.raises(ValueError, match="unknown JITCORE_LOGS"):
            logs.configure("trace")
    finally:
        logs.configure("")
        for logger in ("jitcore.traces", "jitcore.guards", "jitcore.recompiles"):
            logging.getLogger(logger).setLevel(logging.NOTSET)


def test_cli_explain_and_run(capsys):
    assert main(["explain", f"{EXAMPLE}:mlp"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("jitcore.explain: mlp") and "args[0] is a Tensor of shape (4, 8)" in out
    assert main(["run", f"{EXAMPLE}:mlp"]) == 0
    assert capsys.readouterr().out.startswith("result: tensor(")
    shape_error = os.path.join(ROOT, "examples", "debug_shape_error.py")
    assert main(["run", f"{shape_error}:model"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    assert "Inputs of torch.matmul:" in err and "return project(h, w)" in err
    with pytest.raises(SystemExit, match="defines no 'nope'"):
        main(["run", f"{EXAMPLE}:nope"])
    with pytest.raises(SystemExit, match="expected FILE:FUNCTION"):
        main(["run", EXAMPLE])


def test_cli_debug_end_to_end():
    """``python -m jitcore debug`` as a user runs it, commands piped to its stdin."""
    commands = "n\nwhere\np t0.shape\nb aten.softmax\nb softmax\nc\ndiff\nc\nq\n"
    done = subprocess.run(
        [sys.executable, "-m", "jitcore", "debug", f"{EXAMPLE}:mlp"],
        check=False,
        input=commands,
        capture_output=True,
        text=True,
        cwd=ROOT,
        # One torch thread: on a loaded machine, idle OpenMP workers spinning for CPUs slowed
        # this 3-second run past two minutes.
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "jitcore debugger: 5 ops" in out and "-> [0] t0 = torch.matmul(x, w1)" in out
    assert (
        "in mlp\n  hidden = block(x, w1)\n" in out and "in block\n    return torch.relu(project(x, w))" in out
    )
    assert "torch.Size([4, 16])" in out and "breakpoint\n-> [3] t3 = torch.softmax(t2, dim=-1)" in out
    assert "no divergence" in out and "the trace has finished" in out


def test_cli_explain_shows_the_dispatch_map_of_the_subclass_example(capsys):
    example = os.path.join(ROOT, "examples", "debug_subclass.py")
    assert main(["explain", f"{example}:scale_shift"]) == 0
    out = capsys.readouterr().out
    assert (
        "  -> torch.mul -> Logged" in out
        and "-> torch.ops.aten.mul.Tensor(a.inner, 2) -> t0   (issued at" in out
    )
    assert "in __torch_dispatch__: out = func(" in out


def test_jitcore_logs_reads_the_environment(monkeypatch):
    monkeypatch.setenv("JITCORE_LOGS", "recompiles")
    try:
        assert logs.configure() == ["recompiles"]
        assert logging.getLogger("jitcore.recompiles").level == logging.INFO
        assert logging.getLogger("jitcore.traces").level == logging.NOTSET
    finally:
        logs.configure("")


@pytest.mark.parametrize("argv", [["--help"], ["debug", "--help"], ["explain", "--help"]])
def test_cli_help_says_what_the_script_must_define(argv, capsys):
    """Issue 18.9: ``--help`` must say that the script defines example_inputs(), with an example."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "example_inputs()" in out and "(args, kwargs)" in out
    assert "def example_inputs():\n        return (torch.randn(4, 8), torch.randn(8, 3)), {}" in out
    assert "python -m jitcore debug model.py:model" in out


def test_dispatch_map_groups_aten_ops_under_the_user_line_and_names_inner_tensors():
    """Issue 18.5: one user line with two torch ops printed it twice, and a TwoTensor add showed two
    bare ``aten.add.Tensor`` lines without saying which inner tensors each one adds."""
    from torch.testing._internal.two_tensor import TwoTensor

    def f(x, y):
        return (x + y) * 2

    jf = jitcore.jit(f)
    jf(TwoTensor(torch.rand(3), torch.rand(3)), TwoTensor(torch.rand(3), torch.rand(3)))
    text = explain_text(jf)
    block = text.split("dispatch map", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    line = "return (x + y) * 2"
    assert [b for b in block if line in b] == [f"    {__file__}:{f.__code__.co_firstlineno + 1} {line}"]
    assert block[1:] == [
        "      -> torch.add -> TwoTensor",
        "         -> torch.ops.aten.add.Tensor(x.a, y.a) -> t0",
        "         -> torch.ops.aten.add.Tensor(x.b, y.b) -> t1",
        "      -> torch.mul -> TwoTensor",
        "         -> torch.ops.aten.mul.Tensor(t2.a, 2) -> t3",
        "         -> torch.ops.aten.mul.Tensor(t2.b, 2) -> t4",
    ]
