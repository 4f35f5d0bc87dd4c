"""Builtins that call back into Python, replaced so that the Python they call is interpreted.

A lookaside has the signature of the builtin it replaces and is called natively with the same
arguments; it finds the run with ``current_run()``. Builtins that inspect the *calling frame*
(``super()``, ``locals()``, ``sys._getframe()``, ``sys.exc_info()``, ``eval``/``exec`` without namespaces)
need one too: natively they would see the interpreter's frames.

Invariants:
- A lookaside gives the same result and raises the same exceptions as the builtin it replaces; lazy
  builtins (map, filter) stay lazy and keep their types (the callable is wrapped, not the builtin).
- User lookasides (``Hooks.lookasides``) take precedence over these.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import abc
import builtins
import contextvars
import functools
import gc
import operator
import pickle
import sys
import types
import warnings
import weakref
from _thread import get_ident
from collections.abc import Callable
from types import CellType, FunctionType

from jitcore.interpreter.attributes import load_attr, loaded, object_getattribute, store_attr
from jitcore.interpreter.callbacks import (
    abs_,
    active_run,
    all_,
    any_,
    bin_,
    context_run,
    enumerate_,
    filter_,
    format_,
    frozenset_,
    hex_,
    iter_,
    len_,
    list_,
    list_sort,
    map_,
    max_,
    min_,
    next_,
    oct_,
    range_,
    reduce_,
    reversed_,
    set_,
    sorted_,
    sum_,
    tuple_,
    zip_,
)
from jitcore.interpreter.calls import call, opaque, run_class_body
from jitcore.interpreter.code_runs import compile_, eval_, exec_, function_
from jitcore.interpreter.conversions import (
    ascii_,
    bool_,
    bytearray_,
    bytes_,
    complex_,
    dict_,
    dict_update,
    divmod_,
    fromkeys_,
    pow_,
    round_,
)
from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.frame_locals import FrameLocalsProxy, f_locals, frame_locals
from jitcore.interpreter.generators import close_, throw_
from jitcore.interpreter.getters import ATTRGETTER_CALL, attrgetter_call
from jitcore.interpreter.hashed_inserts import keyed_lookasides
from jitcore.interpreter.hashes import hash_
from jitcore.interpreter.iterating_calls import iterating_lookasides
from jitcore.interpreter.line_jumps import set_lineno
from jitcore.interpreter.pickling import dump, dumps, save_global
from jitcore.interpreter.protocols import index, truth
from jitcore.interpreter.reductions import getstate, reduce_ex
from jitcore.interpreter.referrers import get_referrers
from jitcore.interpreter.run import current_run
from jitcore.interpreter.stand_in_reductions import reduce_lookasides
from jitcore.interpreter.tracing import (
    getprofile,
    gettrace,
    setprofile,
    settrace,
)

__all__ = ["FrameProxy", "builtin_lookasides", "frame_proxy", "isinstance_", "super_arguments",
           "warning_location"]

_native_isinstance = builtins.isinstance
_native_issubclass = builtins.issubclass


def index_(v: object, /) -> int:
    """operator.index() with a Python ``__index__`` interpreted (Note [A stand-in's number is given to C as
    its value], protocols.py)."""
    return index(active_run(), v)


def getattr_(obj: object, name: object, /, *default: object) -> object:
    """getattr() through the interpreter's attribute protocol (and ``hooks.on_load_attr``)."""
    run = active_run()
    if type(name) is not str or len(default) > 1:  # (the builtin's errors for these)
        return getattr(obj, name, *default)
    try:
        value = load_attr(run, obj, name)
    except AttributeError:
        if default:
            return default[0]
        raise
    return loaded(run, obj, name, value)


def hasattr_(obj: object, name: object, /) -> bool:
    """hasattr() through the interpreter's attribute protocol."""
    if type(name) is not str:
        return hasattr(obj, name)
    try:
        load_attr(active_run(), obj, name)
    except AttributeError:
        return False
    return True


