"""The calling convention: which callables are interpreted, which are called opaquely, and how.

Invariants:
- Every call the interpreted program makes (explicit or implied by an operator, a with statement, a
  class call, ...) goes through ``call``: first the lookaside table (one dict lookup keyed by the canonical
  callable), then ``resolve_call`` for Python code, then interpretation; anything not interpreted goes
  through ``opaque``, the single place that calls C code (and ``on_opaque_call``).
- Arguments are bound to a new frame's fast locals by CPython itself (a generated native "binder" with
  the same signature), so binding errors carry CPython's exact messages.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import functools
import inspect
import operator
from collections.abc import Callable
from types import (
    BuiltinFunctionType,
    BuiltinMethodType,
    CodeType,
    FunctionType,
    MethodDescriptorType,
    MethodType,
    MethodWrapperType,
    ModuleType,
    WrapperDescriptorType,
)
from typing import TYPE_CHECKING

from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import CODE_INFO, CodeInfo, decode
from jitcore.interpreter.loop import unwind

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["NATIVE_CALLABLES", "call", "call_function", "canonical", "opaque", "run_class_body"]

_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_SIMPLE_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
_OPTIMIZED = inspect.CO_OPTIMIZED
NATIVE_CALLABLES = frozenset({BuiltinFunctionType, MethodDescriptorType, WrapperDescriptorType,
                              MethodWrapperType, type(dict.fromkeys), type(int.__dict__["from_bytes"])})
_partial = functools.partial
_attrgetter = operator.attrgetter
_ATTRGETTER_CALL = operator.attrgetter.__call__  # its lookaside: jitcore/interpreter/getters.py
_new_frame = _object_new = object.__new__
_object_init = object.__init__
_type_getattribute = type.__getattribute__
_mro_of = type.__dict__["__mro__"].__get__
_dict_of = type.__dict__["__dict__"].__get__


def _mro_entry(t: type, name: str) -> object:
    """``name`` in the first class of ``t``'s MRO whose dict has it (CPython's ``_PyType_Lookup``), or
    NULL."""
    for klass in _mro_of(t):
        entry = _dict_of(klass).get(name, NULL)
        if entry is not NULL:
            return entry
    return NULL


def looked_up(run: Run, obj: object, t: type, *names: str) -> None:
    """Tell the run's ``on_type_lookup`` hook that a protocol looks up ``names`` on ``t``, ``obj``'s class
    (Note [A special method is looked up on the class], jit/provenance.py)."""
    hook = run.hooks.on_type_lookup
    if hook is not None:
        for name in names:
            hook(obj, t, name)


def _slot_bound(run: Run, entry: object, obj: object, t: type) -> object:
    """The MRO entry of a slot (``__init__``, ``__call__``) bound to ``obj`` through its ``__get__``, as
    CPython's slots bind what is not a plain function: a staticmethod gives its function (no instance), a
    classmethod or ``functools.partialmethod`` binds its own way."""
    get = getattr(type(entry), "__get__", None)
    return entry if get is None else call(run, get, (entry, obj, t), None)


# Note [interpret() wrappers called by interpreted code]
# The function ``interpret(fn)`` returns starts a run of its own, with its own hooks, as it does when native
# code calls it. Interpreted, it would run the interpreter on the interpreter: the inner one's NULL (the
# marker of an unbound local) stored in a local of the outer one reads there as that local unbound
# ("cannot access local variable 'NULL'"), and jitcore's module globals are not the program's. So a call
# of it from interpreted code (``self.setUp()`` of a test whose setUp was wrapped) runs it natively. Only
# codes taking ``*args`` or ``**kwargs`` can be listed: the check is on call_function's slower path.
NATIVE_CODES: set[int] = set()  # ids of code objects (kept alive by their functions' module) run natively


# Note [A bound method of a defining class]
# A C method that needs its defining class (``METH_METHOD``: ``_pickle.Pickler.dump``) binds as 3.13's
# ``builtin_method``, a subclass of ``builtin_function_or_method`` (3.11 binds it as the latter). Taken for
# something else, ``p.dump`` missed its lookaside (Note [A C pickler's dump of the program's objects]) and
# ran unseen on 3.13 only.
_BOUND_C_METHODS = frozenset((BuiltinMethodType, *BuiltinMethodType.__subclasses__(), MethodWrapperType))


def canonical(fn: object) -> object:
    """The callable a lookaside is keyed by: ``l.append`` -> ``list.append``, a bound method -> its
    function."""
    t = type(fn)
    if t is FunctionType:
        return fn
    if t is MethodType:
        return fn.__func__
    if t in _BOUND_C_METHODS:  # Note [A bound method of a defining class]
        owner = fn.__self__
        if owner is None or type(owner) is ModuleType or isinstance(owner, type):
            return fn
        if t is MethodWrapperType:  # the slot it binds, not the name's lookup on the type: a class's
            # Python ``__getattribute__`` is not the ``object.__getattribute__`` super() bound
            return vars(fn.__objclass__).get(fn.__name__, fn)
        return getattr(type(owner), fn.__name__, fn)
    return fn


def opaque(run: Run, fn: Callable, args: tuple | list, kwargs: dict | None) -> object:
    """Call a callable that is not interpreted (C code, or Python code the hooks keep opaque)."""
    if run.on_opaque_call is not None:
        return run.on_opaque_call(fn, tuple(args), kwargs or {})
    if kwargs:
        return fn(*args, **kwargs)
    return fn(*args)


def call(run: Run, fn: object, args: tuple | list, kwargs: dict | None) -> object:
    """Call ``fn(*args, **kwargs)`` the way the interpreted program does (see the module invariants)."""
    t = type(fn)
    lookasides = run.lookasides
    if t is FunctionType:
        replacement = lookasides.get(fn)
        if replacement is not None:
            return replacement(*args, **kwargs) if kwargs else replacement(*args)
        if run.resolve_call is not None:
            replacement = run.resolve(fn)
            if replacement is not None:
                return replacement(*args, **kwargs) if kwargs else replacement(*args)
        return call_function(run, fn, args, kwargs)
    if t is MethodType:
        func = fn.__func__
        return call(run, func, (fn.__self__, *args), kwargs)
    if t is type:  # a class of metaclass ``type``: its own lookaside key (canonical(cls) is cls)
        replacement = lookasides.get(fn)
        if replacement is not None:
            return replacement(*args, **kwargs) if kwargs else replacement(*args)
        return call_class(run, fn, args, kwargs)
    replacement = _lookaside(run, canonical(fn))
    if replacement is not None:
        given = args
        if t in _BOUND_C_METHODS and canonical(fn) is not fn:
            args = (fn.__self__, *args)
        try:
            return replacement(*args, **kwargs) if kwargs else replacement(*args)
        except TypeError as exc:
            if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
                raise
        # the arguments do not bind to the lookaside's Python signature: the builtin's own error
        # (``getattr()`` without arguments: "getattr expected at least 2 arguments, got 0")
        return fn(*given, **kwargs) if kwargs else fn(*given)
    if t in NATIVE_CALLABLES:
        return opaque(run, fn, args, kwargs)
    if isinstance(fn, type):
        return call_class(run, fn, args, kwargs)
    if t is _partial:
        return call(run, fn.func, (*fn.args, *args), {**fn.keywords, **kwargs} if kwargs else fn.keywords)
    if t is _attrgetter and (replacement := lookasides.get(_ATTRGETTER_CALL)) is not None:
        return replacement(fn, *args, **(kwargs or {}))  # Note [An attribute getter reads as getattr]
    looked_up(run, fn, t, "__call__")
    dunder_call = getattr(t, "__call__", None)  # noqa: B004 - the type slot
    if type(dunder_call) is FunctionType:
        if run.resolve_call is not None:
            replacement = run.resolve(fn)
            if replacement is not None:
                return replacement(*args, **kwargs) if kwargs else replacement(*args)
        entry = _mro_entry(t, "__call__")
        if entry is not dunder_call:  # a descriptor giving a function (a staticmethod): bound by it
            return call(run, _slot_bound(run, entry, fn, t), args, kwargs)
        return call(run, dunder_call, (fn, *args), kwargs)
    klass = run.type_of(fn)
    if klass is not t and _mro_entry(klass, "__call__") is NULL:
        # a stand-in (a traced tensor) is named by the class it stands for, as CPython names it
        raise TypeError(f"'{klass.__name__}' object is not callable")
    return opaque(run, fn, args, kwargs)


# Note [A callable hashed by Python is looked up by identity]
# Finding a callable's lookaside hashes it; for a callable whose class hashes it by Python code (a
# ``MagicMock``, whose ``__hash__`` is a configured magic method recording ``call.__hash__()`` in its
# ``mock_calls``; a callable frozen dataclass hashing its fields) that ran the program's code natively
# where CPython hashes nothing: ``mock.patch.object(conn, 'send')`` then ``conn.send(data)`` recorded an
# extra first call, so ``mock_calls[0][1][0]`` raised IndexError (test_httplib's
# ``test_tunnel_connect_single_send_connection_setup``; /tmp/cpy52-probes/p6_mock.py). A lookaside's key
# is one object (a function, a descriptor, torch's operator objects), so such a callable is looked up by
# its identity among the keys whose class hashes by Python, never hashed.
def _lookaside(run: Run, key: object) -> object:
    t = type(key)
    if t in NATIVE_CALLABLES or t in _BOUND_C_METHODS or type(getattr(t, "__hash__", None)) is _C_HASH:
        try:
            return run.lookasides.get(key)
        except (TypeError, ValueError):  # unhashable (a weakref to a writable memoryview): no lookaside
            return None
    by_identity = run.lookasides_by_identity
    if by_identity is None:
        by_identity = run.lookasides_by_identity = {
            id(k): v for k, v in run.lookasides.items()
            if type(getattr(type(k), "__hash__", None)) is not _C_HASH}
    return by_identity.get(id(key))


_C_HASH = WrapperDescriptorType


def call_class(run: Run, cls: type, args: tuple | list, kwargs: dict | None) -> object:
    """``cls(*args, **kwargs)``: ``type.__call__`` emulated so that Python ``__new__``/``__init__`` run
    here."""
    meta = type(cls)
    if meta is not type:
        meta_call = getattr(meta, "__call__", None)  # noqa: B004 - the metaclass slot
        if type(meta_call) is FunctionType:
            entry = _mro_entry(meta, "__call__")
            if entry is not meta_call:  # a descriptor giving a function (a staticmethod): bound by it
                return call(run, _slot_bound(run, entry, cls, meta), args, kwargs)
            return call(run, meta_call, (cls, *args), kwargs)
        if meta_call is not type.__call__:
            return opaque(run, cls, args, kwargs)
    if cls is type:
        return opaque(run, cls, args, kwargs)
    looked_up(run, cls, cls, "__new__", "__init__")  # the slots of its instances, found on its MRO
    if meta is type:
        new = cls.__new__
        init = cls.__init__
    else:  # type_call reads the slots: a metaclass's __getattribute__ is not asked for them
        new = _type_getattribute(cls, "__new__")
        init = _type_getattribute(cls, "__init__")
    if type(new) is not FunctionType and type(init) is not FunctionType and new not in run.lookasides:
        return opaque(run, cls, args, kwargs)  # Note [A class whose __new__ has a lookaside]
    if new is _object_new:
        obj = _object_new(cls)
    else:
        obj = call(run, new, (cls, *args), kwargs)
    # A stand-in object (the jit's proxies) answers, through ``hooks.type_of``, the class it stands for:
    # its __init__ must run as it would on a real instance.
    klass = run.type_of(obj)
    if klass is not cls:  # (the common case, ``klass is cls``, has its __init__ already)
        if cls not in klass.__mro__:
            return obj
        init = klass.__init__
    if init is _object_init:  # CPython's object_init: extra arguments are fine when __new__ is overridden
        if (args or kwargs) and klass.__new__ is _object_new:
            raise TypeError(f"{klass.__name__}() takes no arguments")
        return obj
    if _dict_of(klass).get("__init__", NULL) is not init and _mro_entry(klass, "__init__") is not init:
        # a descriptor's result (a staticmethod's function, a bound method: reached when __new__ is Python's)
        # is called as the entry bound to the instance, as slot_tp_init calls it
        result = call(run, _slot_bound(run, _mro_entry(klass, "__init__"), obj, klass), args, kwargs)
    elif type(init) is FunctionType and run.resolve_call is None and init not in run.lookasides:
        result = call_function(run, init, (obj, *args), kwargs)  # the fast path of call, inlined
    else:
        result = call(run, init, (obj, *args), kwargs)
    if result is not None:
        raise TypeError(f"__init__() should return None, not '{type(result).__name__}'")
    return obj


# Note [A class whose __new__ has a lookaside]
# A class whose ``__new__`` and ``__init__`` are both C code is called natively, whole, unless its
# ``__new__`` has a lookaside: then ``type.__call__`` is emulated here so that the lookaside answers.
# A tensor subclass that defines neither (``class P(torch.Tensor): pass``, called as ``P(t)``) inherits
# ``torch._C.TensorBase.__new__``: called natively on a traced tensor, torch refused to give the proxy
# object another class ("the raw Tensor object is already associated to a python object of type
# PlainTensorProxy"), where eagerly ``P(t)`` is an alias of ``t`` of class ``P``. Its lookaside
# (``tensor_new``, jitcore/dispatch/lookasides.py) makes that alias, as ``super().__new__(cls, t)``
# in a ``__new__`` of the class's own already did.


def call_function(run: Run, fn: FunctionType, args: tuple | list, kwargs: dict | None) -> object:
    """Interpret the Python function ``fn`` (a generator function returns its generator, unstarted)."""
    code = fn.__code__
    info = CODE_INFO.get(id(code))
    if info is None or info.code is not code:
        info = decode(code)
    frames = run.frames
    if len(frames) >= run.max_depth:  # Note [The program's recursion limit]
        raise RecursionError("maximum recursion depth exceeded")
    if not kwargs and info.simple_argcount == len(args):  # the common case: positional, no defaults used
        # Frame(...) written out: a class call with __init__ costs more than the stores themselves (Note
        # [Frames of plain calls] in frame.py; test_frames_of_plain_calls checks that both set the same slots)
        frame = _new_frame(Frame)
        frame.run = run
        frame.code = code
        frame.info = info
        frame.fast = [*args, *info.unbound_after_args]
        frame.stack = []
        frame.index = 0
        frame.globals = fn.__globals__
        frame.builtins = fn.__builtins__
        frame.locals = None
        frame.function = fn
        frame.kw_names = ()
        frame.exc_value = None
        frame.back = frames[-1] if frames else None
        if run.plain:  # loop.execute's loop, written out (Note [Loops written out] in loop.py)
            handlers = run.handlers
            instructions = info.plain_fused or info.fused  # Note [Fused on first use] in instructions.py
            frames.append(frame)
            try:
                while True:
                    try:
                        while True:
                            inst = instructions[frame.index]
                            frame.index = inst.after
                            if handlers[inst.opcode](frame, inst) is not None:
                                return frame.result
                    except BaseException as exc:
                        if not unwind(frame, exc):
                            raise
            finally:
                frames.pop()
        run.execute(frame)
        return frame.result
    if id(code) in NATIVE_CODES:  # Note [interpret() wrappers called by interpreted code]
        return fn(*args, **kwargs) if kwargs else fn(*args)
    frame = Frame(run, code, info, fn.__globals__, fn.__builtins__, fn, [NULL] * info.nlocalsplus, None,
                  None if code.co_flags & _OPTIMIZED else fn.__globals__)  # as _PyFunction_Vectorcall
    if kwargs or code.co_flags & _SIMPLE_FLAGS or code.co_kwonlyargcount or len(args) != code.co_argcount:
        _bind(frame, fn, info, args, kwargs)
    elif args:
        frame.fast[: len(args)] = args
    if code.co_flags & _GENERATOR_FLAGS:
        from jitcore.interpreter.generators import make_generator

        return make_generator(frame)
    if frames:
        frame.back = frames[-1]
    run.execute(frame)
    return frame.result


def run_class_body(run: Run, fn: FunctionType, namespace: object) -> object:
    """Execute a class body function with ``namespace`` as its locals; returns what the body returns."""
    code = fn.__code__
    info = decode(code)
    frames = run.frames
    frame = Frame(run, code, info, fn.__globals__, fn.__builtins__, fn, [NULL] * info.nlocalsplus,
                  frames[-1] if frames else None, namespace)
    run.execute(frame)
    return frame.result


def run_code(run: Run, code, globals: dict, locals: object) -> object:
    """Execute a module-level code object (``exec`` semantics) with the given namespaces."""
    import builtins

    namespace = globals.get("__builtins__", builtins)
    builtins_dict = namespace if isinstance(namespace, dict) else vars(namespace)
    info = decode(code)
    frames = run.frames
    frame = Frame(run, code, info, globals, builtins_dict, None, [NULL] * info.nlocalsplus,
                  frames[-1] if frames else None, locals)
    run.execute(frame)
    return frame.result


def _bind(frame: Frame, fn: FunctionType, info: CodeInfo, args: tuple | list, kwargs: dict | None) -> None:
    binder = info.binder
    if binder is None:
        binder = info.binder = _make_binder(fn.__code__)
    binder.__defaults__ = fn.__defaults__
    binder.__kwdefaults__ = fn.__kwdefaults__
    binder.__qualname__ = fn.__qualname__
    values = binder(*args, **kwargs) if kwargs else binder(*args)
    frame.fast[: len(values)] = values


def _make_binder(code) -> FunctionType:
    """A native function with ``code``'s signature that returns its arguments in localsplus order: the
    shared code of ``_binder_template`` given ``code``'s parameters (Note [Binders from one template])."""
    names = tuple(n if n.isidentifier() else f"_jc_arg{k}" for k, n in enumerate(code.co_varnames))
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) \
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    template = _binder_template(count)
    flags = template.co_flags | (code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS))
    return FunctionType(template.replace(
        co_varnames=names[:count], co_argcount=code.co_argcount, co_posonlyargcount=code.co_posonlyargcount,
        co_kwonlyargcount=code.co_kwonlyargcount, co_flags=flags), {})


@functools.cache
def _binder_template(count: int) -> CodeType:
    """The code of ``def binder(a0, ..., a<count-1>): return (a0, ..., a<count-1>)``."""
    names = [f"a{k}" for k in range(count)]
    source = f"def binder({', '.join(names)}):\n    return ({', '.join(names)}{',' if count == 1 else ''})\n"
    namespace: dict = {}
    exec(compile(source, "<jitcore binder>", "exec"), namespace)  # noqa: S102 - names made here
    return namespace["binder"].__code__


# Note [Binders from one template]
# A binder's body reads its first ``count`` locals and returns them as a tuple; what makes it bind as
# the interpreted function does is its signature: the local names, how many are positional-only,
# positional, keyword-only, and the ``*args``/``**kwargs`` flags, which CPython reads from the code
# object when it binds a call (parameters are always the first locals, in that order). So the body is
# compiled once per count and each binder is that code with ``code``'s signature put in by
# ``CodeType.replace``: the same bytecode the source ``def binder(<signature>): return (<names>)``
# compiles to, without the ~0.1 ms compile per code object (HF Llama's, GPT-2's and BERT's first calls
# compiled 26-30 binders each, 2.4-3.1 ms).
