"""Generators, coroutines and async generators whose frames are interpreted.

Each interpreted generator frame runs inside a *real* Python generator (coroutine, async generator) -- the
"driver" -- so native consumers (``sum``, ``list``, ``asyncio``) drive it as they would any other, and
``send``/``throw``/``close``, ``gi_running`` errors and "ignored GeneratorExit" come from CPython itself.

Invariants:
- The driver resumes the frame with the value sent (pushed on its stack, as CPython does) or with the
  exception thrown (raised at the instruction the frame is suspended in).
- A frame suspended in ``yield from``/``await`` (the next instruction is RESUME whose location bits are >= 2)
  delegates ``throw``/``close`` to the sub-iterator on top of its stack, as ``gen_throw`` does: on 3.11 a
  delegate that finishes is popped here and the frame jumps past its SEND loop; on 3.13 whatever the
  delegate raises (StopIteration included) is raised in the frame, whose CLEANUP_THROW sorts it out.
- While its frame runs, the generator's Run is the current run and the resuming frame is ``frame.back``.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import functools
import sys
import types
from typing import TYPE_CHECKING

from jitcore.interpreter.errors import JitcoreInterpreterError
from jitcore.interpreter.loop import unwind
from jitcore.interpreter.run import ACTIVE, lift_watch
from jitcore.interpreter.tracebacks import DRIVEN_CODES, strip_internal, user_traceback

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame

__all__ = ["FRAME_ATTRIBUTES", "GENERATOR_TYPES", "AsyncGenWrapped", "close_", "frame_attribute",
           "generator_frame", "make_generator", "throw_"]

_RESUME = "RESUME"


class AsyncGenWrapped:
    """A value yielded by ``yield`` in an async generator (ASYNC_GEN_WRAP), as opposed to an awaited one."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


class _Suspend:
    """An awaitable that suspends the driver coroutine once, passing a raw value to the event loop."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __await__(self):
        return (yield self.value)


_RETURNED = object()
_exception = sys.exception
_CLEANUP_THROW = sys.version_info >= (3, 12)  # the frame's CLEANUP_THROW ends a delegation cut short by throw


def _resume(frame: Frame, sent: object, thrown: BaseException | None, first: bool) -> object:
    """Run ``frame`` until it yields (returns the yielded value) or returns (returns ``_RETURNED``)."""
    run = frame.run
    runs = ACTIVE.stack
    if runs:
        frames = runs[-1].frames
        frame.back = frames[-1] if frames else None
    runs.append(run)
    saved_native = run.native_exc
    run.native_exc = sys.exception()
    lifted = lift_watch()  # Note [A watch of C code is lifted while C calls back into the interpreter]
    try:
        if thrown is not None:
            run.frames.append(frame)  # so that a delegate sees this frame as its caller
            try:
                yielded = _throw(frame, thrown)
            finally:
                run.frames.pop()
            if yielded is not _NOT_DELEGATED:
                return yielded
            run.execute(frame, frame.pending)
        else:
            if not first:
                frame.stack.append(sent)
            run.execute(frame)
    except BaseException as e:
        if not isinstance(e, JitcoreInterpreterError):
            e.__traceback__ = strip_internal(e.__traceback__)
        raise
    finally:
        run.native_exc = saved_native
        runs.pop()
        frame.back = None
        if lifted is not None:
            sys.setprofile(lifted)
    if frame.index in frame.info.yield_resumes:
        value, frame.result = frame.result, None
        return value
    return _RETURNED


_NOT_DELEGATED = object()


def _throw(frame: Frame, exc: BaseException) -> object:
    """Deliver a thrown exception: to the delegate of a ``yield from``/``await`` if any, else to the frame.

    Returns the value to yield if the delegate yielded one; otherwise sets ``frame.pending`` (the exception
    to raise in the frame, or None after a delegate finished) and returns ``_NOT_DELEGATED``.
    """
    frame.pending = exc
    index = frame.index
    if index == 0 or index >= len(frame.instructions):
        return _NOT_DELEGATED
    nxt = frame.instructions[index]
    if nxt.opname != _RESUME or (nxt.arg or 0) & 3 < 2:  # 3.13 adds an except-depth bit (4) to the location
        return _NOT_DELEGATED
    delegate = frame.stack[-1]
    run = frame.run
    from jitcore.interpreter.calls import call

    if isinstance(exc, GeneratorExit):
        try:
            close = getattr(delegate, "close", None)
        except Exception as e:  # noqa: BLE001 - CPython reports a failed lookup and closes the frame
            close = None
            write_unraisable(e, delegate)
        if close is not None:
            try:
                call(run, close, (), None)
            except BaseException as e:  # noqa: BLE001 - the delegate's error replaces GeneratorExit
                frame.pending = e
        return _NOT_DELEGATED
    throw = getattr(delegate, "throw", None)
    if throw is None:
        return _NOT_DELEGATED
    if _CLEANUP_THROW:
        try:
            return call(run, throw, (exc,), None)
        except BaseException as e:  # noqa: BLE001 - raised in this frame, at the delegation's CLEANUP_THROW
            frame.pending = e
        return _NOT_DELEGATED
    try:
        return call(run, throw, (exc,), None)
    except StopIteration as stop:
        value, frame.pending = stop.value, None
    except BaseException as e:  # noqa: BLE001 - the delegate's error is raised in this frame
        value, frame.pending = None, e
    _finish_delegation(frame)
    if frame.pending is None:
        frame.stack.append(value)
    return _NOT_DELEGATED


def _finish_delegation(frame: Frame) -> None:
    """Pop the delegate and jump past the SEND loop, as CPython's gen_throw does after the delegate ends."""
    frame.stack.pop()
    send = frame.instructions[frame.index - 2]
    frame.index = send.argval
    if frame.pending is not None:
        # the exception is raised "at" the instruction before the SEND loop's exit, as in CPython
        return


