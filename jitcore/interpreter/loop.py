"""The run loop: fetch -> dispatch -> (on exception) unwind.

THE invariant: a user exception is data flowing through the interpreted program -- it is routed by the
exception table to the user's handlers, chained and given traceback entries exactly as CPython would; an
interpreter error (``JitcoreInterpreterError``) is a bug or a refusal of jitcore's and is reported as one:
it never enters a user ``except`` or ``finally``. Exceptions that can only be interpreter bugs (an
AttributeError on a Frame, a value-stack underflow in a handler) are turned into ``InterpreterError``.

Other invariants:
- A handler returns None to continue, or True when the frame returns or yields (``frame.result`` holds the
  value; the generator code tells the two apart by the instruction that stopped).
- The exception table is read only when an exception is raised.
- The unwinding runs inside the ``except`` clause that caught the exception, and propagation out of the
  frame is a bare ``raise``: CPython then neither re-chains ``__context__`` nor adds the loop's own
  traceback entry. (A ``raise`` statement that its own frame catches is unwound by RAISE_VARARGS itself,
  without raising: Note [Raises caught in their frame] in opcodes/exceptions.py.)
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import os
from typing import TYPE_CHECKING

from jitcore.interpreter import tracing
from jitcore.interpreter.errors import InterpreterError, JitcoreInterpreterError
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.instructions import CodeInfo, Instruction
from jitcore.interpreter.line_jumps import resume_jump
from jitcore.interpreter.tracebacks import (
    add_frame,
    is_internal,
    last_index,
    reraised_traceback,
    strip_internal,
)

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = ["execute", "execute_settrace", "execute_traced", "unwind"]

_OPCODES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opcodes") + os.sep


def execute(frame: Frame, pending: BaseException | None = None) -> None:
    """Run ``frame`` from ``frame.index`` until it returns or yields (or raises out of it).

    Args:
        frame: the frame to run.
        pending: an exception to raise at the current instruction first (``generator.throw``).
    """
    run = frame.run
    frames = run.frames
    frames.append(frame)
    handlers = run.handlers
    info = frame.info
    instructions = (info.plain_fused or info.fused) if run.plain else _instructions(run, info)
    try:
        if pending is not None:
            _raise_into(frame, pending)
        while True:
            try:
                while True:
                    inst = instructions[frame.index]
                    frame.index = inst.after
                    if handlers[inst.opcode](frame, inst) is not None:
                        return
            except BaseException as exc:
                if not unwind(frame, exc):
                    raise
    finally:
        frames.pop()


# Note [Loops written out]
# ``execute``'s fetch-dispatch-unwind loop is written out, for plain runs (``run.plain``: no hook sees
# instructions, ``info.fused`` is executed), in the two places that start the most frames:
# ``calls.call_function`` (every interpreted call with plain positional arguments) and the generator driver
# ``generators._generator`` (every resumption of a generator sent a value), which read the run's handlers
# and the frame's instructions once per call, or once per generator. This saves ``execute``'s call and setup,
# ~1,000-1,300 of the ~15,000 machine instructions of an interpreted call and of the ~12,000 of a generator
# resumption. The copies must stay this loop: the frame is on ``run.frames`` while it runs, a handler's
# non-None result ends it, and ``unwind`` routes every exception (re-raised when it returns False).


def _instructions(run: Run, info: CodeInfo) -> list[Instruction]:
    """What a run that is not ``plain`` executes: unfused, or fused except where its hooks must see each."""
    return info.fused_without(run.hooked) if run.fused else info.instructions


def execute_traced(frame: Frame, pending: BaseException | None = None) -> None:
    """``execute`` that calls ``hooks.on_instruction(frame, instruction)`` before each instruction."""
    run = frame.run
    frames = run.frames
    frames.append(frame)
    handlers = run.handlers
    instructions = frame.info.instructions
    on_instruction = run.hooks.on_instruction
    try:
        if pending is not None:
            _raise_into(frame, pending)
        while True:
            try:
                while True:
                    inst = instructions[frame.index]
                    on_instruction(frame, inst)
                    frame.index = inst.after
                    if handlers[inst.opcode](frame, inst) is not None:
                        return
            except BaseException as exc:
                if not unwind(frame, exc):
                    raise
    finally:
        frames.pop()


def execute_settrace(frame: Frame, pending: BaseException | None = None) -> None:
    """``execute`` giving the events of Note [Trace events of interpreted frames] to the program's trace
    function (tracing.py); what runs while one is set (``Run.traceable`` runs only)."""
    run = frame.run
    frames = run.frames
    frames.append(frame)
    handlers = tracing.traced_table(run.handlers)
    instructions = frame.info.instructions
    # tracing.before's: the last instruction executed (dropped ones too), ...
    cursor = [None, None, False, None, None]
    try:
        if pending is not None:
            cursor[3] = instructions[frame.index - 1] if frame.index else None  # where it is thrown in
            tracing.call_event(frame)
            try:
                _raise_into(frame, pending)
            except BaseException:  # not handled in the frame: it leaves (3.11: no handler of its own)
                tracing.return_event(frame, None, None, True)
                raise
        elif frame.index:  # resumed: a jump its yield's ``return`` event set (Note [A jump from a yield])
            tracing.landed(cursor, *resume_jump(frame))
        while True:
            try:
                while True:
                    inst = instructions[frame.index]
                    frame.index = inst.after
                    if tracing.TRACE.active and tracing.before(frame, inst, cursor):
                        continue  # a trace function jumped (Note [A jump from a trace function])
                    if handlers[inst.opcode](frame, inst) is not None:
                        break
            except BaseException as exc:
                shown = tracing.unwound_at(cursor)
                if not unwind(frame, exc):
                    tracing.return_event(frame, None, shown, True)
                    raise
                continue
            tracing.return_event(frame, frame.result)
            return
    finally:
        frames.pop()


# Note [Trace events of interpreted frames]
# A frame started while the program's trace function is set runs in ``execute_settrace``, whose events are
# CPython 3.11's (ceval.c's DO_TRACING), over the instructions CPython executes, those the decoding dropped
# included (a NOP carries a ``pass``'s line; a jump to a dropped instruction is taken to land on the first
# dropped before the instruction it maps to): ``call`` (to the global trace function; what it returns is the
# frame's ``f_trace``) at each RESUME, so at the start and at every resumption of a generator; from the first
# RESUME on, before any other instruction, ``line`` where its line differs from the previously executed
# instruction's (none at the start) or a jump went backwards (not SEND's), then ``opcode`` where
# ``f_trace_opcodes`` is set; ``return`` with the returned or yielded value, or None when an exception leaves
# the frame; ``exception`` (``_route``) where the frame gets a traceback entry. A frame already running when
# the function was set gives no line events (CPython's would: every frame checks the thread's flag at every
# instruction, which the plain loops do not).


# Note [A thrown exception is chained in its frame]
# ``gen.throw(exc)`` raises ``exc`` in the generator's frame as CPython's ``_gen_throw`` does: with
# ``PyErr_Restore``, then ``_PyErr_ChainStackItem``, which chains it to the exception the generator's own
# frame is handling (suspended in an ``except`` block), never to the thrower's (``gen.throw(ValueError())``
# inside ``except KeyError``: the context stays None; asyncio's C Task delivers an awaited task's exception
# to the awaiting coroutine this way). The frame gets its traceback entry. Left to ``_route``, an
# exception raised by no instruction of the frame looked raised by C code the frame called, and was chained
# to the exception the thrower handles. ``run.raising`` marks it thrown: its second field None (True: an
# explicit ``raise``; False: a re-raise).
def _raise_into(frame: Frame, exc: BaseException) -> None:
    frame.run.raising = (exc, None, exc.__context__)
    try:
        raise exc
    except BaseException as caught:
        if not unwind(frame, caught):
            raise


def unwind(frame: Frame, exc: BaseException) -> bool:
    """Route ``exc``, raised at the current instruction of ``frame``, to the frame's handler.

    Returns:
        True if the frame handles it (stack and index are set up for the handler); False if it must
        propagate to the caller.
    """
    run = frame.run
    raising = run.raising
    try:
        if isinstance(exc, JitcoreInterpreterError):  # never routed to the program's handlers, but
            add_frame(frame, exc, False)  # its traceback shows the program's frames, as for its own errors
            return False
        if isinstance(exc, _BUG_TYPES):
            bug = _interpreter_bug(exc)
            if bug is not None:
                where = frame.where()
                raise InterpreterError(f"{bug} while executing {frame.instruction.opname}", where) from exc
        return _route(frame, exc, raising)
    except RecursionError as error:
        if error is exc or type(exc) is not RecursionError:
            raise
        # Note [Unwinding at the recursion limit]: it propagates as it is; its entry here comes later
        run.raising = None
        run.unentered = (exc, frame, run.unentered)  # (no call: none is possible here)
        return False


# Note [Unwinding at the recursion limit]
# CPython finds a frame's handler in C, using none of the recursion limit; the interpreter's unwinding is
# Python code (the exception table, chaining, the traceback entry's raiser), so at the limit, where a
# program's unbounded recursion ends, the unwinding itself could raise RecursionError: a new exception,
# chained to the program's and printed with the interpreter's frames ("During handling of the above
# exception, another exception occurred"). When the program's exception is a RecursionError it propagates
# instead, unchanged: the frames at the limit are noted in ``run.unentered`` (no call can be made there)
# and get their traceback entries from the first frame shallower that routes it (``_add_unentered``: the
# innermost frame's locals stay alive while it is handled, test_exceptions' test_recursion_error_cleanup);
# their handlers do not run (at that depth a handler calling anything would hit the limit itself).
# Another exception (``try: ... except: f()`` recursing in its handler) propagates as the new
# RecursionError with it as its context, as CPython's handler would end (test_traceback's
# test_long_context_chain). Raising the limit for the unwinding is no way out: putting it back at that
# depth fails. The call of ``unwind`` itself can fail too (3.13 counts Python calls): that RecursionError,
# raised while the first was being handled, propagates with the first as its ``__context__``; the first
# had reached no user frame (its traceback is the interpreter's alone), so ``_drop_internal_context``
# takes it out of the chain (and a handled exception whose unwinding failed loses its traceback: the
# interpreter's entries alone).


def _add_unentered(run: Run, exc: BaseException) -> None:
    """The traceback entries of the frames ``exc`` left at the recursion limit without one, innermost
    first (a frame shallower has the stack for them)."""
    frames = []
    link = run.unentered
    while link is not None:
        if link[0] is exc:
            frames.append(link[1])
        link = link[2]
    for frame in reversed(frames):
        add_frame(frame, exc, False, True)
    run.unentered = None


def _drop_internal_context(exc: RecursionError) -> None:
    """Take out of ``exc``'s ``__context__`` chain the RecursionErrors that no user frame saw, and the
    interpreter's traceback entries from the exception under them (one whose unwinding ran out of stack)."""
    context = exc.__context__
    while type(context) is RecursionError and strip_internal(context.__traceback__) is None:
        context = context.__context__
    if context is not exc.__context__:
        exc.__context__ = context
    tb = None if context is None else context.__traceback__
    if tb is not None and strip_internal(tb) is None:
        context.__traceback__ = None


