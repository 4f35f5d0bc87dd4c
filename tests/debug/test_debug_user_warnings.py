"""Issue 18.7: warnings about the user's code name the user's line, not jitcore's."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import debug_programs as P
import torch

import jitcore

ROOT = os.path.dirname(os.path.dirname(jitcore.__file__))


def caught(fn, *args):
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        fn(*args)
    return found


def test_breakpoint_in_a_jitted_function_warns_at_the_breakpoint_line():
    found = caught(jitcore.jit(P.with_breakpoint), torch.randn(2))
    (found,) = [w for w in found if "breakpoint()" in str(w.message)]
    assert (found.filename, found.lineno) == (P.__file__, P.line_of(P.with_breakpoint, "breakpoint()"))


def test_unknown_jitcore_logs_name_warns_at_the_import_line(tmp_path):
    script = tmp_path / "uses_jitcore.py"
    script.write_text("import os\nimport jitcore  # line 2\n")
    done = subprocess.run(
        [sys.executable, "-W", "always", str(script)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "JITCORE_LOGS": "no-such-log", "PYTHONPATH": ROOT},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    warning = f"{script}:2: UserWarning: jitcore: JITCORE_LOGS ignored: unknown JITCORE_LOGS component"
    assert warning in done.stderr
    assert "jitcore/" not in done.stderr.split("UserWarning")[0]
