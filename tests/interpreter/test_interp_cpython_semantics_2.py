"""Semantics found different by CPython's regression tests probed for issue 13 (2026-12-03: test_weakref,
...), checked natively against ``interpret`` on small programs of their own."""

from __future__ import annotations

import copy
import itertools
import os
import sys
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _describe_each(makers: tuple) -> list[str]:
    out = []
    for make in makers:
        try:
            out.append(repr(make()))
        except Exception as e:  # noqa: BLE001 - the error is the result compared
            out.append(f"{type(e).__name__}: {e}")
    return out


def test_an_iterator_whose_iter_is_not_itself_is_stepped_as_iter_gave_it() -> None:
    """list(), tuple(), sorted(), enumerate() and zip() step the iterator a Python ``__iter__`` returned,
    never ``iter()`` of it: a weakref proxy to a non-iterator raises the proxy's own TypeError, and an
    iterator class with a Python ``__iter__`` is not asked again (test_weakref's test_proxy_bad_next)."""
    not_an_iterator = lambda: 0  # noqa: E731 - what the proxy refers to

    class Sliced(itertools.islice):
        def __iter__(self):
            return iter(["not", "these"])

    def f() -> list[str]:
        class ToProxy:
            def __iter__(self):
                return weakref.proxy(not_an_iterator)

        class ToSliced:
            def __iter__(self):
                return Sliced([1, 2, 3], 2)

        makers = []
        for cls in (ToProxy, ToSliced):
            makers += [lambda c=cls: list(c()), lambda c=cls: tuple(c()), lambda c=cls: sorted(c()),
                       lambda c=cls: list(enumerate(c())), lambda c=cls: list(zip(c(), "ab"))]
        return _describe_each(makers)

    check(f)


def test_a_len_past_the_ssize_range_overflows_in_truth_tests() -> None:
    """``if obj:`` and ``not obj`` with a Python ``__len__`` answering 2**70 raise CPython's OverflowError
    (its length is a Py_ssize_t), as ``len()`` and ``bool()`` do; a negative one is a ValueError first."""

    def f() -> list[str]:
        makers = []
        for n in (2**70, 2**63, 2**63 - 1, -(2**70), 0):
            class Sized:
                def __len__(self, n=n):
                    return n

            makers += [lambda c=Sized: not c(), lambda c=Sized: "yes" if c() else "no",
                       lambda c=Sized: bool(c()), lambda c=Sized: len(c())]
        return _describe_each(makers)

    check(f)


def test_except_star_wraps_a_naked_exception_as_cpython_does() -> None:
    """The group ``except*`` binds for a naked exception holds a tuple (its repr is CPython's), and on 3.13 it
    has a traceback entry of its own at the ``except*`` line; the group an ``except*`` block raises holds a
    list, as natively."""

    def f() -> list:
        out = []
        try:
            raise ValueError(1)
        except* ValueError as e:
            tb = e.__traceback__
            where = None if tb is None else (tb.tb_lineno - f.__code__.co_firstlineno, tb.tb_next)
            out += [repr(e), type(e.args[1]).__name__, where, e.exceptions[0].__traceback__ is tb]
        try:
            try:
                raise ExceptionGroup("eg", [ValueError(1), KeyError(2)])
            except* ValueError:
                raise TypeError from None
        except ExceptionGroup as e:
            out += [repr(e), type(e.args[1]).__name__]
        return out

    check(f)


def test_a_function_frame_has_one_locals_dict_before_3_13() -> None:
    """On 3.11 ``locals()`` returns the frame's one dict, refreshed (an unbound local's key removed) and
    keeping names that are no local's, such as those ``exec()`` wrote: ``exec("z = 9"); locals()["z"]`` is 9
    and ``locals() is locals()``; on 3.13 each call is a new snapshot (PEP 667) and that ``exec`` is lost."""

    def f() -> tuple:
        a = 1
        first = locals()
        exec("b = 6")
        del a
        c = 3
        second = locals()

        def inner():
            return c

        return (first is second, sorted(second), second.get("b"), sys._getframe().f_locals is second,
                inner())

    def g():
        x = 1
        yield sorted(locals())
        del x
        y = 2
        yield sorted(locals()), y

    check(f)
    check(lambda: list(g()))


def test_frame_f_locals_is_3_13s_frame_locals_proxy() -> None:
    """On 3.13 ``sys._getframe().f_locals`` of an interpreted function behaves as CPython's FrameLocalsProxy:
    its repr is a dict's (``{...}`` where it holds itself), a Mapping but not a MutableMapping, names that are
    no local's kept and shown by later ``locals()``, locals not removable, ``|``, ``copy``, ``update`` and
    ``pop`` as natively (3.11: the frame's one locals dict)."""
    import collections.abc

    def f() -> list:
        x = 1
        y = 2
        p = sys._getframe().f_locals
        out = [repr(p), type(p).__name__, isinstance(p, collections.abc.Mapping),
               isinstance(p, collections.abc.MutableMapping)]
        p["extra"] = 5
        out += [sorted(p), p.get("extra"), sorted(locals()), "extra" in p, len(p)]
        del y
        makers = (lambda: p.__delitem__("x"), lambda: p.pop("x"), lambda: p.pop("extra"),
                  lambda: p.pop("extra", "d"), lambda: sorted(p | {"z": 1}), lambda: sorted({"z": 1} | p),
                  lambda: sorted(p.copy()), lambda: p == dict(p), lambda: p.setdefault("x", 9),
                  lambda: p.update({"x": 3}) or x, lambda: p.update([("x", 4)]), lambda: p.update(x=3),
                  lambda: p.__delitem__("nope"), lambda: hash(p), lambda: p.setdefault("new", 7),
                  lambda: [k for k in p if k == "y"], lambda: type(reversed(p)).__name__,
                  lambda: type(copy.copy(p)).__name__, lambda: type(copy.deepcopy(p)).__name__)
        return out + _describe_each(makers)

    check(f)


def test_a_frames_f_trace_and_its_flags_are_stored() -> None:
    """``sys._getframe().f_trace = fn`` (or None, or True) is stored and read back, ``del`` resets it, and
    ``f_trace_lines``/``f_trace_opcodes`` take bools only, as on a frame object (test_frame's
    test_lineno_with_tracing; the trace function runs only under sys.settrace: test_interp_settrace.py)."""

    def f() -> list:
        frame = sys._getframe()
        out = [frame.f_trace, frame.f_trace_lines, frame.f_trace_opcodes]
        fn = lambda *args: None  # noqa: E731 - a trace function never called
        frame.f_trace = fn
        out.append(frame.f_trace is fn)
        frame.f_trace = True
        out.append(frame.f_trace)
        del frame.f_trace
        out.append(frame.f_trace)
        frame.f_trace_lines, frame.f_trace_opcodes = False, True
        out += [frame.f_trace_lines, frame.f_trace_opcodes]
        frame.f_trace_lines = 5
        return out

    check(f)
