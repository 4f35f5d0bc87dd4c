"""Setting ``f_lineno`` from a trace function: CPython's checks (Objects/frameobject.c), and the jump made.

Invariants:
- A jump is checked as CPython's ``frame_setlineno`` checks it, over the frame's code object (not the decoded
  instructions): the event being traced (a ``line`` event; 3.12+: a generator's resumption too; the
  ``return`` event of a yield), the target line (the first line not before it that starts a run of
  instructions, ``marklines``), then the value stack the frame has there against the one it has now
  (``mark_stacks``, ``compatible_stack``), with CPython's words for each refusal (ValueError).
- A jump allowed pops the frame's value stack to the target's depth (an ``except`` block's saved exception is
  put back as the handled one, as CPython does) and continues the frame at the target's first instruction:
  the tracing loop fetches anew (``TRACE.jump``; Note [A jump from a trace function]).
- Only the frame whose event is running can be jumped (pdb jumps only there too); another is refused as
  unsupported.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import sys
import warnings
from inspect import CO_ASYNC_GENERATOR, CO_COROUTINE, CO_GENERATOR
from types import CodeType
from typing import TYPE_CHECKING

from jitcore.interpreter.errors import UnsupportedConstruct
from jitcore.interpreter.frame import NULL
from jitcore.interpreter.instructions import dis, raw_instructions

if TYPE_CHECKING:
    from jitcore.interpreter.frame import Frame

__all__ = ["resume_jump", "set_lineno"]

# The stack model of frameobject.c: a stack is an int, 3 bits a value (its kind), the top in the low bits;
# integer comparisons of two stacks are CPython's too (which of a line's starts is taken, how far to pop).
_ITERATOR, _EXCEPT, _OBJECT, _NULL, _LASTI = 1, 2, 3, 4, 5
_BITS = 3
_MASK = (1 << _BITS) - 1
_UNINITIALIZED, _OVERFLOWED, _EMPTY = -2, -1, 0
_WILL_OVERFLOW = 1 << ((63 // _BITS - 1) * _BITS)
_V311 = sys.version_info < (3, 12)


def _push(stack: int, kind: int) -> int:
    return _OVERFLOWED if stack >= _WILL_OVERFLOW or stack < 0 else (stack << _BITS) | kind


def _pop(stack: int) -> int:
    return stack >> _BITS  # (arithmetic, as C's on the two negative markers)


def _peek(stack: int, n: int) -> int:
    return (stack >> (_BITS * (n - 1))) & _MASK


def _swap(stack: int, n: int) -> int:
    shift = _BITS * (n - 1)
    low = (stack & ~(_MASK << shift)) | ((stack & _MASK) << shift)
    return (low & ~_MASK) | _peek(stack, n)


def _pop_to_level(stack: int, level: int) -> int:
    if level == 0:
        return _EMPTY
    level_max = _MASK << ((level - 1) * _BITS)
    while stack > level_max:
        stack = _pop(stack)
    return stack


def _opcodes(*names: str) -> frozenset[int]:
    return frozenset(dis.opmap[name] for name in names if name in dis.opmap)


_POP_JUMPS = _opcodes(*(f"POP_JUMP_{way}IF_{cond}" for way in ("", "FORWARD_", "BACKWARD_")
                        for cond in ("FALSE", "TRUE", "NONE", "NOT_NONE")))
_OR_POP_JUMPS = _opcodes("JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP")
_JUMPS = _opcodes("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
_ENDS = _opcodes("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE")
_OP = dis.opmap
_GET_ITERS = _opcodes("GET_ITER", "GET_AITER")
# the opcodes ``_after`` models one by one; any other pushes (pops) its stack effect's objects
_MODELLED = _POP_JUMPS | _OR_POP_JUMPS | _JUMPS | _ENDS | _GET_ITERS | _opcodes(
    "SEND", "FOR_ITER", "PUSH_EXC_INFO", "POP_EXCEPT", "PUSH_NULL", "LOAD_GLOBAL", "SWAP", "COPY",
    *(("LOAD_METHOD", "CALL") if _V311 else ("LOAD_ATTR",)))


def _after(op: int, arg: int | None, stack: int) -> tuple[int | None, int | None]:
    """``(the stack after the instruction ``op`` falling through or None where it never does, the stack at its
    jump target or None)``, as frameobject.c's ``mark_stacks`` models each opcode (3.11's or 3.12+'s)."""
    if op in _POP_JUMPS:
        stack = _pop(stack)
        return stack, stack
    if op in _OR_POP_JUMPS:
        return _pop(stack), stack
    if op == _OP["SEND"]:
        return stack, (_pop(stack) if _V311 else stack)
    if op in _JUMPS:
        return None, stack
    if op in _GET_ITERS:
        return _push(_pop(stack), _ITERATOR), None
    if op == _OP["FOR_ITER"]:
        return _push(stack, _OBJECT), (_pop(stack) if _V311 else _push(stack, _OBJECT))
    if op == _OP["PUSH_EXC_INFO"]:
        return _push(stack, _EXCEPT), None
    if op == _OP["POP_EXCEPT"]:
        return _pop(stack), None
    if op in _ENDS:
        return None, None
    if op == _OP["PUSH_NULL"]:
        return _push(stack, _NULL), None
    if op == _OP["LOAD_GLOBAL"]:  # (the NULL of a call goes under the callable before 3.12, over it after)
        if arg & 1 and _V311:
            stack = _push(stack, _NULL)
        stack = _push(stack, _OBJECT)
        return (_push(stack, _NULL) if arg & 1 and not _V311 else stack), None
    if _V311 and op == _OP["LOAD_METHOD"]:
        return _push(_push(_pop(stack), _NULL), _OBJECT), None
    if not _V311 and op == _OP["LOAD_ATTR"]:
        return (_push(_push(_pop(stack), _OBJECT), _NULL) if arg & 1 else stack), None
    if _V311 and op == _OP["CALL"]:  # (PRECALL popped the arguments)
        return _push(_pop(_pop(stack)), _OBJECT), None
    if op == _OP["SWAP"]:
        return _swap(stack, arg), None
    if op == _OP["COPY"]:
        return _push(stack, _peek(stack, arg)), None
    return _effect(stack, dis.stack_effect(op) if arg is None else dis.stack_effect(op, arg)), None


