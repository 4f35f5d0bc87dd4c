"""``sys.settrace``/``sys.setprofile`` in interpreted code: the thread's functions and their frames' events.

Invariants:
- The trace (profile) function interpreted code installs is this thread's (``TRACE.function``,
  ``TRACE.profile``), never CPython's own: installed natively it would see the interpreter's frames, not the
  program's. Native code does not see it. A profile function gets ``call`` and ``return`` events (as the
  trace function, after it), not ``c_call``/``c_return``/``c_exception`` (the builtins a frame calls).
- Only a run that executes instructions with no hook to see them (``Run.traceable``: ``interpret`` without
  the jit) can be traced; any other refuses ``sys.settrace`` (UnsupportedConstruct) as before.
- While either is set, a traceable run starts every frame in ``loop.execute_settrace``, whose events
  are CPython 3.11's (Note [Trace events of interpreted frames] in loop.py). Frames already running when it
  was set give no line events.
- A trace function may set its frame's ``f_lineno`` (a jump: line_jumps.py); the tracing loop then fetches at
  the frame's new index (Note [A jump from a trace function]).
- While the trace function runs (``TRACE.busy``) nothing is traced, as under CPython's ``tstate->tracing``; an
  exception it raises unsets it (``sys.settrace(None)``) and propagates from the traced instruction.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
import threading
from collections.abc import Callable
from types import CodeType, CoroutineType, FunctionType, GeneratorType
from typing import TYPE_CHECKING

from jitcore.interpreter.errors import UnsupportedConstruct
from jitcore.interpreter.instructions import dis, dropped_before

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame
    from jitcore.interpreter.instructions import Instruction
    from jitcore.interpreter.run import Run

__all__ = ["TRACE", "before", "call_event", "exception_event", "for_iter", "for_iter_next", "getprofile",
           "gettrace", "landed", "native_functions", "native_traced", "raise_traced", "return_event",
           "setprofile", "settrace", "stop_iteration_event", "trace_points", "traced_loop", "traced_table",
           "unwound_at"]


class _TraceState(threading.local):
    def __init__(self) -> None:
        self.function: object = None  # what the program passed to sys.settrace, or None
        self.profile: object = None  # what it passed to sys.setprofile, or None
        self.active = False  # either is set
        self.busy = False  # a trace or profile function is running (CPython's tstate->tracing)
        # while one runs, ``(frame, what, offset)`` of its event (Note [Which events may jump] in
        # line_jumps.py); the ``(frame, offset, line)`` a jump it made lands on, until the frame's loop sees
        # it (the trace function's own frame runs meanwhile)
        self.event: tuple | None = None
        self.jump: tuple[int, int] | None = None


TRACE = _TraceState()
RESUME = dis.opmap["RESUME"]
_SEND = dis.opmap["SEND"]
_RERAISE = dis.opmap["RERAISE"]
# 3.12+ traces through sys.monitoring, where f_trace_opcodes set in a trace function gives no opcode events
_OPCODE_EVENTS = sys.version_info < (3, 12)
_MADE_BY_C = (GeneratorType, CoroutineType)
_FOR_ITER = dis.opmap["FOR_ITER"]
_RAISE_VARARGS = dis.opmap["RAISE_VARARGS"]
_CONDITIONS: dict[int, Callable[[object], bool]] = {dis.opmap[name]: test for names, test in (
    (("POP_JUMP_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE"), lambda v: not v),
    (("POP_JUMP_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE"), bool),
    (("POP_JUMP_IF_NONE", "POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE"), lambda v: v is None),
    (("POP_JUMP_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE"),
     lambda v: v is not None),
) for name in names if name in dis.opmap}
_UNCONDITIONAL = frozenset(dis.opmap[name] for name in ("JUMP_FORWARD", "JUMP_BACKWARD",
                                                        "JUMP_BACKWARD_NO_INTERRUPT", "JUMP",
                                                        "JUMP_NO_INTERRUPT") if name in dis.opmap)


def traced_loop(run: Run) -> bool:
    """Whether ``run`` starts its frames in the tracing loop now (a trace or profile function is set, the run
    can)."""
    return TRACE.active and run.traceable


def _switch() -> None:
    """Start new frames of every traceable run active on this thread in the tracing loop where a trace or
    profile function is set (or not)."""
    from jitcore.interpreter import loop
    from jitcore.interpreter.run import active_runs

    on = TRACE.active = TRACE.function is not None or TRACE.profile is not None
    for run in active_runs():
        if run.traceable:
            run.plain = not on
            run.execute = loop.execute_settrace if on else loop.execute


def settrace(*args: object) -> None:
    """sys.settrace() called by interpreted code: the thread's trace function for interpreted frames."""
    _install("settrace", args)


