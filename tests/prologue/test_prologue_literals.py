"""A tuple of literals guarded by value (a function's ``__defaults__``) is compared in C where that is
exact (Note [A flat tuple of literals compared in C], jitcore/prologue/literals.py): the compiled check
must accept exactly the values ``same_literal`` accepts, which is what the guard's explanation uses."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from jitcore.prologue import MISS, Guard, Path, Prologue, Root
from jitcore.prologue.literals import flat_literal_types, same_literal

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, math.inf,
                                                                     -math.inf, math.nan, 1e-6]),
    st.sampled_from(["", "a", "None", "1"]), st.sampled_from([b"", b"a"]), st.sampled_from([1j, 0j]),
)
_LITERAL_TUPLES = st.recursive(st.tuples(_SCALARS) | st.lists(_SCALARS, max_size=4).map(tuple),
                               lambda inner: st.lists(inner | _SCALARS, max_size=3).map(tuple), max_leaves=8)


class _Tuple(tuple):
    pass


def _variants(expected: tuple) -> list:
    """Values near ``expected``: itself, a copy, each element swapped for another literal of a close
    type or value, a list, a tuple subclass, longer and shorter tuples."""
    found = [expected, tuple(list(expected)), list(expected), _Tuple(expected), expected + (None,),
             expected[:-1], ()]
    for i, x in enumerate(expected):
        others = [-x if type(x) is float else None, float(x) if type(x) in (int, bool) else 0,
                  str(x), math.nan]
        others += _near(x)
        for other in others:
            found.append(expected[:i] + (other,) + expected[i + 1:])
    return found


def _near(x: object) -> list:
    """Literals ``==`` to ``x`` (or falsy like it) of another type."""
    if x is None:
        return [False, 0]
    if type(x) is bool:
        return [int(x), float(x)]
    if type(x) is int:
        return [float(x), -0.0 if x == 0 else x] + ([bool(x)] if x in (0, 1) else [])
    return []


def _accepts(expected: tuple, value: object) -> bool:
    guard = Guard(Path(Root("args", "args")).index(0), "value", expected)
    return Prologue(guards=(guard,)).compile(lambda *a: "hit")((value,), {}) is not MISS


@settings(max_examples=300, deadline=None)
@given(_LITERAL_TUPLES)
def test_a_value_guard_on_a_tuple_accepts_what_same_literal_accepts(expected: tuple) -> None:
    for value in _variants(expected):
        assert _accepts(expected, value) == same_literal(value, expected), (expected, value)


def test_which_tuples_are_compared_in_c() -> None:
    assert flat_literal_types((None, 1, True, "a", b"b", 2.5)) == (type(None), int, bool, str, bytes, float)
    for kept in ((0.0,), (-0.0, 1), (math.nan,), ((1, 2),), (1j,)):
        assert flat_literal_types(kept) is None  # same_literal decides these
    assert _accepts((None, None, False), (None, None, False))
    assert not _accepts((None, None, False), (None, None, 0))
    assert not _accepts((1, 2.5), (1, 2.5, None))


def test_the_traced_tuple_itself_passes_at_once_and_any_other_is_checked() -> None:
    """Note [The traced literal itself] (jitcore/prologue/guards.py): the object the guard keeps is
    accepted by one identity test; an equal copy, a tuple of other element types and a NaN are judged
    by the full check as before."""
    flat, nested = (1, 2.5, None), ((0.0, math.nan), 1j)
    guards = (Guard(Path(Root("args", "args")).index(0), "value", flat),
              Guard(Path(Root("args", "args")).index(1), "value", nested))
    assert str(Prologue(guards=guards)).splitlines()[4:8] == [
        "    v0 = args[0]",
        "    if v0 is not __tuple_for_args_0 and (type(v0) is not tuple or v0 != __tuple_for_args_0 or "
        "tuple(map(type, v0)) != __tuple_for_args_0_2): return None",
        "    v1 = args[1]",
        "    if v1 is not __tuple_for_args_1 and not __same_literal(v1, __tuple_for_args_1): return None",
    ]
    call = Prologue(guards=guards).compile(lambda *a: "hit")
    assert call((flat, nested), {}) == "hit"  # the very objects, NaN inside
    assert call(((1, 2.5, None), ((0.0, math.nan), 1j)), {}) == "hit"  # equal copies: the full check
    assert call(((1.0, 2.5, None), nested), {}) is MISS  # equal under ==, another element type
    assert call((flat, ((-0.0, math.nan), 1j)), {}) is MISS  # the sign of zero
    assert call((list(flat), nested), {}) is MISS
