"""Generator, coroutine and async-iteration opcodes.

Invariants:
- YIELD_VALUE stops the loop with the yielded value in ``frame.result``; the driver in
  ``interpreter/generators.py`` resumes the frame by pushing the sent value.
- SEND follows ``PyIter_Send``: ``send`` for generators/coroutines, ``__next__`` when sending None to other
  iterators; a StopIteration from the delegate is its return value.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import inspect
from types import CoroutineType, GeneratorType

from jitcore.interpreter import tracing
from jitcore.interpreter.attributes import MISSING, load_attr, lookup_special
from jitcore.interpreter.calls import call
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.generators import AsyncGenWrapped
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import get_iter
from jitcore.interpreter.registry import handles

_COROUTINE_FLAGS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE


@handles("RETURN_GENERATOR", since=(3, 11))
def return_generator(frame: Frame, inst: Instruction) -> None:
    """The generator object already exists (see make_generator); push the None of the first resume."""
    frame.stack.append(None)


@handles("YIELD_VALUE", since=(3, 11))
def yield_value(frame: Frame, inst: Instruction) -> bool:
    """Suspend the frame, yielding TOS."""
    frame.result = frame.stack.pop()
    return True


@handles("ASYNC_GEN_WRAP", since=(3, 11), until=(3, 11))
def async_gen_wrap(frame: Frame, inst: Instruction) -> None:
    """Mark TOS as a value yielded by an async generator (not one passed up by an await)."""
    frame.stack[-1] = AsyncGenWrapped(frame.stack[-1])


@handles("SEND", since=(3, 11), until=(3, 11))
def send(frame: Frame, inst: Instruction) -> None:
    """Send TOS into the delegate TOS1; push what it yields, or replace it by its return value and jump."""
    stack = frame.stack
    value = stack.pop()
    receiver = stack[-1]
    try:
        t = type(receiver)
        if t is GeneratorType or t is CoroutineType:
            result = receiver.send(value)
        elif value is None:
            result = call(frame.run, lookup_special(receiver, "__next__"), (), None)
        else:
            result = call(frame.run, load_attr(frame.run, receiver, "send"), (value,), None)
    except StopIteration as stop:
        if tracing.TRACE.function is not None:
            tracing.stop_iteration_event(frame, stop, value, receiver)
        stack[-1] = stop.value
        frame.index = inst.argval
        return
    stack.append(result)


def _send_to(frame: Frame, receiver: object, value: object) -> object:
    """What ``receiver`` yields when sent ``value`` (``PyIter_Send``); StopIteration when it returns."""
    t = type(receiver)
    if t is GeneratorType or t is CoroutineType:
        return receiver.send(value)
    if value is None:
        return call(frame.run, lookup_special(receiver, "__next__"), (), None)
    return call(frame.run, load_attr(frame.run, receiver, "send"), (value,), None)


@handles("SEND", since=(3, 12))
def send_312(frame: Frame, inst: Instruction) -> None:
    """Send TOS into the delegate TOS1 and replace TOS by what it yields; when it returns, by its return
    value, and jump to the END_SEND that drops the delegate."""
    stack = frame.stack
    try:
        stack[-1] = _send_to(frame, stack[-2], stack[-1])
    except StopIteration as stop:
        if tracing.TRACE.function is not None:
            tracing.stop_iteration_event(frame, stop, stack[-1], stack[-2])
        stack[-1] = stop.value
        frame.index = inst.argval


@handles("END_SEND", since=(3, 12))
def end_send(frame: Frame, inst: Instruction) -> None:
    """Drop the delegate under TOS (the end of ``yield from``/``await``)."""
    del frame.stack[-2]


@handles("CLEANUP_THROW", since=(3, 12))
def cleanup_throw(frame: Frame, inst: Instruction) -> None:
    """An exception thrown into the delegate of ``yield from``/``await`` came out of it (TOS): a StopIteration
    ends the delegation with its value (``delegate, sent, exc -> None, value``), anything else is
    re-raised."""
    stack = frame.stack
    exc = stack[-1]
    if isinstance(exc, StopIteration):
        del stack[-3:]
        stack.append(None)
        stack.append(exc.value)
        return
    frame.run.raising = (exc, False, exc.__context__)
    raise exc


@handles("GET_YIELD_FROM_ITER", since=(3, 11))
def get_yield_from_iter(frame: Frame, inst: Instruction) -> None:
    """TOS = iter(TOS) unless it is a generator (or a coroutine, inside a coroutine)."""
    v = frame.stack[-1]
    t = type(v)
    if t is CoroutineType:
        if not frame.code.co_flags & _COROUTINE_FLAGS:
            raise TypeError("cannot 'yield from' a coroutine object in a non-coroutine generator")
    elif t is not GeneratorType:
        frame.stack[-1] = get_iter(frame.run, v)


def _awaitable(frame: Frame, v: object, where: int) -> object:
    t = type(v)
    if t is CoroutineType:
        if v.cr_await is not None:
            raise RuntimeError("coroutine is being awaited already")
        return v
    if t is GeneratorType and v.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE:
        return v
    method = lookup_special(v, "__await__")
    if method is MISSING:
        if where == 1:
            raise TypeError(
                "'async with' received an object from __aenter__ that does not implement __await__: "
                f"{t.__name__}"
            )
        if where == 2:
            raise TypeError(
                "'async with' received an object from __aexit__ that does not implement __await__: "
                f"{t.__name__}"
            )
        raise TypeError(f"object {t.__name__} can't be used in 'await' expression")
    it = call(frame.run, method, (), None)
    if type(it) is CoroutineType or (
        type(it) is GeneratorType and it.gi_code.co_flags & inspect.CO_ITERABLE_COROUTINE
    ):
        raise TypeError("__await__() returned a coroutine")
    if not hasattr(type(it), "__next__"):
        raise TypeError(f"__await__() returned non-iterator of type '{type(it).__name__}'")
    return it


@handles("GET_AWAITABLE", since=(3, 11))
def get_awaitable(frame: Frame, inst: Instruction) -> None:
    """TOS = the iterator to await for TOS."""
    frame.stack[-1] = _awaitable(frame, frame.stack[-1], inst.arg)


@handles("GET_AITER", since=(3, 11))
def get_aiter(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS.__aiter__()."""
    obj = frame.stack[-1]
    method = lookup_special(obj, "__aiter__")
    if method is MISSING:
        raise TypeError(f"'async for' requires an object with __aiter__ method, got {type(obj).__name__}")
    it = call(frame.run, method, (), None)
    if lookup_special(it, "__anext__") is MISSING:
        raise TypeError("'async for' received an object from __aiter__ that does not implement __anext__: "
                        f"{type(it).__name__}")
    frame.stack[-1] = it


