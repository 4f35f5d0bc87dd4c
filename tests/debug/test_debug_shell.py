"""Issue 18.6: pdb habits in the command-line debugger, driven as a user types them.

Each test feeds the commands of one habit to ``DebuggerShell`` (or to ``python -m jitcore debug``
on its standard input); the Up arrow goes through a pseudo-terminal, where readline edits lines.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time

import debug_scripts
import pytest
import torch

import jitcore
from jitcore.debug.debugger import Debugger
from jitcore.debug.shell import DebuggerShell

ROOT = os.path.dirname(os.path.dirname(jitcore.__file__))
EXAMPLE = os.path.join(ROOT, "examples", "debug_mlp.py")


@pytest.fixture
def mlp():
    """examples/debug_mlp.py's mlp: ``hidden = block(x, w1)``, then a softmax of ``hidden @ w2``."""
    import runpy

    namespace = runpy.run_path(EXAMPLE, run_name="__jitcore_example__")
    args, kwargs = namespace["example_inputs"]()
    jfn = jitcore.jit(namespace["mlp"])
    jfn(*args, **kwargs)
    return jfn, args, namespace


def run_shell(debugger, *commands):
    out = io.StringIO()
    DebuggerShell(debugger, stdin=io.StringIO("\n".join(commands) + "\n"), stdout=out).cmdloop()
    return out.getvalue()


def test_up_arrow_recalls_the_last_command_through_readline():
    """The Up arrow printed ``unknown command '\\x1b[A'``: input is read through readline."""
    main_fd, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "jitcore", "debug", f"{EXAMPLE}:mlp"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        cwd=ROOT,
        env={**os.environ, "TERM": "xterm", "OMP_NUM_THREADS": "1", "INPUTRC": "/dev/null"},
        close_fds=True,
    )
    os.close(terminal)
    seen = b""

    def read_until(marker, count=1, timeout=240.0):
        nonlocal seen
        end = time.monotonic() + timeout
        while seen.count(marker) < count and time.monotonic() < end:
            ready, _, _ = select.select([main_fd], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(main_fd, 4096)
                except OSError:
                    break
        assert seen.count(marker) >= count, seen.decode(errors="replace")

    try:
        prompt = b"(jitcore-debug) "
        read_until(prompt)
        os.write(main_fd, b"p x.shape\r")
        read_until(prompt, 2)
        os.write(main_fd, b"\x1b[A\r")  # Up arrow, Enter: the same command again
        read_until(prompt, 3)
        os.write(main_fd, b"q\r")
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main_fd)
    text = seen.decode(errors="replace")
    assert "unknown command" not in text, text
    assert text.count("torch.Size([4, 8])") == 2, text


def test_up_and_down_walk_the_user_stack(mlp):
    jfn, args, _ = mlp
    text = run_shell(Debugger(jfn, args), "up", "up", "up", "where", "down", "down", "down", "q")
    lines = text.splitlines()
    assert f"(jitcore-debug) > {EXAMPLE}:15 in block" in lines
    assert "  return torch.relu(project(x, w))" in lines
    assert f"(jitcore-debug) > {EXAMPLE}:19 in mlp" in lines and "  hidden = block(x, w1)" in lines
    assert "(jitcore-debug) *** oldest frame" in lines
    assert f"(jitcore-debug) > {EXAMPLE}:19 in mlp" in lines  # where marks the selected frame
    assert f"(jitcore-debug) > {EXAMPLE}:11 in project" in lines
    assert "(jitcore-debug) *** newest frame" in lines


def test_pp_bare_expressions_and_bang_statements(mlp):
    jfn, args, _ = mlp
    text = run_shell(
        Debugger(jfn, args),
        "n",
        "pp {'shape': tuple(t0.shape), 'dtype': t0.dtype}",
        "t0.shape",
        "!scaled = t0 * 0",
        "scaled.abs().sum().item()",
        "!t0 = t0 * 0",
        "n",
        "p t1.abs().sum().item()",
        "q",
    )
    assert "{'dtype': torch.float32, 'shape': (4, 16)}" in text  # pp: pprint's form
    assert "torch.Size([4, 16])" in text  # a bare expression, as in pdb
    assert "(jitcore-debug) 0.0\n" in text  # a name assigned with ! is kept
    assert text.count("(jitcore-debug) 0.0\n") == 2  # assigning t0 changed what the next op computed


def test_restart_keeps_breakpoints(mlp):
    jfn, args, _ = mlp
    text = run_shell(Debugger(jfn, args), "b softmax", "c", "restart", "c", "q")
    assert text.count("breakpoint\n-> [3] t3 = torch.softmax(t2, dim=-1)") == 2
    assert "restarted\n-> [0] t0 = torch.matmul(x, w1)" in text


