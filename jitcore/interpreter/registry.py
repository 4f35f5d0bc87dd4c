"""Which function executes which opcode, per Python version.

Invariants:
- An opcode is registered at most once per Python version, and only if it exists in ``dis.opmap`` of the
  running Python; a mistake here fails at import time, not in the middle of a user's program.
- Every opcode of the running Python is either handled or listed in ``UNSUPPORTED`` with a reason
  (tests/interpreter/test_opcode_coverage.py checks this).
- Handler variants that exist only to serve a hook (``hook="on_load_global"``) replace the plain handler in
  the table of runs that set that hook, and nowhere else.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import dis
import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from jitcore.interpreter.errors import InterpreterError, UnsupportedConstruct

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame
    from jitcore.interpreter.instructions import Instruction

    Handler = Callable[[Frame, Instruction], object]

__all__ = [
    "FUSED",
    "HANDLERS",
    "SUPPORTED_VERSIONS",
    "UNSUPPORTED",
    "VARIANTS",
    "JUMP_FUSED",
    "fused_jumps",
    "fused_opcodes",
    "fuses",
    "fuses_jump",
    "handler_table",
    "handles",
    "hooked_opcodes",
    "unsupported",
]

# The versions whose bytecode has a complete handler table here and whose tests run (.ci/run; 3.12 where a
# CPython 3.12 is installed). Others (3.10, 3.14, ...) are refused at import (jitcore/interpreter/__init__).
SUPPORTED_VERSIONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))
_VERSION = sys.version_info[:2]

# CPython 3.12+ lists pseudo-instructions (SETUP_FINALLY, LOAD_METHOD, JUMP, ...) in ``dis.opmap`` with
# numbers
# from 256 on: the compiler replaces them before bytecode exists, so they are never dispatched (and their
# numbers would collide with the synthetic opcodes of fused handlers).
_MIN_PSEUDO = 256
_REAL_OPCODES = frozenset(name for name, code in dis.opmap.items() if code < _MIN_PSEUDO)

HANDLERS: dict[str, Handler] = {}
VARIANTS: dict[tuple[str, str], Handler] = {}
UNSUPPORTED: dict[str, str] = {}


def _applies(since: tuple[int, int], until: tuple[int, int] | None) -> bool:
    return since <= _VERSION and (until is None or _VERSION <= until)


def handles(
    opname: str, since: tuple[int, int], until: tuple[int, int] | None = None, hook: str | None = None
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``opname`` for Pythons in ``[since, until]``.

    Args:
        opname: the CPython opcode name, e.g. ``"BINARY_OP"``.
        since: first Python version (major, minor) whose bytecode this handler implements.
        until: last such version, or None for "up to the newest supported".
        hook: name of a ``Hooks`` field; the handler is then a variant used only by runs that set that hook.

    Raises:
        InterpreterError: the opcode does not exist on this Python, or is registered twice.
    """

    def register(fn: Handler) -> Handler:
        if not _applies(since, until):
            return fn
        if opname not in _REAL_OPCODES:
            raise InterpreterError(f"@handles({opname!r}): no such opcode on Python {_VERSION}")
        table: dict = VARIANTS if hook else HANDLERS
        key = (opname, hook) if hook else opname
        if key in table:
            raise InterpreterError(f"@handles({opname!r}, hook={hook!r}) registered twice")
        table[key] = fn
        return fn

    return register


def unsupported(
    opname: str, reason: str, since: tuple[int, int], until: tuple[int, int] | None = None
) -> None:
    """Declare that ``opname`` is deliberately not executed, and why (raises UnsupportedConstruct if met)."""
    if _applies(since, until):
        if opname not in _REAL_OPCODES:
            raise InterpreterError(f"unsupported({opname!r}): no such opcode on Python {_VERSION}")
        UNSUPPORTED[opname] = reason