def setprofile(*args: object) -> None:
    """sys.setprofile() called by interpreted code: the thread's profile function for interpreted frames
    (``call`` and ``return`` events; no ``c_call`` events for the builtins they call)."""
    _install("setprofile", args)


def _install(name: str, args: tuple) -> None:
    from jitcore.interpreter.run import current_run

    if len(args) != 1:
        raise TypeError(f"{name}() takes exactly one argument ({len(args)} given)")
    function = args[0]
    if function is None:
        setattr(TRACE, _FIELDS[name], None)
        _switch()
        getattr(sys, name)(None)  # one set natively around the run goes too, as CPython has one per thread
        return
    run = current_run()
    if run is None or not run.traceable:
        frame = run.frames[-1] if run is not None and run.frames else None
        raise UnsupportedConstruct(
            f"sys.{name}() inside interpreted code: trace functions would not see interpreted frames",
            frame.where() if frame is not None else "",
            hint=f"call sys.{name}() outside the interpreted function",
        )
    setattr(TRACE, _FIELDS[name], function)
    _switch()


_FIELDS = {"settrace": "function", "setprofile": "profile"}


def gettrace() -> object:
    """sys.gettrace() called by interpreted code: the trace function it set, else the thread's native one."""
    function = TRACE.function
    return function if function is not None else sys.gettrace()


def getprofile() -> object:
    """sys.getprofile() called by interpreted code: the profile function it set, else the thread's native
    one."""
    function = TRACE.profile
    return function if function is not None else sys.getprofile()


def trace_points(code: CodeType) -> tuple[list[tuple], dict[int, int], int]:
    """The dropped instructions before each decoded one and the byte offset each jump targets
    (``instructions.dropped_before``), and the offset of the first RESUME (CPython's ``_co_firsttraceable``:
    what comes before it gives no events); made once per code object."""
    hit = _POINTS.get(id(code))
    if hit is None or hit[0] is not code:
        dropped, targets = dropped_before(code)
        resumes = [point[0] for points in dropped for point in points if point[1] == RESUME]
        hit = _POINTS[id(code)] = (code, dropped, targets, min(resumes, default=0))
    return hit[1], hit[2], hit[3]


_POINTS: dict[int, tuple[CodeType, list, dict, int]] = {}


def before(frame: Frame, inst: Instruction, cursor: list) -> bool:
    """The events before ``inst`` executes in ``frame``: those of the instructions dropped before it that
    CPython executed on the way (``_dropped_run``), then its own (``_step``). ``cursor``: the frame's
    ``[last point, last decoded instruction, whether that jumped, the last that raised, the offset a jump
    landed on]``, updated. Returns whether a trace function jumped (set ``f_lineno``): ``inst`` does not run,
    the frame goes on at its new index (Note [A jump from a trace function])."""
    dropped, targets, first = trace_points(frame.code)
    prev, last, jumped = cursor[0], cursor[1], cursor[2]
    points = _dropped_run(dropped[inst.index], inst, last, jumped, targets)
    if cursor[4] is not None:  # the first instruction after a jump: from its target on
        points = tuple(point for point in points if point[0] > cursor[4])
        cursor[4] = None
    for point in points:
        prev = _step(frame, point, prev, first, True)
        if TRACE.jump is not None and TRACE.jump[0] is frame:
            return _jumped(cursor)
    cursor[0] = _step(frame, (inst.offset, inst.opcode, inst.lineno), prev, first, False)
    if TRACE.jump is not None and TRACE.jump[0] is frame:
        return _jumped(cursor)
    cursor[1] = inst
    cursor[2] = _jumps(inst, frame.stack)
    return False


# Note [A jump from a trace function]
# A trace function that sets ``f_lineno`` in a ``line`` event (line_jumps.set_lineno) has moved the frame's
# index to the target's instruction and popped its stack; the instruction whose event it was does not run.
# CPython then executes the target without tracing it (3.11's DO_TRACING dispatches the instruction its
# ``prev_instr`` now names; 3.12+'s LINE instrumentation sees the target's line as the one it came from): the
# next ``line`` event is for a line after it, or a jump backwards. The cursor takes the target as the point
# executed last, and the dropped instructions before the next decoded one that come before the target are
# not run (a jump to a dropped instruction runs those after it).
def _jumped(cursor: list) -> bool:
    _frame, offset, line = TRACE.jump
    TRACE.jump = None
    landed(cursor, offset, line)
    cursor[1], cursor[2] = None, False
    return True


