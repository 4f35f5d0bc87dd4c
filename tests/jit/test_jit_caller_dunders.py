"""A caller's object read by C code or by the standard library's code inside a jitted function: each call's
answer and the caller's state after it are eager's, cached calls included.

Found probing test_weakset's WeakSet over calls that hit the cache (issue 14): ``len(box)`` with a Python
``__len__``, ``sum(box)``, ``set(box)``, ``[*box]``, ``int(box)`` ran the dunder natively, past the jit's
hooks, so what it read of the caller's object was a constant of the trace (Note [C builtins over a Python
object's dunders], jitcore/interpreter/callbacks.py); ``UserDict``/``UserList``/``WeakSet`` methods, the
standard library's code, read and wrote ``self.data`` unbound, so a cached call returned the first call's
length and replayed none of the writes (Note [A caller's object in the standard library's code],
jitcore/jit/code_kinds.py).
"""

from __future__ import annotations

import collections
import itertools
import random
import statistics
import warnings
import weakref
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from jit_helpers import assert_same

import jitcore


class Box:
    """A user's container whose protocols read its own state."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Any:
        return iter(range(self.n))

    def __int__(self) -> int:
        return self.n

    def __float__(self) -> float:
        return self.n / 2


class Flags(Box):
    """Its items are all true while it holds fewer than three."""

    def __iter__(self) -> Any:
        return iter([i != 2 for i in range(self.n)])


READS: dict[str, Callable[[Box], Any]] = {
    "len": lambda b: len(b),
    "sum": lambda b: sum(b),
    "sum_start": lambda b: sum(b, 10),
    "set": lambda b: sorted(set(b)),
    "frozenset": lambda b: sorted(frozenset(b)),
    "any": lambda b: any(b),
    "all": lambda b: all(Flags(len(b))),
    "max": lambda b: max(b, default=-1),
    "min": lambda b: min(b, key=lambda x: -x),
    "unpack_list": lambda b: [*b],
    "unpack_set": lambda b: sorted({*b}),
    "int": lambda b: int(b),
    "float": lambda b: float(b),
    "map": lambda b: list(map(str, b)),
    "filter": lambda b: list(filter(None, b)),
    "join": lambda b: ",".join(map(str, b)),
}


class Dunders(Box):
    """More protocols that C builtins call on it."""

    def __abs__(self) -> int:
        return self.n

    def __format__(self, spec: str) -> str:
        return f"F{self.n}{spec}"

    def __index__(self) -> int:
        return self.n

    def __reversed__(self) -> Any:
        return iter(range(self.n, 0, -1))

    def __bool__(self) -> bool:
        return self.n > 1


# found after f6830db (cpy38's p_native_dunders.py): ``abs`` went to the NumPy bridge's lookaside, which ran
# it natively; the others had no lookaside; ``any``/``all`` took their items' truth natively
MORE_READS: dict[str, Callable[[Box], Any]] = {
    "abs": lambda b: abs(b),
    "format": lambda b: format(b, "x"),
    "format_no_spec": lambda b: format(b),
    "hex": lambda b: hex(b),
    "oct": lambda b: oct(b),
    "bin": lambda b: bin(b),
    "range": lambda b: list(range(b)),
    "range_from": lambda b: list(range(1, b, 1)),
    "reversed": lambda b: list(reversed(b)),
    "any_truth": lambda b: any([0, b]),
    "all_truth": lambda b: all((1, b)),
}


@pytest.mark.parametrize("name", MORE_READS)
def test_more_builtins_over_a_callers_dunder_follow_each_call(name: str) -> None:
    fn = MORE_READS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(Dunders(n)), fn(Dunders(n)))


@pytest.mark.parametrize("name", READS)
def test_a_builtin_over_a_callers_dunder_follows_each_call(name: str) -> None:
    fn = READS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(Box(n)), fn(Box(n)))


def _userdict_store(d: collections.UserDict) -> int:
    d["k"] = len(d)
    return len(d)


def _userlist_append(items: collections.UserList) -> int:
    items.append(len(items))
    return len(items)


_KEEP = [collections.UserString(c) for c in "abcdefgh"]  # referents of the weak sets, alive throughout


def _weakset_add(s: weakref.WeakSet) -> int:
    s.add(_KEEP[7])
    return len(s)


def _weakset_discard(s: weakref.WeakSet) -> int:
    s.discard(_KEEP[0])
    return len(s)


def _state(obj: Any) -> Any:
    if isinstance(obj, weakref.WeakSet):
        return sorted(str(x) for x in obj)
    return obj.data


CASES = {
    "userdict_store": (_userdict_store, lambda n: collections.UserDict({i: i for i in range(n)})),
    "userlist_append": (_userlist_append, lambda n: collections.UserList(range(n))),
    "weakset_add": (_weakset_add, lambda n: weakref.WeakSet(_KEEP[:n])),
    "weakset_discard": (_weakset_discard, lambda n: weakref.WeakSet(_KEEP[:n])),
}


@pytest.mark.parametrize("name", CASES)
def test_a_callers_stdlib_container_is_read_and_written_as_eager(name: str) -> None:
    fn, make = CASES[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        eager, jitted = make(n), make(n)
        assert_same(jfn(jitted), fn(eager))
        assert _state(jitted) == _state(eager)


COUNTS = collections.UserDict()


def _bump() -> int:
    COUNTS["n"] = COUNTS.get("n", 0) + 1
    return COUNTS["n"]


def test_a_global_userdict_counts_like_eager() -> None:
    jbump = jitcore.jit(_bump)
    assert [jbump() for _ in range(4)] == [1, 2, 3, 4]
    assert dict(COUNTS) == {"n": 4}


class Sequence:
    """A caller's sequence by the old protocol: no ``__iter__``, a ``__getitem__`` and a ``__len__``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if 0 <= i < self.n:
            return i + 1
        raise IndexError(i)