def _effect(stack: int, delta: int) -> int:
    """``stack`` after an instruction of stack effect ``delta`` (objects pushed, or values popped)."""
    if delta < 0:
        return stack >> (_BITS * -delta)
    for _ in range(delta):
        stack = _push(stack, _OBJECT)
    return stack


def _mark_stacks(code: CodeType) -> dict[int, int]:
    """The modelled value stack before each instruction (by offset): frameobject.c's ``mark_stacks``."""
    # (offset, opcode, arg, jump target, stack effect where _after need not model it: most instructions)
    insts = [(offset, op, arg, argval, None if op in _MODELLED else
              dis.stack_effect(op) if arg is None else dis.stack_effect(op, arg))
             for offset, op, _name, arg, argval, *_ in raw_instructions(code)]
    stacks = dict.fromkeys([inst[0] for inst in insts], _UNINITIALIZED)
    first = insts[0][0] if insts else 0
    stacks[first] = _EMPTY
    if _V311 and code.co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR):
        stacks[first] = _push(_EMPTY, _OBJECT)  # a generator is sent None as it starts
    following = dict(zip([inst[0] for inst in insts], [inst[0] for inst in insts[1:]] + [None]))
    table = dis._parse_exception_table(code)
    todo = True
    while todo:
        todo = False
        for offset, op, arg, argval, delta in insts:
            stack = stacks[offset]
            if stack == _UNINITIALIZED:
                continue
            if delta is not None:
                nxt = following[offset]
                if nxt is not None:
                    stacks[nxt] = _effect(stack, delta)
                continue
            fall, target = _after(op, arg, stack)
            if target is not None:
                if stacks.get(argval) == _UNINITIALIZED and argval < offset:
                    todo = True
                stacks[argval] = target
            nxt = following[offset]
            if fall is not None and nxt is not None:
                stacks[nxt] = fall
        for entry in table:
            start = stacks.get(entry.start, _UNINITIALIZED)
            if start != _UNINITIALIZED and stacks.get(entry.target) == _UNINITIALIZED:
                todo = True
                stack = _pop_to_level(start, entry.depth)
                if entry.lasti:
                    stack = _push(stack, _LASTI)
                stacks[entry.target] = _push(stack, _EXCEPT)
    return stacks


def _compatible_kind(source: int, to: int) -> bool:
    if to == 0:
        return False
    if to == _OBJECT:
        return source != _NULL
    return to == _NULL or source == to


