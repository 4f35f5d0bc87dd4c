"""Arguments bound by a binder made from one compiled template per parameter count (Note [Binders from one
template], jitcore/interpreter/calls.py): every signature binds, defaults apply and errors read as
CPython's, and binders of the same count share the template's bytecode instead of a compile each."""

from __future__ import annotations

import pytest
from interp_helpers import check

from jitcore.interpreter import calls


def _signatures():
    def none():
        return ()

    def one(a):
        return (a,)

    def everything(a, b=2, /, c=3, *args, d, e=5, **kw):
        return a, b, c, args, d, e, sorted(kw.items())

    def star(*args):
        return args

    def keywords(**kw):
        return sorted(kw.items())

    def only_positional(a, /):
        return (a,)

    def only_keyword(*, k):
        return (k,)

    def captured(a, b, *c):  # a parameter that is also a cell
        return (lambda: (a, b, c))()

    def keyword_defaults(a, *, b=1, **c):
        return a, b, sorted(c.items())

    return [none, one, everything, star, keywords, only_positional, only_keyword, captured, keyword_defaults]


_CALLS = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3, 4), {"d": 4}), ((), {"a": 1}),
          ((1,), {"b": 2, "zz": 3}), ((), {"k": 1}), ((1, 2, 3), {"d": 1, "e": 2, "f": 3}), ((1,), {"a": 1}),
          ((1, 2, 3, 4, 5, 6), {})]


@pytest.mark.parametrize("fn", _signatures(), ids=lambda fn: fn.__name__)
def test_calls_bind_as_natively_values_and_errors(fn) -> None:
    def caller(args, kwargs):
        return fn(*args, **kwargs)

    for args, kwargs in _CALLS:
        check(caller, args, kwargs)  # the value, or the TypeError with CPython's message


def test_binders_of_one_parameter_count_share_the_compiled_template() -> None:
    def f(a, b, /, c=1, *, d):
        return a

    def g(x, y=0, *rest, **kw):
        return x

    bf, bg = calls._make_binder(f.__code__), calls._make_binder(g.__code__)
    assert bf.__code__.co_code == bg.__code__.co_code == calls._binder_template(4).co_code
    assert bf.__code__.co_varnames == ("a", "b", "c", "d")
    code = bf.__code__
    assert (code.co_posonlyargcount, code.co_argcount, code.co_kwonlyargcount) == (2, 3, 1)
    assert bg.__code__.co_varnames == ("x", "y", "rest", "kw") and bg.__code__.co_argcount == 2
    bf.__defaults__, bf.__kwdefaults__ = (1,), {"d": 4}  # as _bind sets them from the function
    assert bf(1, 2) == (1, 2, 1, 4)
    assert bg(1, 2, 3, k=4) == (1, 2, (3,), {"k": 4})