class Steps:
    """A caller's iterator whose ``__next__`` reads its state."""

    def __init__(self, n: int) -> None:
        self.n, self.i = n, 0

    def __iter__(self) -> Steps:
        return self

    def __next__(self) -> str:
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return chr(96 + self.i)


class Numeric(Dunders):
    """The numeric, byte and mapping protocols C builtins call, reading the caller's object, with its
    items as a sequence (``seq``) and as an iterator (``steps``)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.seq, self.steps = Sequence(n), Steps(n)

    def __bytes__(self) -> bytes:
        return bytes([self.n])

    def __divmod__(self, other: int) -> tuple:
        return self.n, other

    def __rdivmod__(self, other: int) -> tuple:
        return other, self.n

    def __pow__(self, other: int, mod: int | None = None) -> int:
        return pow(self.n, other, mod)

    def __rpow__(self, other: int) -> int:
        return other ** self.n

    def __complex__(self) -> complex:
        return complex(self.n, 1)

    def __round__(self, ndigits: int | None = None) -> int:
        return self.n * 10 if ndigits is None else self.n * 100

    def __floor__(self) -> int:
        return -self.n

    def __repr__(self) -> str:
        return f"N\u00e9{self.n}"

    def keys(self) -> list[str]:
        return [f"k{i}" for i in range(self.n)]

    def __getitem__(self, key: str) -> str:
        return key * self.n


def _keywords(**kwargs: Any) -> list:
    return sorted(kwargs.items())


# found after 74f757c (cpy39's p_dunders.py, 36 of 150 programs wrong on main): each reads the caller's object
# through C code that called its Python dunders natively, so every cached call gave the first call's answer
C_READS: dict[str, Callable[[Numeric], Any]] = {
    "dict.fromkeys": lambda b: dict.fromkeys(b),
    "dict.fromkeys_seq": lambda b: dict.fromkeys(b.seq, 0),
    "bytes": lambda b: bytes(b),
    "bytes_seq": lambda b: bytes(b.seq),
    "bytearray_index": lambda b: bytearray(b),
    "divmod": lambda b: divmod(b, 7),
    "rdivmod": lambda b: divmod(7, b),
    "pow": lambda b: pow(b, 2),
    "pow_mod": lambda b: pow(b, 3, 5),
    "rpow": lambda b: pow(2, b),
    "complex": lambda b: complex(b),
    "round": lambda b: round(b),
    "round_ndigits": lambda b: round(b, 2),
    "math.floor": lambda b: __import__("math").floor(b),
    "math.sqrt": lambda b: __import__("math").sqrt(b),
    "bool": lambda b: bool(b),
    "ascii": lambda b: ascii(b),
    "call_star_star": lambda b: _keywords(**b),
    "dict_display": lambda b: sorted({**b}.items()),
    "dict": lambda b: sorted(dict(b).items()),
    "dict.update": lambda b: sorted((lambda d: (d.update(b), d)[1])({}).items()),
    "for_seq": lambda b: [x for x in b.seq],
    "list_seq": lambda b: list(b.seq),
    "sorted_seq": lambda b: sorted(b.seq, reverse=True),
    "max_seq": lambda b: max(b.seq),
    "sum_seq": lambda b: sum(b.seq),
    "reversed_seq": lambda b: list(reversed(b.seq)),
    "zip_seq_steps": lambda b: list(zip(b.seq, b.steps)),
    "call_star_seq": lambda b: _keywords(**dict.fromkeys(map(str, b.seq))) + [*b.seq],
    "star_arguments": lambda b: (lambda *a: a)(*b.seq),
    "in_seq": lambda b: 2 in b.seq,
    "in_steps": lambda b: "b" in b.steps,
    "str.join_steps": lambda b: "-".join(b.steps),
    "list.extend": lambda b: (lambda items: (items.extend(b.seq), items)[1])([0]),
    "set.update": lambda b: sorted((lambda s: (s.update(b.steps), s)[1])(set())),
    "set.union": lambda b: sorted({"z"}.union(b.steps)),
    "deque": lambda b: list(collections.deque(b.seq)),
    "counter": lambda b: sorted(collections.Counter(b.steps).items()),
    "itertools.chain": lambda b: list(__import__("itertools").chain(b.seq, b.steps)),
    "math.fsum": lambda b: __import__("math").fsum(b.seq),
    "functools.reduce": lambda b: __import__("functools").reduce(lambda x, y: x * y, b.seq, 1),
}


@pytest.mark.parametrize("name", C_READS)
def test_c_code_over_a_callers_dunders_follows_each_call(name: str) -> None:
    fn = C_READS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(Numeric(n)), fn(Numeric(n)))


def _harmonic_mean_is_positive(n: int) -> bool:
    data = [random.uniform(1, 5) for _ in range(n)]  # the jit's numbers while tracing
    return statistics.harmonic_mean(data) > 0


def test_statistics_over_the_jits_numbers_runs_as_eager() -> None:
    # test_statistics jitted crashed the process (rc 139): statistics._sum groups its data with
    # groupby(data, type), whose type() C called natively on the jit's numbers (their proxy class), and
    # _convert(value, T) made an empty proxy whose attribute lookups recursed until the C stack overflowed
    jfn = jitcore.jit(_harmonic_mean_is_positive)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (random numbers the program needs: it runs eagerly, and says so)
        assert [jfn(n) for n in (2, 3, 2)] == [True, True, True]


def test_itertools_call_the_programs_functions_interpreted() -> None:
    def groups(b: Numeric) -> list:
        return [(k, len(list(g))) for k, g in itertools.groupby(range(6), key=lambda i: i < b.n)]

    def kept(b: Numeric) -> list:
        return list(itertools.takewhile(lambda i: i < b.n, range(6)))

    for fn in (groups, kept):
        jfn = jitcore.jit(fn)
        for n in (1, 2, 3, 2):
            assert_same(jfn(Numeric(n)), fn(Numeric(n)))


class Shown:
    """Text made by a Python ``__str__``/``__repr__`` reading the caller's object."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __str__(self) -> str:
        return f"S{self.n}"

    def __repr__(self) -> str:
        return f"R{self.n}"