def landed(cursor: list, offset: int | None, line: int | None) -> None:
    """``cursor`` of a frame going on at ``offset`` (line ``line``) after a jump (None: none was made)."""
    if offset is not None:
        cursor[0], cursor[4] = (offset, None, line), offset


def _dropped_run(points: tuple, inst: Instruction, last: Instruction | None, jumped: bool,
                 targets: dict[int, int]) -> tuple:
    """Which of ``points``, the instructions dropped before ``inst``, CPython executed on the way from
    ``last``: all of them falling through, those from the jump's target on where ``last`` jumped (``inst``
    does not follow it, it jumps unconditionally, or ``jumped``)."""
    if last is None or not points:
        return points
    target = targets.get(last.index)
    if target is None or (inst.index == last.after and last.opcode not in _UNCONDITIONAL and not jumped):
        return points
    return tuple(point for point in points if point[0] >= target)


def _jumps(inst: Instruction, stack: list) -> bool:
    """Whether a conditional jump over dropped instructions only (its target the next decoded instruction) is
    taken, where its operand tells without asking it (True, False, None); False otherwise."""
    if inst.argval != inst.after or inst.opcode not in _CONDITIONS or not stack:
        return False
    value = stack[-1]
    if value is not True and value is not False and value is not None:
        return False
    return _CONDITIONS[inst.opcode](value)


def _step(frame: Frame, point: tuple, prev: tuple | None, first: int, dropped: bool) -> tuple:
    """The events before the instruction ``point`` = ``(offset, opcode, line)`` executes, ``prev`` the one
    executed before it in the frame: ``call`` at a RESUME, else CPython 3.11's ``maybe_call_line_trace``: a
    ``line`` event where the line differs from ``prev``'s (none at or before ``first``) or a jump went
    backwards (but to a SEND), then ``opcode`` where ``f_trace_opcodes`` is set (3.11). ``dropped``: an
    instruction the decoding dropped (the frame's ``f_lineno`` is then its line). Returns ``point``."""
    offset, opcode, line = point
    if offset < first or TRACE.busy or not TRACE.active:
        return point
    shown, at = (line, offset) if dropped else (None, None)
    if opcode == RESUME:  # (a frame's start is a RESUME the decoding dropped; one kept resumes a generator)
        _entry(frame, shown, at, "start" if dropped else "resume")
        return point
    callback = getattr(frame, "trace", None) if TRACE.function is not None else None
    if callback is None:
        return point
    proxy = _proxy(frame)
    if line is not None and proxy.f_trace_lines:
        last = -1 if prev is None or prev[0] <= first or prev[2] is None else prev[2]
        if line != last or (prev is not None and offset < prev[0] and opcode != _SEND):
            _call_trace(frame, callback, "line", None, shown, at, "line", offset)
    if _OPCODE_EVENTS and proxy.f_trace_opcodes and TRACE.function is not None:
        callback = getattr(frame, "trace", None)
        if callback is not None:
            _call_trace(frame, callback, "opcode", None, shown, at, "opcode", offset)
    return point


def _proxy(frame: Frame) -> object:
    """The frame object of ``frame``, the innermost frame of its run (as ``sys._getframe()`` gives it)."""
    from jitcore.interpreter.lookasides import getframe

    return getframe(0)


def _call_trace(frame: Frame, callback: Callable, event: str, arg: object, line: int | None = None,
                lasti: int | None = None, what: str | None = None, offset: int | None = None) -> None:
    """``callback(frame, event, arg)`` as CPython's ``trace_trampoline``: its result, if not None, becomes the
    frame's ``f_trace``; if it raises, tracing stops (``sys.settrace(None)``) and the exception propagates.
    ``line``, ``lasti``: the frame's ``f_lineno`` and ``f_lasti`` meanwhile, where the instruction is one the
    decoding dropped (Note [A dropped instruction's f_lasti]). ``what``, ``offset``: the event as
    line_jumps.py tells them apart (``event`` by default), and the instruction's offset (the current one's by
    default)."""
    from jitcore.interpreter.calls import call

    TRACE.busy = True
    TRACE.event = (frame, what or event, frame.instruction.offset if offset is None else offset)
    frame.trace_line, frame.trace_lasti = line, lasti
    try:
        result = call(frame.run, callback, (_proxy(frame), event, arg), None)
    except BaseException:
        TRACE.function = None
        _switch()
        frame.trace = None
        raise
    finally:
        TRACE.busy = False
        TRACE.event = None
        frame.trace_line = frame.trace_lasti = None
    if result is not None:
        frame.trace = result


