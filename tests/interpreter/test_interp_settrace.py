"""``sys.settrace`` called by interpreted code: the events the trace function gets from interpreted frames are
CPython's (call, line, return, exception, opcode; f_trace, f_trace_lines, f_lineno), checked natively against
``interpret`` on small programs that record them (jitcore/interpreter/tracing.py)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check

from jitcore.interpreter import interpret
from jitcore.interpreter.errors import UnsupportedConstruct
from jitcore.interpreter.hooks import Hooks


def _traced(program, names: tuple[str, ...], lines: bool = True, opcodes: bool = False):
    """A function running ``program()`` under a trace function that records the events of the frames of the
    functions named ``names``: (name, event, line relative to the code's first, arg or its type's name)."""

    def run() -> list:
        events: list = []

        def tracer(frame, event, arg):
            code = frame.f_code
            if code.co_name in names:
                shown = arg[0].__name__ if event == "exception" else arg
                events.append((code.co_name, event, frame.f_lineno - code.co_firstlineno, shown))
                if event == "call":
                    frame.f_trace_lines = lines
                    frame.f_trace_opcodes = opcodes
            return tracer

        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            program()
        except Exception as e:  # noqa: BLE001 - recorded
            events.append(("raised", type(e).__name__))
        finally:
            sys.settrace(old)
        events.append(("after", sys.gettrace() is old))
        return events

    return run


def test_calls_lines_returns_and_loops() -> None:
    """``call`` at a function's start, ``line`` at each new line and at each backward jump of a loop (a
    ``while`` loop's body on one line: the line each iteration), ``return`` with the value."""

    def g(x):
        return x + 1

    def f():
        total = 0
        for i in range(3):
            total += g(i)
        i = 0
        while i < 3: i += 1  # noqa: E701 - one line: a backward jump to the same line
        return total

    check(_traced(f, ("f", "g")))


def test_statements_compiled_to_nothing_but_a_line() -> None:
    """``try:``, ``else:``, ``pass`` and a loop's ``while True:`` compile to NOPs, which the interpreter does
    not execute: their line events are CPython's still, and a jump past one (an ``if`` whose body is
    ``pass``, the loop's jump back to its body) gives none for it."""

    def f():
        try:
            x = 1
        except KeyError:
            x = 2
        else:
            x = 3
            if x == 4:
                pass
        finally:
            x = 5
        n = 0
        while True:
            n += 1
            if n > 2:
                break
        return x

    check(_traced(f, ("f",)))


def test_exceptions_raised_caught_and_leaving() -> None:
    """``exception`` where a frame gets a traceback entry (raised there or by a callee; not a re-raise), the
    handler's lines, and ``return`` with None for a frame an exception leaves."""

    def inner():
        raise KeyError("k")

    def middle():
        try:
            inner()
        finally:
            pass

    def f():
        try:
            middle()
        except KeyError:
            pass
        try:
            {}["x"]
        except KeyError as e:
            return str(e)

    check(_traced(f, ("f", "middle", "inner")))


def test_generators_resumed_thrown_into_and_closed() -> None:
    """A generator gives ``call`` at each resumption and ``return`` with each yielded value; an exception
    thrown in gives ``call`` then ``exception``; a comprehension and a ``yield from`` delegation are traced
    too."""

    def gen():
        try:
            yield 1
            yield 2
        except ValueError:
            yield 3

    def sub():
        yield "a"
        return "r"

    def outer():
        r = yield from sub()
        yield r

    def f():
        g = gen()
        out = [next(g), next(g), g.throw(ValueError)]
        g.close()
        out += [x for x in outer()]
        return out

    check(_traced(f, ("f", "gen", "sub", "outer", "<listcomp>")))


def test_class_bodies_with_blocks_and_match() -> None:
    """A class body is a frame (``call``, its lines, ``return``); ``with`` blocks and a ``match`` statement's
    cases give CPython's lines (test_patma's TestTracing)."""

    class CM:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return True

    def f(command):
        class C:
            a = 1
            b = a + 1
        with CM():
            raise ValueError
        match command.split():
            case ["go", direction] if direction in "nesw":
                return f"go {direction}"
            case ["go", _]:
                return "no go"
            case _:
                return C.b

    for command in ("go n", "go x", "spam"):
        check(_traced(lambda command=command: f(command), ("f", "C", "__exit__")))


