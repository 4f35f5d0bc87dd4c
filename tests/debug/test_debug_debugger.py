"""The stepping debugger: programmatic API, every shell command, subsymbols, breakpoints, diff."""

from __future__ import annotations

import dataclasses
import io

import debug_programs as P
import pytest
import torch
from debug_subclass import Wrapped

import jitcore
from jitcore.debug.debugger import Debugger
from jitcore.debug.shell import DebuggerShell
from jitcore.ir import BoundSymbol, Symbol, Trace

PROGRAMS = P.__file__


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    jfn = jitcore.jit(P.mlp)
    args = (torch.randn(4, 3), torch.randn(3, 5))
    jfn(*args)
    return jfn, args


def ids(debugger):
    return debugger.current.symbol.id if debugger.current is not None else None


def test_programmatic_stepping(mlp):
    jfn, args = mlp
    d = Debugger(jfn, args)
    assert ids(d) == "torch.mul" and d.index == 0 and set(d.values) == {"x", "w"}
    d.next()
    torch.testing.assert_close(d.values["t0"], args[0] * 2)
    assert ids(d) == "torch.matmul"
    assert [(f.function, f.lineno) for f in d.stack()] == [
        ("mlp", P.line_of(P.mlp, "z = helper")),
        ("helper", P.line_of(P.helper, "return torch.relu")),
    ]
    d.step()  # no subsymbols: runs the op
    assert ids(d) == "torch.relu"
    assert d.continue_() is None and d.finished and d.current is None
    torch.testing.assert_close(d.output, P.mlp(*args))


def test_breakpoints_by_line_and_op(mlp):
    jfn, args = mlp
    d = Debugger(jfn, args)
    d.break_at(f"{PROGRAMS}:{P.line_of(P.mlp, 'return z.sum')}")
    assert ids(d.continue_() and d) == "torch.sum"
    d = Debugger(jfn, args)
    d.break_at("debug_programs.py:" + str(P.line_of(P.helper, "return torch.relu")))  # a relative name
    assert ids(d.continue_() and d) == "torch.matmul"
    d = Debugger(jfn, args)
    d.break_at("relu")
    assert ids(d.continue_() and d) == "torch.relu"
    assert d.continue_() is None and d.finished


def hand_built(jfn):
    """The mlp trace with its first two ops made the subsymbols of one fused op."""
    trace = jitcore.last_traces(jfn)[-1]
    mul, matmul, *rest = trace.bound_symbols
    fused = Symbol("test.mul_matmul", "mul_matmul", "test", lambda x, w: (x * 2) @ w, None, None)
    parent = BoundSymbol(fused, tuple(trace.args), {}, matmul.output, (mul, matmul), matmul.source)
    return Trace(
        name="computation",
        args=trace.args,
        bound_symbols=[parent, *rest],
        output=trace.output,
        imports=trace.imports,
    )


def test_step_into_subsymbols(mlp):
    jfn, args = mlp
    d = Debugger(jfn, args, trace=hand_built(jfn))
    assert ids(d) == "test.mul_matmul" and d.depth == 0
    assert d.step().symbol.id == "torch.mul" and d.depth == 1
    d.step()
    assert ids(d) == "torch.matmul" and "t0" in d.values
    d.step()
    assert ids(d) == "torch.relu" and d.depth == 0
    d.run_to_end()
    torch.testing.assert_close(d.output, P.mlp(*args))
    d = Debugger(jfn, args, trace=hand_built(jfn))
    d.next()  # runs the fused op whole
    assert ids(d) == "torch.relu" and "t0" not in d.values
    d = Debugger(jfn, args, trace=hand_built(jfn))
    d.break_at("matmul")  # inside the fused op: continue descends to it
    assert d.continue_().symbol.id == "torch.matmul" and d.depth == 1


