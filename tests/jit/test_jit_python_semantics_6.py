"""Python semantics under ``jitcore.jit`` found by the differential probes of issue 14 (2026-12-05):
programs run eagerly and jitted, their values and exception chains compared. Each test fails before
its fix.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from jit_helpers import exception_chain
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

try:
    from _testcapi import exception_print as _exception_print
except ImportError:  # a CPython built without its test extensions: traceback.walk_tb alone is compared
    _exception_print = None


class _Index:
    """An index object whose ``__index__`` returns the number it holds."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n


def test_a_modules_builtin_given_to_c_runs_its_lookaside() -> None:
    """``sorted(objs, key=operator.index)``, ``map(operator.index, objs)`` and
    ``max(..., key=operator.index)`` over objects whose ``__index__`` returns a number the jit made
    dynamic raised "__index__ returned non-int (type NumberProxy)" from the call where ``n`` became
    dynamic: the C builtin called ``operator.index`` natively. A module's builtin with a lookaside is
    now called through the interpreter (Note [A module's builtin with a lookaside, called by C])."""

    def program(x: torch.Tensor, n: int) -> Any:
        objs = [_Index(n + 1), _Index(n), _Index(n + 2)]
        return ([o.n for o in sorted(objs, key=operator.index)], list(map(operator.index, objs)),
                max(objs, key=operator.index).n, min(objs, key=operator.index).n,
                list(filter(operator.index, [_Index(0), _Index(n)])) != [], x + n)

    jfn = jitcore.jit(program)
    for n in (2, 3, 1, 4, 2):
        expected, got = program(torch.ones(2), n), jfn(torch.ones(2), n)
        assert got[:5] == expected[:5], (n, got, expected)
        assert all(type(v) is int for v in got[1]), got[1]
        assert torch.equal(got[5], expected[5])


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("value", fn(*args).tolist())
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return ("raised", exception_chain(error))