def setattr_(obj: object, name: object, value: object, /) -> None:
    """setattr() as STORE_ATTR: a Python ``__setattr__`` (``nn.Module``'s), ``__set__`` or property setter
    interpreted, and the run's store hooks told. Native, ``setattr(module, "weight", p)`` ran
    ``Module.__setattr__`` on a proxy of ``nn.Parameter`` it did not see as one (``load_state_dict(...,
    assign=True)`` raised "cannot assign 'torch.FloatTensor' as parameter" where eager assigns)."""
    if type(name) is not str:
        return setattr(obj, name, value)  # (the builtin's errors)
    run = active_run()
    hooks = run.hooks
    frame = run.frames[-1] if run.frames else None
    if hooks.on_store is None or hooks.store_attr is None or not hooks.store_attr(frame, obj, name, value):
        store_attr(run, obj, name, value)
    if hooks.on_store is not None:
        hooks.on_store(frame, obj, name, "attr")
    return None


_NESTING_LOOKED_AT = 32


def _python_check_in(classes: tuple, attr: str, depth: int = 0) -> bool:
    """Whether a class in the (nested) tuple ``classes`` has a Python ``attr`` (``__instancecheck__``...).
    Tuples nested deeper than ``_NESTING_LOOKED_AT`` are left to the native check (its RecursionError
    included): their Python checks, if any, then run natively (same result, untraced)."""
    for c in classes:
        if type(c) is tuple:
            if depth < _NESTING_LOOKED_AT and _python_check_in(c, attr, depth + 1):
                return True
        elif type(getattr(type(c), attr, None)) is FunctionType:
            return True
    return False


def isinstance_(obj: object, cls: object, /) -> bool:
    """isinstance() with a Python ``__instancecheck__`` interpreted."""
    if type(obj) is cls:
        return True
    if type(cls) is tuple:
        if not _python_check_in(cls, "__instancecheck__"):
            return _native_isinstance(obj, cls)
        return any(isinstance_(obj, c) for c in cls)
    check = getattr(type(cls), "__instancecheck__", None)
    if type(check) is FunctionType:
        run = current_run()
        if run is not None:
            return truth(run, call(run, check, (cls, obj), None))
    return _native_isinstance(obj, cls)


def issubclass_(sub: object, cls: object, /) -> bool:
    """issubclass() with a Python ``__subclasscheck__`` interpreted."""
    if type(cls) is tuple:
        if not _native_isinstance(sub, type) or not _python_check_in(cls, "__subclasscheck__"):
            return _native_issubclass(sub, cls)
        return any(issubclass_(sub, c) for c in cls)
    check = getattr(type(cls), "__subclasscheck__", None)
    if type(check) is FunctionType:
        run = active_run()
        return truth(run, call(run, check, (cls, sub), None))
    return _native_issubclass(sub, cls)


def _caller() -> Frame:
    run = active_run()
    if not run.frames:
        raise RuntimeError("no interpreted frame")
    return run.frames[-1]


def _in_caller_module(args: tuple) -> tuple:
    """``(name, bases, ns, ...)`` of a class made by ``type(...)``/``type.__new__``, ``ns`` given the
    calling interpreted frame's module as ``__module__`` where it has none: CPython reads the running
    frame's globals, which for a native call from here would be jitcore's."""
    if len(args) >= 3 and _native_isinstance(args[2], dict) and "__module__" not in args[2]:
        run = current_run()
        module = run.frames[-1].globals.get("__name__") if run is not None and run.frames else None
        if module is not None:
            args = (args[0], args[1], {**args[2], "__module__": module}, *args[3:])
    return args


def type_(*args: object, **kwargs: object) -> object:
    """type(obj), or type(name, bases, ns) made in the caller's module."""
    if len(args) == 1 and not kwargs:
        found = type(args[0])
        return types.FrameType if found is FrameProxy else found  # a frame proxy stands for a frame
    return opaque(current_run(), type, _in_caller_module(args), kwargs)  # (the hooks' values given to C)


def type_new(meta: object, *args: object, **kwargs: object) -> object:
    """type.__new__(meta, name, bases, ns) (a metaclass's ``super().__new__``), in the caller's module."""
    return opaque(current_run(), type.__new__, (meta, *_in_caller_module(args)), kwargs)