def test_subclass_trace_subsymbols():
    """A subclass call is one torch-level op; ``step`` goes into the aten ops it resolved to."""
    a = Wrapped(torch.randn(3))
    jfn = jitcore.jit(P.scale_shift)
    expected = jfn(a)
    d = Debugger(jfn, (a,))
    seen = []
    while d.current is not None:
        seen.append((d.depth, d.current.symbol.id.replace("torch.ops.", "")))
        d.step()
    rebuild = (
        1,
        "unflatten_tensor_subclass_result",
    )  # how the subclass output is built from the inner tensor
    assert seen[1:] == [
        (0, "torch.mul"),
        (1, "aten.mul.Tensor"),
        rebuild,
        (0, "torch.add"),
        (1, "aten.add.Tensor"),
        rebuild,
    ]
    assert type(d.output) is Wrapped
    torch.testing.assert_close(d.output.inner, expected.inner)
    d = Debugger(jfn, (a,))
    d.break_at("aten.add")
    hit = d.continue_()
    assert hit is not None and hit.symbol.id.endswith("aten.add.Tensor") and d.depth == 1


def run_shell(debugger, commands):
    out = io.StringIO()
    DebuggerShell(debugger, stdin=io.StringIO("\n".join(commands) + "\n"), stdout=out).cmdloop()
    return out.getvalue()


def test_shell_commands(mlp):
    jfn, args = mlp
    sum_line = P.line_of(P.mlp, "return z.sum")
    text = run_shell(
        Debugger(jfn, args),
        [
            "help",
            "n",
            "where",
            "bt",
            "p t0",
            "p t0.shape",
            "p nothing",
            "b",
            f"b {PROGRAMS}:{sum_line}",
            "b aten.add",
            "b",
            "l",
            "c",
            "s",
            "",
            "c",
            "frobnicate now",
            "q",
        ],
    )
    assert "Documented commands" in text and "diff" in text  # help
    assert "-> [0] t0 = torch.mul(x, 2)" in text and ">> y = x * 2" in text
    assert "-> [1] t1 = torch.matmul(t0, w)" in text
    stack = (
        f"{PROGRAMS}:{P.line_of(P.mlp, 'z = helper')} in mlp\n  z = helper(y, w)\n"
        f"  {PROGRAMS}:{P.line_of(P.helper, 'return torch.relu')} in helper\n    return torch.relu(h @ w)"
    )
    assert text.count(stack) == 2  # where, bt
    assert "torch.Size([4, 3])" in text and "*** NameError" in text  # p
    assert (
        "no breakpoints" in text
        and f"breakpoint 0 at {PROGRAMS}:{sum_line}" in text
        and "1: aten.add" in text
    )
    assert "->   t1 = torch.matmul(t0, w)" in text  # list marks the current line
    assert "breakpoint\n-> [3] t3 = torch.sum(t2, dim=0)" in text  # continue stops at the line
    assert "-> [4] t4 = torch.add(t3, 1)" in text  # step
    assert "the trace has finished; output: tensor(" in text  # the empty line repeated step
    assert "unknown command 'frobnicate'" in text  # not Python: a bare expression is evaluated (as pdb)


def test_shell_diff_finds_a_planted_divergence(mlp):
    jfn, args = mlp
    assert "no divergence" in run_shell(Debugger(jfn, args), ["diff", "q"])
    trace = jitcore.last_traces(jfn)[-1]
    ops = list(trace.bound_symbols)
    relu = ops[2]
    wrong = Symbol("torch.neg", "neg", "torch", torch.neg, "torch.neg", relu.symbol.meta)
    ops[2] = dataclasses.replace(relu, symbol=wrong)
    planted = Trace(
        name=trace.name, args=trace.args, bound_symbols=ops, output=trace.output, imports=trace.imports
    )
    d = Debugger(jfn, args, trace=planted)
    found = d.diff()
    assert found is not None and found.index == 2 and found.name == "t2"
    assert found.bound_symbol.source[-1].lineno == P.line_of(P.helper, "return torch.relu")
    text = run_shell(Debugger(jfn, args, trace=planted), ["diff", "q"])
    assert "op 2 (torch.neg -> t2) diverges from" in text and "return torch.relu(h @ w)" in text