def _declare_pseudo_and_instrumented() -> None:
    """Pseudo-instructions and sys.monitoring's INSTRUMENTED_* opcodes never reach the run loop: ``co_code``
    (what ``dis`` decodes) is de-instrumented, and pseudo-instructions exist only inside the compiler."""
    for opname, code in dis.opmap.items():
        if code >= _MIN_PSEUDO:
            UNSUPPORTED[opname] = "pseudo-instruction: the compiler replaces it before bytecode exists"
        elif opname.startswith("INSTRUMENTED_"):
            UNSUPPORTED[opname] = (
                "sys.monitoring instrumentation: co_code (what is decoded) is de-instrumented"
            )


_declare_pseudo_and_instrumented()


def _make_unsupported(opname: str, reason: str) -> Handler:
    def handler(frame: Frame, inst: Instruction) -> None:
        raise UnsupportedConstruct(f"opcode {opname} is not supported: {reason}", frame.where())

    return handler


def _make_unknown(opname: str) -> Handler:
    if opname.startswith("<"):
        return _unknown_opcode

    def handler(frame: Frame, inst: Instruction) -> None:
        raise InterpreterError(f"no handler for opcode {opname}", frame.where())

    return handler


# Note [Unknown opcodes]
# A byte that is no opcode of this Python (a code object made by ``code.replace(co_code=...)``) reaches
# CPython's eval loop, which raises SystemError when it gets there: "unknown opcode" on 3.11 (after printing
# "XXX lineno: N, opcode: OP" to the process's stderr), "FILE:LINE: unknown opcode OP" on 3.13. ``dis``
# decodes such a byte as CACHE (opcode 0, never an instruction otherwise; ``co_code`` shows 0 too), so
# decoding takes the byte itself back from ``_co_code_adaptive`` where that is no opcode's, and its handler
# raises as CPython does (test_code's test_invalid_bytecode on 3.13). CPython's frame has not moved on to
# the byte (no instruction's prologue ran): the error, its message's line and the frame's traceback entry are
# at the instruction before it. (Where that is the function's first RESUME, CPython adds no entry: the frame
# is not "complete" yet; here the entry is at the byte.)
def _unknown_opcode(frame: Frame, inst: Instruction) -> None:
    if inst.index:
        frame.index = inst.index  # the traceback entry's instruction is the one before ``frame.index``
    lineno = frame.position().lineno if inst.index else frame.code.co_firstlineno
    if _VERSION >= (3, 12):
        raise SystemError(f"{frame.code.co_filename}:{lineno}: unknown opcode {inst.opcode}")
    import os

    os.write(2, f"XXX lineno: {lineno}, opcode: {inst.opcode}\n".encode())
    raise SystemError("unknown opcode")


# Note [Fused instructions]
# Frequent runs of instructions (pairs, and a few runs of three or four: two operand loads and a binary
# operation or comparison, possibly with the store or jump after it) have one handler for all of them (a
# "superinstruction"), saving trips through the run loop. Decoding puts the fused instruction (a synthetic
# opcode >= 256; ``inst.next`` = the second instruction, whose ``next`` is the third, ...) at the first
# index and leaves the other instructions at their own indices, so jumps into them still work. A fused
# handler advances ``frame.index`` past each instruction before executing it, so positions and exception
# handling see exactly what the unfused instructions would. A run with ``on_instruction`` executes the
# unfused instructions; a run with load hooks (the jit's) fuses only runs free of the hooked opcodes
# (``CodeInfo.fused_without``), so every LOAD_GLOBAL/LOAD_ATTR/... it hooks still goes through its hook.
FUSED: dict[tuple[str, ...], tuple[int, Handler]] = {}


def fuses(*opnames: str, since: tuple[int, int], until: tuple[int, int] | None = None
          ) -> Callable[[Handler], Handler]:
    """Register the decorated function as the fused handler of the run of instructions ``opnames``
    (a pair, or a longer superinstruction)."""

    def register(fn: Handler) -> Handler:
        if not _applies(since, until):
            return fn
        if len(opnames) < 2:
            raise InterpreterError(f"@fuses{opnames!r}: a fused handler covers at least two instructions")
        for opname in opnames:
            if opname not in HANDLERS:
                raise InterpreterError(f"@fuses{opnames!r}: {opname} has no handler")
        if opnames in FUSED:
            raise InterpreterError(f"@fuses{opnames!r} registered twice")
        FUSED[opnames] = (_next_synthetic_opcode(), fn)
        return fn

    return register


