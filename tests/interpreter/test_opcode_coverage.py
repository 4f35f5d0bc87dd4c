"""Every opcode of the running Python is handled, or declared unsupported with a reason."""

from __future__ import annotations

import dis

import pytest

import jitcore.interpreter  # noqa: F401 - registers the handlers
from jitcore.interpreter.errors import InterpreterError
from jitcore.interpreter.registry import HANDLERS, UNSUPPORTED, VARIANTS, handles


def test_every_opcode_is_handled_or_declared_unsupported() -> None:
    missing = [name for name in dis.opmap if name not in HANDLERS and name not in UNSUPPORTED]
    assert not missing, f"opcodes neither handled nor declared unsupported: {missing}"


def test_unsupported_opcodes_have_reasons() -> None:
    assert all(len(reason) > 10 for reason in UNSUPPORTED.values())
    assert not set(UNSUPPORTED) & set(HANDLERS)


def test_hook_variants_replace_existing_handlers() -> None:
    assert all(opname in HANDLERS for opname, _ in VARIANTS)


def test_registering_twice_fails() -> None:
    with pytest.raises(InterpreterError, match="registered twice"):
        handles("NOP", since=(3, 11))(lambda frame, inst: None)


def test_unknown_opcode_fails() -> None:
    with pytest.raises(InterpreterError, match="no such opcode"):
        handles("NOT_AN_OPCODE", since=(3, 11))(lambda frame, inst: None)


def test_handler_for_other_versions_is_not_registered() -> None:
    fn = handles("NOT_AN_OPCODE_EITHER", since=(3, 99))(lambda frame, inst: None)
    assert fn not in HANDLERS.values()


@pytest.mark.parametrize("version", [(3, 10), (3, 14)])
def test_untested_versions_are_refused_at_import(version: tuple[int, int]) -> None:
    """``import jitcore`` on a Python CI does not test fails at once, naming the tested versions."""
    import subprocess
    import sys

    # the libraries jitcore imports are imported first, under the real version (they check it too)
    fake = (
        "import sys, collections, torch, numpy, optree, rich; sys.version_info = collections.namedtuple('v', "
        f"'major minor micro releaselevel serial')({version[0]}, {version[1]}, 0, 'final', 0)"
    )
    proc = subprocess.run([sys.executable, "-c", f"{fake}; import jitcore"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "UnsupportedPythonVersion" in last and "[JC-I003]" in last, last
    assert "CPython 3.11, 3.12 and 3.13" in last and f"this is Python {version[0]}.{version[1]}" in last, last