def test_p_of_a_user_variable_name(mlp):
    """``p hidden``: the user's name maps to the trace value it holds, and says which one."""
    jfn, args, namespace = mlp
    before = run_shell(Debugger(jfn, args), "p hidden", "p t3", "q")
    assert "*** NameError: hidden (mlp," in before and "is t1, computed by op [1] (torch.relu)" in before
    later = "*** NameError: t3 is a trace value, computed by op [3] (torch.softmax), which has not run yet"
    assert later in before
    commands = ("n", "n", "p hidden.shape", "p hidden", "hidden.sum() == t1.sum()", "q")
    text = run_shell(Debugger(jfn, args), *commands)
    x, w1, _w2 = args
    assert "torch.Size([4, 16])" in text and f"(hidden (mlp, {EXAMPLE}:19) is t1)" in text
    assert "tensor(True)" in text
    d = Debugger(jfn, args)
    d.next(), d.next()
    torch.testing.assert_close(d.evaluate("hidden"), namespace["block"](x, w1))


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("nosuchfile.py:3", "no such file: nosuchfile.py"),
        ("debug_mlp.py:999", "debug_mlp.py has only {n} lines"),
        (
            "debug_mlp.py:7",
            "no op of the trace was recorded from debug_mlp.py:7 (lines with ops: 11, 15, 19, 20)",
        ),
        ("aten.nosuchop", "unknown op 'aten.nosuchop'"),
        ("frobnicate", "unknown op 'frobnicate'"),
        ("aten.conv2d", "the trace never runs aten.conv2d"),
    ],
)
def test_breakpoints_that_can_never_be_hit_are_refused(mlp, spec, reason):
    jfn, args, _ = mlp
    with open(EXAMPLE) as f:
        reason = reason.format(n=len(f.readlines()))
    d = Debugger(jfn, args)
    with pytest.raises(ValueError, match="cannot stop at") as info:
        d.break_at(spec)
    assert reason in str(info.value)
    assert d.breakpoints == []
    text = run_shell(Debugger(jfn, args), f"b {spec}", "b", "q")
    assert f"*** cannot stop at {spec}: {reason}" in text and "no breakpoints" in text


def test_b_aten_mm_stops_where_torch_matmul_decomposes_to_it():
    """``torch.matmul`` on plain tensors is one op of the trace; it runs ``aten.mm``."""
    args, _ = debug_scripts.mm_inputs()
    jfn = jitcore.jit(debug_scripts.mm_model)
    jfn(*args)
    d = Debugger(jfn, args)
    d.break_at("aten.mm")
    hit = d.continue_()
    assert hit is not None and hit.symbol.id == "torch.matmul" and d.index == 1
    assert d.hit_detail(hit) == "torch.matmul runs aten.mm.default here"
    assert d.continue_() is None
    text = run_shell(Debugger(jfn, args), "b aten.mm", "c", "q")
    assert "breakpoint\n-> [1] t1 = torch.matmul(t0, w)" in text
    assert "(torch.matmul runs aten.mm.default here: 'n' runs it)" in text


def test_the_habits_through_python_m_jitcore_debug_standard_input():
    """The same habits typed into ``python -m jitcore debug`` (its standard input is a pipe here)."""
    commands = [
        "b nosuchfile.py:3",
        "b aten.mm",
        "c",
        "p hidden",
        "pp hidden.shape",
        "restart",
        "up",
        "where",
        "down",
        "!scaled = x * 0",
        "scaled.abs().sum().item()",
        "q",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "jitcore", "debug", f"{EXAMPLE}:mlp"],
        check=False,
        input="\n".join(commands) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "*** cannot stop at nosuchfile.py:3: no such file: nosuchfile.py" in out
    assert "breakpoint\n-> [2] t2 = torch.matmul(t1, w2)" in out
    assert "(torch.matmul runs aten.mm.default here: 'n' runs it)" in out
    assert f"(hidden (mlp, {EXAMPLE}:19) is t1)" in out and "torch.Size([4, 16])" in out
    assert "restarted\n-> [0] t0 = torch.matmul(x, w1)" in out
    assert f"> {EXAMPLE}:15 in block" in out  # up
    assert f"  > {EXAMPLE}:15 in block\n" in out  # where marks the selected frame
    assert f"> {EXAMPLE}:11 in project" in out and "(jitcore-debug) 0.0\n" in out
    assert "***" not in out.replace("*** cannot stop at nosuchfile.py:3", "")