# Note [Fused jumps]
# The back edge of a loop and the instruction it jumps to (``JUMP_BACKWARD`` -> ``FOR_ITER``) run as one
# handler: decoding replaces a ``JUMP_BACKWARD`` whose target's opname (a fused one included, such as
# ``FOR_ITER+STORE_FAST``) has a registered jump handler by a synthetic instruction whose ``next`` is the
# target instruction. The handler sets ``frame.index`` as if the target had been fetched, then executes it.
JUMP_FUSED: dict[tuple[str, str], tuple[int, Handler]] = {}


def fuses_jump(jump: str, target: str, since: tuple[int, int], until: tuple[int, int] | None = None
               ) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``jump`` when it lands on ``target``."""

    def register(fn: Handler) -> Handler:
        if not _applies(since, until):
            return fn
        if jump not in HANDLERS:
            raise InterpreterError(f"@fuses_jump({jump!r}, {target!r}): {jump} has no handler")
        if (jump, target) in JUMP_FUSED:
            raise InterpreterError(f"@fuses_jump({jump!r}, {target!r}) registered twice")
        JUMP_FUSED[(jump, target)] = (_next_synthetic_opcode(), fn)
        return fn

    return register


def _next_synthetic_opcode() -> int:
    """Fused handlers take the opcodes past CPython's 0..255, in registration order."""
    return 256 + len(FUSED) + len(JUMP_FUSED)


def fused_jumps() -> dict[tuple[int, str], int]:
    """(jump opcode, target opname) -> synthetic opcode of their fused handler (made once per state of
    the registry: every code object's decoding asks; do not mutate the result)."""
    return _fused_jumps(len(JUMP_FUSED))


@functools.cache
def _fused_jumps(_registered: int) -> dict[tuple[int, str], int]:
    return {(dis.opmap[jump], target): code for (jump, target), (code, _) in JUMP_FUSED.items()}


def hooked_opcodes(hooks_set: frozenset[str]) -> frozenset[int]:
    """The opcodes whose handler is a hook variant in a run with these hooks set (never fused there)."""
    return frozenset(dis.opmap[opname] for opname, hook in VARIANTS if hook in hooks_set)


def fused_opcodes(hooked: frozenset[int] = frozenset()) -> dict[tuple[int, ...], int]:
    """(opcodes of a fused run) -> synthetic opcode of its fused handler, for the runs holding no opcode
    of ``hooked`` (made once per state of the registry and ``hooked``; do not mutate the result)."""
    return _fused_opcodes(len(FUSED), hooked)


@functools.cache
def _fused_opcodes(_registered: int, hooked: frozenset[int]) -> dict[tuple[int, ...], int]:
    runs = {tuple(dis.opmap[name] for name in names): code for names, (code, _) in FUSED.items()}
    return {k: v for k, v in runs.items() if not hooked.intersection(k)} if hooked else runs


def handler_table(hooks_set: frozenset[str]) -> list[Handler]:
    """The dispatch table (indexed by opcode, fused opcodes included) for a run whose set hooks are
    ``hooks_set``."""
    table: list[Handler] = [_make_unknown(dis.opname[i]) for i in range(256)]
    table.extend(fn for _, fn in sorted([*FUSED.values(), *JUMP_FUSED.values()], key=lambda entry: entry[0]))
    for opname, reason in UNSUPPORTED.items():
        if opname in _REAL_OPCODES:
            table[dis.opmap[opname]] = _make_unsupported(opname, reason)
    for opname, fn in HANDLERS.items():
        table[dis.opmap[opname]] = fn
    for (opname, hook), fn in VARIANTS.items():
        if hook in hooks_set:
            table[dis.opmap[opname]] = fn
    return table