def test_an_error_the_computation_raises_inside_an_except_is_chained_to_the_handled_one() -> None:
    """``try: raise KeyError / except KeyError: return x[i]`` with ``i`` a tensor holding an index out of
    range: on a call the cache answered, the computation's IndexError had no ``__context__`` (no
    ``except`` clause runs there); eager's has the KeyError, and its chain (Note [An error the
    computation raises while the program handled one])."""

    def handled(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        try:
            raise KeyError("k")
        except KeyError:
            return x[i]

    def handled_chained(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        try:
            try:
                raise ValueError("inner")
            except ValueError as inner:
                raise KeyError("outer") from inner
        except KeyError:
            return x[i] * 2

    def unhandled(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        try:
            raise KeyError("k")
        except KeyError:
            pass
        return x[i]

    for program in (handled, handled_chained, unhandled):
        jfn = jitcore.jit(program)
        for i in (1, 2, 5, 7, 0):
            expected = _outcome(program, torch.arange(3.0), torch.tensor(i))
            assert _outcome(jfn, torch.arange(3.0), torch.tensor(i)) == expected, (program.__name__, i)


def test_a_list_c_changes_in_place_is_the_programs_list() -> None:
    """``heapq.heapify(heap)``, ``heappush``, ``heappop`` and ``bisect.insort`` on a list of dynamic numbers
    changed a copy that held their values: from the call where ``n`` became dynamic, the program's list kept
    its items, so ``[heappop(heap) for _ in range(k)]`` gave the smallest item k times (test_heapq's
    test_heapsort jitted). The list itself is handed to C, its numbers made their values in it (Note [A list
    C is handed is the program's])."""
    import bisect
    import heapq

    def program(x: torch.Tensor, n: int) -> Any:
        heap = [n + 3, n, n + 1, n + 2]
        heapq.heapify(heap)
        first = heapq.heappop(heap)
        heapq.heappush(heap, n - 1)
        pairs = [(n + 1, "b"), (n, "a")]
        heapq.heapify(pairs)
        ordered = [n + 5, n]
        bisect.insort(ordered, n + 2)
        return [heapq.heappop(heap) for _ in range(4)], first, heap, pairs[0], ordered, x + n

    jfn = jitcore.jit(program)
    for n in (1, 2, 3, 5, 2):
        expected, got = program(torch.ones(2), n), jfn(torch.ones(2), n)
        assert got[:5] == expected[:5], (n, got, expected)
        assert torch.equal(got[5], expected[5])


def test_bitwise_operators_of_a_dynamic_number() -> None:
    """``1 << n``, ``n >> 1``, ``n & 1``, ``7 | n``, ``3 ^ n`` and ``~n`` raised "unsupported operand type(s)"
    from the call where ``n`` became a dynamic number (test_int's test_pylong_roundtrip jitted): the proxy had
    only the arithmetic operators (Note [Bitwise operators of a dynamic number]). A float operand raises
    Python's own TypeError."""

    def program(x: torch.Tensor, n: int) -> Any:
        bits = (1 << n, n << 2, 5 >> n, n >> 1, n & 1, 7 & n, n | 8, 3 | n, n ^ 5, 3 ^ n, ~n, -(~n) << 1)
        return bits, x * (n & 3), x[: (1 << n) % 4 + 1]

    def with_float(x: torch.Tensor, n: int) -> Any:
        return x + (1.5 << n)

    jfn = jitcore.jit(program)
    for n in (1, 2, 3, 4, 2):
        expected, got = program(torch.arange(4.0), n), jfn(torch.arange(4.0), n)
        assert got[0] == expected[0], (n, got[0], expected[0])
        assert all(type(v) is int for v in got[0])
        assert torch.equal(got[1], expected[1]) and torch.equal(got[2], expected[2])
    jfloat = jitcore.jit(with_float)
    for n in (1, 2, 3):
        try:
            jfloat(torch.ones(1), n)
        except TypeError as error:
            assert "unsupported operand type(s) for <<: 'float' and 'int'" in str(error)
        else:
            raise AssertionError("1.5 << n raised nothing")


def test_an_error_raised_on_a_retrace_is_not_chained_to_the_jits_first_pass() -> None:
    """An index that changes between calls makes the next pass symbolic; where that pass raises, a static
    pass runs the call again. It ran inside the handler of the first pass's exception, so the program's
    IndexError carried a copy of itself as ``__context__`` (eager: none), and a traceback printed "During
    handling of the above exception" over one error (Note [No pass inside an except block]). The program
    that catches its own error is a control: the interpreter chains what it handles, and did before."""

    def index(x: torch.Tensor, i: int) -> torch.Tensor:
        return x[i] + 1

    def context_seen(x: torch.Tensor, i: int) -> tuple[torch.Tensor, bool]:
        try:
            return x[i] + 1, True
        except IndexError as error:
            return x.sum(), error.__context__ is None

    def _outcome(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
            return exception_chain(error)

    for fn in (index, context_seen):
        jfn = jitcore.jit(fn)
        for i in (1, 5, 7, 2, 6):
            x = torch.arange(3.0)
            expected, got = _outcome(fn, x, i), _outcome(jfn, x, i)
            if isinstance(expected, list):
                assert got == expected, (fn.__name__, i)
            else:
                torch.testing.assert_close(got, expected)


def _frames_past_a_generator(x: torch.Tensor) -> tuple[int, list[str], torch.Tensor]:
    """How many frames one call deeper adds past a generator C steps, and jitcore's files among them."""
    import traceback

    def deeper() -> list:
        return list(traceback.walk_stack(None))

    outer = list(traceback.walk_stack(None))
    inner = deeper()
    jitcores = [frame.f_code.co_filename for frame, _ in inner if "/jitcore/" in frame.f_code.co_filename]
    return len(inner) - len(outer), jitcores, x + 1


def _calls(fn: Any, x: torch.Tensor) -> Any:
    return _calls_once_more(fn, x)


def _calls_once_more(fn: Any, x: torch.Tensor) -> Any:
    return fn(x)


def test_frames_past_the_outermost_interpreted_one_are_the_callers() -> None:
    """A frame object's ``f_back`` chain past the jitted function's frame goes on at its caller, as eagerly:
    asked for inside a generator C steps (``list(traceback.walk_stack(None))``), it went through the jit's
    hook frame and the interpreter's native frames (test_traceback's ``test_walk_stack``: 7 where eagerly 1;
    Note [The native frames around a hooked run], interpreter/lookasides.py). (This suite's conftest wraps
    each jitted call in a frame of its own, so the frames' names are not compared.)"""
    x = torch.ones(2)
    eager = _calls(_frames_past_a_generator, x)
    jitted = _calls(jitcore.jit(_frames_past_a_generator), x)
    assert eager[:2] == jitted[:2]
    assert torch.equal(eager[2], jitted[2])


class _NoSin(TwoTensor):
    """A TwoTensor whose ``__torch_dispatch__`` refuses ``aten.sin``."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.sin.default:
            raise ValueError("no sin here")
        return super().__torch_dispatch__(func, types, args, kwargs)


def _opaque_call_fails(x: torch.Tensor) -> Any:
    www = 1
    return www(0)


def _torch_op_fails(x: torch.Tensor) -> Any:
    return x @ torch.ones(5, 5)


def _dispatch_fails(x: torch.Tensor) -> Any:
    return _NoSin(x, x).sin()


class _RefusingForward(torch.autograd.Function):
    """An autograd.Function whose forward raises."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no forward here")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


def _function_forward_fails(x: torch.Tensor) -> Any:
    return _RefusingForward.apply(x)


def _entries_of_caught(fails: Any, x: torch.Tensor) -> tuple[list, list, torch.Tensor]:
    """The function name of each traceback entry of the error ``fails(x)`` raises, as ``traceback.walk_tb``
    and C's ``PyErr_Display`` (``_testcapi.exception_print``, where there is one) show them."""
    import io
    import sys
    import traceback

    try:
        fails(x)
    except Exception as error:  # noqa: BLE001 - the program's view of it is what is compared
        walked = [frame.f_code.co_name for frame, _ in traceback.walk_tb(error.__traceback__)]
        printed: list = []
        if _exception_print is not None:
            stream, sys.stderr = sys.stderr, io.StringIO()
            try:
                _exception_print(error)
                text = sys.stderr.getvalue()
            finally:
                sys.stderr = stream
            printed = [line.split(", in ")[-1] for line in text.splitlines() if line.startswith("  File")]
    return walked, printed, x + 1


def test_a_caught_errors_traceback_shows_none_of_the_jits_entries() -> None:
    """An error the program catches carries the program's entries only, as eagerly: one an opaque C call, a
    torch op or a subclass's ``__torch_dispatch__`` raised listed ``_opaque_call``, ``offer_native``,
    ``call_watched`` (or a dozen of the jit's torch-op entries and torch's ``_dynamo`` wrappers) after
    them, in ``traceback.walk_tb`` and in C's printing (test_traceback's CPythonTracebackErrorCaretTests
    jitted; Note [The hooks' traceback entries], interpreter/tracebacks.py). An autograd.Function's forward
    is below torch's ``Function.apply`` frame, as eagerly (the jit's lookaside's stand-in)."""
    for fails in (_opaque_call_fails, _torch_op_fails, _dispatch_fails, _function_forward_fails):
        x = torch.ones(2, 2)
        eager = _entries_of_caught(fails, x)
        jitted = jitcore.jit(_entries_of_caught)(fails, x)
        assert jitted[:2] == eager[:2], fails.__name__
        assert fails.__name__ in eager[0], eager
        torch.testing.assert_close(jitted[2], eager[2])


class _Dropped:
    """An object whose lifetime is watched."""


def _freed_after_a_caught_c_error(x: torch.Tensor) -> tuple[bool, torch.Tensor]:
    import weakref

    obj = _Dropped()
    watch = weakref.ref(obj)
    try:
        len(obj)
    except TypeError:
        pass
    del obj
    return watch() is None, x + 1


def test_an_object_a_c_call_raised_over_is_freed_once_the_error_is_dropped() -> None:
    """The entries hidden from the program are kept for the jit's reports without the hooks' frames: a frame
    holds its locals and its callers' (an opaque call's arguments), which would keep ``obj`` alive after the
    handler dropped the error (Note [The hooks' traceback entries]; eagerly it is freed at once)."""
    x = torch.ones(2)
    assert _freed_after_a_caught_c_error(x)[0]
    assert jitcore.jit(_freed_after_a_caught_c_error)(x)[0]


def _a_class_made_and_dropped(x: torch.Tensor) -> tuple[bool, bool, torch.Tensor]:
    import gc
    import weakref

    class Made:
        pass

    Made.instance = Made()
    watch = weakref.ref(Made)

    def made() -> int:
        return 1

    watch_function = weakref.ref(made)
    del Made, made
    gc.collect()
    return watch() is None, watch_function() is None, x + 1


def test_a_class_or_function_the_program_made_and_dropped_is_freed() -> None:
    """A class or function the program made and dropped is freed at ``gc.collect()``, as eagerly: the pass's
    record of what the program made held it to the pass's end (test_ordered_dict's test_reference_loop,
    test_functools' test_lru_cache_weakrefable, 3.13 test_inspect's
    test_cache_does_not_cause_classes_to_persist jitted; jit/made_functions.py MadeHere)."""
    x = torch.ones(2)
    eager = _a_class_made_and_dropped(x)
    jitted = jitcore.jit(_a_class_made_and_dropped)(x)
    assert jitted[:2] == eager[:2] == (True, True)
    torch.testing.assert_close(jitted[2], eager[2])


def _recursive_repr(x: torch.Tensor) -> tuple[str, torch.Tensor]:
    """``repr()`` of an object whose ``__repr__`` formats itself with ``str.format`` (as ``_pyio``'s readers
    do): a RecursionError through every level."""

    class Loop:
        def __repr__(self) -> str:
            return "<{!r}>".format(self)  # noqa: UP032 - the jit's str.format calls back for {!r}

    try:
        repr(Loop())
        out = "no error"
    except RecursionError as error:
        out = type(error).__name__
    return out, x + 1


def test_an_error_through_many_nested_hooked_calls_is_not_walked_at_every_level() -> None:
    """A RecursionError through ~500 nested ``repr()`` calls, each the jit's call back into the interpreter,
    had its traceback walked, its hidden entries put back and hidden again whole at every level: 0.8 s
    before 8d2b6b2, over 120 s after (test_io's PyBufferedReaderTest.test_recursive_repr jitted; Note [The
    hooks' traceback entries]); now ~0.2 s. The bound is loose, for loaded machines."""
    import time

    x = torch.ones(2)
    eager = _recursive_repr(x)
    start = time.perf_counter()
    jitted = jitcore.jit(_recursive_repr)(x)
    assert time.perf_counter() - start < 30
    assert jitted[0] == eager[0] == "RecursionError"
    torch.testing.assert_close(jitted[1], eager[1])
