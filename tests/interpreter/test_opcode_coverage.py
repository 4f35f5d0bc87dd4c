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