def test_line_events_off_and_opcode_events() -> None:
    """``f_trace_lines = False`` set in the ``call`` event stops a frame's line events (its other events
    stay); ``f_trace_opcodes = True`` gives an ``opcode`` event before each instruction on 3.11 (3.12+,
    tracing through sys.monitoring, gives none for a flag set in the trace function)."""

    def f():
        a = 1
        b = a + 2
        return b

    check(_traced(f, ("f",), lines=False))
    events = interpret(_traced(f, ("f",), opcodes=True))()
    native = _traced(f, ("f",), opcodes=True)()
    opcodes = sum(1 for event in events if event[1] == "opcode")
    if sys.version_info >= (3, 12):  # whether 3.12 gives them natively depends on what ran before (it did
        # after tests/dispatch's subclass programs): the other events are compared
        events, native = ([event for event in run if event[1] != "opcode"] for run in (events, native))
    assert events == native
    assert opcodes > 5 if sys.version_info < (3, 12) else opcodes == 0


def test_a_trace_function_that_raises_stops_tracing() -> None:
    """What the trace function raises propagates from the traced line (here caught by the program) and
    unsets it: ``sys.gettrace()`` is None after, as CPython's ``trace_trampoline`` does."""

    def run() -> list:
        out: list = []

        def tracer(frame, event, arg):
            if frame.f_code.co_name == "g" and event == "line":
                raise RuntimeError("tracer")
            return tracer

        def g():
            out.append("body")

        sys.settrace(tracer)
        try:
            g()
        except RuntimeError as e:
            out.append(str(e))
        out.append(sys.gettrace())
        sys.settrace(None)
        return out

    check(run)


def test_the_trace_function_is_not_traced_and_gettrace_answers_it() -> None:
    """The trace function's own frames give no events (CPython's ``tstate->tracing``); ``sys.gettrace()``
    answers what interpreted code set; ``sys.settrace()`` without its argument is a TypeError."""

    def run() -> list:
        seen: list = []

        def helper():
            return 1

        def tracer(frame, event, arg):
            seen.append((frame.f_code.co_name, event))
            helper()
            return None

        def g():
            return 2

        sys.settrace(tracer)
        same = sys.gettrace() is tracer
        g()
        sys.settrace(None)
        try:
            sys.settrace()
        except TypeError:
            seen.append("TypeError")
        return [same, *seen]

    check(run)


def test_a_run_with_hooks_still_refuses_settrace() -> None:
    """A run whose hooks see instructions or loads (the jit's) cannot be traced: ``sys.settrace`` there is
    refused as before (JC-I001), and nothing is installed."""

    def f():
        sys.settrace(lambda *a: None)

    hooks = Hooks(on_load_global=lambda frame, name, value: value)
    before = sys.gettrace()
    with pytest.raises(UnsupportedConstruct, match="sys.settrace"):
        interpret(f, hooks)()
    assert sys.gettrace() is before


def test_profile_function_gets_calls_and_returns() -> None:
    """``sys.setprofile()`` in interpreted code: the profile function gets ``call`` (at each start and
    resumption) and ``return`` (with the value; None when an exception leaves) of the interpreted frames,
    after a trace function set too, never ``line`` or ``exception``; ``sys.getprofile()`` answers it. (Its
    ``c_call``/``c_return`` events of builtins are not given interpreted: left out here.)"""

    def run() -> list:
        events: list = []

        def profile(frame, event, arg):
            if frame.f_code.co_name in ("g", "gen", "raises"):
                events.append(("profile", frame.f_code.co_name, event, arg))
            return "ignored"

        def tracer(frame, event, arg):
            if frame.f_code.co_name == "g" and event in ("call", "return"):
                events.append(("trace", event, arg))
            return tracer

        def g(x):
            return x * 2

        def gen():
            yield 1
            yield 2

        def raises():
            raise KeyError("k")

        sys.setprofile(profile)
        events.append(sys.getprofile() is profile)
        g(3)
        list(gen())
        try:
            raises()
        except KeyError:
            pass
        sys.settrace(tracer)
        g(4)
        sys.settrace(None)
        sys.setprofile(None)
        g(5)
        return events

    check(run)


