"""The process environment inside a jitted function (jitcore/jit/environment.py): reads of
``os.environ`` are guarded, so a changed environment is seen (the trace kept the first call's value:
a stale answer), and writes make the call run eagerly."""

from __future__ import annotations

import os
import warnings
from collections import UserList
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore

X = torch.ones(3)
KEYS = ("JITCORE_TEST_SCALE", "JITCORE_TEST_NEGATE", "JITCORE_TEST_ADD", "JITCORE_TEST_OFFSET")


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch):
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)

    def set_to(values: dict[str, str]) -> None:
        for key in KEYS:
            if key in values:
                monkeypatch.setenv(key, values[key])
            else:
                monkeypatch.delenv(key, raising=False)

    return set_to


def _configured(x):
    scale = float(os.environ.get("JITCORE_TEST_SCALE", "1"))
    if os.getenv("JITCORE_TEST_NEGATE"):
        x = -x
    if "JITCORE_TEST_ADD" in os.environ:
        x = x + 1
    try:
        x = x + float(os.environ["JITCORE_TEST_OFFSET"])
    except KeyError:
        pass
    return x * scale


def test_reads_of_the_environment_follow_its_changes(environment) -> None:
    jf = jitcore.jit(_configured)
    configurations = [
        {}, {}, {"JITCORE_TEST_SCALE": "3"}, {"JITCORE_TEST_SCALE": "3"}, {"JITCORE_TEST_NEGATE": "1"},
        {"JITCORE_TEST_ADD": ""}, {"JITCORE_TEST_OFFSET": "0.5"}, {"JITCORE_TEST_SCALE": "2"}, {},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # traced
        for values in configurations:
            environment(values)
            assert_same(jf(X), _configured(X))
    assert jitcore.cache_misses(jf) == 6  # one entry per distinct environment


def test_writes_to_the_environment_run_eagerly(environment) -> None:
    def f(x):
        os.environ["JITCORE_TEST_SCALE"] = "2"
        return x * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            environment({})
            assert_same(jitcore.jit(f)(X), X * 2)
            assert os.environ["JITCORE_TEST_SCALE"] == "2"
    assert any("runs eagerly" in str(w.message) and "environment" in str(w.message) for w in caught)


def test_setting_the_recursion_limit_runs_eagerly() -> None:
    """``sys.setrecursionlimit`` inside: the pass's own raised limit was put back when it ended, so the
    program's limit was lost (and a cached call would not set it); the call runs eagerly instead."""
    import sys

    def f(x, limit):
        sys.setrecursionlimit(limit)
        return x * 2

    before = sys.getrecursionlimit()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jf = jitcore.jit(f)
            for limit in (before + 123, before + 456):
                assert_same(jf(X, limit), X * 2)
                assert sys.getrecursionlimit() == limit
        assert any("recursion limit" in str(w.message) for w in caught)
    finally:
        sys.setrecursionlimit(before)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except RecursionError:
        return RecursionError


def _descend(depth: int, fn: Any) -> Any:
    """``fn()`` called ``depth`` frames deeper than this one."""
    return fn() if depth == 0 else _descend(depth - 1, fn)


def test_the_program_sees_and_meets_the_callers_recursion_limit() -> None:
    """Note [The program's recursion limit]: the pass interprets under a raised native limit of its own;
    before, ``sys.getrecursionlimit()`` read it (20000), a recursion 1100 deep returned where eager raises
    RecursionError, and code sizing its test by the limit built 20100 levels."""
    import sys

    def count(x, n):
        return x if n == 0 else count(x, n - 1) + 1

    def limit(x):
        return x + sys.getrecursionlimit()

    def nested_repr(x, node):
        return x, len(repr(node))

    assert_same(jitcore.jit(limit)(X), limit(X))
    deep = UserList()
    for _ in range(sys.getrecursionlimit() + 100):  # as CPython's test_userlist sizes it
        deep = UserList([deep])
    shallow = UserList([UserList([None])])
    for depth in (0, 200):  # where the jitted function is called from matters, as eagerly
        for n in (50, 700 - depth, 1100 - depth, 3000):
            want = _descend(depth, lambda n=n: _outcome(count, X, n))
            got = _descend(depth, lambda n=n: _outcome(jitcore.jit(count), X, n))
            assert (want is RecursionError) == (got is RecursionError), (depth, n, want, got)
            if want is not RecursionError:
                assert_same(got, want)
        for node in (shallow, deep):
            want = _descend(depth, lambda node=node: _outcome(nested_repr, X, node))
            got = _descend(depth, lambda node=node: _outcome(jitcore.jit(nested_repr), X, node))
            assert (want is RecursionError) == (got is RecursionError), (depth, want, got)