def super_(*args: object) -> super:
    """super(); the zero-argument form reads the calling interpreted frame (first argument, __class__
    cell)."""
    return super(*args) if args else super(*super_arguments())


def super_arguments() -> tuple[type, object]:
    """``(__class__, first argument)`` of the calling interpreted frame: what ``super()`` binds."""
    frame = _caller()
    code = frame.code
    if code.co_argcount == 0:
        raise RuntimeError("super(): no arguments")
    first = frame.fast[0]
    # (not isinstance, which asks a class for __class__ through its metaclass's __getattribute__; a cell's
    # type cannot be subclassed)
    if type(first) is CellType and code.co_varnames[0] in code.co_cellvars:
        try:
            first = first.cell_contents
        except ValueError:
            first = NULL
    if first is NULL:
        raise RuntimeError("super(): arg[0] deleted")
    if "__class__" not in code.co_freevars:
        raise RuntimeError("super(): __class__ cell not found")
    index = len(frame.fast) - len(code.co_freevars) + code.co_freevars.index("__class__")
    try:
        cls = frame.fast[index].cell_contents
    except ValueError:
        raise RuntimeError("super(): empty __class__ cell") from None
    if not isinstance(cls, type):
        raise RuntimeError(f"super(): __class__ is not a type ({type(cls).__name__})")  # noqa: TRY004 - as CPython
    return cls, first


def locals_() -> dict:
    """locals() of the calling interpreted frame."""
    return frame_locals(_caller())


def globals_() -> dict:
    """globals() of the calling interpreted frame."""
    return _caller().globals


def vars_(*args: object) -> dict:
    """vars(); without argument, the calling frame's locals."""
    return vars(*args) if args else frame_locals(_caller())


def dir_(*args: object) -> list:
    """dir(); without argument, the sorted names of the calling frame's locals."""
    return dir(*args) if args else sorted(frame_locals(_caller()))




def exc_info() -> tuple:
    """sys.exc_info() as the calling interpreted frame sees it."""
    run = active_run()
    exc = run.frames[-1].handled_exception() if run.frames else None
    if exc is None:
        exc = run.native_exc
    if exc is None:
        return (None, None, None)
    return (type(exc), exc, exc.__traceback__)


def exception() -> BaseException | None:
    """sys.exception() as the calling interpreted frame sees it."""
    return exc_info()[1]


def _or(value: int | None, otherwise: int) -> int:
    """``value``, ``otherwise`` where it is None (an offset 0 is one)."""
    return otherwise if value is None else value


def _no_module(self: object) -> str:
    raise AttributeError("'frame' object has no attribute '__module__'")


def _no_delete(self: FrameProxy) -> None:
    raise AttributeError("cannot delete attribute")