class Represented:
    """Only a Python ``__repr__``: ``str()`` and ``format(x, "")`` reach it through ``object.__str__``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"R{self.n}"


# str.format called them natively (cached calls gave the first call's text); object.__format__ and
# object.__str__ called the Python __str__/__repr__ natively for format(x) and str(x)
TEXTS: dict[str, tuple[Callable[[Any], Any], type]] = {
    "str.format": (lambda b: "{} {!r} {!s:>4}".format(b, b, b), Shown),  # noqa: UP032 - str.format tested
    "str.format_keywords": (lambda b: "{x}|{x!r}".format(x=b), Shown),  # noqa: UP032
    "format_no_spec": (lambda b: format(b), Shown),
    "str_of_repr": (lambda b: str(b), Represented),
    "format_of_repr": (lambda b: "{}".format(b), Represented),  # noqa: UP032
}


@pytest.mark.parametrize("name", TEXTS)
def test_text_of_a_callers_object_follows_each_call(name: str) -> None:
    fn, cls = TEXTS[name]
    jfn = jitcore.jit(fn)
    for n in (1, 2, 3, 2):
        assert_same(jfn(cls(n)), fn(cls(n)))


def _mean_of_shuffled_fractions() -> tuple:
    data = list(range(10))
    random.shuffle(data)  # the jit's numbers while tracing
    return statistics.mean([Fraction(x) for x in data]), sum(Fraction(x, 3) for x in data)


def test_sum_of_fractions_over_the_jits_numbers() -> None:
    # sum() added 0 + Fraction natively, so Fraction.__radd__ ran natively on the jit's numbers, where
    # isinstance(n, numbers.Rational) does not answer for the number a proxy stands for: "both arguments
    # should be Rational instances" raised to the caller (test_statistics' test_types_conserved ran eagerly
    # after a JC-I002 warning on each call)
    def fn(n: int) -> Fraction:
        return sum([Fraction(1, 3), Fraction(n, 3)])

    jfn = jitcore.jit(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a Fraction over the jit's number is an eager entry (JC-T001)
        for n in (1, 2, 1, 5):
            assert_same(jfn(n), fn(n))
        jmean = jitcore.jit(_mean_of_shuffled_fractions)
        for seed in (1, 2, 1):
            random.seed(seed)
            expected = _mean_of_shuffled_fractions()
            random.seed(seed)
            assert_same(jmean(), expected)


class _Cents:
    def __init__(self, cents: int) -> None:
        self.cents = cents

    def __radd__(self, other: float) -> float:
        return other + self.cents / 100


def test_sum_runs_a_callers_radd_interpreted() -> None:
    # sum() ran the caller's __radd__ natively: its read of .cents unguarded (the net over C calls then made
    # every call eager); interpreted, the call is traced and the read guarded
    def fn(items: list) -> float:
        return sum(items, 0.5)

    jfn = jitcore.jit(fn)
    for cents in (1, 250, 1, 7):
        items = [_Cents(cents), 2.0, _Cents(3)]
        assert_same(jfn(items), fn(items))
    assert jfn.fallback_reason is None


def test_builtin_operators_of_numbers_and_of_a_class_changed_later() -> None:
    # divmod/round/pow of ints and floats keep their answer per immutable class (Note [Builtin operators of
    # immutable classes], jitcore/numpy/lookasides.py); a Python class is looked at again on every call: its
    # dunders set after a first trace are run by the next function traced
    class Num(int):
        pass

    def fn(n: Any, x: float) -> tuple:
        return divmod(n, 3), round(n), pow(n, 2), divmod(x, 0.5), round(x, 1), pow(x, 2.0)

    assert_same(jitcore.jit(fn)(Num(7), 2.25), fn(Num(7), 2.25))
    Num.__divmod__ = lambda self, other: (int(self) * 10, other)  # type: ignore[method-assign]
    Num.__round__ = lambda self, ndigits=None: 99  # type: ignore[method-assign]
    for args in ((Num(7), 2.25), (7, 1.75)):
        assert_same(jitcore.jit(fn)(*args), fn(*args))
    assert fn(Num(7), 2.25)[:2] == ((70, 3), 99)
