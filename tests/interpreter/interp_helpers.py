"""Differential checking: run a function natively and interpreted, compare everything observable."""

from __future__ import annotations

import contextlib
import copy
import io

from jitcore.interpreter import interpret


def _outcome(fn, args, kwargs):
    out = io.StringIO()
    args, kwargs = copy.deepcopy((args, kwargs))
    with contextlib.redirect_stdout(out):
        try:
            value = fn(*args, **kwargs)
            error = None
        except BaseException as e:  # noqa: BLE001 - compared below
            value, error = None, e
    return value, error, out.getvalue(), (args, kwargs)


def _describe(error):
    if error is None:
        return None
    chain = []
    seen = 0
    while error is not None and seen < 5:
        chain.append((type(error), repr(error.args), type(error.__cause__), type(error.__context__),
                      error.__suppress_context__))
        error = error.__cause__ or error.__context__
        seen += 1
    return chain


def check(fn, *args, hooks=None, **kwargs):
    """Assert ``interpret(fn, hooks)`` matches ``fn`` on value, exception (type, args, cause, context), stdout
    and
    mutations of the arguments; returns the native value."""
    native = _outcome(fn, args, kwargs)
    interpreted = _outcome(interpret(fn, hooks), args, kwargs)
    assert repr(interpreted[0]) == repr(native[0])
    assert _describe(interpreted[1]) == _describe(native[1])
    assert interpreted[2] == native[2]
    assert repr(interpreted[3]) == repr(native[3])
    return native[0]