# Note [The driver's traceback entry]
# An exception leaving the interpreted frame leaves the native driver too, whose frame adds its entry
# (generators.py) on top of the stripped traceback. Where the driver's caller is interpreted, the caller's
# unwinding strips it; where it is native code (a generator handed to a native caller, ``gen.throw()`` from
# native code) the user saw it, and on 3.11 a StopIteration leaving a generator kept it for good: the
# RuntimeError CPython makes of it when it leaves the driver (PEP 479, in C before 3.12) holds it as its
# ``__cause__``, shown first by a printed traceback. Each driver strips the entries again as the exception
# passes through it; the bare ``raise`` that follows adds none. (The send path of ``_generator`` has its own
# ``except`` clause.)


# Note [Yield statements]
# A ``yield`` whose value is unused (every generator expression's, most ``for`` bodies') resumes at
# ``RESUME; POP_TOP``, which fused.resume_pop_top runs as one instruction: drop the value sent. The driver
# of a plain run (``run.plain``: it executes ``info.fused`` with no hook to see instructions) skips that
# instruction instead of pushing the value for it to drop: one dispatch fewer per value a generator
# expression produces (on 3.11, whose DP may leave RESUME and POP_TOP unfused, the skip applies only where
# they were fused). RESUME does nothing here, and neither part can raise.