class FrameProxy:
    """What ``sys._getframe()`` returns for an interpreted frame: the ``f_*`` attributes of a frame object."""

    __slots__ = ("__weakref__", "_back", "_frame", "_generator")

    def __init__(self, frame: Frame, back: object) -> None:
        self._frame = frame
        self._back = back
        self._generator: Callable[[], object] | None = None  # weakref to its generator, set by gi_frame

    f_globals = property(lambda self: self._frame.globals)
    f_builtins = property(lambda self: self._frame.builtins)
    f_locals = property(lambda self: f_locals(self._frame))
    f_code = property(lambda self: self._frame.code)
    # (while a trace function runs for an instruction the decoding dropped, its line: tracing.py)
    f_lineno = property(lambda self: getattr(self._frame, "trace_line", None) or
                        self._frame.position().lineno,
                        lambda self, value: set_lineno(self._frame, value),  # a jump: line_jumps.py
                        _no_delete)
    # (and its offset: Note [A dropped instruction's f_lasti] in tracing.py)
    f_lasti = property(lambda self: _or(getattr(self._frame, "trace_lasti", None),
                                        self._frame.instruction.offset))
    f_back = property(lambda self: self._back)

    # ``f_trace`` is kept by the frame (a proxy lives only while held), its two flags as on a frame object;
    # the events of a trace function interpreted code installs (sys.settrace) go to it: tracing.py
    f_trace = property(lambda self: getattr(self._frame, "trace", None),
                       lambda self, value: setattr(self._frame, "trace", value),
                       lambda self: setattr(self._frame, "trace", None))
    f_trace_lines = property(lambda self: getattr(self._frame, "trace_flags", _TRACE_FLAGS)[0],
                             lambda self, value: _set_trace_flag(self._frame, 0, value))
    f_trace_opcodes = property(lambda self: getattr(self._frame, "trace_flags", _TRACE_FLAGS)[1],
                               lambda self, value: _set_trace_flag(self._frame, 1, value))
    # ``isinstance(f, types.FrameType)`` (inspect.isframe) holds, through ``__class__``, so Python code
    # that takes frames (``inspect.stack()``, ``inspect.getframeinfo``, ``traceback.walk_stack``) accepts
    # it; C code that needs a frame object still refuses it (its type is this class).
    __class__ = property(lambda self: types.FrameType)  # type: ignore[assignment]
    __module__ = property(_no_module)  # type: ignore[assignment]  # a frame has none (inspect.getmodule)

    def __repr__(self) -> str:
        code = self._frame.code
        where = f"file {code.co_filename!r}, line {self.f_lineno}"
        return f"<frame at {id(self):#x}, {where}, code {code.co_name}>"

    def clear(self) -> None:
        """frame.clear(): RuntimeError while the frame executes (3.13: or is suspended). The frame of a
        generator not yet finished finalizes its generator (closes it; a coroutine never started warns that
        it was never awaited) through the driver's own frame, which does that as CPython does; before 3.13
        that is all, its locals stay. Any other frame drops its locals."""
        frame = self._frame
        if any(active is frame for active in frame.run.frames):
            raise RuntimeError("cannot clear an executing frame")
        generator = None if self._generator is None else self._generator()
        native = None if generator is None else getattr(generator, _NATIVE_FRAME[type(generator)])
        if native is not None:
            native.clear()
            if sys.version_info < (3, 13):
                return
        fast = frame.fast
        for i in range(len(fast)):
            fast[i] = NULL
        frame.stack.clear()


# A frame's type is named ``frame``: the messages C and the interpreter make of a proxy's type name (``'frame'
# object is not iterable``, ``'frame' object has no attribute 'locals'``) and its class's repr are a frame's.
FrameProxy.__name__ = FrameProxy.__qualname__ = "frame"


_TRACE_FLAGS = (True, False)  # a frame's (f_trace_lines, f_trace_opcodes) until set


def _set_trace_flag(frame: Frame, which: int, value: object) -> None:
    flags = list(getattr(frame, "trace_flags", _TRACE_FLAGS))
    flags[which] = _trace_flag(value)
    frame.trace_flags = tuple(flags)


def _trace_flag(value: object) -> bool:
    if type(value) is not bool:
        raise TypeError("attribute value type must be bool")
    return value


_NATIVE_FRAME = {types.GeneratorType: "gi_frame", types.CoroutineType: "cr_frame",
                 types.AsyncGeneratorType: "ag_frame"}


def frame_proxy(frame: Frame, back: object, generator: object = None) -> FrameProxy:
    """The frame object of ``frame``, with ``back`` as its ``f_back``: while one is held, the same one
    (``sys._getframe() is sys._getframe()``, ``gen.gi_frame is gen.gi_frame``, as CPython's frame objects).
    The frame keeps only a weak reference to it: a proxy in a frame slot would make every frame whose frame
    object was asked for a reference cycle, its locals freed only by the cyclic GC. ``generator`` is the
    generator (coroutine, async generator) whose frame it is, when known: held weakly, for ``clear()``."""
    ref = getattr(frame, "proxy", None)  # unset until asked (Note [Frames of plain calls] in frame.py)
    proxy = None if ref is None else ref()
    if proxy is None:
        proxy = FrameProxy(frame, back)
        frame.proxy = weakref.ref(proxy)
    else:
        proxy._back = back  # f_back is the caller now, as CPython's is
    if generator is not None:
        proxy._generator = weakref.ref(generator)
    return proxy


