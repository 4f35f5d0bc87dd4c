"""The safety net under the jit's C calls: a C function that runs the program's Python code natively
(a dunder of a caller's object: ``{obj}``, ``sorted(objs)`` over a Python ``__lt__``,
``"%s" % obj``, ``struct.pack("i", obj)``, ``pickle.dumps(obj)``) makes the call run eagerly
(JC-T001), never a cache entry that returns the first call's answer (Note [Python code a C call ran
natively]).

Invariants:
- a C call the program makes while tracing either runs none of the program's Python code natively, or
  raises ``UnsupportedOperationError``, whatever it returned: the program's code is stopped as its frame
  starts (before its first instruction, so none of its effects happen), and where C swallowed that
  error the call raises it once it returns;
- only code of the program's files counts (not torch's, jitcore's, the standard library's:
  ``is_library_file``; not a generator C resumes, nor a ``__del__``), and only a frame that C itself
  started from the call (its caller is the frame that made the C call): Python code the interpreter
  runs inside the call (a ``key`` function interpreted, jitcore's proxies' dunders) is not the call's;
- no garbage collection runs inside a watched call: a ``gc.callbacks`` function (hypothesis registers one)
  or a finalizer it would run is not the call's doing, yet its frame would look started by the call;
- a profile function already set (a profiler's, cProfile's, jitcore's own backward watch) is never
  replaced: under one, the net is not set (left, docs/user-guide.md).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import pickle
import reprlib
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter.calls import opaque
from jitcore.interpreter.hashed_inserts import rerun_allowed
from jitcore.interpreter.pickling import built_in_values
from jitcore.interpreter.run import LIFTED_WATCH, current_run
from jitcore.jit.code_kinds import is_library_file, is_programs_class, is_torch_builtin

__all__ = ["call_watched", "pickler_lookasides"]

# Note [Python code a C call ran natively]
# jitcore interprets the program's Python code, and the C functions it calls for the program run
# natively: where such a function calls back into the program's Python code (a dunder of a caller's
# object), that code runs unseen, its reads unguarded, and the C call's result is recorded as a
# constant of the trace: a cached call returned the first call's answer (``"%d" % obj`` with an
# ``__index__`` that reads ``obj.n``). The lookasides interpret the common cases through a Python
# equivalent (jitcore/interpreter/conversions.py, iterating_calls.py, callbacks.py), so those calls
# still trace. For the long tail (``%`` formatting, a dict key's hash in a store, ``struct``, ``math``,
# ``array``, ``bisect``, ``heapq``, ``pickle``, ``json``'s C encoder, list comparisons, ``sorted`` over a
# Python ``__lt__``, ...) this net watches each C call while it runs (a profile function, on this
# thread only): the program's calls of C functions (``_native_call``), and the C calls the interpreter
# makes itself for the program's operations (``Hooks.native_call``: ``sorted``'s comparisons, a set or
# dict display's hashes, ``%`` of a str, a container's comparison, repr or format). A Python frame of
# the program's code whose caller is the frame making the C call was started by C. That frame raises
# ``UnsupportedOperationError`` (JC-T001) as it starts, before any of its code runs (a write it would
# make would otherwise happen twice: once now, once when the call runs eagerly), and the C call raises
# it (again, if C swallowed it) when it returns: the call runs eagerly and becomes an eager entry
# (Note [Eager entries], jit/api.py), or raises under
# ``fullgraph=True``. Interpreting every C function through a Python equivalent was the other choice;
# it cannot be complete (C extensions), and a guard on the result would need the C call rerun in the
# prologue on the next call's objects. On Python 3.12+, setting a profile function re-instruments the
# code that runs next, so the net is set there only for a call whose arguments (or their items, two
# levels down: a list of pairs) include an object of a class the program defined (not for
# ``sorted(xs, key=functools.cmp_to_key(cmp))``, whose ``cmp`` C calls: left, docs/user-guide.md; nor
# while a profiler's function is set, which the net never replaces); on 3.11
# it is set for every C call (no cost measured: a trace of 300 loops of C calls, 0.54 s set vs 0.72 s not
# set, noise on a loaded machine; on 3.13 setting it for every call made that trace 1.13 s from 0.69 s).

_ARMS_EVERY_CALL = sys.version_info < (3, 12)
_SCANNED_ITEMS = 256  # items of one container argument looked at (3.12+)
_CONTAINERS = (list, tuple, set, frozenset, dict)
_TYPE_NEW = type.__new__
_RESUMED = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _watches(fn: Any) -> bool:
    """Whether ``fn`` is C code the net watches: not a Python function, not torch's (its Python code is
    torch's, and its ops are the trace's), not the making of a class (its ``__set_name__`` and
    ``__init_subclass__`` run natively: left, docs/user-guide.md)."""
    t = type(fn)
    if t is types.FunctionType or t is types.MethodType or is_torch_builtin(fn) or fn is _TYPE_NEW:
        return False
    return not (t is type or issubclass(t, type)) or not issubclass(fn, type)


def _programs_object(v: Any) -> bool:
    t = type(v)
    if not t.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
        return False
    module = sys.modules.get(t.__module__)
    filename = getattr(module, "__file__", None) or ""
    return not filename or not is_library_file(filename)


def _holds_programs_object(values: Any, depth: int = 2) -> bool:
    """Whether ``values`` (or their items, ``depth`` levels down: a list of pairs) hold an object of a
    class the program defined."""
    for i, v in enumerate(values):
        if i >= _SCANNED_ITEMS:
            return False
        if _programs_object(v):
            return True
        t = type(v)
        if depth and t in _CONTAINERS and _holds_programs_object(v.values() if t is dict else v, depth - 1):
            return True
    return False


def call_watched(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)``; raises UnsupportedOperationError after it where C ran the program's Python
    code natively (Note [Python code a C call ran natively])."""
    if not _watches(fn) or sys.getprofile() is not None or \
            not (_ARMS_EVERY_CALL or _holds_programs_object((*args, *kwargs.values()))):
        return fn(*args, **kwargs)
    # the frame that makes the C call, by id: the frame itself in the closure would make a cycle (frame ->
    # event -> frame) that keeps the call's arguments, and an exception's traceback, alive until a collection
    origin = id(sys._getframe())  # noqa: SLF001
    ran: list[types.CodeType] = []

    def event(frame: types.FrameType, name: str, arg: Any) -> None:
        if name == "call" and id(frame.f_back) == origin and not ran and _programs_code(frame) \
                and not rerun_allowed(frame):  # Note [A keyed C call, interpreted first]
            ran.append(frame.f_code)
            raise _ran_natively(fn, frame.f_code)  # before that code runs: none of its effects happen

    setattr(event, LIFTED_WATCH, True)  # Note [A watch of C code is lifted while C calls back into the ...]

    collecting = gc.isenabled()  # no collection inside the call: its callbacks (``gc.callbacks``,
    if collecting:  # finalizers) are not the call's, and would look started by it (hypothesis registers one)
        gc.disable()
    sys.setprofile(event)
    try:
        result = fn(*args, **kwargs)
    except BaseException:
        sys.setprofile(None)
        if collecting:
            gc.enable()
        if ran:
            raise _ran_natively(fn, ran[0]) from None
        raise
    sys.setprofile(None)
    if collecting:
        gc.enable()
    if ran:
        raise _ran_natively(fn, ran[0])
    return result