def test_breakpoint_in_the_jitted_function_is_a_marker():
    jfn = jitcore.jit(P.with_breakpoint)
    x = torch.randn(3)
    with pytest.warns(UserWarning, match="jitcore.debug"):
        out = jfn(x)
    torch.testing.assert_close(out, x * 2 + 1)
    d = Debugger(jfn, (x,))
    assert [b.spec for b in d.breakpoints] == [
        f"breakpoint() at {PROGRAMS}:{P.line_of(P.with_breakpoint, 'breakpoint()')} in with_breakpoint"
    ]
    assert d.continue_().symbol.id == "torch.add"  # stops before the op after breakpoint()
    torch.testing.assert_close(d.values["y"] if "y" in d.values else d.values["t0"], x * 2)


def test_jitcore_debug_is_callable(mlp, monkeypatch, capsys):
    jfn, args = mlp
    monkeypatch.setattr("sys.stdin", io.StringIO("n\nc\n"))
    out = jitcore.debug(jfn, *args)
    torch.testing.assert_close(out, P.mlp(*args))
    assert "jitcore debugger: 5 ops" in capsys.readouterr().out
    from jitcore.debug.report import report

    assert callable(jitcore.debug) and report is jitcore.report


# --- issue 18 -------------------------------------------------------------------------------------


def two_tensor_sqrt():
    from torch.testing._internal.two_tensor import TwoTensor

    jf = jitcore.jit(lambda x: (x * 2).sqrt())
    x = TwoTensor(torch.rand(3), torch.rand(3))
    return jf, x


@pytest.mark.parametrize("move", ["continue_", "next", "step"])
def test_moving_on_from_a_breakpoint_on_an_aten_op_inside_a_subclass_op(move):
    """Issue 18.1: after ``b aten.sqrt.default`` and ``c`` the debugger stops inside ``torch.sqrt``'s
    subsymbols; the next move needs the inner tensors of ``x * 2``, which ran whole."""
    jf, x = two_tensor_sqrt()
    d = jitcore.Debugger(jf, (x,), {})
    d.break_at("aten.sqrt.default")
    hit = d.continue_()
    assert hit is not None and hit.symbol.id == "torch.ops.aten.sqrt.default" and d.depth == 1
    getattr(d, move)()  # raised KeyError: 't0 has no value yet (it is computed by a later op)'
    if move == "continue_":  # the second aten.sqrt (on the other inner tensor) is a hit too
        assert d.current.symbol.id == "torch.ops.aten.sqrt.default"
        torch.testing.assert_close(d.evaluate(d.current.args[0].name), x.b * 2)
    d.run_to_end()
    torch.testing.assert_close(d.output.a, (x.a * 2).sqrt())
    torch.testing.assert_close(d.output.b, (x.b * 2).sqrt())


def run_cli(target, commands, *extra):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(jitcore.__file__))
    return subprocess.run(
        [sys.executable, "-m", "jitcore", *extra, "debug", target],
        check=False,
        input=commands,
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )


def test_cli_continue_twice_after_an_aten_breakpoint_in_a_subclass_op():
    """Issue 18.1 from ``python -m jitcore debug file.py:model``: ``b aten.sqrt.default``, ``c``, ``c``."""
    import debug_scripts

    done = run_cli(f"{debug_scripts.__file__}:sqrt_of_double", "b aten.sqrt.default\nc\nc\nc\nq\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "***" not in out, out
    assert out.count("breakpoint\n") == 2 and "-> [2.] t3 = torch.ops.aten.sqrt.default(t0)" in out
    assert "-> [2.] t4 = torch.ops.aten.sqrt.default(t1)" in out and "the trace has finished" in out