def _route(frame: Frame, exc: BaseException, raising: tuple | None) -> bool:
    """``unwind``'s routing of a program's exception (chaining, traceback entry, handler)."""
    frame.run.raising = None
    if type(exc) is RecursionError:
        _drop_internal_context(exc)
    explicit = reraised = thrown = False
    if raising is not None and raising[0] is exc:
        explicit = raising[1]
        if explicit is None:  # thrown into a generator (Note [A thrown exception is chained in its frame])
            explicit, thrown = False, True
        elif not explicit:  # bare re-raise: CPython leaves __context__ alone
            exc.__context__ = raising[2]
            reraised = True
    if thrown:
        _set_context(exc, frame.exc_value)
    elif explicit or (raising is None and (_fresh(frame, exc) or _raised_again(frame, exc))):
        _chain(frame, exc)
    if frame.run.unentered is not None:
        _add_unentered(frame.run, exc)
    index = frame.index - 1
    entry = frame.info.handler_for(index)
    if reraised:  # Note [A re-raise adds no traceback entry]
        exc.__traceback__ = reraised_traceback(frame, exc, entry is None)
    else:  # raised here or by a callee: an entry, even over one of this frame's (a callee re-raised it)
        add_frame(frame, exc, True, entry is None)
        if tracing.TRACE.function is not None:  # Note [Trace events of interpreted frames]
            tracing.exception_event(frame, exc)
    if entry is None:
        frame.stack.clear()  # as CPython clears an unwound frame's value stack (tracebacks keep frames alive)
        # the last few that left a frame, and for which caller (Note [A stored exception C raises again])
        run = frame.run
        run.left = ((id(exc), id(exc.__traceback__), id(frame.back)), *run.left[:7])
        return False
    # the last few caught here (Note [A stored exception C raises again])
    frame.caught = ((id(exc), id(exc.__traceback__)), *getattr(frame, "caught", ())[:3])
    stack = frame.stack
    if entry.lasti:  # CPython's f_lasti, set back by a RERAISE with an argument (Note [A frame's last line])
        index = last_index(frame) if reraised else index
        del stack[entry.depth:]
        stack.append(index)
    else:
        del stack[entry.depth:]
    stack.append(exc)
    frame.index = entry.target
    return True


