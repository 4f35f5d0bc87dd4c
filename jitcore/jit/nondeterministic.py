"""Python calls whose result differs from call to call: the clock, Python's random generators.

A cached call runs the computation, not the program's Python: a value the program took from
``time.time()``, ``random.random()`` or ``datetime.now()`` while tracing would be a constant of the
trace, the same on every call where eager gets a new one (and a branch on ``random.random() < p``
would always take the traced side).

Read on every call (``PerCallReads``, Note [Clock reads and random draws on every call]): the clocks
of ``time`` that give a number (``time()``, ``perf_counter()``, ``monotonic()``, ... and their ``_ns``
forms), the two C methods of a ``random.Random`` that draw a number (``random()``, ``getrandbits()``;
``uniform`` is Python code over them, interpreted), and its methods made whole (``randint``,
``gauss``, the variates, ``choice`` over numbers: Note [Draws made whole]; ``seed``, ``sample`` and
``shuffle`` over numbers: Note [Seeds, samples and shuffles]). The number is a name of the trace, as
``t.item()``'s is. ``datetime``'s ``now``/``utcnow``/``today``, ``os.urandom``/``os.getrandom`` and
``uuid.uuid4``/``uuid1`` give a name too, of a value that is not a number (an ``ObjectProxy``: Note
[Values made anew on every call]).

Refused with UnsupportedOperationError (JC-T001; without ``fullgraph`` the call runs eagerly, Note
[Eager entries] in jit/api.py, as torch.compile breaks its graph at ``time.time()``):
``time.localtime()``/``ctime()`` and the like without a time, the other methods of a
``random.Random`` (``setstate``; ``sample``/``shuffle`` of other items), and a per-call value whose
value the program needs (a size, an index, a dict key, an attribute of a datetime: ``choice`` over
other items indexes with one), and a pass that branches on per-call numbers more than ``MAX_BRANCHES``
times (Note [Many branches on per-call values]). Exempt: clock reads of the standard library's
``logging`` code that the program calls itself (a ``Formatter.formatTime``); the records of its
logging calls are made on every call, with each call's time (jitcore/jit/log_records.py).

The same holds for ``next(it)`` of an iterator of the caller's or of state that advances in C (a
module-level ``itertools.count()`` handing out ids, an ``itertools.cycle``, a generator made before
the call): jitcore does not snapshot such iterators, so the trace would keep the first call's item
(``iterator_lookasides``). An iterator the program makes itself (``next(iter(xs))``,
``next(model.parameters())``) is traced.

Invariants: a refused call has not run, and a pass leaves every ``random.Random`` it drew from in the
state it found it (the first call's computation makes the same draws again).
"""

from __future__ import annotations

import datetime
import os
import random
import time
import types
import uuid
from collections.abc import Callable
from typing import Any

import jitcore
from jitcore.errors import UnsupportedOperationError
from jitcore.interpreter import current_run
from jitcore.ir import BoundSymbol, TraceContext
from jitcore.langctx.reads import CLOCK_READ, RANDOM_DRAW, shuffled
from jitcore.proxies.number import NumberProxy, ObjectProxy

__all__ = ["MAX_BRANCHES", "NOT_A_READ", "PerCallReads", "iterator_lookasides", "needed_value"]

_CLOCKS = frozenset(
    getattr(time, name) for name in (
        "time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
        "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns",
    ) if hasattr(time, name)
) | frozenset(getattr(os, name) for name in ("urandom", "getrandom") if hasattr(os, name))
_NOW = frozenset({"now", "utcnow", "today"})
_CURRENT_TIME = frozenset({time.localtime, time.gmtime, time.ctime, time.asctime, time.strftime})
_LOGGING = os.path.join("logging", "__init__.py")


