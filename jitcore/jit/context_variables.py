"""Context variables (``contextvars``) the program's own code reads or sets while traced (Note [Context
variables]).

Invariants:
- ``var.get()`` (bound, or ``ContextVar.get(var)``) of a variable the pass has not set is run now and its
  answer bound as state read at a path that calls it again per call (a literal guarded by its value, an
  object by what the program reads of it); after the pass set it, the answer is the program's own;
- ``var.set(v)``/``var.reset(token)`` are made natively; when the pass ends, every variable it set is put
  back as the call found it, and where one then held another value than at the call (a set not reset), the
  call is refused (JC-T001: it runs eagerly, its eager entry whatever the variables hold);
- a ``Context``'s methods (``ctx.run(f)`` runs ``f`` natively in another context) are refused before they run;
- library code (torch, jitcore, the standard library) is not watched: its variables are its bookkeeping.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.jit.code_kinds import is_library_file
from jitcore.prologue import Path, Root

__all__ = ["NOT_CONTEXT", "ContextVariables"]

# Note [Context variables]
# ``CV.get()`` is a C method the interpreter called natively: its answer was a constant of the trace, so a
# cached call made after the caller set the variable computed with the old value (``x * CV.get()``: eager
# 2.0 after ``CV.set(2.0)``, jit 1.0), and ``CV.set(CV.get() + 1)`` inside the program was made once, by the
# pass, never by cached calls (a counter: eager 1, 2, ..., 20, jit 1 on every call, the variable stuck;
# /tmp/eff54-probes/wide4.py "contextvar counter", cv_read.py). A read is now state at ``var.get`` called
# (bound as any value read there, as a weak reference's referent is: Note [The referent of a weak
# reference of state]), checked by the prologue on every call. A set made and reset within the call
# (transformers' ``_active_collector.set(...)`` around a model's forward, ``reset`` in ``finally``) leaves
# the context as it found it: the reads between read the program's own value, and the trace stands. A set
# left in place changes the thread's context, which no trace replays: the variables the pass set are put
# back and the call runs eagerly (its eager entry leaves out the guards on the variables' values, which a
# counter changes on every call: ``unguarded``). ``ctx.run(f)`` runs ``f`` natively in another context:
# refused.
NOT_CONTEXT = object()
_VAR = contextvars.ContextVar
_ABSENT = object()


class _Get:
    """What the prologue calls to read a variable per call: ``var.get(*default)``."""

    __slots__ = ("default", "var")

    def __init__(self, var: contextvars.ContextVar, default: tuple) -> None:
        self.var, self.default = var, default

    def __call__(self) -> Any:
        return self.var.get(*self.default)


def _reads_a_variable(guard: Any) -> bool:
    return any(type(path.root.obj) is _Get for path in (guard.path, *guard.related))


def _refused(what: str) -> UnsupportedOperationError:
    refused = UnsupportedOperationError(
        f"{what} inside a jitted function changes or runs in the thread's context (contextvars), which a "
        "cached call does not replay",
        hints=("the call runs eagerly; set the variable outside the jitted function, or reset it before "
               "the function returns",))
    refused.unguarded = _reads_a_variable  # its eager entry: whatever the variables hold (eager_guards)
    return refused


def _variable_call(fn: Any, args: tuple) -> tuple[contextvars.ContextVar, str, tuple] | None:
    """(the variable, the method's name, its other arguments) of a call of a ``ContextVar`` method."""
    owner = getattr(fn, "__self__", None)
    if type(owner) is _VAR:
        return owner, fn.__name__, args
    if getattr(fn, "__objclass__", None) is _VAR and args and type(args[0]) is _VAR:
        return args[0], fn.__name__, args[1:]
    return None


def _programs_code() -> bool:
    """Whether the calling frame runs the program's code (no library's: torch, jitcore, the stdlib)."""
    run = current_run()
    frame = run.frames[-1] if run is not None and run.frames else None
    return frame is not None and not is_library_file(frame.code.co_filename)


def _value(var: contextvars.ContextVar) -> Any:
    return var.get(_ABSENT)


class ContextVariables:
    """The context variables one pass reads and sets (Note [Context variables])."""

    def __init__(self, provenance: Any) -> None:
        self._provenance = provenance
        self._set: dict[int, tuple[contextvars.ContextVar, Any, contextvars.Token]] = {}  # value at the call

    def call(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """The answer of a ``contextvars`` call of the program's code; ``NOT_CONTEXT`` for any other call.

        Raises:
            UnsupportedOperationError: a ``Context``'s method.
        """
        if type(fn) not in (types.BuiltinMethodType, types.MethodDescriptorType) or not _programs_code():
            return NOT_CONTEXT  # a library's own bookkeeping
        if type(getattr(fn, "__self__", None)) is contextvars.Context \
                or getattr(fn, "__objclass__", None) is contextvars.Context:
            raise _refused(f"contextvars.Context.{getattr(fn, '__name__', 'run')}()")
        found = _variable_call(fn, args)
        if found is None:
            return NOT_CONTEXT
        var, name, rest = found
        if name == "set" and len(rest) == 1 and not kwargs:
            before = _value(var)
            token = var.set(*rest)
            self._set.setdefault(id(var), (var, before, token))
            return token
        if name != "get" or kwargs or id(var) in self._set:
            return NOT_CONTEXT  # made natively: a reset, or a read of the program's own value
        value = var.get(*rest)
        path = Path(Root("bound", f"ContextVar({var.name!r}).get", _Get(var, rest))).call()
        return self._provenance.bind_state(value, path, f"contextvar_{var.name}")

    @staticmethod
    def run_lookaside(inner: Callable[..., Any]) -> Callable[..., Any]:
        """``Context.run``: refused where the program's own code calls it (Note [Context variables])."""
        def run(context: contextvars.Context, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if _programs_code():
                raise _refused("contextvars.Context.run()")
            return inner(context, fn, *args, **kwargs)
        return run

    def put_back(self) -> UnsupportedOperationError | None:
        """Every variable the pass set as the call found it; the refusal of the call where one held another
        value (Note [Context variables])."""
        changed = None
        for var, before, token in self._set.values():
            if _value(var) is not before and changed is None:
                changed = var
            try:
                var.reset(token)  # the first set's token: the value before it
            except (RuntimeError, ValueError):  # reset already, or made in another context
                if before is _ABSENT:
                    continue
                var.set(before)
        self._set.clear()
        return None if changed is None else _refused(f"ContextVar.set() of {changed.name!r}, not reset,")
