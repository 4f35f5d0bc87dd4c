"""Run one of CPython's regression test modules with each test method (and its setUp/tearDown) called through
``jitcore.jit`` instead of ``interpret``: the jit's hooks (state binding, guards, replayed effects, its own
builtins) on programs nobody here wrote. Prints one JSON line: the natively passing tests, those passing
jitted, and the jitted errors (tests/jit/test_jit_cpython_conformance.py reads it).

Usage: python tests/jit/cpython_under_jit.py test_scope
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interpreter"))

import cpython_conformance_runner as runner  # noqa: E402

import jitcore  # noqa: E402


def main(name: str) -> None:
    warnings.simplefilter("ignore")  # eager entries warn; the tests' own warnings checks catch theirs
    runner.interpret = jitcore.jit  # what _suite wraps each test method with
    runner.TIMEOUT_S = 120
    outcome = runner.run_module(name)
    print(json.dumps({"native_pass": sorted(outcome.native_pass),
                      "jit_pass": sorted(outcome.interpreted_pass),
                      "jit_errors": outcome.interpreted_errors}))


if __name__ == "__main__":
    main(sys.argv[1])