def getframe(depth: int = 0, /) -> object:
    """sys._getframe() that sees interpreted frames (then the native frames around the run)."""
    run = active_run()
    native = sys._getframe(0)
    skipped = (_PACKAGE_PREFIX, *run.hooks.host_files)  # Note [The native frames around a hooked run]
    while native is not None and native.f_code.co_filename.startswith(skipped):
        native = native.f_back
    proxies: object = native
    for frame in run.frames:
        proxies = frame_proxy(frame, proxies)
    chain = proxies
    for _ in range(depth):
        if chain is None:
            break
        chain = chain.f_back
    if chain is None:
        raise ValueError("call stack is not deep enough")
    return chain


# Note [The native frames around a hooked run]
# Past the outermost interpreted frame, ``f_back`` is the native frame that started the run. The
# interpreter's own native frames are skipped to find it, and so are those of the hooks' code
# (``Hooks.host_files``: the jit's package): under ``jitcore.jit`` a frame object asked for inside a
# generator that C steps (``list(traceback.walk_stack(None))``) found the jit's hook frame first and went on
# through the interpreter's and the jit's native frames (test_traceback's ``test_walk_stack``: 7 frames
# more where eagerly 1; /tmp/cpy52-probes/p9_walk.py); now it goes on at the jitted function's caller.


def current_frames() -> dict:
    """sys._current_frames() whose entry for this thread is the calling interpreted frame's, as
    ``sys._getframe()`` gives it (another thread's entry is its native frame)."""
    frames = sys._current_frames()
    frames[get_ident()] = getframe()
    return frames


_PAST_THE_STACK = ("<sys>", 0) if sys.version_info >= (3, 13) else ("sys", 1)


def _is_internal_frame(frame: object) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def warn(message: object, category: object = None, stacklevel: int = 1, source: object = None, *,
         skip_file_prefixes: tuple[str, ...] = ()) -> None:
    """warnings.warn() blaming the frame ``stacklevel`` levels up among the interpreted frames (then the
    native ones around the run): CPython's reads the native stack, which here is jitcore's own, so the
    location, ``-W``/``filterwarnings(module=...)`` filters and the once-per-location registries would
    all be jitcore's."""
    message, category, filename, lineno, globals_ = warning_location(
        message, category, stacklevel, skip_file_prefixes)
    registry = globals_.setdefault("__warningregistry__", {})
    # no module_globals, as C's warn (do_warn) passes none: with them, warn_explicit checks the module's
    # __loader__ against its __spec__ (a DeprecationWarning of its own for a __main__ run as a script)
    warnings.warn_explicit(message, category, filename, lineno, globals_.get("__name__", "<string>"),
                           registry, None, source)


def warning_location(message: object, category: object, stacklevel: int,
                     skip_file_prefixes: tuple[str, ...] = ()) -> tuple[object, type, str, int, dict]:
    """What ``warnings.warn`` called from the innermost interpreted frame hands ``warn_explicit``:
    ``(message, category, filename, lineno, the blamed frame's globals)`` (its registry's owner).

    Raises:
        TypeError: ``category`` is not a Warning subclass, as ``warnings.warn`` raises."""
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    if skip_file_prefixes:
        stacklevel = max(2, stacklevel)
    frame: object = getframe(0)
    skip_internal = stacklevel > 0 and not _is_internal_frame(frame)
    for _ in range(stacklevel - 1):
        frame = frame.f_back
        while frame is not None and skip_internal and (
                _is_internal_frame(frame) or frame.f_code.co_filename.startswith(skip_file_prefixes)):
            frame = frame.f_back
        if frame is None:
            break
    if frame is None:  # past the outermost frame: CPython blames "sys" (3.12+: "<sys>", line 0)
        return message, category, *_PAST_THE_STACK, sys.__dict__
    return message, category, frame.f_code.co_filename, frame.f_lineno, frame.f_globals


def getframemodulename(depth: int = 0) -> str | None:
    """sys._getframemodulename() (3.12+; dataclasses and typing ask who called them) seeing interpreted
    frames: the module of the frame's function, else of its globals."""
    frames = active_run().frames
    if 0 <= depth < len(frames):
        frame = frames[-1 - depth]
        function = frame.function
        return function.__module__ if function is not None else frame.globals.get("__name__")
    try:
        frame = getframe(depth)
    except ValueError:
        return None
    return frame.f_globals.get("__name__")