def test_a_profile_function_that_raises_stops_profiling() -> None:
    """What the profile function raises propagates from the call it was told of, and unsets it."""

    def run() -> list:
        out: list = []

        def profile(frame, event, arg):
            if frame.f_code.co_name == "g" and event == "call":
                raise RuntimeError("profile")

        def g():
            out.append("body")

        sys.setprofile(profile)
        try:
            g()
        except RuntimeError as e:
            out.append(str(e))
        out.append(sys.getprofile())
        sys.setprofile(None)
        return out

    check(run)


def test_stop_iteration_events_of_loops_and_delegation() -> None:
    """The StopIteration ending a ``for`` loop gives an ``exception`` event where the iterator raised one: a
    generator returning a value (with no traceback: C made it; a generator returning None, a list's iterator
    raise none) or a Python ``__next__``; a ``yield from`` of a generator returning a value likewise (bdb
    skips a generator's StopIteration without traceback when stepping: test_bdb's generator tests)."""

    def returns_value():
        yield 1
        return "done"

    def returns_none():
        yield 1

    class Countdown:
        def __init__(self):
            self.n = 2

        def __iter__(self):
            return self

        def __next__(self):
            if not self.n:
                raise StopIteration
            self.n -= 1
            return self.n

    def delegates():
        r = yield from returns_value()
        yield r

    def f():
        out = []
        for x in returns_value():
            out.append(x)
        for x in returns_none():
            out.append(x)
        for x in Countdown():
            out.append(x)
        for x in [7]:
            out.append(x)
        for x in delegates():
            out.append(x)
        return out

    def run() -> list:
        events: list = []

        def tracer(frame, event, arg):
            if frame.f_code.co_name in ("f", "delegates") and event == "exception":
                events.append((frame.f_code.co_name, frame.f_lineno, arg[0].__name__, arg[2] is None))
            return tracer

        sys.settrace(tracer)
        result = f()
        sys.settrace(None)
        return [result, events]

    check(run)


def test_code_exec_and_eval_run_is_traced() -> None:
    """``exec``/``eval`` run their code natively: the program's trace and profile functions are CPython's own
    meanwhile, so that code gives them CPython's events (bdb's ``run``/``runeval``, trace's coverage of a
    module), and the thread's native functions are back after."""

    def run() -> list:
        events: list = []

        def tracer(frame, event, arg):
            events.append(("trace", frame.f_code.co_name, event, frame.f_lineno))
            return tracer

        def profile(frame, event, arg):
            if event in ("call", "return"):
                events.append(("profile", frame.f_code.co_name, event))

        code = compile("def h(a):\n    return a + 1\nx = h(1)\ny = x * 2\n", "<traced>", "exec")
        namespace: dict = {}
        sys.settrace(tracer)
        exec(code, namespace)
        value = eval("y + 1", namespace)
        sys.settrace(None)
        sys.setprofile(profile)
        exec("z = 3", namespace)
        sys.setprofile(None)
        return [value, namespace["y"], events, sys.gettrace(), sys.getprofile()]

    check(run)