def _programs_code(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs code of the program's whose start the net stops: not a library's, not a
    generator resumed (a caller's generator that C steps, ``gen.send(v)``: stopping it would finish
    it), not a finalizer that collecting garbage ran. Code compiled from a string (``<string>``: the
    ``__hash__``/``__eq__`` that ``dataclasses`` generates, torch's among them) belongs to the module
    whose globals it runs in."""
    code = frame.f_code
    if code.co_flags & _RESUMED or code.co_name == "__del__":
        return False
    if code in _WRAPPERS_OF_DUNDERS:  # Note [The standard library's wrappers of a program's dunders]
        return _of_the_programs_class(frame)
    filename = code.co_filename
    if filename.startswith("<"):
        globals_ = frame.f_globals
        if globals_.get("_tuple_new") is tuple.__new__ and \
                str(globals_.get("__name__")).startswith("namedtuple_"):
            return False  # Note [A named tuple's __new__ is the standard library's]
        filename = globals_.get("__file__") or filename
    return not is_library_file(filename)


# Note [The standard library's wrappers of a program's dunders]
# A dataclass's generated ``__repr__`` is wrapped by dataclasses.py's ``_recursive_repr`` (``reprlib``'s
# ``recursive_repr`` likewise), and ``functools.total_ordering`` gives a class ``__gt__``/``__le__``/...
# written in functools.py that call the class's own ``__lt__``: where C calls such a dunder (``repr`` of a
# list holding a caller's dataclass, ``max(objs)``), the frame it starts is the standard library's, and
# the program's code runs below it, not started by C: unseen, and a cached call returned the first call's
# ``repr([cfg])`` after the caller changed ``cfg`` (a wrong answer). Such a wrapper's frame counts as the
# program's where its first argument is an instance of a program's class.
def _wrapper_codes() -> frozenset[types.CodeType]:
    codes = {getattr(functools, name).__code__ for name in dir(functools) if "_from_" in name
             and type(getattr(functools, name)) is types.FunctionType}
    codes.add(reprlib.recursive_repr()(repr).__code__)
    recursive_repr = getattr(dataclasses, "_recursive_repr", None)
    if recursive_repr is not None:
        codes.add(recursive_repr(repr).__code__)
    return frozenset(codes)


_WRAPPERS_OF_DUNDERS = _wrapper_codes()


def _of_the_programs_class(frame: types.FrameType) -> bool:
    code = frame.f_code
    if not code.co_argcount:
        return False
    first = frame.f_locals.get(code.co_varnames[0])
    return is_programs_class(type(first))

# Note [A named tuple's __new__ is the standard library's]
# ``collections.namedtuple`` (and ``typing.NamedTuple``, which calls it) makes the class's ``__new__`` with
# ``eval`` of ``lambda _cls, a, b: _tuple_new(_cls, (a, b))`` in a namespace of its own (``_tuple_new``,
# ``__name__`` ``namedtuple_<typename>``, no ``__file__``): code of ``<string>`` that belongs to no
# library's module, so it counted as the program's, and every C call that makes a named tuple
# (``pickle.loads``, ``copy.deepcopy``'s ``__reduce_ex__`` path) made the call run eagerly (CPython's
# test_typing ``NamedTupleTests.test_copy_and_pickle`` jitted). That code reads no state: it only
# builds the tuple.


# Note [A C pickler's dump of the program's objects]
# ``pickle.Pickler(f, 2).dump(obj)`` (torch.save's pickler too) is C's pickler reading an object of the
# program's classes natively: its instance dict and slots through C's ``object.__reduce_ex__``, no
# Python code run, so the net above does not see it, and a cached call wrote the first call's bytes
# after the caller changed the object (a wrong answer). ``pickle.dumps``/``pickle.dump`` are traced
# through the pure-Python pickler (Note [The Python pickler writes C's bytes], interpreter/pickling.py),
# but a C pickler object does not say which protocol or file it was made with. Its ``dump`` of a graph
# reaching an instance of a Python class makes the call run eagerly (JC-T001); of built-in values alone,
# it is the C call, as before.
# Note [torch.save refused before it writes]
# ``torch.save(x, buf)`` opens its zip writer on ``buf`` (C++ writes into it natively) and then dumps ``x``
# with a C pickler, which the lookaside below refuses for a tensor (JC-T001): the writer's ``__exit__`` had
# already written its records into the caller's buffer, and the eager rerun wrote the whole file after them
# (/tmp/ao58-probes/p_save_partial.py: 2251 bytes where eager wrote 1577). With no tensor (``torch.save({"a":
# 1}, buf)``) the traced call raised TypeError where eager writes. ``torch.save`` is refused before it
# writes anything: the call runs eagerly, and the bytes are eager's.
def _refused_save(*_args: Any, **_kwargs: Any) -> Any:
    raise UnsupportedOperationError(
        "torch.save(obj, f) writes with a C zip writer and pickler, which jitcore does not see: the bytes "
        "would not be written on later calls",
        hints=("the call runs eagerly; save outside the jitted function",),
    )


def pickler_lookasides() -> dict[Any, Callable[..., Any]]:
    """``{pickle.Pickler.dump: ..., torch.save: ...}`` (Note [A C pickler's dump of the program's objects],
    Note [torch.save refused before it writes])."""

    def dump(pickler: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and not built_in_values(args[0]):
            raise UnsupportedOperationError(
                "pickle.Pickler(...).dump(obj) of an object of your classes reads it in C, which jitcore "
                "does not see: what it read would not be checked on later calls",
                hints=("the call runs eagerly; pickle.dumps(obj, protocol) or pickle.dump(obj, file, "
                       "protocol) are traced",),
            )
        return opaque(current_run(), _PICKLER_DUMP, (pickler, *args), kwargs)

    return {_PICKLER_DUMP: dump, torch.save: _refused_save}


_PICKLER_DUMP = pickle.Pickler.dump


def _ran_natively(fn: Any, code: types.CodeType) -> UnsupportedOperationError:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return UnsupportedOperationError(
        f"{name} (C code) called {code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
        f"({code.co_filename}:{code.co_firstlineno}) natively, which jitcore does not see: what it read "
        "would not be checked on later calls",
        hints=("the call runs eagerly; a Python equivalent of the C function (or reading the value before "
               "the call) lets jitcore trace it",),
    )
