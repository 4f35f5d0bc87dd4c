"""jitcore's bytecode interpreter: runs Python functions instruction by instruction, in Python.

``interpret(fn, hooks)(*args, **kwargs)`` behaves like ``fn(*args, **kwargs)`` -- same value, same
exception object, same side effects -- while every piece of Python code reached runs on this interpreter
and can be observed and steered through ``Hooks``. See docs/interpreter.md.

Invariants:
- The interpreter knows nothing of torch or of the jit; they stand on ``Hooks``.
- Only the CPython versions in ``SUPPORTED_VERSIONS`` (3.11, 3.12 and 3.13: those tested) are accepted; on
  others importing this package raises ``UnsupportedPythonVersion`` naming them, before any handler is
  registered.
"""

from __future__ import annotations

# Note [Builtins snapshot]: the interpreter's own code must not see a program's replacement of a builtin
# (``builtins.len = ...``), so each of its modules resolves builtins in a copy taken at import: the line
# ``__builtins__ = dict(vars(__import__("builtins")))`` near its top, which refers to this note.
__builtins__ = dict(vars(__import__("builtins")))

import functools
import sys
from collections.abc import Callable
from types import CodeType

from jitcore.interpreter.errors import (
    InterpreterError,
    JitcoreInterpreterError,
    UnsupportedConstruct,
    UnsupportedPythonVersion,
)
from jitcore.interpreter.registry import SUPPORTED_VERSIONS


def _check_version() -> None:
    if sys.version_info[:2] not in SUPPORTED_VERSIONS:
        names = [f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS]
        supported = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        running = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise UnsupportedPythonVersion(
            f"jitcore supports CPython {supported} (the versions it is tested on); this is Python {running}",
            hint="run under CPython "
            + " or ".join(f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS),
        )


_check_version()  # before the handlers register: their opcodes exist only on the supported versions

from jitcore.interpreter import opcodes  # noqa: E402, F401 - registers the opcode handlers
from jitcore.interpreter.frame import Frame, Position
from jitcore.interpreter.hooks import Hooks
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.run import Run, active_runs, current_run
from jitcore.interpreter.warnings_from_c import install as _install_warning_locations

_install_warning_locations()  # Note [Warnings issued by C code]

__all__ = [
    "SUPPORTED_VERSIONS",
    "Frame",
    "Hooks",
    "Instruction",
    "InterpreterError",
    "JitcoreInterpreterError",
    "Position",
    "Run",
    "UnsupportedConstruct",
    "UnsupportedPythonVersion",
    "current_run",
    "interpret",
    "interpret_code",
]


def interpret(fn: Callable, hooks: Hooks | None = None) -> Callable:
    """Wrap ``fn`` so that calling the wrapper runs ``fn`` on the interpreter.

    Args:
        fn: any callable (a Python function, method, class, callable object or builtin).
        hooks: the Hooks to consult (none if None).

    Returns:
        a callable with ``fn``'s signature returning what ``fn`` returns.

    Raises:
        UnsupportedPythonVersion: on a Python whose bytecode the interpreter does not know.
        (When called) whatever ``fn`` raises -- the same exception object, with a traceback showing the
        user's frames -- or UnsupportedConstruct / InterpreterError for jitcore's own failures.
    """
    _check_version()
    hooks = hooks if hooks is not None else Hooks()

    @functools.wraps(fn)
    def interpreted(*args: object, **kwargs: object) -> object:
        from jitcore.interpreter.calls import call
        from jitcore.interpreter.tracebacks import restore_hidden, strip_internal

        run = Run(hooks)
        run.native_exc = sys.exc_info()[1]
        runs = active_runs()
        if not runs:  # an outermost run: the hook may have been replaced (Note [Warnings issued by C code])
            _install_warning_locations()
        runs.append(run)
        try:
            return call(run, fn, args, kwargs)
        except BaseException as e:
            if not isinstance(e, InterpreterError):
                e.__traceback__ = strip_internal(e.__traceback__)
                if len(runs) == 1:  # the outermost run (Note [The hooks' traceback entries])
                    restore_hidden(run, e)
            raise
        finally:
            runs.pop()

    interpreted.__wrapped_by_jitcore__ = True
    return interpreted


def _register_native_codes() -> None:
    """The wrapper ``interpret`` returns runs natively when interpreted code calls it (Note [interpret()
    wrappers called by interpreted code] in calls.py)."""
    from jitcore.interpreter.calls import NATIVE_CODES

    for const in interpret.__code__.co_consts:
        if isinstance(const, CodeType) and const.co_name == "interpreted":
            NATIVE_CODES.add(id(const))


_register_native_codes()


def interpret_code(
    code: CodeType, globals: dict, locals: object = None, hooks: Hooks | None = None
) -> object:
    """Run a module-level code object on the interpreter, as ``exec(code, globals, locals)`` would.

    Args:
        code: a code object compiled in "exec", "single" or "eval" mode.
        globals: the global namespace.
        locals: the local namespace (``globals`` if None).
        hooks: the Hooks to consult (none if None).

    Returns:
        the value of the code ("eval" mode), else None.

    Raises:
        whatever the code raises, as ``interpret`` does.
    """
    _check_version()
    from jitcore.interpreter.calls import run_code
    from jitcore.interpreter.tracebacks import restore_hidden, strip_internal

    run = Run(hooks if hooks is not None else Hooks())
    run.native_exc = sys.exc_info()[1]
    runs = active_runs()
    runs.append(run)
    try:
        return run_code(run, code, globals, globals if locals is None else locals)
    except BaseException as e:
        if not isinstance(e, InterpreterError):
            e.__traceback__ = strip_internal(e.__traceback__)
            if len(runs) == 1:  # the outermost run (Note [The hooks' traceback entries])
                restore_hidden(run, e)
        raise
    finally:
        runs.pop()