def _generator(frame: Frame):
    try:
        value = _resume(frame, None, None, True)
    except BaseException as e:  # Note [The driver's traceback entry]
        e.__traceback__ = strip_internal(e.__traceback__)
        raise
    if value is _RETURNED:
        return frame.result
    run = frame.run
    stack = frame.stack
    info = frame.info
    yield_resumes = info.yield_resumes
    plain = run.plain
    # where the RESUME; POP_TOP that loop.execute would run drops the value sent (Note [Yield statements])
    skips = info.yield_statement_ends if plain else _NO_SKIPS
    # Note [Loops written out] in loop.py; Note [Fused on first use] in instructions.py
    fused = (info.plain_fused or info.fused) if plain else None  # (a run with hooks: run.execute)
    handlers, run_frames = run.handlers, run.frames
    box = [value]  # the yielded value until ``yield`` takes it: the driver keeps no reference while suspended
    del value  # (CPython keeps none either)
    while True:
        thrown = None
        try:
            sent = yield box.pop()
        except BaseException as e:  # noqa: BLE001 - thrown into the generator: deliver to the frame
            thrown = e  # outside this clause: sys.exception() in the frame is the consumer's, as natively
        if thrown is not None:
            try:
                value = _resume(frame, None, thrown, False)
            except BaseException as e:  # Note [The driver's traceback entry]
                e.__traceback__ = strip_internal(e.__traceback__)
                raise
            if value is _RETURNED:
                return frame.result
            box.append(value)
            del value
            continue
        # _resume(frame, sent, None, False), its lines repeated on purpose: a value sent, nothing thrown
        # (every ``for``/``next``/``send``) costs one Python call fewer per value; coroutines and async
        # generators, whose drivers suspend through an await, call _resume
        runs = ACTIVE.stack
        if runs:
            frames = runs[-1].frames
            frame.back = frames[-1] if frames else None
        runs.append(run)
        saved_native = run.native_exc
        run.native_exc = _exception()
        lifted = lift_watch()  # (Note [A watch of C code is lifted while C calls back into the interpreter])
        index = frame.index
        if index in skips:
            frame.index = index + 2  # RESUME; POP_TOP: the value sent is dropped
        else:
            stack.append(sent)
        try:
            if plain:  # loop.execute's loop (Note [Loops written out] in loop.py)
                run_frames.append(frame)
                try:
                    while True:
                        try:
                            while True:
                                inst = fused[frame.index]
                                frame.index = inst.after
                                if handlers[inst.opcode](frame, inst) is not None:
                                    break
                            break
                        except BaseException as exc:
                            if not unwind(frame, exc):
                                raise
                finally:
                    run_frames.pop()
            else:
                run.execute(frame)
        except BaseException as e:
            if not isinstance(e, JitcoreInterpreterError):
                e.__traceback__ = strip_internal(e.__traceback__)
            raise
        finally:
            run.native_exc = saved_native
            runs.pop()
            frame.back = None
            if lifted is not None:
                sys.setprofile(lifted)
        if frame.index not in yield_resumes:
            return frame.result
        box.append(frame.result)
        frame.result = None


_NO_SKIPS: frozenset[int] = frozenset()


def _iterable_coroutine_driver(frame: Frame):
    try:
        return (yield from _generator(frame))
    except BaseException as e:  # Note [The driver's traceback entry]
        e.__traceback__ = strip_internal(e.__traceback__)
        raise


_iterable_coroutine = types.coroutine(_iterable_coroutine_driver)


async def _coroutine(frame: Frame):
    sent, thrown, first = None, None, True
    while True:
        try:
            value = _resume(frame, sent, thrown, first)
        except BaseException as e:  # Note [The driver's traceback entry]
            e.__traceback__ = strip_internal(e.__traceback__)
            raise
        first = False
        if value is _RETURNED:
            return frame.result
        try:
            sent, thrown = (await _Suspend(value)), None
        except BaseException as e:  # noqa: BLE001 - thrown into the coroutine: deliver to the frame
            sent, thrown = None, e


async def _async_generator(frame: Frame):
    sent, thrown, first = None, None, True
    while True:
        try:
            value = _resume(frame, sent, thrown, first)
        except BaseException as e:  # Note [The driver's traceback entry]
            e.__traceback__ = strip_internal(e.__traceback__)
            raise
        first = False
        if value is _RETURNED:
            return
        try:
            if type(value) is AsyncGenWrapped:
                sent = yield value.value
            else:
                sent = await _Suspend(value)
            thrown = None
        except BaseException as e:  # noqa: BLE001 - thrown into the generator: deliver to the frame
            sent, thrown = None, e


def make_generator(frame: Frame) -> object:
    """The generator/coroutine/async generator object for a frame of a generator-kind code object."""
    info = frame.info
    driver = info.driver
    if driver is None:
        driver = info.driver = _make_driver(frame.code)
    gen = driver(frame)
    function = frame.function
    gen.__name__ = function.__name__ if function is not None else frame.code.co_name
    gen.__qualname__ = function.__qualname__ if function is not None else frame.code.co_qualname
    # the frame holds no reference to its generator: with one, every generator would be in a cycle, kept
    # alive (its ``finally`` blocks not run) until the cyclic GC, where CPython frees it when dropped
    return gen


