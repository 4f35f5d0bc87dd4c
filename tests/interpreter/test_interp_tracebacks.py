"""Tracebacks show the user's interpreted frames (file, line, source) and none of the interpreter's."""

from __future__ import annotations

import sys
import traceback
import weakref

import pytest

from jitcore.interpreter import Hooks, UnsupportedConstruct, interpret


def _helper(y):
    return y / 0  # the failing line


def _entry(x):
    z = x + 1
    return _helper(z)


def test_same_exception_object_and_user_frames():
    raised = ZeroDivisionError("mine")

    def f():
        raise raised

    with pytest.raises(ZeroDivisionError) as info:
        interpret(f)()
    assert info.value is raised


def test_traceback_shows_user_frames_not_interpreter():
    try:
        interpret(_entry)(1)
    except ZeroDivisionError:
        text = traceback.format_exc()
        frames = traceback.extract_tb(sys.exc_info()[2])
    names = [f.name for f in frames]
    assert names[-2:] == ["_entry", "_helper"]
    assert "jitcore/interpreter" not in text
    assert "return y / 0  # the failing line" in text
    assert frames[-1].lineno == _helper.__code__.co_firstlineno + 1
    assert frames[-1].filename == __file__


def _last_two_entries(fn) -> str:
    try:
        fn(1)
    except ZeroDivisionError as e:
        return "".join(traceback.format_tb(e.__traceback__)[-2:])
    raise AssertionError("did not raise")


def test_traceback_columns_point_at_expression():
    text = _last_two_entries(interpret(_entry))
    assert "~~^~~" in text  # the column span of ``y / 0``
    # the user's entries print exactly as natively (3.13 leaves out markers spanning a whole line)
    assert text == _last_two_entries(_entry)


def test_caught_exception_traceback_inside_interpreted_code():
    def f():
        try:
            _entry(1)
        except ZeroDivisionError as e:
            return [entry.name for entry in traceback.extract_tb(e.__traceback__)]

    assert interpret(f)() == ["f", "_entry", "_helper"]


def test_generator_exception_traceback():
    def gen():
        yield 1
        raise KeyError("g")

    def f():
        return list(gen())

    try:
        interpret(f)()
    except KeyError:
        text = traceback.format_exc()
    assert 'raise KeyError("g")' in text
    assert "jitcore/interpreter" not in text


# a run whose hooks see loads (as the jit's) refuses sys.settrace (JC-I001)
_LOAD_HOOKS = Hooks(on_load_global=lambda frame, name, value: value)


def test_unsupported_construct_names_file_and_line():
    def f():
        sys.settrace(lambda *a: None)

    before = sys.gettrace()
    with pytest.raises(UnsupportedConstruct) as info:
        interpret(f, _LOAD_HOOKS)()
    assert info.value.code == "JC-I001"
    assert f"{__file__}:{f.__code__.co_firstlineno + 1}" in str(info.value)
    assert sys.gettrace() is before  # nothing was installed by the refusal


def test_unsupported_construct_skips_user_handlers():
    log = []

    def f():
        try:
            sys.settrace(print)
        except Exception:  # noqa: BLE001 - must not catch jitcore errors
            log.append("user handler ran")

    with pytest.raises(UnsupportedConstruct):
        interpret(f, _LOAD_HOOKS)()
    assert log == []


def test_lookaside_exception_propagates_unchanged():
    boom = RuntimeError("from lookaside")

    def target():
        return 1

    def replacement():
        raise boom

    def f():
        try:
            return target()
        except RuntimeError as e:
            return e

    assert interpret(f, Hooks(lookasides={target: replacement}))() is boom


def test_interpreter_bug_is_reported_as_interpreter_error(monkeypatch):
    from jitcore.interpreter import InterpreterError, registry
    from jitcore.interpreter.run import _TABLES

    def broken_pop_top(frame, inst):
        frame.stack.pop()
        return frame.no_such_slot  # a bug in a handler: an AttributeError on the interpreter's own Frame

    monkeypatch.setattr(registry, "HANDLERS", {**registry.HANDLERS, "POP_TOP": broken_pop_top})
    _TABLES.clear()
    log = []

    def f():
        try:
            len([])
        except Exception:  # noqa: BLE001 - must not see the interpreter's bug
            log.append("user handler ran")

    try:
        with pytest.raises(InterpreterError) as info:
            interpret(f)()
    finally:
        monkeypatch.undo()
        _TABLES.clear()
    assert log == []
    assert info.value.code == "JC-I002"
    assert "POP_TOP" in str(info.value)


def test_user_index_error_stays_a_user_exception():
    def f():
        return [].pop()

    with pytest.raises(IndexError, match="pop from empty list"):
        interpret(f)()


def _entries(tb) -> list[tuple]:
    return [(s.name, s.lineno, s.end_lineno, s.colno, s.end_colno, s.line) for s in traceback.extract_tb(tb)]


def _raises_caught_in_their_frame():
    seen = []
    reused = KeyError("reused")
    stale = LookupError("stale")
    stale.__context__ = IndexError("an old context")
    for i in range(3):
        try:
            if i == 0:
                raise ValueError(i)  # a class called: the fast path for builtin exception classes
            if i == 1:
                raise reused from TypeError("cause")
            try:
                raise reused  # a second raise of an instance that has a traceback already
            finally:
                seen.append("finally")
        except (ValueError, KeyError) as e:
            try:
                raise RuntimeError("while handling")  # chained to the exception being handled
            except RuntimeError as inner:
                seen.append((repr(inner.__context__), _entries(inner.__traceback__)))
            try:
                raise stale  # an explicit raise re-chains even an instance that has a context already
            except LookupError as again:
                seen.append(repr(again.__context__))
            seen.append((repr(e), repr(e.__cause__), e.__suppress_context__, repr(e.__context__),
                         _entries(e.__traceback__)))
    return seen