# Note [Clock reads and random draws on every call]
# ``time.perf_counter()`` or ``random.random()`` in a jitted function is recorded as
# ``n0 = jitcore.langctx.reads.per_call_read(<time.perf_counter>)``: every call reads the clock
# or draws anew, in program order with the computation's other operations, and the number flows on
# as a name (arithmetic, a torch Scalar, text it is formatted into, a state write, an output), as
# ``t.item()``'s does. A branch on it is checked by its outcome where it is computed (Note [Predicate
# guards], proxies/number.py): a call taking the other side goes to another entry, after the
# computation's writes and its draws (Python's generators included) are undone
# (value_reads.with_rollback). Where the program needs the value itself (a size, an index, a key, C
# code), no entry could serve another call: JC-T001, the call runs eagerly.
# While tracing, a draw advances the generator as eagerly (a second draw gives the next number); the
# pass then puts each generator back (``restore``), so the first call's computation draws the very
# numbers the trace saw. A clock reads on: the first run may take another side of a branch on time
# than tracing did (``ReadSite.varies``), and then that call runs eagerly (jit/api.py).


# Note [Many branches on per-call values]
# Each branch on a per-call number is one outcome check of the computation, and a cached call serves
# another call only if every outcome is the same. A program that sorts, heapifies or searches numbers it
# drew (CPython's test_heapq: ``sorted`` and ``heapq.nlargest`` over 1000 ``random.randrange`` draws)
# branches on them thousands of times: the trace held one check per comparison (~40,000 records for 300
# items, 11 s to trace where the interpreter takes 0.1 s; test_nlargest took 514 s), and another call's
# draws almost surely take another side of one of them, so the entry would never serve a call. Past
# ``MAX_BRANCHES`` such checks in one pass, the pass stops with JC-T001 and the call runs eagerly (an
# eager entry), as a program that needs such a value does. Branches on ``t.item()`` (value_reads.py)
# are not counted: a tensor's value may well take the same path on every call.
MAX_BRANCHES = 1024


NOT_A_READ = object()  # PerCallReads.read: the call is none of these; the interpreter makes it
_URANDOM = frozenset(getattr(os, name) for name in ("urandom", "getrandom") if hasattr(os, name))
_NUMBER_CLOCKS = _CLOCKS - _URANDOM
_NUMBER_DRAWS = frozenset({"random", "getrandbits"})
_WHOLE_DRAWS = tuple(name for name in (
    "randint", "randrange", "choice", "gauss", "normalvariate", "lognormvariate", "expovariate",
    "vonmisesvariate", "gammavariate", "betavariate", "paretovariate", "weibullvariate", "triangular",
    "binomialvariate",
) if hasattr(random.Random, name))  # Note [Draws made whole]


def _items(seq: Any) -> list:
    return list(seq) if type(seq) in (list, tuple) else [None]