def _compatible_stack(source: int, to: int) -> bool:
    if source < 0 or to < 0:
        return False
    while source > to:
        source = _pop(source)
    while source:
        if not _compatible_kind(source & _MASK, to & _MASK):
            return False
        source, to = _pop(source), _pop(to)
    return to == 0


def _explain_incompatible_stack(to: int) -> str:
    if to == _OVERFLOWED:
        return "stack is too deep to analyze"
    if to == _UNINITIALIZED:
        return "can't jump into an exception handler, or code may be unreachable"
    return {_EXCEPT: "can't jump into an 'except' block as there's no exception",
            _LASTI: "can't jump into a re-raising block as there's no location",
            _ITERATOR: "can't jump into the body of a for loop"}.get(to & _MASK, "incompatible stacks")


def _marklines(code: CodeType) -> dict[int, int]:
    """The offsets where a line starts (a run of instructions whose line differs from the last one's), and
    that line: frameobject.c's ``marklines``."""
    starts = {}
    last = -1
    for start, _end, line in code.co_lines():
        if line is not None and line != last:
            starts[start] = last = line
    return starts


def _analysis(code: CodeType) -> tuple[dict[int, int], dict[int, int]]:
    hit = _ANALYSED.get(id(code))
    if hit is None or hit[0] is not code:
        hit = _ANALYSED[id(code)] = (code, _marklines(code), _mark_stacks(code))
    return hit[1], hit[2]


_ANALYSED: dict[int, tuple[CodeType, dict[int, int], dict[int, int]]] = {}

# the events a frame can be jumped from (Note [Which events may jump]): 3.11's, then 3.12+'s
_ALLOWED = frozenset({"line", "yield"}) if _V311 else frozenset({"line", "yield", "resume"})
_CALL_EVENTS = frozenset({"start", "resume", "throw"}) if _V311 else frozenset({"start"})
_NOT_TRACING = ("f_lineno can only be set by a trace function" if _V311 else
                "f_lineno can only be set in a trace function")


# Note [Which events may jump]
# CPython 3.11 decides by the event the thread is tracing (``tstate->tracing_what``): a ``call`` event
# ("can't jump from the 'call' trace event of a new frame", a generator's resumption too), a ``return`` event
# but one of a yield, an ``exception`` or ``opcode`` event ("can only jump from a 'line' trace event"); then
# the frame must have an ``f_trace``. 3.12+ decides by the sys.monitoring event its settrace runs on: a
# resumption (PY_RESUME) may jump, a new frame's start may not, a throw into a generator (PY_THROW), a return
# or unwind, an exception or an instruction may not; no ``f_trace`` is asked for. Outside any event the
# ``f_trace`` check (3.11) or the event check (3.12+) refuses. The event being traced is ``TRACE.event``
# (tracing.py): ``(frame, what, offset)``, ``what`` one of start, resume, throw, line, opcode, return, yield,
# unwind, exception.
def set_lineno(frame: Frame, value: object) -> None:
    """``frame.f_lineno = value`` (the frame object's setter): CPython's checks, then the jump.

    Raises:
        ValueError: CPython's, where it refuses the jump (its words).
        UnsupportedConstruct: a frame other than the one whose trace event runs.
    """
    from jitcore.interpreter.tracing import TRACE

    if type(value) is not int:
        raise ValueError("lineno must be an integer")
    event = TRACE.event
    what = None if event is None else event[1]
    if what is None and not _V311:
        raise ValueError(_NOT_TRACING)
    if what in _CALL_EVENTS:
        raise ValueError("can't jump from the 'call' trace event of a new frame")
    if what is not None and what not in _ALLOWED:
        raise ValueError("can only jump from a 'line' trace event")
    if _V311 and (what is None or getattr(frame, "trace", None) is None):
        raise ValueError(_NOT_TRACING)
    if event[0] is not frame:
        raise UnsupportedConstruct(
            "setting f_lineno of a frame other than the one whose trace event is running",
            frame.where(), hint="jump from a trace event of the frame itself")
    target, pops = _target(frame, value, event[2], what == "yield")
    _unbind_none(frame)
    if what == "yield":  # Note [A jump from a yield]
        frame.jump = (target, pops)
        frame.trace_lasti, frame.trace_line = target, _analysis(frame.code)[0][target]
        return
    _pop_stack(frame, pops)
    _land(frame, target)
    TRACE.jump = (frame, target, frame.trace_line)