# Note [A re-raise adds no traceback entry]
# CPython's re-raises (a bare ``raise``, RERAISE at the end of a ``finally``/``with``/``except`` block,
# END_ASYNC_FOR, CLEANUP_THROW) go straight to unwinding, past the code that adds the frame's traceback entry:
# the exception keeps the traceback it has. A handled exception has the frame's entry already, from when
# it was caught; one that has not keeps none: a ``raise`` of the exception a native caller handles (the
# caller's entry comes when it reaches the caller), an exception whose ``__traceback__`` the handler
# replaced, the group ``except*`` makes of what its clauses raised, 3.12+'s RuntimeError of a StopIteration
# leaving a generator (made by an intrinsic, then re-raised). An entry added for the frame anyway showed
# the frame twice (a handled exception re-raised after another was handled in the frame) or once too many.

_INTERNAL_TYPES = (Frame, Instruction)
_BUG_TYPES = (AttributeError, IndexError)  # what _interpreter_bug can recognise


def _interpreter_bug(exc: BaseException) -> str | None:
    """Recognise exceptions that can only come from a bug in the interpreter itself (not from the program):
    an attribute error on the interpreter's own objects, or a value-stack underflow in a handler."""
    # (the type of obj, not isinstance: that asks a user object for __class__, through its __getattribute__)
    if isinstance(exc, AttributeError) and issubclass(type(getattr(exc, "obj", None)), _INTERNAL_TYPES):
        return f"internal attribute error ({exc})"
    if type(exc) is IndexError and exc.args == ("pop from empty list",):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OPCODES_DIR):
            return "value stack underflow"
    return None