class PerCallReads:
    """One pass's clock reads and random draws (Note [Clock reads and random draws on every call])."""

    def __init__(self, context: TraceContext, check_predicate: Callable[..., bool]) -> None:
        """Args:
            context: the pass's trace context (records go to its innermost scope).
            check_predicate: ``ValueReads.check_predicate``: records a branch's outcome check.
        """
        self._context = context
        self._check_predicate = check_predicate
        self._drawn: dict[int, tuple[random.Random, Any]] = {}  # id -> (generator, state at its first draw)
        self.numbers: list[tuple[NumberProxy, str]] = []  # each with what made it (``time.time``)
        self._needed: list[str] = []  # what made the numbers whose values the program needed
        self._branches = 0  # outcome checks of per-call numbers (Note [Many branches on per-call values])

    def read(self, fn: Any, args: tuple, kwargs: dict) -> Any:
        """The number of a clock read or a random draw, recorded; ``NOT_A_READ`` for any other call.

        Raises:
            UnsupportedOperationError: (JC-T001) a call whose value changes per call and is not a number
                read on every call.
        """
        name = _nondeterministic(fn, args)
        if name is None:
            return NOT_A_READ
        run = current_run()
        if run is not None and run.frames and run.frames[-1].code.co_filename.endswith(_LOGGING):
            return NOT_A_READ
        owner = getattr(fn, "__self__", None)
        draws = isinstance(owner, random.Random) and fn.__name__ in _NUMBER_DRAWS
        if not kwargs and (draws or _is_number_clock(fn)):
            return self._record(fn, args, name, draws=draws)
        if _is_value_read(fn, args, kwargs):  # Note [Values made anew on every call]
            return self._record(fn, args, name, draws=False, kwargs=kwargs)
        raise _refusal(name, "a cached call could not reproduce it")

    def record_read(self, fn: Callable[[], Any], name: str, value: Any,
                    made: Callable[[Any, Callable[[Any], NumberProxy]], Any]) -> Any:
        """``fn()``, whose answer the pass has already (``value``), recorded to be made by every call; its
        result names, as a clock read's (``made`` as for ``_record``). A cached function's
        ``cache_info()``: Note [A cached function's counts], jit/lru_caches.py."""
        return self._record(fn, (), name, draws=False, made=made, value=value)

    def _record(self, fn: Any, args: tuple, name: str, *, draws: bool, kwargs: dict | None = None,
                made: Callable[[Any, Callable[[Any], NumberProxy]], Any] | None = None,
                value: Any = NOT_A_READ) -> Any:
        """The call ``fn(*args, **kwargs)`` made now (unless its ``value`` is given) and recorded to be
        made by every call; its result a name (``made(value, name)``: the result's structure, names where
        it has numbers)."""
        owner = getattr(fn, "__self__", None)
        if draws and id(owner) not in self._drawn:
            self._drawn[id(owner)] = (owner, _state(owner))
        kwargs = kwargs or {}
        if value is NOT_A_READ:
            value = fn(*(_value(a) for a in args), **kwargs)

        def name_of(v: Any) -> NumberProxy:
            kind = NumberProxy if type(v) in (int, float, bool) else ObjectProxy
            number = kind(self._context.values.names.fresh("n"), v,
                          on_specialize=lambda: self._needed.append(name))
            number.on_predicate = lambda n, outcome: self._branch(n, outcome, name, draws)
            number.per_call = True
            self.numbers.append((number, name))
            return number

        out = name_of(value) if made is None else made(value, name_of)
        self._context.trace.imports.setdefault("jitcore", jitcore)
        symbol, source = RANDOM_DRAW if draws else CLOCK_READ, self._context.source()
        self._context.scopes[-1].append(BoundSymbol(symbol, (fn, *args), kwargs, out, (), source))
        return list(out) if type(out) is list else out  # the program's list: the record's stays as made

    def _branch(self, number: NumberProxy, outcome: bool, name: str, draws: bool) -> bool:
        """A branch on a per-call number: its outcome checked (``ValueReads.check_predicate``).

        Raises:
            UnsupportedOperationError: (JC-T001) past ``MAX_BRANCHES`` checks in the pass (Note [Many
                branches on per-call values]).
        """
        self._branches += 1
        if self._branches > MAX_BRANCHES:
            raise _refusal(name, f"the program branched on such values more than {MAX_BRANCHES} times (a "
                                 "sort, a heap, a search over them), so another call would almost surely "
                                 "take another path than a trace's")
        return self._check_predicate(number, outcome, varies=not draws)

    def lookasides(self) -> dict[Any, Callable[..., Any]]:
        """The methods of ``random.Random`` drawn whole (Note [Draws made whole]), its ``seed``,
        ``sample`` and ``shuffle`` (Note [Seeds, samples and shuffles]), ``uuid.uuid4``/``uuid1``
        (Note [Values made anew on every call])."""
        return {
            **{_GENUINE[name]: self._draw_whole(name) for name in _WHOLE_DRAWS},
            _GENUINE["seed"]: self._seed, _GENUINE["sample"]: self._sample,
            _GENUINE["shuffle"]: self._shuffle,
            uuid.uuid4: self._made_whole(uuid.uuid4, "uuid.uuid4"),
            uuid.uuid1: self._made_whole(uuid.uuid1, "uuid.uuid1"),
        }

    # Note [Seeds, samples and shuffles]
    # ``random.seed(s)`` is recorded as a call the computation makes on every call at its place among
    # the draws (``per_call_read(<bound method Random.seed>, s)``, no result), so the draws after it give
    # the seeded sequence eager gives, on every call: the seed may be a constant (guarded as the
    # program's reads are), a dynamic number or a number read on every call, or absent (the system's
    # entropy, as eagerly). While tracing the seed is made (the draws after it see its sequence), and
    # the generator is put back with the rest (``restore``). ``sample(population, k)`` over a list,
    # tuple or range of numbers is one draw giving ``k`` names (``[n0, n1] = per_call_read(<bound
    # method Random.sample>, range(0, 10), 2)``: ``k`` is specialized), ``shuffle(xs)`` of a list of
    # numbers (constants, or the program's names: ``t.tolist()``'s) one draw giving the shuffled items
    # as names, written into the list (``reads.shuffled``): a list of the caller's gets them as any write
    # (jit/effects.py). The numbers flow on as any draw's; where their values are needed (an index into
    # a list of tensors) the call runs eagerly, as before. Over other items (``counts=``, strings,
    # tensors) the call is refused as before.
    def _seed(self, rng: random.Random, a: Any = None, version: int = 2) -> None:
        if type(rng).seed is not _GENUINE["seed"] or not (
                a is None or type(a) in (int, float, str, bytes, bytearray) or isinstance(a, NumberProxy)):
            raise _refusal("random.seed", "a cached call could not reproduce it")
        self._record(rng.seed, (a, version), "random.seed", draws=True, made=lambda _v, _name: None)

    def _sample(self, rng: random.Random, population: Any, k: Any, *, counts: Any = None) -> list:
        items = tuple(population) if type(population) in (list, tuple) else population
        if counts is not None or not _genuine(rng) or not _numbers(items):
            raise needed_value("random.sample")
        k = k.specialize() if isinstance(k, NumberProxy) else k
        return self._record(rng.sample, (items, k), "random.sample", draws=True,
                            made=lambda value, name_of: [name_of(v) for v in value])

    def _shuffle(self, rng: random.Random, x: Any) -> None:
        if type(x) is not list or not _genuine(rng) or not _numbers(x):
            raise needed_value("random.shuffle")
        shuffle = types.MethodType(shuffled, rng)  # a method of ``rng``, as the draws' are
        shuffled_items = self._record(shuffle, (tuple(x),), "random.shuffle", draws=True,
                                      made=lambda value, name_of: [name_of(v) for v in value])
        x[:] = shuffled_items

    def _made_whole(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not all(type(a) in (int, type(None)) for a in (*args, *kwargs.values())):
                raise _refusal(name, "a cached call could not reproduce it")
            return self._record(fn, args, name, draws=False, kwargs=kwargs)
        return call

    # Note [Draws made whole]
    # ``randint``/``randrange`` loop on ``getrandbits`` until a draw fits (a branch on each draw),
    # ``gauss`` keeps its second number in ``gauss_next`` for the next call, ``normalvariate`` and the
    # other variates loop on ``random()``: interpreted, they would be an entry per loop outcome, or
    # refused. Each is recorded as one read of the bound method with its arguments
    # (``n0 = per_call_read(<bound method Random.gauss>, 0.0, 1.0)``), which the computation makes on
    # every call: the generator's own Python state (``gauss_next``) moves as eagerly, and
    # ``restore``/``with_rollback`` put it back with the rest of the state (``getstate``). Arguments
    # may be dynamic numbers (each call's value). ``choice`` is made whole over a sequence of numbers
    # (its items are guarded as the program's reads of them); over other items its value is an index,
    # which is needed (JC-T001). A generator of another class (``SystemRandom``: no state) is refused.
    def _draw_whole(self, name: str) -> Callable[..., Any]:
        def draw(rng: random.Random, *args: Any, **kwargs: Any) -> Any:
            method = getattr(rng, name)
            if name == "choice" and args and not kwargs:
                if not all(type(v) in (int, float) for v in _items(args[0])):
                    raise needed_value("random.choice")
                args = (tuple(_items(args[0])), *args[1:])
            if kwargs or not _genuine(rng) or not all(
                    type(a) in (int, float, tuple, type(None)) or isinstance(a, NumberProxy) for a in args):
                raise _refusal(f"random.{name}", "a cached call could not reproduce it")
            return self._record(method, args, f"random.{name}", draws=True)
        return draw

    def finish(self) -> list[tuple[NumberProxy, str]]:
        """The pass's numbers, once it ended.

        Raises:
            UnsupportedOperationError: (JC-T001) the program needed the value of one (the need is
                noted, not raised, where it arises: C code such as ``Tensor.__mul__`` turns a
                TypeError into NotImplemented).
        """
        if self._needed:
            raise needed_value(self._needed[0])
        return list(self.numbers)

    @property
    def needed(self) -> list[str]:
        """What made the numbers whose values the program needed (``finish`` refuses the first)."""
        return list(self._needed)

    @property
    def drew(self) -> bool:
        """Whether the pass drew from a generator (``random.random()``, ``time.time()``)."""
        return bool(self._drawn or self.numbers)

    def restore(self) -> None:
        """Put back every generator the pass drew from (the first call's computation draws again)."""
        for generator, state in self._drawn.values():
            if state is not None:  # (a generator the pass made is seeded again by the computation)
                generator.setstate(state)
        self._drawn.clear()


# Note [A generator whose draws are its own]
# A draw made whole, a sample or a shuffle is made twice on the first call: while tracing, then by the
# computation, after the generator's state was put back (``restore``). That holds for a generator whose
# numbers come from its own state. A class attribute replaced (``mock.patch('random.Random.random')``,
# whose ``side_effect`` lists the draws), an instance's own (``g.random = xs.pop``), or a variate the one
# drawn calls replaced (``mock.patch('random.Random.gammavariate')`` under ``betavariate``) is not such
# state: the second draw took the next numbers, a wrong value or an outcome check failing on the call that
# made the trace (test_random's TestDistributions jitted: ``gammavariate``, ``betavariate`` JC-T002,
# ``test_avg_std`` IndexError; /tmp/cpy53-probes/p5c.py). The class's methods are compared with the
# standard library's own, taken when this module is imported (while patched, ``random.Random.random`` is
# the mock; the lookasides are keyed by them too), the instance must have none of its own, and otherwise
# the call is refused: it runs eagerly.
_GENUINE = {name: getattr(random.Random, name)
            for name in ("random", "getrandbits", "_randbelow", "seed", "sample", "shuffle", *_WHOLE_DRAWS)}


def _genuine(rng: random.Random) -> bool:
    """Whether ``rng``'s draws come from its own state (Note [A generator whose draws are its own])."""
    t = type(rng)
    own = getattr(rng, "__dict__", None) or {}
    return all(getattr(t, name, None) is f and name not in own for name, f in _GENUINE.items())


def _state(rng: random.Random) -> tuple | None:
    """``rng.getstate()``, or None for a generator that ``Random.__init__`` is seeding (it sets
    ``gauss_next``, which ``getstate`` reads, after ``seed``): the program made it in this pass, and its
    next use is a seed."""
    return rng.getstate() if hasattr(rng, "gauss_next") else None


def _value(arg: Any) -> Any:
    """An argument with the traced values of the names in it (a tuple of a shuffle's items)."""
    if type(arg) is tuple:
        return tuple(_value(a) for a in arg)
    return arg.value if isinstance(arg, NumberProxy) else arg


def _numbers(items: Any) -> bool:
    """``items`` is a range, or a list or tuple of numbers (constants or names)."""
    if type(items) is range:
        return True
    return type(items) in (list, tuple) and all(
        type(v) in (int, float) or (isinstance(v, NumberProxy) and type(v.value) in (int, float, bool))
        for v in items)


# Note [Values made anew on every call]
# ``datetime.now()`` (``utcnow``, ``today``; a ``tz`` of constants), ``os.urandom(n)``/``getrandom``
# and ``uuid.uuid4()``/``uuid1()`` (made whole: lookasides) give a value that is not a number but
# flows as the clock's numbers do: a name of the trace made by every call
# (``n0 = per_call_read(<built-in method now of type object>)``), which the program may return, store
# into state, format into text (``f"{datetime.now():%H:%M}"``, made per call: jit/texts.py) or compare
# (a branch checked by its outcome). Anything else needs the value (an attribute such as ``.year``,
# ``str(u)``, arithmetic on dates, indexing the bytes): the call runs eagerly (JC-T001), as before.
def _is_value_read(fn: Any, args: tuple, kwargs: dict) -> bool:
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, datetime.date) and fn.__name__ in _NOW:
        return all(v is None or isinstance(v, datetime.tzinfo) for v in (*args, *kwargs.values()))
    return _is_urandom(fn) and not kwargs and all(type(a) is int for a in args)