@handles("GET_ANEXT", since=(3, 11))
def get_anext(frame: Frame, inst: Instruction) -> None:
    """Push the awaitable of TOS.__anext__()."""
    it = frame.stack[-1]
    method = lookup_special(it, "__anext__")
    if method is MISSING:
        raise TypeError(f"'async for' requires an iterator with __anext__ method, got {type(it).__name__}")
    awaitable = call(frame.run, method, (), None)
    try:
        frame.stack.append(_awaitable(frame, awaitable, 0))
    except Exception as e:
        raise TypeError(
            f"'async for' received an invalid object from __anext__: {type(awaitable).__name__}"
        ) from e


@handles("END_ASYNC_FOR", since=(3, 11))
def end_async_for(frame: Frame, inst: Instruction) -> None:
    """End of ``async for``: StopAsyncIteration ends the loop, anything else is re-raised."""
    stack = frame.stack
    exc = stack.pop()
    if isinstance(exc, StopAsyncIteration):
        stack.pop()
        return
    frame.run.raising = (exc, False, exc.__context__)
    raise exc


@handles("BEFORE_ASYNC_WITH", since=(3, 11))
def before_async_with(frame: Frame, inst: Instruction) -> None:
    """Replace the async context manager TOS by its bound __aexit__ and push __aenter__()."""
    stack = frame.stack
    mgr = stack[-1]
    enter = lookup_special(mgr, "__aenter__")
    if enter is MISSING:
        raise TypeError(
            f"'{type(mgr).__name__}' object does not support the asynchronous context manager protocol"
        )
    exit_ = lookup_special(mgr, "__aexit__")
    if exit_ is MISSING:
        raise TypeError(f"'{type(mgr).__name__}' object does not support the asynchronous context manager "
                        "protocol (missed __aexit__ method)")
    stack[-1] = exit_
    stack.append(call(frame.run, enter, (), None))