def _call_profile(frame: Frame, event: str, arg: object, line: int | None = None,
                  lasti: int | None = None, what: str | None = None) -> None:
    """``profile(frame, event, arg)`` as CPython's ``profile_trampoline``: its result is ignored; if it
    raises, profiling stops (``sys.setprofile(None)``) and the exception propagates."""
    from jitcore.interpreter.calls import call

    TRACE.busy = True
    TRACE.event = (frame, what or event, frame.instruction.offset if lasti is None else lasti)
    frame.trace_line, frame.trace_lasti = line, lasti
    try:
        call(frame.run, TRACE.profile, (_proxy(frame), event, arg), None)
    except BaseException:
        TRACE.profile = None
        _switch()
        raise
    finally:
        TRACE.busy = False
        TRACE.event = None
        frame.trace_line = frame.trace_lasti = None


# Note [A dropped instruction's f_lasti]
# The events of an instruction the decoding dropped (a RESUME, a NOP carrying a ``try:``'s or a ``pass``'s
# line) come before the decoded instruction that follows it, whose offset the frame's ``f_lasti`` gave:
# ``f_lineno`` was the dropped one's line but ``f_lasti`` the next one's, in no ``co_lines`` range of that
# line (3.13's test_sys_settrace asserts they agree at every event in its tracer: the assertion stopped
# tracing and ~250 of its tests saw no events; /tmp/cpy54-probes/p12_lasti_line.py). While its events run,
# the frame shows the dropped instruction's offset too (``trace_lasti``).
def _entry(frame: Frame, line: int | None = None, lasti: int | None = None, what: str = "start") -> None:
    """The ``call`` events of a frame starting or resuming (``what``: start, resume, throw): the trace
    function's, then the profile function's, as CPython's ``trace_function_entry``."""
    if TRACE.function is not None:
        _call_trace(frame, TRACE.function, "call", None, line, lasti, what)
    if TRACE.profile is not None and not TRACE.busy:
        _call_profile(frame, "call", None, line, lasti, what)


def call_event(frame: Frame) -> None:
    """The ``call`` events of an exception thrown into a generator's frame (CPython's
    TRACE_FUNCTION_THROW_ENTRY: no RESUME runs)."""
    if TRACE.active and not TRACE.busy:
        _entry(frame, what="throw")


def return_event(frame: Frame, value: object, shown: Instruction | None = None,
                 unwound: bool = False) -> None:
    """The ``return`` events of a frame returning or yielding ``value`` (None when an exception leaves it,
    ``unwound``; ``shown``: the instruction whose ``f_lineno`` and ``f_lasti`` the frame shows then, where a
    RERAISE restored another, ``unwound_at``): to its ``f_trace``, then to the profile function, as CPython's
    ``trace_function_exit``."""
    if not TRACE.active or TRACE.busy:
        return
    what = "unwind" if unwound else "yield" if frame.index in frame.info.yield_resumes else "return"
    line, lasti = (None, None) if shown is None else (shown.lineno, shown.offset)
    callback = getattr(frame, "trace", None) if TRACE.function is not None else None
    if callback is not None:
        _call_trace(frame, callback, "return", value, line, lasti, what)
    if TRACE.profile is not None and not TRACE.busy:
        _call_profile(frame, "return", value, line, lasti, what)


def unwound_at(cursor: list) -> Instruction | None:
    """The instruction CPython's frame shows (its line, its ``f_lasti``) when an exception raised by
    ``cursor[1]`` (the instruction executed last) leaves it: where that is a RERAISE with an argument (the
    end of an ``except``/``with`` block's cleanup), the instruction it restores ``f_lasti`` to, the last one
    that raised otherwise (``cursor[3]``, which it updates); None for the current instruction."""
    last = cursor[1]
    if last is not None and last.opcode == _RERAISE and last.arg:
        return cursor[3]
    cursor[3] = last
    return None


def stop_iteration_event(frame: Frame, stop: StopIteration, value: object, receiver: object) -> None:
    """SEND under a trace function gives an ``exception`` event for the StopIteration of a delegate that
    returned, but where it takes the delegate's ``__next__`` slot (``value`` None) and that, a generator's,
    raised none (it returned None). One a generator or coroutine made has no traceback (C made it)."""
    if TRACE.busy or (value is None and stop.value is None and type(receiver) is GeneratorType):
        return
    exception_event(frame, stop, type(receiver) not in _MADE_BY_C)