def _is_urandom(fn: Any) -> bool:
    try:
        return fn in _URANDOM
    except (TypeError, ValueError):  # unhashable (a weakref to a writable memoryview hashes it)
        return False


def _is_number_clock(fn: Any) -> bool:
    try:
        return fn in _NUMBER_CLOCKS
    except (TypeError, ValueError):  # unhashable (a weakref to a writable memoryview hashes it)
        return False


def _refusal(name: str, why: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"{name}() gives a new value on every call: {why}",
        hints=("take the value outside the jitted function and pass it in as an argument",),
    )


def needed_value(name: str) -> UnsupportedOperationError:
    """The error for a clock read or a random draw whose value is needed (JC-T001)."""
    return _refusal(name, "the program needs its value (a size, an index, a key, C code, a tensor "
                          "subclass's dispatch), which no cache entry could serve for another call")


def _nondeterministic(fn: Any, args: tuple) -> str | None:
    """The name of ``fn`` when it reads a clock or a Python random generator, else None."""
    try:
        if fn in _CLOCKS:
            return f"{getattr(fn, '__module__', None) or 'time'}.{fn.__name__}"
        if fn in _CURRENT_TIME and _reads_the_clock(fn, args):
            return f"time.{fn.__name__}"
    except (TypeError, ValueError):  # an unhashable callable (a weakref to a writable memoryview hashes it)
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, types.BuiltinMethodType) and isinstance(owner, random.Random):
        return f"random.{fn.__name__}"
    if isinstance(owner, type) and issubclass(owner, datetime.date) and getattr(fn, "__name__", "") in _NOW:
        return f"{owner.__name__}.{fn.__name__}"
    return None


