"""The instructions whose stack layout or jump targets differ between 3.11, 3.12 and 3.13, each run natively
and interpreted (docs/interpreter.md, "Python versions"): a method's NULL (LOAD_GLOBAL, LOAD_ATTR's and
LOAD_SUPER_ATTR's method forms, CALL and KW_NAMES), the callable DICT_MERGE names in its errors, FOR_ITER's
exit past END_FOR, comparisons (3.12: ``op << 4``) tested by jumps, PEP 709's inlined comprehensions and
PEP 695's intrinsics."""

from __future__ import annotations

import sys
import textwrap

import pytest
from interp_helpers import check


class _Base:
    def m(self, x, k=0):
        return ("base", x, k)

    @property
    def p(self):
        return "base-p"


class _Derived(_Base):
    def m(self, x, k=0):
        return ("derived", super().m(x, k=k), super(_Derived, self).m(x), super().p)  # noqa: UP008 - the two-argument form


def _methods_and_globals(items):
    out = []
    d = _Derived()
    for x in items:  # FOR_ITER leaves past 3.12's END_FOR (3.13's END_FOR; POP_TOP)
        out.append(d.m(x, k=len(out)))  # LOAD_ATTR's method form, KW_NAMES + CALL
        if x < 2:  # COMPARE_OP + POP_JUMP_IF_*
            continue
        if not x >= 5:
            break
    else:
        out.append("else")
    out.append(max(items, default=None))  # LOAD_GLOBAL's NULL
    out.append([y * 2 for y in items if y % 2])  # inlined comprehension (3.12+: LOAD_FAST_AND_CLEAR)
    out.append({y: [z for z in range(y)] for y in items})
    return out


@pytest.mark.parametrize("items", [[], [0, 1], [3, 4], [5, 6, 7], [1, 5, 9]])
def test_methods_super_and_loops(items) -> None:
    check(_methods_and_globals, items)


def _takes(a, b=0):
    return a, b


def _star_call(kwargs, positional):
    return _takes(*positional, **kwargs), _Derived().m(**kwargs) if "x" in kwargs else None


@pytest.mark.parametrize(("kwargs", "positional"), [
    ({"b": 2}, (1,)), ({"a": 1}, (1,)), ({"x": 3}, ()), ([], ()), ({"a": 1, "c": 2}, ()),
])
def test_star_calls_and_their_errors_name_the_callable(kwargs, positional) -> None:
    """DICT_MERGE's error names the callable it finds under the kwargs (3.11/3.12: NULL first; 3.13:
    after)."""
    check(_star_call, kwargs, positional)


@pytest.mark.skipif(sys.version_info < (3, 12), reason="PEP 695 syntax is 3.12's")
@pytest.mark.parametrize("n", [0, 3])
def test_pep_695_type_parameters(n) -> None:
    namespace: dict = {"__name__": __name__}
    source = textwrap.dedent("""
        def make(n):
            class Box[T: int, *Ts, **P]:
                def get[U](self, u: U) -> T | U:
                    return u
            type Alias[K] = list[K]
            (T, Ts, P) = Box.__type_params__
            return (Box().get(n), T.__name__, T.__bound__, Ts.__name__, P.__name__, Alias.__value__,
                    Alias.__type_params__[0].__name__, Box.get.__type_params__[0].__name__)
    """)
    exec(source, namespace)  # noqa: S102 - 3.12 syntax, which 3.11 cannot parse
    check(namespace["make"], n)