def _target(frame: Frame, value: int, offset: int, suspended: bool) -> tuple[int, tuple[int, ...]]:
    """The offset a jump to line ``value`` from the instruction at ``offset`` lands on, and the kinds of the
    values it pops, top first (frameobject.c's checks; ValueError with its words where it refuses)."""
    code = frame.code
    if not -(1 << 31) <= value < (1 << 31):
        raise ValueError("lineno out of range")
    if value < code.co_firstlineno:
        raise ValueError(f"line {value} comes before the current code block")
    lines, stacks = _analysis(code)
    line = min((line for line in lines.values() if line >= value), default=None)
    if line is None:
        raise ValueError(f"line {value} comes after the current code block")
    best_stack, best = _OVERFLOWED, -1
    start = stacks.get(offset, _UNINITIALIZED)
    err, message = -1, "cannot find bytecode for specified line"
    for where, at in sorted(lines.items()):
        if at != line:
            continue
        stack = stacks.get(where, _UNINITIALIZED)
        if _compatible_stack(start, stack):
            err = 0
            if stack > best_stack:
                best_stack, best = stack, where
        elif err < 0:
            if start == _OVERFLOWED:
                message = "stack to deep to analyze"  # (sic)
            elif start == _UNINITIALIZED:
                message = "can't jump from unreachable code"
            else:
                message, err = _explain_incompatible_stack(stack), 1
    if err:
        raise ValueError(message)
    if suspended:
        start = _pop(start)  # the value the yield took
    pops = []
    while start > best_stack:
        pops.append(start & _MASK)
        start = _pop(start)
    return best, tuple(pops)


def _unbind_none(frame: Frame) -> None:
    """3.12+: the frame's unbound locals are bound to None first, with CPython's RuntimeWarning (its fast
    locals are no longer checked where the compiler proved them bound)."""
    if _V311:
        return
    fast = frame.fast
    unbound = sum(1 for value in fast if value is NULL)
    if unbound:
        words = f"assigning None to {unbound} unbound local{'' if unbound == 1 else 's'}"
        warnings.warn(words, RuntimeWarning, stacklevel=1)
        for i, value in enumerate(fast):
            if value is NULL:
                fast[i] = None


def _pop_stack(frame: Frame, pops: tuple[int, ...]) -> None:
    """Pop the values of kinds ``pops`` (top first); an ``except`` block's saved exception is the frame's
    handled one again, as POP_EXCEPT would leave it."""
    stack = frame.stack
    for kind in pops:
        value = stack.pop()
        if kind == _EXCEPT:
            frame.exc_value = value


def _land(frame: Frame, target: int) -> None:
    """Continue ``frame`` at the instruction at offset ``target`` (the decoded one it maps to: Note [Dropped
    instructions] in instructions.py); while the trace function runs, its frame object shows the target."""
    frame.index = frame.info.index_at(target)
    frame.trace_lasti = target
    frame.trace_line = _analysis(frame.code)[0][target]


def resume_jump(frame: Frame) -> tuple[int | None, int | None]:
    """A jump set in the ``return`` event of the yield ``frame`` resumes from, made now (the value sent stays
    on top): the offset it lands on and its line, or ``(None, None)`` where there is none."""
    jump = getattr(frame, "jump", None)
    if jump is None:
        return None, None
    del frame.jump
    target, pops = jump
    sent = frame.stack.pop()
    _pop_stack(frame, pops)
    frame.stack.append(sent)
    frame.index = frame.info.index_at(target)
    return target, _analysis(frame.code)[0][target]


# Note [A jump from a yield]
# The ``return`` event of a yield may jump (CPython's frame is suspended). The jump is made when the generator
# resumes (``resume_jump``, from the tracing loop), not at once: its driver tells a yield from a return by the
# frame's index after it (generators.py), and a generator resumed after ``sys.settrace(None)`` runs in a
# plain loop that knows nothing of jumps (it resumes where it yielded, its stack whole). Resumed, the frame
# goes on at the target, the value sent on top of its stack, with no ``call`` event. CPython is no model
# there: it may resume one instruction past the target, the value sent taking the place of the one skipped
# (3.11 and 3.13, /tmp/cpy55-probes/p1_yield_jump.py: ``'str' object has no attribute 'append'``), and 3.13
# crashed on a generator a ``for`` loop resumed so.