def build_class(func: object, name: object, /, *bases: object, **kwds: object) -> type:
    """__build_class__: the class body, ``__prepare__`` and a Python metaclass run interpreted.

    (``__set_name__`` and ``__init_subclass__`` are called by ``type.__new__`` from C, so they run
    natively.)"""
    run = active_run()
    if not isinstance(func, FunctionType):
        raise TypeError("__build_class__: func must be a function")
    if not isinstance(name, str):
        raise TypeError("__build_class__: name is not a string")
    orig_bases = bases
    bases = types.resolve_bases(bases)
    meta = kwds.pop("metaclass", None)
    is_class = meta is None or isinstance(meta, type)
    if meta is None:
        meta = type(bases[0]) if bases else type
    if is_class:
        meta = _calculate_meta(meta, bases)
    prepare = getattr(meta, "__prepare__", None)
    namespace = call(run, prepare, (name, bases), kwds) if prepare is not None else {}
    if not hasattr(type(namespace), "__getitem__"):
        raise TypeError(f"{meta.__name__ if is_class else '<metaclass>'}.__prepare__() must return a "
                        f"mapping, not {type(namespace).__name__}")
    if bases is not orig_bases:
        namespace["__orig_bases__"] = orig_bases
    cell = run_class_body(run, func, namespace)
    cls = call(run, meta, (name, bases, namespace), kwds)
    if isinstance(cls, type) and isinstance(cell, CellType):
        try:
            cell_value = cell.cell_contents
        except ValueError:
            cell_value = NULL
        if cell_value is not cls:
            if cell_value is NULL:
                raise RuntimeError(f"__class__ not set defining {name!r} as {cls!r}. Was __classcell__ "
                                   "propagated to type.__new__?")
            raise TypeError(f"__class__ set to {cell_value!r} defining {name!r} as {cls!r}")
    if run.hooks.on_made is not None and isinstance(cls, type):  # a metaclass may return anything
        run.hooks.on_made(cls)
    return cls


def _calculate_meta(meta: type, bases: tuple) -> type:
    winner = meta
    for base in bases:
        base_meta = type(base)
        if _native_issubclass(winner, base_meta):
            continue
        if _native_issubclass(base_meta, winner):
            winner = base_meta
            continue
        raise TypeError(
            "metaclass conflict: the metaclass of a derived class must be a (non-strict) subclass "
            "of the metaclasses of all its bases"
        )
    return winner


import os as _os

_PACKAGE_PREFIX = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep

_TABLE: dict[object, Callable] | None = None


