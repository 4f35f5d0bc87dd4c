"""Calls and function creation.

Invariant: every call goes through ``calls.call`` (lookasides, resolve_call, interpretation, opaque calls).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from types import CellType, FunctionType, MethodType

from jitcore.interpreter.callbacks import native_iterable
from jitcore.interpreter.calls import call, call_class, call_function
from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.opcodes.build import _function_str, merge_keywords
from jitcore.interpreter.registry import handles


@handles("KW_NAMES", since=(3, 11), until=(3, 12))
def kw_names(frame: Frame, inst: Instruction) -> None:
    """Record the keyword names of the next CALL."""
    frame.kw_names = inst.argval if isinstance(inst.argval, tuple) else frame.code.co_consts[inst.arg]


@handles("CALL", since=(3, 11), until=(3, 12))
def call_(frame: Frame, inst: Instruction) -> None:
    """Call with inst.arg arguments: stack is [NULL|callable, callable|self, args...]."""
    stack = frame.stack
    n = inst.arg
    if n:
        args = stack[-n:]
        del stack[-n:]
    else:
        args = []
    fn = stack.pop()
    head = stack.pop()
    if head is not NULL:
        args.insert(0, fn)
        fn = head
    names = frame.kw_names
    if names:
        frame.kw_names = ()
        k = len(names)
        kwargs = dict(zip(names, args[-k:]))
        del args[-k:]
        stack.append(call(frame.run, fn, args, kwargs))
        return
    run = frame.run
    t = type(fn)
    if t is FunctionType and run.resolve_call is None and fn not in run.lookasides:
        stack.append(call_function(run, fn, args, None))  # the fast paths of calls.call, inlined
    elif t is type and fn not in run.lookasides:
        stack.append(call_class(run, fn, args, None))
    else:
        stack.append(call(run, fn, args, None))


@handles("CALL", since=(3, 13))
def call_313(frame: Frame, inst: Instruction) -> None:
    """Call with inst.arg arguments: stack is [callable, self|NULL, args...] (3.13's order)."""
    stack = frame.stack
    base = len(stack) - inst.arg - 2  # the callable's slot
    fn = stack[base]
    args = stack[base + 1:] if stack[base + 1] is not NULL else stack[base + 2:]
    del stack[base:]
    t = type(fn)
    if t is MethodType:  # as calls.call does: the function, self first (``obj.method`` loaded bound)
        args.insert(0, fn.__self__)
        fn = fn.__func__
        t = type(fn)
    run = frame.run
    if t is FunctionType and run.resolve_call is None and fn not in run.lookasides:
        stack.append(call_function(run, fn, args, None))  # the fast paths of calls.call, inlined
    elif t is type and fn not in run.lookasides:
        stack.append(call_class(run, fn, args, None))
    else:
        stack.append(call(run, fn, args, None))


@handles("CALL_KW", since=(3, 13))
def call_kw(frame: Frame, inst: Instruction) -> None:
    """Call with inst.arg arguments, the last ones named by the tuple TOS: [callable, self|NULL, args...,
    names]."""
    stack = frame.stack
    names = stack.pop()
    n = inst.arg
    args = stack[-n:] if n else []
    del stack[len(stack) - n:]
    self_ = stack.pop()
    fn = stack.pop()
    if self_ is not NULL:
        args.insert(0, self_)
    k = len(names)
    kwargs = dict(zip(names, args[len(args) - k:]))
    del args[len(args) - k:]
    stack.append(call(frame.run, fn, args, kwargs))


@handles("CALL_FUNCTION_EX", since=(3, 11))
def call_function_ex(frame: Frame, inst: Instruction) -> None:
    """Call TOS2(*TOS1, **TOS) (kwargs only if inst.arg & 1); a NULL sits under (3.11) or above (3.13) it."""
    stack = frame.stack
    kwargs = stack.pop() if inst.arg & 1 else None
    args = stack.pop()
    fn = stack.pop()
    if fn is NULL:  # 3.13: callable, NULL, args[, kwargs]
        fn = stack.pop()
    elif stack and stack[-1] is NULL:
        stack.pop()
    if kwargs is not None and type(kwargs) is not dict:  # a Python keys()/__getitem__ interpreted
        kwargs, mapping = {}, kwargs
        merge_keywords(frame, fn, kwargs, mapping)  # Note [A mapping merged as CPython merges it]
    if type(args) is not tuple:
        if not hasattr(type(args), "__iter__") and not hasattr(type(args), "__getitem__"):
            raise TypeError(
                f"{_function_str(fn)} argument after * must be an iterable, not {type(args).__name__}"
            )
        args = tuple(native_iterable(frame.run, args))  # Note [C builtins over a Python object's dunders]
    stack.append(call(frame.run, fn, args, kwargs))


def _made(frame: Frame, fn: FunctionType) -> None:
    """Tell the run's ``on_made`` hook of a function the program made."""
    made = frame.run.hooks.on_made
    if made is not None:
        made(fn)


@handles("MAKE_FUNCTION", since=(3, 11), until=(3, 12))
def make_function(frame: Frame, inst: Instruction) -> None:
    """Push a new function from the code object TOS (+ closure, annotations, kwdefaults, defaults)."""
    stack = frame.stack
    flags = inst.arg
    code = stack.pop()
    closure = stack.pop() if flags & 8 else None
    annotations = stack.pop() if flags & 4 else None
    kwdefaults = stack.pop() if flags & 2 else None
    defaults = stack.pop() if flags & 1 else None
    fn = FunctionType(code, frame.globals, code.co_name, defaults, closure)
    fn.__qualname__ = code.co_qualname
    if kwdefaults is not None:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2]))
    _made(frame, fn)
    stack.append(fn)


@handles("MAKE_FUNCTION", since=(3, 13))
def make_function_313(frame: Frame, inst: Instruction) -> None:
    """Push a new function from the code object TOS; SET_FUNCTION_ATTRIBUTE instructions then give it its
    closure, annotations, keyword defaults and defaults."""
    code = frame.stack[-1]
    # a function object cannot be made without its closure: empty cells stand in until SET_FUNCTION_ATTRIBUTE
    closure = tuple(CellType() for _ in code.co_freevars) if code.co_freevars else None
    fn = FunctionType(code, frame.globals, code.co_name, None, closure)
    fn.__qualname__ = code.co_qualname
    _made(frame, fn)
    frame.stack[-1] = fn


@handles("SET_FUNCTION_ATTRIBUTE", since=(3, 13))
def set_function_attribute(frame: Frame, inst: Instruction) -> None:
    """Set the function TOS's defaults (1), keyword defaults (2), annotations (4) or closure (8) to TOS1."""
    stack = frame.stack
    fn = stack.pop()
    value = stack[-1]
    flag = inst.arg
    if flag == 8:
        # the closure comes first (codegen order), before anything else was set: make the function anew
        fn = FunctionType(fn.__code__, fn.__globals__, fn.__name__, None, value)
        fn.__qualname__ = fn.__code__.co_qualname
        _made(frame, fn)
    elif flag == 4:
        fn.__annotations__ = dict(zip(value[::2], value[1::2])) if type(value) is tuple else value
    elif flag == 2:
        fn.__kwdefaults__ = value
    else:
        fn.__defaults__ = value
    stack[-1] = fn
