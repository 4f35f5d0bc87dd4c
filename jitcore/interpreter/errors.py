"""Exceptions of the interpreter itself, as distinct from the user's exceptions.

Invariants:
- A user exception (anything the interpreted program raises) is never wrapped in these classes: it reaches
  the caller as the very same object.
- ``UnsupportedConstruct`` means "the program uses something the interpreter deliberately does not run";
  ``InterpreterError`` means "the interpreter itself is wrong" (a bug). Neither is ever caught by the user's
  ``except`` clauses inside interpreted code.
- Each class carries a stable ``code`` string; docs/interpreter.md lists them.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

__all__ = ["InterpreterError", "JitcoreInterpreterError", "UnsupportedConstruct", "UnsupportedPythonVersion"]


class JitcoreInterpreterError(Exception):
    """Base class of the interpreter's own errors: a stable ``code``, a summary and where it happened.

    Args:
        summary: one line saying what happened, in the user's terms.
        where: ``"file:line"`` of the user's code involved, or ``""`` when unknown.
        hint: an action the user can take, or ``""``.
    """

    code = "JC-I000"

    def __init__(self, summary: str, where: str = "", hint: str = "") -> None:
        self.summary = summary
        self.where = where
        self.hint = hint
        text = f"[{self.code}] {summary}"
        if where:
            text += f" (at {where})"
        if hint:
            text += f". Hint: {hint}"
        super().__init__(text)


class UnsupportedConstruct(JitcoreInterpreterError):
    """The interpreted program uses a construct this interpreter does not run (rather than running it
    wrong)."""

    code = "JC-I001"


class InterpreterError(JitcoreInterpreterError):
    """An internal inconsistency of the interpreter: a bug in jitcore, not in the user's program."""

    code = "JC-I002"


class UnsupportedPythonVersion(JitcoreInterpreterError):
    """The running Python's bytecode is not one the interpreter knows."""

    code = "JC-I003"
