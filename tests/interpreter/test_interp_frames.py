"""Frames as Python code sees them under ``interpret``: ``sys._getframe()`` and ``inspect.currentframe()``
give a frame proxy (jitcore/interpreter/lookasides.py ``FrameProxy``) that the standard library's frame
tools accept as a frame; generators' delegation reports what CPython reports (found by running CPython's
test_yield_from)."""

from __future__ import annotations

import inspect
import os
import sys
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _caller_names() -> list[str]:
    return [info.function for info in inspect.stack()]


def test_inspect_stack_sees_interpreted_frames_and_delegating_generators() -> None:
    """CPython's test_delegator_is_visible_to_debugger: ``inspect.stack()`` raised "<frame (interpreted)
    ...> is not a frame or traceback object"."""

    def gen():
        yield _caller_names()[:4]
        yield _caller_names()[:4]

    def spam(g):
        yield from g

    def program():
        return list(spam(gen()))

    assert check(program)[0][:3] == ["_caller_names", "gen", "spam"]


def test_frame_tools_of_the_standard_library() -> None:
    def program():
        frame = inspect.currentframe()
        info = inspect.getframeinfo(frame)
        outer = inspect.getouterframes(frame)[:2]
        last = traceback.extract_stack()[-1]
        walked = [f.f_code.co_name for f, _ in traceback.walk_stack(frame)][:2]
        return (info.function, info.lineno, info.code_context, [o.function for o in outer], last.name,
                last.lineno, walked, inspect.getmodule(frame).__name__, inspect.isframe(frame),
                isinstance(sys._getframe(), types.FrameType))

    check(program)


def test_a_delegates_failing_close_lookup_is_reported_as_unraisable() -> None:
    """CPython's test_broken_getattr_handling: ``close()`` of a generator delegating to an iterator whose
    ``__getattr__`` raises reports the error through ``sys.unraisablehook`` and closes; it raised."""

    class Broken:
        def __iter__(self):
            return self

        def __next__(self):
            return 1

        def __getattr__(self, attr):
            return 1 / 0

    def program():
        seen = []
        hook, sys.unraisablehook = sys.unraisablehook, lambda args: seen.append(
            (args.exc_type, type(args.object).__name__, args.err_msg))
        try:
            def g():
                yield from Broken()

            gen = g()
            first = next(gen)
            gen.close()
        finally:
            sys.unraisablehook = hook
        return first, seen, gen.gi_frame

    assert check(program)[1] == [(ZeroDivisionError, "Broken", None)]


def test_the_type_of_a_generators_frame() -> None:
    def program():
        def gen():
            yield 1

        g = gen()
        return type(g.gi_frame), type(sys._getframe())

    check(program)


def test_a_dropped_generator_is_closed_at_once() -> None:
    """An interpreted generator was in a reference cycle with its frame, so dropping it ran its
    ``finally`` only at the next cyclic collection (CPython frees it at once)."""
    import gc

    def program():
        out = []

        def gen():
            try:
                yield 1
            finally:
                out.append("closed")

        g = gen()
        next(g)
        del g
        out.append("after del")
        return out

    enabled = gc.isenabled()
    gc.disable()
    try:
        assert check(program) == ["closed", "after del"]
    finally:
        if enabled:
            gc.enable()


_EXECD = """
import sys
back = sys._getframe().f_back
seen = (type(back).__name__, back.f_code.co_name, back.f_code.co_qualname, back.f_code.co_filename == FILE,
        back.f_lineno - LINE, back.f_globals is GLOBALS, sys._getframe(1).f_code.co_name)
"""


def test_code_exec_runs_is_called_from_the_callers_frame() -> None:
    """Module code ``exec`` runs (and an ``eval``) sees the function that called ``exec`` as its
    ``f_back``: its name, qualified name, file, line and globals (Note [The frame exec'd code is called
    from], lookasides.py); it saw jitcore's ``native_traced`` in jitcore's module
    (/tmp/cpy52-probes/p4b.py)."""

    def f() -> list[object]:
        namespace = {"FILE": __file__, "LINE": sys._getframe().f_lineno, "GLOBALS": globals()}
        exec(_EXECD, namespace)
        out: list[object] = [namespace["seen"]]
        exec(compile(_EXECD, "<module>", "exec"), namespace)
        out.append(namespace["seen"])
        back, line = eval("(sys._getframe().f_back, sys._getframe().f_back.f_lineno)", {"sys": sys})
        out.append((back.f_code.co_name, back.f_globals is globals(), line - namespace["LINE"]))
        return out

    check(f)
