"""``eval``, ``exec``, ``compile`` and ``types.FunctionType`` as the calling interpreted frame would see them:
its namespaces by default, its builtins for new namespaces, its ``__future__`` flags, and natively run code
called from a frame standing for it.

Invariants:
- code ``exec``/``eval`` run is run natively (under the program's trace and profile functions where it set
  them, as CPython's own: tracing.native_traced);
- each lookaside gives the builtin's result and errors (its signature per version: 3.13 takes the
  namespaces by keyword too).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import __future__

import builtins
import functools
import operator
import sys
from collections.abc import Callable
from types import FunctionType

from jitcore.interpreter.callbacks import active_run
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.frame_locals import frame_locals
from jitcore.interpreter.run import current_run
from jitcore.interpreter.tracebacks import caller_stand_in
from jitcore.interpreter.tracing import native_functions, native_traced

__all__ = ["compile_", "eval_", "exec_", "function_"]


def _caller() -> Frame:
    run = active_run()
    if not run.frames:
        raise RuntimeError("no interpreted frame")
    return run.frames[-1]


def _namespaces(global_ns: object, local_ns: object) -> tuple[object, object]:
    if global_ns is None:
        frame = _caller()
        global_ns = frame.globals
        if local_ns is None:
            local_ns = frame_locals(frame)
    elif type(global_ns) is dict and "__builtins__" not in global_ns:
        global_ns["__builtins__"] = _caller_builtins()  # Note [Builtins of new namespaces]
    return global_ns, local_ns


# Note [Builtins of new namespaces]
# exec()/eval() with a globals dict lacking ``__builtins__``, and ``FunctionType(code, globals)`` with
# one, take the builtins of the *calling frame* (CPython's PyEval_GetBuiltins). Called natively from
# here, that would be this module's snapshot (Note [Builtins snapshot]), leaking into the program:
# the lookasides supply the calling interpreted frame's builtins instead (exec and eval insert them
# into the dict, as CPython does; a function only records them).
def _caller_builtins() -> dict:
    run = current_run()
    frames = run.frames if run is not None else None
    return frames[-1].builtins if frames else vars(builtins)


def function_(code: object, global_ns: object, *args: object, **kwargs: object) -> FunctionType:
    """``types.FunctionType(code, globals, ...)`` with the calling interpreted frame's builtins (told to
    the run's ``on_made`` hook)."""
    if type(global_ns) is not dict or "__builtins__" in global_ns:
        fn = FunctionType(code, global_ns, *args, **kwargs)
    else:
        global_ns["__builtins__"] = _caller_builtins()
        try:
            fn = FunctionType(code, global_ns, *args, **kwargs)
        finally:
            del global_ns["__builtins__"]
    run = current_run()
    if run is not None and run.hooks.on_made is not None:
        run.hooks.on_made(fn)
    return fn


_FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


def _caller_future_flags() -> int:
    run = current_run()
    return run.frames[-1].code.co_flags & _FUTURE_FLAGS if run is not None and run.frames else 0


# Note [Inherited compiler flags]
# compile(), exec() and eval() of source text inherit the __future__ flags of the *calling frame*. Called
# natively from here that would be this module's, so source is compiled here with the flags of the
# interpreted caller and dont_inherit=True.

def compile_(source: object, filename: object, mode: object, flags: int = 0, dont_inherit: bool = False,
             optimize: int = -1, *, _feature_version: int = -1) -> object:
    """compile() inheriting the calling interpreted frame's __future__ flags."""
    if not dont_inherit:
        flags = operator.index(flags) | _caller_future_flags()
    return compile(source, filename, mode, flags, True, optimize, _feature_version=_feature_version)


def _compiled(source: object, mode: str) -> object:
    if isinstance(source, (str, bytes, bytearray)):
        if isinstance(source, str) and mode == "eval":
            source = source.lstrip(" \t")
        return compile(source, "<string>", mode, _caller_future_flags(), True)
    return source


def _eval(source: object, global_ns: object, local_ns: object) -> object:
    """eval() defaulting to the calling interpreted frame's namespaces."""
    source = _compiled(source, "eval")
    global_ns, local_ns = _namespaces(global_ns, local_ns)
    return _from_callers_frame(eval, (source, global_ns, local_ns), {})


def _exec(source: object, global_ns: object, local_ns: object, kwargs: dict) -> None:
    """exec() defaulting to the calling interpreted frame's namespaces."""
    source = _compiled(source, "exec")
    global_ns, local_ns = _namespaces(global_ns, local_ns)
    return _from_callers_frame(exec, (source, global_ns, local_ns), kwargs)


# Note [The frame exec'd code is called from]
# The code ``exec``/``eval`` run is run natively (Note [Trace events of interpreted frames]: bdb and trace
# step it as CPython's), so its frame is a frame object whose ``f_back`` is the native frame that called
# ``exec``: jitcore's (``sys._getframe().f_back.f_code.co_name`` was 'native_traced' where eagerly it names
# the function calling ``exec``, and its ``f_globals`` were jitcore's module's: /tmp/cpy52-probes/p4b.py).
# A native frame's ``f_back`` cannot be an interpreted frame's proxy, so the call is made from a native
# frame standing for the caller: ``tracebacks.caller_stand_in`` (Note [A caller stand-in]), a function in
# the caller's globals whose code has the caller's name, qualified name, file and current line, and whose
# traceback entry is dropped with the interpreter's own (the caller's entry stands for it: an error of the
# exec'd code showed the caller's line twice, test_traceback's test_traceback_very_long_line). Its
# ``f_locals`` are not the caller's, ``f_code`` is not the caller's code object, and its own ``f_back`` is
# jitcore's. Under a trace or profile function the program
# set, the code is run by ``native_traced`` as before (the stand-in would be traced as a frame of its own).
def _from_callers_frame(fn: Callable, args: tuple, kwargs: dict) -> object:
    run = current_run()
    if run is None or not run.frames or native_functions() is not None:
        return native_traced(fn, *args, **kwargs)
    callee = functools.partial(fn, **kwargs) if kwargs else fn
    return caller_stand_in(run.frames[-1])(callee, args)  # (its traceback entry is dropped)


# eval()'s and exec()'s signatures: 3.13 takes the namespaces by keyword too (``eval(s, globals=g)``)
if sys.version_info >= (3, 13):

    def eval_(source: object, /, globals: object = None, locals: object = None) -> object:  # noqa: A002
        return _eval(source, globals, locals)

    def exec_(source: object, /, globals: object = None, locals: object = None,  # noqa: A002
              **kwargs: object) -> None:
        return _exec(source, globals, locals, kwargs)

else:

    def eval_(source: object, global_ns: object = None, local_ns: object = None, /) -> object:
        return _eval(source, global_ns, local_ns)

    def exec_(source: object, global_ns: object = None, local_ns: object = None, /, **kwargs: object) -> None:
        return _exec(source, global_ns, local_ns, kwargs)