# Note [Generator frame attributes]
# An interpreted generator is a native driver generator, so its own ``gi_code``/``gi_frame``/``gi_yieldfrom``
# (``cr_*``, ``ag_*``) would describe the driver. Attribute loads made by interpreted code answer them from
# the interpreted frame instead (attributes.load_attr asks ``frame_attribute``); native code still sees the
# driver. Each interpreted code object gets a driver of its own (a copy of one of the four drivers' code
# named after it, made once), so the code is known after the generator finished, when the driver's frame
# (and with it the interpreted one) is gone: ``gi_code`` of a finished generator is still the user's code.
GENERATOR_TYPES = frozenset({types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType})
# The frame attributes answer a frame proxy (lookasides.FrameProxy: ``isinstance(f, types.FrameType)`` holds,
# its ``clear()`` finalizes the generator through the driver's own frame, as CPython's does).
FRAME_ATTRIBUTES = frozenset(
    {"gi_code", "gi_frame", "gi_yieldfrom", "cr_code", "cr_frame", "cr_await", "ag_code", "ag_frame",
     "ag_await"}
)
_DRIVEN_CODES = DRIVEN_CODES  # id(a driver's code) -> (that code, the interpreted code it drives)
_NOT_INTERPRETED = object()


def _make_driver(code: types.CodeType) -> types.FunctionType:
    """The driver function of ``code``'s generators: the driver of its kind over a copy of its code."""
    import inspect

    flags = code.co_flags
    if flags & inspect.CO_COROUTINE:
        base = _coroutine
    elif flags & inspect.CO_ASYNC_GENERATOR:
        base = _async_generator
    elif flags & inspect.CO_ITERABLE_COROUTINE:
        base = _iterable_coroutine
    else:
        base = _generator
    driver_code = base.__code__.replace(co_name=code.co_name, co_qualname=code.co_qualname)
    _DRIVEN_CODES[id(driver_code)] = (driver_code, code)
    return types.FunctionType(driver_code, base.__globals__, code.co_name)


def _driven_frame(gen: object, prefix: str) -> Frame | None:
    """The interpreted frame a driver generator runs (None once it finished)."""
    native = getattr(gen, f"{prefix}_frame")
    return None if native is None else native.f_locals.get("frame")


def generator_frame(gen: object) -> Frame | None:
    """The interpreted frame of the generator ``gen``: None where ``gen`` is native, or finished."""
    if type(gen) is not types.GeneratorType or id(gen.gi_code) not in _DRIVEN_CODES:
        return None
    return _driven_frame(gen, "gi")


def frame_attribute(gen: object, name: str) -> object:
    """``gen.<name>`` for one of FRAME_ATTRIBUTES as seen by interpreted code; ``_NOT_INTERPRETED`` when
    ``gen`` is not an interpreted generator: then the native attribute is right."""
    prefix = "gi" if type(gen) is types.GeneratorType else "cr" if type(gen) is types.CoroutineType else "ag"
    driven = _DRIVEN_CODES.get(id(getattr(gen, f"{prefix}_code")))
    if driven is None:
        return _NOT_INTERPRETED
    kind = name[3:]
    if kind == "code":
        return driven[1]
    frame = _driven_frame(gen, prefix)
    if frame is None:
        return None  # finished: no frame, nothing delegated to
    if kind == "frame":
        from jitcore.interpreter.lookasides import frame_proxy

        return frame_proxy(frame, None, gen)  # (a suspended frame has no f_back)
    index = frame.index  # yieldfrom/await: the delegate of a frame suspended in yield from / await
    instructions = frame.instructions
    if (
        0 < index < len(instructions)
        and instructions[index].opname == _RESUME
        and (instructions[index].arg or 0) & 3 >= 2
    ):
        return frame.stack[-1]
    return None


NOT_INTERPRETED = _NOT_INTERPRETED