def test_raises_caught_in_their_frame_chain_and_locate_as_natively():
    # RAISE_VARARGS routes a raise inside a ``try`` to its handler without raising natively (Note [Raises
    # caught in their frame]): chaining, causes and traceback entries must be CPython's
    assert interpret(_raises_caught_in_their_frame)() == _raises_caught_in_their_frame()


class _Payload:
    pass


def _raise_in_callee(log):
    payload = _Payload()
    log.append(weakref.ref(payload))
    raise ValueError("deep")


def _catch_and_forget():
    log = []
    try:
        _raise_in_callee(log)
    except ValueError as e:
        alive_while_handled = log[0]() is not None
        text = "".join(traceback.format_tb(e.__traceback__))
    return alive_while_handled, log[0], text


def test_traceback_entries_keep_the_raising_frames_alive_until_dropped():
    # as natively (test_exceptions' test_memory_error_cleanup): a traceback keeps the frames it passed
    # through, and their locals, alive while the exception is handled, and nothing once it is dropped, with
    # no collection needed (Note [Traceback frame objects]: the raisers run in a generator of their own)
    alive, ref, text = interpret(_catch_and_forget)()
    assert (alive, ref() is None) == (True, True)
    assert "_raise_in_callee(log)" in text and 'raise ValueError("deep")' in text
    assert interpret(_catch_and_forget)()[2] == text  # the raisers made for the first raise, reused
    try:
        interpret(_raise_in_callee)([])
    except ValueError as e:
        frames = [tb.tb_frame for tb in _walk(e.__traceback__)][1:]
    assert [f.f_code.co_name for f in frames] == ["_raise_in_callee"]
    assert frames[0].f_globals is globals()
    assert frames[0].f_lineno == _raise_in_callee.__code__.co_firstlineno + 3


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _locals_of_entries(fn, *args):
    """Each traceback entry's (function name, f_locals) after ``fn`` raised, then the same after
    ``traceback.clear_frames``, and the innermost entries printed with ``capture_locals``."""
    try:
        fn(*args)
    except ZeroDivisionError as e:
        tb = e.__traceback__
    entries = list(_walk(tb))[-2:]  # the two user frames (the first entry is this function's)
    seen = [(t.tb_frame.f_code.co_name, dict(t.tb_frame.f_locals)) for t in entries]
    summary = traceback.StackSummary.extract(((t.tb_frame, t.tb_lineno) for t in entries),
                                             capture_locals=True)
    printed = "".join(summary.format())
    traceback.clear_frames(tb)
    cleared = [dict(t.tb_frame.f_locals) for t in entries]
    return seen, printed, cleared


def _divides(y, scale=3):
    unused = None  # noqa: F841 - a bound local
    if y > 100:
        never = 1  # noqa: F841 - an unbound local: not in f_locals
    return (y * scale) / 0


def _outer_with_cell(x):
    held = [x]  # a cell (the lambda reads it)
    return _divides(len((lambda: held)()) + x)


def test_traceback_frames_hold_the_users_locals():
    # a traceback entry's frame shows the locals of the user's frame at the raise (unbound ones left out,
    # cells by their contents), as natively: traceback's capture_locals, pdb.post_mortem and pytest's
    # --showlocals read tb_frame.f_locals; clear_frames empties them (CPython's test_traceback test_clear,
    # test_print, test_from_exception)
    assert _locals_of_entries(interpret(_outer_with_cell), 4) == _locals_of_entries(_outer_with_cell, 4)


def _recurse_forever():
    _recurse_forever()


def _recursion_report():
    try:
        _recurse_forever()
    except RecursionError as e:
        text = "".join(traceback.format_exception(e))
        # (the message's ending names the C code that ran out of stack: which, differs interpreted)
        last = text.splitlines()[-1].startswith("RecursionError: maximum recursion depth exceeded")
        return type(e).__name__, e.__context__, "jitcore" in text, last


def test_recursion_error_has_no_interpreter_context():
    # the RecursionError that unbounded recursion raises reaches the handler alone, as natively: routing it
    # through the frames at the recursion limit needs calls of the interpreter's own, which raised further
    # RecursionErrors chained onto it (each printed with the interpreter's frames, "During handling of the
    # above exception, another exception occurred")
    assert interpret(_recursion_report)() == _recursion_report()


def _recurse_in_handler():
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        _recurse_in_handler()


def _handler_recursion_report():
    try:
        _recurse_in_handler()
    except RecursionError as e:
        text = "".join(traceback.format_exception(e))
        return type(e).__name__, type(e.__context__).__name__, "jitcore" in text
    except ZeroDivisionError as e:  # (a frame at the limit that skipped its handler)
        return type(e).__name__


def test_recursion_in_a_handler_ends_in_a_recursion_error():
    # a handler that recurses ends in a RecursionError whose context is the handled exception, as natively,
    # even where the interpreter's own unwinding runs out of stack first (test_long_context_chain)
    assert interpret(_handler_recursion_report)() == _handler_recursion_report() == (
        "RecursionError", "ZeroDivisionError", False)


def _released_while_handled():
    obj = _Payload()
    ref = weakref.ref(obj)
    try:
        try:
            raise ValueError("first")
        except ValueError:
            raise KeyError("second")  # noqa: B904
    except KeyError as e:
        e.__context__ = None
        obj = None  # noqa: F841 - the rebinding under test
        return ref() is None


def test_a_handling_frame_rebinding_a_local_releases_it():
    # the entry of a frame that handles the exception and runs on does not keep its locals' values of the
    # raise alive (CPython's is the live frame): test_exceptions' testExceptionCleanupState
    assert interpret(_released_while_handled)() is _released_while_handled() is True
