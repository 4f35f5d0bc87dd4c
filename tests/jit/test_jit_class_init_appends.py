"""A list argument passed to a class whose ``__init__`` only appends to it (issue 14: no retrace per call):
``raise E(log)`` with ``E.__init__`` appending, ``Record(log)``. Each program runs eagerly and jitted on equal
lists, every result and the list compared, and the traces counted (Note [A list argument passed to a class's
__init__], jitcore/jit/helper_appends.py)."""

from __future__ import annotations

import pytest
from test_jit_retrace_free_effects import run_both

import jitcore


class _Logged(Exception):
    def __init__(self, log: list) -> None:
        log.append("init")
        super().__init__()  # the exception's args no longer hold the list


class _Kept(Exception):
    def __init__(self, log: list) -> None:
        log.append("kept")  # its args keep the list


class _Record:
    def __init__(self, log: list, tag: str = "r") -> None:
        log.append(tag)


class _OwnNew:
    def __new__(cls, log: list) -> _OwnNew:
        made = super().__new__(cls)
        made.log = log
        return made

    def __init__(self, log: list) -> None:
        log.append("new")


class _NamesArgs(Exception):
    def __init__(self, log: list) -> None:
        log.append(len(self.args))
        super().__init__()


def _raises_logged(log, x):
    try:
        raise _Logged(log)
    except _Logged:
        log.append("handled")
    return x * 2


def _reads_the_kept_list(log, x):
    try:
        raise _Kept(log)
    except _Kept as e:
        n = len(e.args[0])  # the caller's list, as eagerly: the pass that finds it held binds it whole
    return x * n


def _records(log, x):
    _Record(log)
    _Record(log, tag="t")
    return x * 2


def _own_new(log, x):
    return x * len(_OwnNew(log).log)


def _names_args(log, x):
    try:
        raise _NamesArgs(log)
    except _NamesArgs:
        pass
    return x * 2


@pytest.mark.parametrize(("fn", "once"), [
    (_raises_logged, True), (_records, True), (_reads_the_kept_list, False), (_own_new, False),
    (_names_args, False)],
                         ids=["raised", "records", "kept", "own_new", "names_args"])
def test_a_list_argument_passed_to_a_classs_init_that_appends(fn, once) -> None:
    """``raise E(log)`` with ``E.__init__`` appending: traced once over 20 calls where every call traced
    again; an exception still holding the list, a Python ``__new__``, an ``__init__`` naming ``args``:
    the list bound whole, every result and the list eager's."""
    jf = run_both(fn, [], 20)
    if once:
        assert jitcore.cache_misses(jf) == 1