def throw_(gen: object, *args: object) -> object:
    """``generator.throw``/``coroutine.throw`` called by interpreted code: on 3.11, the StopIteration thrown
    into a generator not started, which CPython turns into PEP 479's RuntimeError when it leaves the driver,
    gets the generator's entry as its ``__cause__`` (the exception itself gets it in the calling frame: Note
    [A throw into a generator not started] in tracebacks.py)."""
    if _unstarted_frame(gen) is None:
        return gen.throw(*args)
    try:
        return gen.throw(*args)
    except BaseException as e:
        cause = e.__cause__
        if cause is not None and _has_driver_entry(cause.__traceback__):
            cause.__traceback__ = user_traceback(cause.__traceback__)
        raise


# Note [close() chains to the closer's exception]
# ``gen.close()`` makes its GeneratorExit with ``PyErr_SetNone``, which chains it to the exception the
# thread is handling: inside ``except KeyError``, the GeneratorExit (and the "generator ignored
# GeneratorExit" RuntimeError, made the same way) has the KeyError as ``__context__``. An interpreted frame's
# handled exceptions are the interpreter's, not the thread's: called by interpreted code, close() chained
# them to nothing (the generator's own frame chains what it handles itself, as CPython's does). ``close_``
# makes the calling frame's handled exception the thread's for the call, by raising it and calling close()
# in the ``except`` clause, the exception's traceback and chain restored first. (Not where the exception
# is in the chain of the thread's own: ``raise`` would cut that chain.) An exception ``throw`` delivers is
# not chained by the caller's: ``throw`` restores it as given.
def close_(gen: object) -> object:
    """``generator.close``/``coroutine.close`` called by interpreted code, its GeneratorExit chained to the
    caller's handled exception (Note [close() chains to the closer's exception])."""
    runs = ACTIVE.stack
    frames = runs[-1].frames if runs else None
    handled = frames[-1].handled_exception() if frames else None
    native = sys.exception()
    if handled is None or handled is native or _in_chain(handled, native):
        return gen.close()
    tb, context, suppress = handled.__traceback__, handled.__context__, handled.__suppress_context__
    try:
        raise handled
    except BaseException:
        handled.__traceback__, handled.__context__ = tb, context
        handled.__suppress_context__ = suppress
        return gen.close()


def _in_chain(exc: BaseException, head: BaseException | None) -> bool:
    """Whether ``exc`` is ``head`` or in its ``__context__`` chain (the first 1000 links)."""
    for _ in range(1000):
        if head is None:
            return False
        if head is exc:
            return True
        head = head.__context__
    return True


def _unstarted_frame(gen: object) -> Frame | None:
    """The interpreted frame of ``gen`` if it is an interpreted generator or coroutine not started yet."""
    if type(gen) is types.GeneratorType:
        native, code, started = gen.gi_frame, gen.gi_code, gen.gi_running or gen.gi_suspended
    else:
        native, code, started = gen.cr_frame, gen.cr_code, gen.cr_running or gen.cr_suspended
    if native is None or started or id(code) not in _DRIVEN_CODES:
        return None
    return native.f_locals.get("frame")


def _has_driver_entry(tb: types.TracebackType | None) -> bool:
    while tb is not None:
        if id(tb.tb_frame.f_code) in _DRIVEN_CODES:
            return True
        tb = tb.tb_next
    return False


@functools.cache
def _unraisable_args_type() -> type:
    """``sys.UnraisableHookArgs`` (not exposed by ``sys``): the type the hook receives, taken once from
    an exception ignored in a ``__del__``."""
    found: list[type] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda args: found.append(type(args))

    class _Ignored:
        def __del__(self) -> None:
            raise RuntimeError

    try:
        _Ignored()
    finally:
        sys.unraisablehook = hook
    return found[0]


def write_unraisable(exc: BaseException, obj: object) -> None:
    """CPython's ``PyErr_WriteUnraisable(obj)`` for ``exc``: ``sys.unraisablehook`` reports it."""
    sys.unraisablehook(_unraisable_args_type()((type(exc), exc, exc.__traceback__, None, obj)))