def builtin_lookasides() -> dict[object, Callable]:
    """The interpreter's own lookaside table (canonical builtin -> replacement)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = {
            map: map_,
            enumerate: enumerate_,
            zip: zip_,
            list: list_,
            tuple: tuple_,
            filter: filter_,
            sorted: sorted_,
            min: min_,
            max: max_,
            len: len_,  # Note [C builtins over a Python object's dunders] (callbacks.py)
            abs: abs_,
            hash: hash_,  # Note [A Python __hash__'s result] (hashes.py)
            format: format_,
            hex: hex_,
            oct: oct_,
            bin: bin_,
            range: range_,
            reversed: reversed_,
            bool: bool_,  # Note [C builtins over a Python object's dunders]: conversions.py's
            complex: complex_,
            round: round_,
            divmod: divmod_,
            pow: pow_,
            ascii: ascii_,
            bytes: bytes_,
            bytearray: bytearray_,
            dict: dict_,
            dict.update: dict_update,
            dict.fromkeys: fromkeys_,
            **iterating_lookasides(),
            **keyed_lookasides(),  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
            sum: sum_,
            any: any_,
            all: all_,
            set: set_,
            frozenset: frozenset_,
            list.sort: list_sort,
            functools.reduce: reduce_,
            contextvars.Context.run: context_run,
            iter: iter_,
            next: next_,
            getattr: getattr_,
            object.__getattribute__: object_getattribute,  # super().__getattribute__(name) in a hook
            operator.index: index_,
            hasattr: hasattr_,
            setattr: setattr_,
            isinstance: isinstance_,
            issubclass: issubclass_,
            super: super_,
            type: type_,
            type.__new__: type_new,
            locals: locals_,
            globals: globals_,
            vars: vars_,
            dir: dir_,
            eval: eval_,
            exec: exec_,
            compile: compile_,
            sys.exc_info: exc_info,
            sys.exception: exception,
            sys._getframe: getframe,
            sys._current_frames: current_frames,
            warnings.warn: warn,
            builtins.__build_class__: build_class,
            FunctionType: function_,
            sys.settrace: settrace,
            sys.gettrace: gettrace,
            types.GeneratorType.throw: throw_,  # Note [A throw into a generator not started]
            types.CoroutineType.throw: throw_,
            types.GeneratorType.close: close_,  # Note [close() chains to the closer's exception]
            types.CoroutineType.close: close_,
            sys.setprofile: setprofile,
            sys.getprofile: getprofile,
            gc.get_referrers: get_referrers,  # Note [Referrers of the interpreter's own]
            object.__reduce_ex__: reduce_ex,  # Note [A reduction that runs Python]
            **reduce_lookasides(),  # Note [A reduction shows what the program gave]
            object.__getstate__: getstate,  # Note [Protocols 0 and 1], reductions.py
            pickle.dumps: dumps,  # Note [The Python pickler writes C's bytes]
            pickle.dump: dump,
            pickle._Pickler.save_global: save_global,  # noqa: SLF001 - Note [A local name refused first]
            ATTRGETTER_CALL: attrgetter_call,  # Note [An attribute getter reads as getattr]
        }
        # Note [ABCMeta checks run natively]: ABCMeta.__instancecheck__/__subclasscheck__ and register (which
        # checks issubclass) only call C (_abc), which calls any Python __subclasshook__/__subclasscheck__
        # natively anyway; running them natively keeps their frame (module "abc") where typing's protocol
        # checks look for it (3.11's typing reads sys._getframe(4).f_globals, 3.12+ asks
        # sys._getframemodulename, whether abc/functools is the caller): ``P.register(C)`` of a protocol with
        # data members is allowed.
        for method in (abc.ABCMeta.__instancecheck__, abc.ABCMeta.__subclasscheck__, abc.ABCMeta.register):
            _TABLE[method] = method
        # The interpreter's own view of frames runs natively: interpreted, it would read the NULL of an
        # unbound
        # slot as an unbound local of its own.
        for value in [*vars(FrameProxy).values(), *vars(FrameLocalsProxy).values()]:
            functions = (value.fget, value.fset, value.fdel) if isinstance(value, property) else \
                (value.__func__,) if isinstance(value, staticmethod) else (value,)
            for function in functions:
                if type(function) is FunctionType:
                    _TABLE[function] = function
        if hasattr(sys, "_getframemodulename"):
            _TABLE[sys._getframemodulename] = getframemodulename
        if sys.version_info >= (3, 12):
            import typing

            for cls in (typing.TypeVar, typing.ParamSpec, typing.TypeVarTuple, typing.TypeAliasType):
                _TABLE[cls] = _made_in_caller_module(cls)
    return _TABLE


def _made_in_caller_module(cls: type) -> Callable:
    """``cls(...)`` for a 3.12+ typing class whose C constructor takes ``__module__`` from its caller's
    function (typevarobject.c's ``caller()``): called from a native function made with the calling interpreted
    frame's globals (as Note [Native intrinsics] does), so the module is the program's, not jitcore's
    (pickling a TypeVar looks it up there; TypeAliasType's ``__module__`` cannot be set afterwards)."""

    def construct(*args: object, **kwargs: object) -> object:
        frames = active_run().frames
        if not frames:
            return cls(*args, **kwargs)
        return FunctionType(_CALL_CODE, frames[-1].globals)(cls, args, kwargs)

    return construct


def _call(cls: type, args: tuple, kwargs: dict) -> object:
    return cls(*args, **kwargs)


_CALL_CODE = _call.__code__
