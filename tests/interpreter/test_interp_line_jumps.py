"""Setting ``f_lineno`` from a trace function (a jump): where CPython allows it the interpreted frame goes on
at the target line, its value stack popped as CPython pops it; elsewhere the ValueError is CPython's. Each
program records the lines it runs and the jump's outcome, natively and under ``interpret``
(jitcore/interpreter/line_jumps.py)."""

from __future__ import annotations

import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _jumping(body, source: int, target: object, event: str = "line"):
    """A function running ``body(out)`` under a trace function that, at the first ``event`` of ``body``'s
    frame (or a frame of code it holds) at line ``source`` (relative to its ``def``), sets ``f_lineno`` to
    ``target`` (relative too where an int); ``out`` records ``body``'s own appends, the outcome of the jump
    (the frame's ``f_lineno`` after it, or the error's type and words), the events seen and any warning."""

    def run() -> list:
        out: list = []
        first = body.__code__.co_firstlineno
        done = []

        def tracer(frame, what, arg):
            code = frame.f_code
            if code.co_firstlineno >= first and code.co_filename == body.__code__.co_filename \
                    and what == event and frame.f_lineno - first == source and not done:
                done.append(1)
                try:
                    frame.f_lineno = first + target if type(target) is int else target
                    out.append(("jumped", frame.f_lineno - first))
                except ValueError as e:
                    out.append(("refused", str(e)))
            return tracer

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sys.settrace(tracer)
            try:
                body(out)
            except Exception as e:  # noqa: BLE001 - recorded
                out.append(("raised", type(e).__name__, str(e)))
            finally:
                sys.settrace(None)
        out.extend(("warned", str(w.message)) for w in caught)
        return out

    return run


def forwards_and_backwards(out):
    out.append(1)
    out.append(2)
    out.append(3)
    out.append(4)


def loops(out):
    for i in range(2):
        out.append(i)
        out.append("body")
    out.append(4)
    while len(out) < 99:
        out.append(6)
        break


def handlers(out):
    try:
        out.append(2)
        out.append(1 / 0)
    except ZeroDivisionError as e:
        out.append(type(e).__name__)
        out.append(6)
    out.append(7)
    try:
        out.append(9)
    finally:
        out.append(11)
    out.append(12)


def withs(out):
    import contextlib

    with contextlib.nullcontext(out):
        out.append(4)
        out.append(5)
    out.append(6)


def generator(out):
    def gen():
        out.append(2)
        yield 3
        out.append(4)

    for value in gen():
        out.append(value)
    out.append(8)


def started(out):
    def gen():
        out.append(2)
        yield 3

    out.append(next(gen()))
    out.append(6)


CASES = [
    (forwards_and_backwards, 2, 4),  # forwards: lines 2 and 3 skipped
    (forwards_and_backwards, 3, 1),  # backwards: line 1 again
    (forwards_and_backwards, 2, 2),  # to its own line
    (forwards_and_backwards, 2, 0),  # to the ``def`` line: the first line with code not before it
    (forwards_and_backwards, 2, 99, "after"),
    (forwards_and_backwards, 2, -5, "before"),
    (forwards_and_backwards, 2, "4"),  # not an int
    (forwards_and_backwards, 2, True),  # not exactly an int
    (forwards_and_backwards, 0, 3, "call"),
    (forwards_and_backwards, 4, 1, "return"),
    (loops, 2, 4),  # out of a ``for`` loop: its iterator popped
    (loops, 4, 2),  # into one: refused
    (loops, 3, 1),  # to the loop's head from its body
    (loops, 6, 2),  # from a ``while`` loop into a ``for`` loop's body
    (handlers, 5, 7),  # out of an ``except`` block: the exception handled before it is handled again
    (handlers, 2, 5),  # into an ``except`` block: refused
    (handlers, 3, 1, "exception"),
    (handlers, 11, 12),  # out of a ``finally`` block
    (handlers, 9, 11),  # into a ``finally`` block's normal path
    (withs, 4, 6),  # out of a ``with`` block (its exit not called)
    (withs, 6, 4),  # into one: refused
    (generator, 2, 4),  # inside the generator's frame
    (started, 3, 2, "return"),  # from the ``return`` event of a yield (Note [A jump from a yield]: never
    # resumed here, as CPython 3.11 resumes it one instruction past the target and 3.13 crashes;
    # /tmp/cpy55-probes/p1_yield_jump.py)
    (started, 1, 2, "call"),  # from the ``call`` event of a frame starting
    (generator, 4, 2),  # backwards inside the generator
    (generator, 3, 4, "call"),  # from the ``call`` event of its resumption: 3.11 refuses, 3.12+ jumps
    (generator, 6, 8),  # out of the loop over it (the generator left suspended)
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0].__name__}-{case[1]}-{case[2]}-{case[3:]}")
def test_a_jump_is_cpythons(case) -> None:
    """The lines run, the outcome of the jump (its line, or CPython's ValueError), and the warning 3.12+ gives
    for the unbound locals a jump binds to None, natively and interpreted."""
    body, source, target, *event = case
    check(_jumping(body, source, target, *(e for e in event if e in ("call", "return", "exception", "line"))))


def test_a_jump_in_an_except_block_that_pops_it_handles_the_outer_exception_again() -> None:
    """Jumping out of an ``except`` block nested in another pops the inner one's saved exception: the outer
    one is handled again (``sys.exception()``), as POP_EXCEPT would leave it."""

    def body(out):
        try:
            raise KeyError("outer")
        except KeyError:
            try:
                raise ValueError("inner")
            except ValueError:
                out.append(repr(sys.exception()))
                out.append(10)
            out.append(repr(sys.exception()))
        out.append(repr(sys.exception()))

    check(_jumping(body, 9, 11))


def test_no_jump_outside_a_trace_function() -> None:
    """``f_lineno`` set on a frame outside any trace event: CPython's ValueError (its words name the trace
    function on every version)."""

    def run():
        frame = sys._getframe()
        try:
            frame.f_lineno = frame.f_lineno
        except ValueError as e:
            return "trace" in str(e)
        return "jumped"

    check(run)


def test_f_lineno_cannot_be_deleted() -> None:
    def run():
        try:
            del sys._getframe().f_lineno
        except AttributeError as e:
            return str(e)
        return "deleted"

    check(run)


def test_pdbs_jump_command() -> None:
    """pdb's ``jump`` (bdb's trace function sets ``curframe.f_lineno``): forwards, backwards, and refused into
    a ``for`` loop's body with pdb's report of CPython's words (/tmp/cpy55-probes/p6_pdb_jump.py)."""
    import io
    import pdb

    def body(out):
        out.append(1)
        out.append(2)
        out.append(3)
        for i in range(2):
            out.append(("i", i))
        out.append(9)

    def run():
        out = []
        first = body.__code__.co_firstlineno
        commands = f"jump {first + 3}\nnext\njump {first + 1}\nnext\nnext\njump {first + 5}\ncontinue\n"
        shown = io.StringIO()
        debugger = pdb.Pdb(stdin=io.StringIO(commands), stdout=shown, nosigint=True, readrc=False)
        debugger.use_rawinput = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                debugger.runcall(body, out)
            finally:
                sys.settrace(None)
        reports = [line for line in shown.getvalue().splitlines() if "***" in line]
        return out, reports, [str(w.message) for w in caught]

    check(run)