# Note [A stored exception C raises again]
# C code that raises an exception it stored (an asyncio Future's ``result()``, ``set_exception`` earlier)
# does so with ``PyErr_SetObject``, which chains it to the exception being handled, as a ``raise`` would.
# Such an exception is not fresh (``_fresh``): it carries the traceback it was caught with, and the
# interpreter left its ``__context__`` alone: ``fut.result()`` inside ``except KeyError`` gave the stored
# exception no context, where CPython's is the KeyError. A frame remembers the last few exceptions it
# caught with the traceback entry it gave each (ids only: holding them would keep their frames alive); one
# of them coming back out of a C call with that entry on top (no callee's entry above it: C raised it
# itself, no Python code raised it on the way) is chained as ``_PyErr_SetObject`` chains it. The same holds
# for one that left a frame called by another frame than this one (a coroutine an asyncio Task drove, whose
# exception ``await task`` raises again): the run remembers the last few exceptions that left a frame, with
# the entry and the caller. An exception that passed through a callee of this frame (interpreted, or native:
# its entry is on top) was chained where the callee raised it. Ids outlive their objects: an exception and
# its entry that died may have left their addresses to a new pair, so only the newest record of a pair
# speaks for it (a pair that left a frame for this one, recorded after the stale one, is not raised again).
# Reading any record that matched chained a MyException of the second pass of CPython's
# test_exit_exception_explicit_none_context to an IndexError, about one run in eight.
def _raised_again(frame: Frame, exc: BaseException) -> bool:
    """Whether ``exc``, coming out of a C call, is one that C stored and raised again."""
    head = strip_internal(exc.__traceback__)
    if head is None:
        return False
    caught = getattr(frame, "caught", None)
    if caught and (id(exc), id(head)) in caught:
        code = head.tb_frame.f_code  # (an id may be reused: the entry must be one of this frame's)
        return code.co_name == frame.code.co_name and code.co_filename == frame.code.co_filename
    for e, t, back in frame.run.left:  # the newest record of the pair decides (an older one may be stale)
        if e == id(exc) and t == id(head):
            return back != id(frame)
    return False