def _reads_the_clock(fn: Any, args: tuple) -> bool:
    """``time.localtime()`` and the like read the clock only without a time argument."""
    if fn is time.strftime:
        return len(args) < 2
    return not args or args[0] is None


# Note [An iterator of state advanced by its methods]
# ``g.send(2)`` of a generator kept across calls (a global, an argument's attribute) ran natively while
# tracing and its answer was a constant of the trace: every cached call computed with the first call's item
# and the generator no longer advanced (/tmp/eff55-probes/gen_send.py: eager 2, 4, 6, 8; jit 2, 2, 2, 2).
# ``next(g)`` was already refused (``iterator_lookasides``); its method forms are refused the same way
# (JC-T001): ``send``, ``throw``, ``close`` and ``__next__`` called on an iterator the program reached from
# its arguments or state whose ``__next__`` is C code (a generator made outside the call runs natively).
_ADVANCING = frozenset({"send", "throw", "close", "__next__"})


def refuse_advance(fn: Any, path_of: Callable[[Any], Any]) -> None:
    """Raise JC-T001 where the C call ``fn`` advances an iterator of the caller's (Note [An iterator of state
    advanced by its methods])."""
    if type(fn) is not types.BuiltinMethodType and type(fn) is not types.MethodWrapperType:
        return
    if getattr(fn, "__name__", None) not in _ADVANCING:
        return
    owner = getattr(fn, "__self__", None)
    step = getattr(type(owner), "__next__", None)
    if step is not None and not isinstance(step, types.FunctionType) and path_of(owner) is not None:
        raise UnsupportedOperationError(
            f"{fn.__name__}() of a {type(owner).__name__} the function reaches from its arguments or state "
            "advances it in C code, which a cached call could not replay",
            hints=("take the item outside the jitted function and pass it in as an argument",),
        )


def iterator_lookasides(path_of: Callable[[Any], Any], base: Callable[..., Any]) -> dict[Any, Callable]:
    """``next``: refused (JC-T001) for an iterator the program reached from its arguments or state
    (``path_of`` finds a path) whose ``__next__`` is C code; otherwise ``base``, the interpreter's own."""

    def next_(iterator: Any, *default: Any) -> Any:
        step = getattr(type(iterator), "__next__", None)
        if step is not None and not isinstance(step, types.FunctionType) and path_of(iterator) is not None:
            raise UnsupportedOperationError(
                f"next() of a {type(iterator).__name__} the function reaches from its arguments or state "
                "advances it in C code, which a cached call could not replay",
                hints=("take the item outside the jitted function and pass it in as an argument",),
            )
        return base(iterator, *default)

    return {next: next_}