def for_iter(frame: Frame, inst: Instruction) -> None:
    """FOR_ITER as the tracing loop runs it (``traced_table``): opcodes/control.py's, giving the
    ``exception`` events of ``for_iter_next`` while a trace function is set."""
    from jitcore.interpreter.protocols import EXHAUSTED, next_value

    stack = frame.stack
    it = stack[-1]
    v = for_iter_next(frame, it) if TRACE.function is not None else next_value(frame.run, it)
    if v is EXHAUSTED:
        stack.pop()
        frame.index = inst.argval
    else:
        stack.append(v)


def for_iter_next(frame: Frame, it: object) -> object:
    """FOR_ITER's next value under a trace function (``EXHAUSTED`` at the end), with 3.11's ``exception``
    event for a StopIteration the iterator raised: a generator's that returned a value (C makes it, with no
    traceback), or one a Python ``__next__`` raised; a builtin iterator's end raises none."""
    from jitcore.interpreter.calls import call
    from jitcore.interpreter.protocols import EXHAUSTED, next_value

    t = type(it)
    if t is not GeneratorType:
        method = getattr(t, "__next__", None)
        if type(method) is not FunctionType:
            return next_value(frame.run, it)
    try:
        return it.__next__() if t is GeneratorType else call(frame.run, method, (it,), None)
    except StopIteration as stop:
        if t is not GeneratorType or stop.value is not None:
            exception_event(frame, stop, t is not GeneratorType)
        return EXHAUSTED


def exception_event(frame: Frame, exc: BaseException, traceback: bool = True) -> None:
    """The ``exception`` event of ``exc`` raised in ``frame`` (by its instruction or a callee), after its
    traceback entry, as CPython's ``call_exc_trace``; a frame not traced by the loop gets it too where its
    ``f_trace`` was set (a debugger's ``set_trace`` sets it on the frames it was called from). ``traceback``:
    whether the event shows ``exc``'s (not for one C made without, a generator's StopIteration)."""
    if TRACE.busy:
        return
    callback = getattr(frame, "trace", None)
    if callback is not None:
        shown = exc.__traceback__ if traceback else None
        _call_trace(frame, callback, "exception", (type(exc), exc, shown))


def traced_table(handlers: list) -> list:
    """The run's dispatch table ``handlers`` with the tracing loop's handlers in place (FOR_ITER's events:
    ``for_iter``; RAISE_VARARGS: ``raise_traced``); made once per table."""
    hit = _TABLES.get(id(handlers))
    if hit is None or hit[0] is not handlers:
        table = list(handlers)
        table[_FOR_ITER] = for_iter
        table[_RAISE_VARARGS] = raise_traced
        hit = _TABLES[id(handlers)] = (handlers, table)
    return hit[1]


_TABLES: dict[int, tuple[list, list]] = {}



def raise_traced(frame: Frame, inst: Instruction) -> None:
    """RAISE_VARARGS as the tracing loop runs it: always raised to the loop, which notes it as the raiser
    whose line a frame left by a handler's RERAISE shows (``unwound_at``). Routed to its handler in the
    frame by the plain handler (Note [Raises caught in their frame], opcodes/exceptions.py), a raise inside
    an ``except`` block was not noted: the ``return`` event of the frame it left showed the line of the
    exception handled there (``try: next(it) except StopIteration: raise ValueError``: the ``next`` line,
    where CPython shows the ``raise``; CPython's test_sys_settrace test_20_async_for_loop)."""
    from jitcore.interpreter.opcodes.exceptions import raised_by

    raise raised_by(frame, inst)


def native_functions() -> tuple[object, object] | None:
    """The program's ``(trace, profile)`` functions for code the interpreter runs natively for it
    (lookasides' eval/exec), or None where it set neither (or one of them is running)."""
    if not TRACE.active or TRACE.busy:
        return None
    return TRACE.function, TRACE.profile


def native_traced(fn: Callable, *args: object, **kwargs: object) -> object:
    """``fn(*args, **kwargs)`` (eval, exec: the module-level code and what it calls run natively) under the
    program's trace and profile functions as CPython's own, so that it gives them CPython's events (bdb's
    ``run``/``runeval``); the thread's native ones are put back after, by C calls (no Python frame of the
    interpreter's starts meanwhile)."""
    wanted = native_functions()
    if wanted is None:
        return fn(*args, **kwargs)
    trace, profile = sys.gettrace(), sys.getprofile()
    sys.settrace(wanted[0])
    sys.setprofile(wanted[1])
    try:
        return fn(*args, **kwargs)
    finally:
        sys.setprofile(profile)
        sys.settrace(trace)