def _fresh(frame: Frame, exc: BaseException) -> bool:
    """Whether ``exc`` was just raised by C code called from this frame (so its ``__context__`` is stale)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        # came through an interpreted callee (which chained it already) or through native Python code
        if strip_internal(tb) is not None:
            if not _raised_by_hooks(frame, exc):
                return False
            exc.__suppress_context__ = False  # Note [An error the hooks translated]
            exc.__context__ = None
            return True
    if exc.__suppress_context__ and exc.__cause__ is None:
        # raised by a handler with ``from None`` while translating an internal error: drop that chaining
        exc.__suppress_context__ = False
        exc.__context__ = None
        return True
    return exc.__context__ is None or exc.__context__ is run_native_exc(frame)


# Note [An error the hooks translated]
# The jit's hooks (a torch op's lookaside) raise the error the program sees (torch's own words, from running
# the op eagerly on zero-filled tensors, or from running it again with eager's kernels) inside their handler
# of an error of their own (the fake kernel's), with ``from None`` or without. Its traceback passes through
# the hooks' frames (and torch's wrappers of them), which are not the interpreter's, so ``_fresh`` took it for
# one raised by native Python code that had chained it, and left its chain alone: ``e.__context__`` was the
# jit's own error, and inside ``except KeyError`` CPython's context, the KeyError, was missing. An exception
# raised where the hooks' files are (``host_files``; the innermost traceback entry is where it was raised),
# with no cause, and chained to nothing of the program's (``from None``, nothing, the native caller's
# exception, or an exception the hooks raised themselves) is one the hooks raised as C would: its chain is
# dropped and it is chained as an exception C raised.
def _raised_by_hooks(frame: Frame, exc: BaseException) -> bool:
    """Whether ``exc`` is an error the code that provides the run's hooks raised as C would."""
    host = frame.run.hooks.host_files
    if not host or exc.__cause__ is not None or not _raised_in(exc, host):
        return False
    context = exc.__context__
    return exc.__suppress_context__ or context is None or context is frame.run.native_exc or \
        _raised_in(context, host)


def _raised_in(exc: BaseException, files: tuple[str, ...]) -> bool:
    """Whether ``exc`` was raised in one of ``files`` (its innermost traceback entry), not in the
    interpreter's."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(files) and not is_internal(filename)


def run_native_exc(frame: Frame) -> BaseException | None:
    """The exception the native code around the interpreter is handling (CPython's outer ``exc_info``)."""
    return frame.run.native_exc


def _chain(frame: Frame, exc: BaseException) -> None:
    """Set ``exc.__context__`` to the exception being handled, as ``_PyErr_SetObject`` does."""
    handled = frame.handled_exception()
    if handled is None:
        handled = frame.run.native_exc
    _set_context(exc, handled)


def _set_context(exc: BaseException, handled: BaseException | None) -> None:
    """``exc.__context__ = handled`` unless None or ``exc`` itself, breaking a cycle through ``exc``."""
    if handled is None or handled is exc:
        return
    o, seen = handled, 0
    while True:
        context = o.__context__
        if context is None:
            break
        if context is exc:
            o.__context__ = None
            break
        o = context
        seen += 1
        if seen > 10_000:  # a pre-existing cycle: stop, as CPython's cycle detection would
            break
    exc.__context__ = handled