def test_a_frame_left_by_a_raise_in_its_except_block_returns_at_that_raise() -> None:
    """The ``return`` event of a frame an exception leaves from its own ``except`` block shows the line of
    the ``raise`` there, as CPython's RERAISE restores ``f_lasti`` to it: the plain RAISE_VARARGS routes a
    raise inside a ``try`` to its handler itself (Note [Raises caught in their frame]), so the tracing loop
    did not note it as the raiser, and the event showed the line of the exception handled there (a ``next``
    raising StopIteration, a ``raise KeyError``), in a function, a generator and a coroutine alike (CPython's
    test_sys_settrace test_20_async_for_loop; tracing.raise_traced)."""

    def plain(it):
        try:
            return next(it)
        except StopIteration:
            raise ValueError from None

    def plain2():
        try:
            raise KeyError
        except KeyError:
            x = 1
            raise ValueError(x)  # noqa: B904 - chained implicitly: the case

    def gen(it):
        try:
            yield next(it)
        except StopIteration:
            raise ValueError  # noqa: B904 - chained implicitly: the case

    async def coro(it):
        try:
            return next(it)
        except StopIteration:
            raise ValueError  # noqa: B904 - chained implicitly: the case

    def program():
        for step in (lambda: plain(iter(())), plain2, lambda: next(gen(iter(()))),
                     lambda: coro(iter(())).send(None)):
            try:
                step()
            except ValueError:
                pass

    check(_traced(program, ("plain", "plain2", "gen", "coro")))


def _lasti_in_lineno(frame) -> bool:
    """Whether ``frame.f_lasti`` lies in a ``co_lines`` range of ``frame.f_lineno``."""
    line = None
    for start, end, at in frame.f_code.co_lines():
        if start <= frame.f_lasti < end:
            line = at
    return line == frame.f_lineno


def test_a_trace_events_f_lasti_is_in_its_f_linenos_lines() -> None:
    """At every event, the frame's ``f_lasti`` lies in a ``co_lines`` range of its ``f_lineno``, as CPython's
    (3.13's test_sys_settrace asserts it in its tracer): at the ``call`` event (a RESUME the decoding dropped)
    and the ``line`` event of a ``try:`` (a dropped NOP), ``f_lasti`` was the next decoded instruction's
    offset (Note [A dropped instruction's f_lasti], tracing.py; /tmp/cpy54-probes/p12_lasti_line.py)."""

    def run() -> list:
        events: list = []

        def tracer(frame, event, arg):
            if frame.f_code.co_name == "body":
                events.append((event, frame.f_lineno - frame.f_code.co_firstlineno, _lasti_in_lineno(frame)))
            return tracer

        def body():
            x = 1
            for i in range(2):
                x += i
            try:
                raise KeyError
            except KeyError:
                pass
            while x > 3:
                x -= 1
            return x

        sys.settrace(tracer)
        try:
            body()
        finally:
            sys.settrace(None)
        return events

    check(run)


def test_the_return_event_of_a_frame_left_by_a_raise_in_its_except_block_shows_that_raises_f_lasti() -> None:
    """The ``return`` event of a frame an exception leaves from its ``except`` block (``raise KeyError(key)
    from None``, os._Environ.__getitem__'s) shows the raise's line and an ``f_lasti`` in it, as CPython's
    RERAISE restores them: ``f_lasti`` was the RERAISE's, in another line (3.13's JumpTracer asserts they
    agree: every async JumpTestCase of its test_sys_settrace failed in asyncio's ``os.environ.get``;
    /tmp/cpy55-probes/p4_lasti_exception.py)."""

    def run() -> list:
        events: list = []

        def tracer(frame, event, arg):
            if frame.f_code.co_name == "body":
                events.append((event, frame.f_lineno - frame.f_code.co_firstlineno, _lasti_in_lineno(frame)))
            return tracer

        def body(key):
            try:
                return {}[key]
            except KeyError:
                raise KeyError(key) from None

        sys.settrace(tracer)
        try:
            body("k")
        except KeyError:
            pass
        finally:
            sys.settrace(None)
        return events

    check(run)


def test_a_generator_an_exception_thrown_in_leaves_gives_its_return_event() -> None:
    """``gen.throw(exc)`` that the generator does not catch: ``call``, ``exception``, then ``return`` None as
    the exception leaves, as CPython's; 3.11's interpreted frame (no handler of its own there) gave no
    ``return`` (/tmp/cpy55-probes/p7_throw_events.py)."""

    def gen(out):
        out.append(1)
        yield 2
        out.append(3)

    def program():
        g = gen([])
        next(g)
        try:
            g.throw(KeyError("k"))
        except KeyError:
            pass

    check(_traced(program, ("gen",)))
