"""Calls of ``functools.lru_cache``/``functools.cache`` wrappers inside jitted code: traced as the cache's
answer, guarded by the cache entry, and replayed on cached calls (Note [A cached function's call]).

Invariants:
- a call is handled here only where its key is made of plain values (numbers, text, None, torch's
  dtypes and devices, tuples and frozensets of them), which the prologue rebuilds from constants of the
  entry (the numbers are specialized), and of the caller's tensors and identity-hashed objects, each
  guarded as that very object (Note [What keys an entry]); a key value hashed by the program's own
  ``__hash__`` goes on to the net of jit/native_python.py, as before;
- the cache never holds a proxy: the wrapper is called with the caller's tensors;
- a miss is made natively once per call of the program while tracing (it runs the wrapped function and
  stores its result, as eagerly); a hit is found by the pass and made once, by the computation's first run
  or by the call's eager run (Note [A hit made later]); the computation's first run skips the misses, every
  later run makes the call again (a hit: ``cache_info().hits`` and the LRU order stay eager's);
- what a miss's function writes into an object the program reached is made once: the trace of that call
  answers it alone (Note [What a cached function writes]);
- an entry's prologue holds only while the cache holds the key with the very result object traced: a
  cleared cache, an evicted or replaced entry fails it (a retrace);
- a call that made the wrapper's calls natively in its pass is never run again eagerly where the pass
  finished: its trace answers it once (Note [A cached function that raised, caught]).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import BoundSymbol, Proxy
from jitcore.ir.symbol import recorded_symbol
from jitcore.jit.object_states import attributes, same_state, state_of
from jitcore.jit.object_states import restore as restore_state
from jitcore.prologue import Path, Root
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.tensor import PlainTensorProxy

__all__ = ["KEYWORD_MARK", "LRU_WRAPPER", "NOT_HANDLED", "RECORDED", "CacheInfoRead", "LruCalls", "Made",
           "cache_dict", "is_cache_clear", "is_cache_info", "lru_key", "made_by_runs", "new_call", "one_call",
           "replay_lru_call", "rewrite", "same_key", "without_entries"]

# Note [A cached function's call]
# ``functools.lru_cache`` is C's ``_lru_cache_wrapper``: it calls the wrapped function natively on a miss,
# so the net (Note [Python code a C call ran natively]) stopped that frame and the program ran eagerly
# for ever (JC-T001, an eager entry), and on a hit its answer was a constant of the trace that no guard
# watched (``cache_clear()`` then a changed global gave the first answer). Here the wrapper is called
# natively while tracing: on a miss the wrapped function runs this once, with its effects, as eager runs
# it; from then on eager hits and returns that same result object, which the trace reads from the cache
# entry (a path the prologue follows: a tensor result is an input, other values are guarded by value)
# and guards by identity. The key is C's ``lru_cache_make_key`` mirrored (``lru_key``): one positional
# int or str alone, otherwise the argument tuple, with C's keyword marker and the name/value pairs, and
# the types for ``typed=True``. The cache dict and the marker are the wrapper's own, reached through
# ``gc.get_referents`` (C's traverse visits them); a bounded cache's values are C link objects that do
# not show their fields to Python or to the collector, so its result is read from the link's struct
# (``_field``, checked against a cache of known contents at import: where that check fails,
# bounded caches are not handled here). The recorded call (``replay_lru_call``) keeps ``cache_info()``
# and the LRU order (which decides evictions) as eager has them on every cached call; it is skipped on
# the computation's first run, which follows the tracing call that made it already. An object of the
# program's hashed by identity keys an entry as that very object (Note [What keys an entry]). Left: an
# object with its own ``__hash__``/``__eq__`` in the key (the net decides, as before), and
# a wrapped function that raises: C caches nothing, the pass raises its exception as eager does;
# where the program caught it, calls like it run eagerly (Note [A cached function that raised, caught]).

LRU_WRAPPER: type = functools._lru_cache_wrapper  # noqa: SLF001
NOT_HANDLED = object()
_PLAIN = (int, float, bool, str, bytes, type(None),
          torch.dtype, torch.device, torch.layout, torch.memory_format)  # hashed by C code alone
_ABSENT = object()


def _is_plain(value: Any, depth: int = 0) -> bool:
    t = type(value)
    if t in _PLAIN:
        return True
    return (t is tuple or t is frozenset) and depth < 8 and len(value) <= 64 \
        and all(_is_plain(v, depth + 1) for v in value)


def _keyword_mark() -> Any:
    """C's keyword marker of lru_cache keys (one object, the module's): read from a key that holds it."""

    @functools.cache
    def probe(_a: int, *, b: int) -> None:
        return None

    probe(1, b=2)
    return next(iter(cache_dict(probe)))[1]


def cache_dict(wrapper: Any) -> dict:
    """The wrapper's cache dict. C's traverse visits (after each link's key and result, in a bounded
    cache) the cache, the function, the keyword marker, two types and the wrapper's ``__dict__``: the
    cache is sixth from the end."""
    referents = gc.get_referents(wrapper)
    if len(referents) < 6 or referents[-1] is not getattr(wrapper, "__dict__", None) \
            or type(referents[-6]) is not dict \
            or (KEYWORD_MARK is not None and referents[-4] is not KEYWORD_MARK):
        raise LookupError("not a C lru_cache wrapper of a known layout")
    return referents[-6]


KEYWORD_MARK: Any = None
KEYWORD_MARK = _keyword_mark()


def lru_key(args: tuple, kwargs: dict, *, typed: bool, mark: Any) -> Any:
    """C's ``lru_cache_make_key``: the key the wrapper stores ``args``/``kwargs``'s result under."""
    if not typed and not kwargs:
        if len(args) == 1 and type(args[0]) in (int, str):
            return args[0]
        return args
    key = [*args]
    if kwargs:
        key.append(mark)
        for name, value in kwargs.items():
            key += (name, value)
    if typed:
        key += [type(a) for a in args]
        key += [type(v) for v in kwargs.values()]
    return tuple(key)


# A bounded cache's link (``lru_list_elem``: the object header, prev, next, hash, key, result): the
# offsets of its key and its result, where the check below found them.
_WORD = ctypes.sizeof(ctypes.c_void_p)
_KEY_AT = object.__basicsize__ + 3 * _WORD
_RESULT_AT = _KEY_AT + _WORD


def _field(link: Any, offset: int) -> Any:
    address = ctypes.c_void_p.from_address(id(link) + offset).value
    return ctypes.cast(address, ctypes.py_object).value


def _links_readable() -> bool:
    """Whether a bounded cache's link has the layout ``_field`` reads (checked on a cache of known
    contents)."""
    key, result = ("jitcore", 1), object()

    @functools.lru_cache(maxsize=2)
    def probe(_a: str, _b: int) -> object:
        return result

    probe(*key)
    cache = cache_dict(probe)
    link = cache[key]
    if type(link).__basicsize__ != _RESULT_AT + _WORD:
        return False
    return _field(link, _KEY_AT) == key and _field(link, _RESULT_AT) is result


_BOUNDED_READABLE = _links_readable()


def _refusal(wrapper: Any, unnamed: str, message: str, hint: str) -> UnsupportedOperationError:
    """JC-T001 for a call of ``wrapper``: ``message`` with ``{name}``, the cached function's name."""
    name = getattr(wrapper, "__qualname__", None) or unnamed
    return UnsupportedOperationError(message.format(name=name), hints=(hint,))


def _caches_nothing(wrapper: Any) -> UnsupportedOperationError:
    return _refusal(
        wrapper, "the function",
        "{name} is wrapped by functools.lru_cache(maxsize=0), which caches nothing: C code calls it natively "
        "on every call, which jitcore does not see",
        "the call runs eagerly; call the function itself, or give the cache a size")


# Note [A cache cleared inside the program]
# ``cache_clear()`` of a cached function, called by the traced program, empties the cache on every call:
# a lookup after it misses and runs the function, whose fresh result a trace does not have (it reads
# results from the cache entry the prologue checked at the call's start), and the entry a lookup before
# it traced is gone at the next call's start. Made natively while tracing and not replayed, it gave a
# trace made again on every call (the entry's guard failing), a computation that read a result the
# clear had removed (its first run, a tensor result: a crash), or, the clear first, a trace that kept
# the first result and never ran the function again (eager runs it on every call: its effects and
# ``cache_info()`` differed, and its answer too once what it read changed). So calls like it run eagerly
# (JC-T001, an eager entry), whose guards leave out this cache's entries, which the program empties (the
# entry a lookup before the clear traced is gone at the next call's start: kept, that guard failed on
# every call, which traced again up to the clear). The call whose pass made it is answered by its trace
# (Note [A cached function that raised, caught]): the clear is made natively, once per call of the program
# (a later pass of the call takes it as made), and the pass goes on as eager does. Refused then and run
# again eagerly, the pass's lookups before it had been made natively: the eager run found their entries
# (a hit counted where eager missed), and what the function wrote to an object the program had read
# before was put back with the pass's snapshots and not written again (/tmp/eff53-probes/
# lru_clear_variants.py). Still refused before it clears, and run eagerly: a clear after a lookup whose
# result is no plain value (a tensor is an input the first run reads from the entry the clear removes).
def is_cache_clear(fn: Any) -> bool:
    """Whether ``fn`` is a cached function's ``cache_clear`` (bound, or C's method descriptor)."""
    return fn is _CLEAR or (type(fn) is _BOUND_CLEAR and type(getattr(fn, "__self__", None)) is LRU_WRAPPER
                            and fn.__name__ == "cache_clear")


_CLEAR = LRU_WRAPPER.cache_clear
_CLEAR_KEY = object()  # the key of a ``cache_clear()`` among a call's native calls
_BOUND_CLEAR = type(functools.cache(len).cache_clear)


def _clear_refused(wrapper: Any) -> UnsupportedOperationError:
    """Note [A cache cleared inside the program]."""
    return _refusal(
        wrapper, "a cached function",
        "{name}.cache_clear() (functools.lru_cache) is called inside the jitted function: eager empties the "
        "cache on every call and runs the function again, which a trace cannot replay",
        "the call runs eagerly; clear the cache outside the jitted function")


class CacheEntries:
    """What the prologue reads a wrapper's entries through: ``entries[key]`` is the result the cache holds
    for ``key`` (a fresh sentinel object where it holds none), read without calling the wrapper."""

    __slots__ = ("_cache", "_bounded", "wrapper")

    def __init__(self, wrapper: Any, cache: dict, *, bounded: bool) -> None:
        self.wrapper = wrapper
        self._cache = cache
        self._bounded = bounded

    def __getitem__(self, key: Any) -> Any:
        value = self._cache.get(key, _ABSENT)
        if value is _ABSENT or not self._bounded:
            return value
        return _field(value, _RESULT_AT)

    def __repr__(self) -> str:
        return f"<entries of {getattr(self.wrapper, '__qualname__', 'a cache')}>"


def without_entries(guards: tuple) -> list:
    """``guards`` but those that read a cache's entries: the guards of the eager entry filed for the calls
    after one its trace answered (Note [A cached function that raised, caught]), which run the program
    eagerly whatever the caches hold (a cleared cache's entries are new objects on every call)."""
    return [g for g in guards
            if all(type(path.root.obj) is not CacheEntries for path in (g.path, *g.related))]


class _FirstRun:
    """A recorded call's token: set while the tracing call has made the call already (or holds it, a hit
    ``made`` later: Note [A hit made later]); its place among the pass's native calls (``ordinal``) and its
    key (Note [Calls an entry tried before made])."""

    __slots__ = ("key", "made", "ordinal", "pending")

    def __init__(self, ordinal: int, key: Any, made: _Made) -> None:
        self.pending = True
        self.ordinal = ordinal
        self.key = key
        self.made = made


def replay_lru_call(token: _FirstRun, wrapper: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """What the computation runs for a cached function's call: the wrapper's call (a hit), but on the
    computation's first run, which follows the tracing call that made it (Note [A cached function's call]),
    and where an entry tried before in this call made it (Note [Calls an entry tried before made])."""
    if token.pending:
        token.pending = False
        if token.made.kind == "pending":  # Note [A hit made later]
            token.made.kind = "hit"
            wrapper(*args, **kwargs)
        return
    made_by_runs(token.ordinal, wrapper, token.key, lambda: wrapper(*args, **kwargs))


# Note [Calls an entry tried before made]
# A cached call may run more than one entry's computation: one whose value check fails sends the call to
# the next entry (from the start: a computation that replays a wrapper's call is never resumed, its
# records being ``per_call``), or to a new trace. The failed computation's wrapper calls were made (each
# a hit: ``hits`` counted, the entry moved to the front), so making them again counted every hit twice
# (``table(2)`` then ``if x.sum() > 0``, alternating signs: eager's ``hits`` 1, 2, 3, 4, jit's 2, 4, 5,
# 7). The calls the computations of one call of the jitted function made are kept in program order
# (``made_by_runs``, emptied by ``new_call`` when a call begins, once a pass of the process recorded such
# a call: ``RECORDED``; other programs pay one list read per call): a computation making the call at the
# same place with the same wrapper and key takes it as made, and a pass tracing the call afterwards
# starts from them (``one_call``: Note [One native call per call of the program]), so each call is made
# once per call, as eagerly. A ``cache_info()`` read is kept with them (its counts), so a later entry or
# pass reads the counts as they were at that place. Where the program's paths differ, everything from
# the first call that differs is made anew. Not covered: a call that then runs eagerly (an eager entry)
# makes the calls again.
_CALL_RUNS = threading.local()
RECORDED = [False]  # set once a pass recorded a wrapper's call or ``cache_info()``: jitted calls reset then


def new_call() -> None:
    """A call of a jitted function begins (Note [Calls an entry tried before made])."""
    _CALL_RUNS.made = None


def made_by_runs(ordinal: int, wrapper: Any, key: Any, make: Callable[[], Any]) -> Any:
    """``make()``'s answer for the native call at ``ordinal`` of a computation, or the answer this call's
    computations had there already (Note [Calls an entry tried before made])."""
    made = getattr(_CALL_RUNS, "made", None)
    if made is None:
        made = _CALL_RUNS.made = []
    if ordinal < len(made) and made[ordinal].wrapper is wrapper and _same_key(made[ordinal].key, key):
        return made[ordinal].result
    del made[ordinal:]
    made.extend(_Made(None, None) for _ in range(ordinal - len(made)))  # places no run reached: never equal
    result = make()
    made.append(_Made(wrapper, key, result))
    return result


# bound as a constant of the trace (``jitcore.jit`` names the function ``jit`` there, not this package);
# ``per_call``: made by every run, as recorded (the grad transform copies it into the forward, the probe
# does not run it)
_REPLAY = dataclasses.replace(recorded_symbol(replay_lru_call, langctx="jitcore", path="",
                                              tags=frozenset({"per_call"})), path=None)


# Note [A cached function's counts]
# ``wrapper.cache_info()`` is a C method the interpreter called natively: its ``CacheInfo`` was a constant
# of the trace, so ``table.cache_info().hits`` gave the first call's count on every cached call (eager
# 0, 2, 4, ...; jit 0, 0, 0). It is recorded as a read made by every call, as a clock read is
# (jit/nondeterministic.py): ``hits``, ``misses`` and ``currsize`` are names of the computation, made
# where the program reads them, among the recorded calls of the wrapper (``replay_lru_call``), so each
# count is eager's at that point; ``maxsize`` is the wrapper's constant. The computation's first run
# follows the tracing call, which made the wrapper's calls already (the recorded ones are skipped then),
# so that run answers with the counts the pass read (``CacheInfoRead``), later runs with the wrapper's.
# The read is made once per call of the program, as the wrapper's calls are (a later pass of the same call
# takes the counts the first pass read). A branch on a count is checked on every call (a call taking the
# other side goes to another entry); a count whose value the program needs (an index, ``repr``) runs the
# call eagerly, as for a clock read.
_INFO = LRU_WRAPPER.cache_info
_BOUND_INFO = type(functools.cache(len).cache_info)
_INFO_KEY = object()  # the key of a ``cache_info()`` read among a call's native calls


def is_cache_info(fn: Any) -> bool:
    """Whether ``fn`` is a cached function's ``cache_info`` (bound, or C's method descriptor)."""
    return fn is _INFO or (type(fn) is _BOUND_INFO and type(getattr(fn, "__self__", None)) is LRU_WRAPPER
                           and fn.__name__ == "cache_info")


def _counts(wrapper: Any) -> list[int]:
    info = wrapper.cache_info()
    return [info.hits, info.misses, info.currsize]


class CacheInfoRead:
    """What the computation runs for ``wrapper.cache_info()``: the counts the pass read on its first run,
    the wrapper's counts on every later one (Note [A cached function's counts])."""

    __slots__ = ("_traced", "ordinal", "wrapper")

    def __init__(self, wrapper: Any, traced: list[int], ordinal: int) -> None:
        self.wrapper = wrapper
        self._traced: list[int] | None = traced
        self.ordinal = ordinal  # its place among the pass's native calls (Note [Calls an entry tried ...])

    def __call__(self) -> list[int]:
        if self._traced is not None:
            traced, self._traced = self._traced, None
            return list(traced)
        return list(made_by_runs(self.ordinal, self.wrapper, _INFO_KEY, lambda: _counts(self.wrapper)))

    def __repr__(self) -> str:
        return f"<cache_info of {getattr(self.wrapper, '__qualname__', 'a cached function')}>"


# Note [One native call per call of the program]
# One call of the jitted function may interpret the program more than once (a symbolic pass, then a
# static one; a pass again once counters were found: jit/api.py). The wrapper's calls change its cache
# (a hit moves the entry and counts, a miss runs the function): each is made once per call of the
# program, by its first pass; a later pass of the same call takes the answer (or the exception) that
# call gave, in program order, where it makes the same call (the same wrapper, an equal key), and makes
# its own native calls from the first one that differs.
@dataclasses.dataclass(slots=True)
class Made:
    """One native call of a call of the program. ``kind``: ``"made"`` (a ``cache_info()``/``cache_clear()``,
    or a computation's call), and for the wrapper's calls made by a pass ``"pending"`` (a hit the pass
    found and did not make: Note [A hit made later]), ``"hit"``, ``"miss"`` (the function ran and its
    result is cached) or ``"raised"`` (it ran and raised)."""

    wrapper: Any
    key: Any
    result: Any = None
    error: BaseException | None = None
    kind: str = "made"
    args: tuple = ()  # a wrapper's call: the arguments it is called with natively
    kwargs: dict = dataclasses.field(default_factory=dict)
    writes: list = dataclasses.field(default_factory=list)  # (object, before, after): _native_writes


_Made = Made


_THIS_CALL = threading.local()


@contextlib.contextmanager
def one_call() -> Iterator[list[Made]]:
    """The passes interpreting one call of the jitted function (Note [One native call per call of the
    program]); yields the native calls they made, in program order."""
    outer = getattr(_THIS_CALL, "made", None)
    _THIS_CALL.made = made = list(getattr(_CALL_RUNS, "made", None) or ())  # Note [Calls an entry tried ...]
    try:
        yield made
    finally:
        _THIS_CALL.made = outer


@contextlib.contextmanager
def _native_writes(snapshots: Any) -> Iterator[list[tuple[Any, Any, Any]]]:
    """``(object, state before, state after)`` of each object the pass reached (``snapshots``, its
    StateSnapshots) that the body's native code changed (Note [What a cached function writes])."""
    before = [(obj, state_of(obj)) for obj in snapshots.objects()]
    writes: list[tuple[Any, Any, Any]] = []
    try:
        yield writes
    finally:
        writes += [(obj, state, after) for obj, state in before
                   if not same_state(after := state_of(obj), state)]


# Note [A number the program wrote, read by a miss]
# ``state["n"] += 1`` makes ``n`` a dynamic number: the pass holds its NumberProxy in the caller's dict. A
# miss whose function read ``state["n"]`` natively read the proxy, and the cache kept a result computed from
# it (a later call: ``TypeError: ... 'Tensor' and 'NumberProxy'``; /tmp/eff54-probes/lru_reads_proxy.py).
# For the native call the reached dicts and instances hold the numbers' values (what eager's function reads
# at that point), and the proxies are put back after it where the function left the value there. The
# value is not guarded: eager caches what the miss computed whatever the number is on later calls, which
# hit.
@contextlib.contextmanager
def _values_for_native(snapshots: Any) -> Iterator[None]:
    """The reached dicts' and instances' NumberProxy items as their values for the body (Note [A number the
    program wrote, read by a miss])."""
    replaced: list[tuple[dict, Any, Any]] = []
    for obj in snapshots.objects():
        items = obj if type(obj) is dict else None if isinstance(obj, Proxy) else attributes(obj)
        if type(items) is not dict:
            continue
        for key, value in list(dict.items(items)):
            if isinstance(value, NumberProxy):
                dict.__setitem__(items, key, value.value)
                replaced.append((items, key, value))
    try:
        yield
    finally:
        for items, key, proxy in replaced:
            if dict.get(items, key, _ABSENT) is proxy.value:
                dict.__setitem__(items, key, proxy)


def rewrite(writes: list[tuple[Any, Any, Any]]) -> None:
    """A native call's writes (``_native_writes``) made again: a list's appended items
    appended, a dict's (an instance's attributes') set or removed keys set or removed, another object's
    state put where it is as the call found it (Note [What a cached function writes])."""
    for obj, before, after in writes:
        kind = before[0] if type(before) is tuple else None
        if kind == "list" and len(after[1]) >= len(before[1]) \
                and all(a is b for a, b in zip(before[1], after[1])):
            list.extend(obj, after[1][len(before[1]):])
        elif kind == "dict" and type(obj) is dict or kind == "attrs" and type(attributes(obj)) is dict:
            items = obj if kind == "dict" else attributes(obj)  # an instance's ``__dict__``: its attributes
            for key in [k for k in before[1] if k not in after[1]]:
                dict.pop(items, key, None)
            for key, value in after[1].items():
                if before[1].get(key, _ABSENT) is not value:
                    dict.__setitem__(items, key, value)
        elif same_state(state_of(obj), before):
            restore_state(obj, after)


def same_key(a: Any, b: Any) -> bool:
    """Whether two keys of a wrapper's calls are the same (plain values equal, other objects identical)."""
    return _same_key(a, b)


def _same_key(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(_same_key(x, y) for x, y in zip(a, b))
    return a is b or (type(a) in _PLAIN or type(a) is frozenset) and a == b  # else: pinned by identity


def _made_here() -> UnsupportedOperationError:
    return UnsupportedOperationError(
        "a functools.lru_cache function is called with a tensor the program made, which C hashes by "
        "identity: eager misses on every call (a new tensor each time), which a trace cannot replay",
        hints=("the call runs eagerly; key the cache by values (sizes, dtypes) or by the caller's tensors",),
    )


class LruCalls:
    """A pass's calls of lru-cached functions (Note [A cached function's call])."""

    def __init__(self, provenance: Any, context: Any, source: Callable[[], Any], snapshots: Any) -> None:
        self._provenance = provenance
        self._snapshots = snapshots  # the pass's StateSnapshots (Note [What a cached function writes])
        self.wrote = False  # a function this call ran wrote an object the program reached
        self._context = context
        self._source = source
        self._entries: dict[int, CacheEntries] = {}
        made = getattr(_THIS_CALL, "made", None)
        self._made: list[_Made] = made if made is not None else []
        self._next = 0  # this pass's next call, as an index of ``_made``
        self._raised: _Made | None = None  # a call that raised, in this pass
        self._info_names: set[str] = set()  # the names of its ``cache_info()`` reads (PerCallReads')
        self._held_results: set[int] = set()  # wrappers a result of which, no plain value, the pass bound
        self._cleared: list[Any] = []  # wrappers whose ``cache_clear()`` the program called

    def call(self, wrapper: Any, args: tuple, kwargs: dict) -> Any:
        """The wrapper's answer for this call, traced; NOT_HANDLED where the call is left to the net."""
        maxsize = wrapper.cache_parameters()["maxsize"]
        if maxsize is not None and maxsize <= 0:
            raise _caches_nothing(wrapper)
        if maxsize is not None and not _BOUNDED_READABLE:
            return NOT_HANDLED
        if any(self._left_to_the_net(v) for v in (*args, *kwargs.values())):
            return NOT_HANDLED
        try:
            cache = cache_dict(wrapper)
        except LookupError:
            return NOT_HANDLED
        recorded = args, kwargs
        args, kwargs = self._key_values(args, kwargs)
        key = lru_key(args, kwargs, typed=wrapper.cache_parameters()["typed"], mark=KEYWORD_MARK)
        entries = self._entries.get(id(wrapper))
        if entries is None:
            entries = self._entries[id(wrapper)] = CacheEntries(wrapper, cache, bounded=maxsize is not None)
        result = self._made_once(wrapper, key, args, kwargs, found=entries)
        if not _is_plain(result):  # an input (a tensor) or an object the trace reads through the entry
            self._held_results.add(id(wrapper))
        self._record(_FirstRun(self._next - 1, key, self._made[self._next - 1]), wrapper, *recorded)
        path = Path(Root("bound", f"{getattr(wrapper, '__qualname__', 'cache')}.cache", entries)).key(key)
        self._provenance.guard(path, "identity", result, per_expected=True)
        return self._provenance.bind_state(result, path, "cached")

    # Note [What keys an entry]
    # C hashes a tensor, a module, ``self`` of a cached method (any object whose class keeps object's
    # ``__hash__`` and ``__eq__``) by identity. Where the pass reached such a value through a path (an
    # argument, a parameter, an attribute) it is guarded as that very object, and the wrapper is called
    # with it (a tensor argument: the caller's tensor, not the pass's proxy, which the cache would keep
    # for ever, and which eager never passes), so the entry's key holds it as eager's does and the
    # prologue's lookup finds it. Another object at that path is another key: the identity guard fails,
    # the call traces again, as eager misses. A tensor the computation reads as the key's input is that
    # tensor (the guard pins it), so the recorded call hits. A tensor the program made (``twice(x + 1)``)
    # is a new key on every call, a miss each time for eager: no trace replays that, so the call runs
    # eagerly (JC-T001); so does a tensor subclass's instance (not handled: the computation may hand it
    # on rebuilt from its inner tensors, another object). Left to the net, as before: a value whose
    # class hashes it with its own Python code (its hash and equality may read anything; they run
    # natively, and the net sees that code run), and an identity-hashed object reached through no path
    # (made by the program, or a constant such as ``typing.Union``, which ``typing``'s own cache keys by).
    def clear(self, fn: Any, args: tuple) -> None:
        """``cache_clear()`` made once per call of the program, natively; the calls after this one refused
        (Note [A cache cleared inside the program]).

        Raises:
            UnsupportedOperationError: a result of the cache read before is no plain value (a tensor is an
                input its first run reads from the entry the clear removes).
        """
        wrapper = args[0] if fn is _CLEAR and args else getattr(fn, "__self__", None)
        if id(wrapper) in self._held_results:
            raise self.clear_refused(wrapper)
        self._make_pending(lambda made: made.wrapper is wrapper or made.wrapper.cache_parameters()["maxsize"])
        self._made_once(wrapper, _CLEAR_KEY, (), {}, call=wrapper.cache_clear)
        self._cleared.append(wrapper)
        RECORDED[0] = True

    def clear_refused(self, wrapper: Any) -> UnsupportedOperationError:
        """The refusal of a ``cache_clear()`` call (Note [A cache cleared inside the program]); the pass's
        guards on the cache's entries are dropped."""
        self._drop_entry_guards(wrapper)
        return _clear_refused(wrapper)

    def _drop_entry_guards(self, wrapper: Any) -> None:
        entries = self._entries.get(id(wrapper))
        if entries is not None:
            def reads_entries(guard: Any) -> bool:
                return any(path.root.obj is entries for path in (guard.path, *guard.related))

            guards = self._provenance.prologue.guards
            guards[:] = [g for g in guards if not reads_entries(g)]

    def _left_to_the_net(self, value: Any, depth: int = 0) -> bool:
        """Whether C hashes ``value`` (or an item of a tuple it is) with a class's own ``__hash__``/
        ``__eq__``, or it is an identity-hashed object the pass reached through no path (Note [What keys
        an entry])."""
        t = type(value)
        if _is_plain(value) or isinstance(value, TensorProxy):
            return False
        if t is tuple:
            return depth >= 8 or any(self._left_to_the_net(v, depth + 1) for v in value)
        hashed_by_program = t.__hash__ is not object.__hash__ or t.__eq__ is not object.__eq__
        return hashed_by_program or self._provenance.path_of(value) is None

    def _key_values(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The arguments as the wrapper is called with them natively (a tensor input is the caller's
        tensor), each pinned (Note [What keys an entry])."""
        return tuple(self._key_value(a) for a in args), {k: self._key_value(v) for k, v in kwargs.items()}

    def _key_value(self, value: Any) -> Any:
        if _is_plain(value):
            return value
        if isinstance(value, TensorProxy):
            return self._tensor_key(value)
        t = type(value)
        if t is tuple:
            return tuple(self._key_value(v) for v in value)
        self._provenance.guard(self._provenance.path_of(value), "identity", value)
        return value

    def _tensor_key(self, proxy: TensorProxy) -> torch.Tensor:
        """The caller's tensor an argument proxy stands for, guarded as that very tensor (C hashes a tensor
        by identity): Note [What keys an entry]."""
        if not isinstance(proxy, PlainTensorProxy):
            raise UnsupportedOperationError(
                "a functools.lru_cache function is called with a tensor subclass's instance, which jitcore "
                "does not key a cache entry by", hints=("the call runs eagerly",))
        reached = self._provenance.input_of(proxy)
        if reached is None:
            raise _made_here()
        path, tensor = reached
        self._provenance.guard(path, "identity", tensor)
        return tensor

    # Note [A cached function that raised, caught]
    # A wrapped function that raises caches nothing: eager calls it again on every call, and each call
    # runs it (its effects, ``misses`` counted). The pass made that call natively (the function ran once,
    # raised, and the program's handler took the exception, as eagerly), so no trace replays later calls:
    # calls like it run eagerly (an eager entry, JC-T001). The call whose pass this was must not: refused
    # once the pass ended and run again eagerly, it ran the function a second time (eager 1, 2, 3, 4 with
    # one ``log`` entry per call and ``misses`` 1, 2, ...; jit 2, 3, 4, 5, a longer log, one miss more:
    # /tmp/eff52-probes/lru_raise_caught.py). The pass interpreted the whole program as eager runs it,
    # each wrapper call made once, so its trace answers this call (its first run, which skips the calls
    # the pass made), and the refusal only decides the entry filed for the calls after it
    # (``TracedProgram.this_call_only``, jit/api.py). So does a count of ``cache_info()`` whose value the
    # program needed (``repr`` of it: Note [A cached function's counts]), which the pass read as eager
    # reads it at that point and no later call can replay.
    def caught_refusal(self) -> UnsupportedOperationError | None:
        """The refusal of later calls where a call raised and the program went on (eager calls the function
        again on every call, C having cached nothing), or a cache was cleared, or None: Note [A cached
        function that raised, caught]."""
        if self._raised is None:
            return _clear_refused(self._cleared[0]) if self._cleared else None
        name = getattr(self._raised.wrapper, "__qualname__", None) or "a cached function"
        return UnsupportedOperationError(
            f"{name} (cached by functools.lru_cache) raised {type(self._raised.error).__name__}, which "
            "the program caught: the cache kept nothing, so eager calls the function again on every call",
            hints=("the call runs eagerly; return a value for the failing case instead of raising",),
        )

    def only_counts(self, names: list[str]) -> bool:
        """Whether every per-call read named in ``names`` is a ``cache_info()`` this pass recorded."""
        return bool(names) and all(name in self._info_names for name in names)

    def info(self, fn: Any, args: tuple, per_call: Any) -> Any:
        """``wrapper.cache_info()``: its counts names of the computation, read on every call (Note [A cached
        function's counts]); ``per_call`` the pass's ``PerCallReads``."""
        wrapper = args[0] if fn is _INFO and args else fn.__self__
        counts = self._made_once(wrapper, _INFO_KEY, (), {}, call=lambda: self._counts_here(wrapper))
        info = wrapper.cache_info()  # its type, and ``maxsize``: a constant of the wrapper
        name = f"{getattr(wrapper, '__qualname__', 'a cached function')}.cache_info"
        read = CacheInfoRead(wrapper, counts, self._next - 1)
        RECORDED[0] = True
        self._info_names.add(name)
        hits, misses, currsize = per_call.record_read(
            read, name, counts, made=lambda value, name_of: [name_of(v) for v in value])
        return type(info)(hits, misses, info.maxsize, currsize)

    def _made_once(self, wrapper: Any, key: Any, args: tuple, kwargs: dict,
                   call: Callable[[], Any] | None = None, found: CacheEntries | None = None) -> Any:
        """The wrapper's answer (``call()``'s, where given): the native call's, a hit's found in ``found``
        (Note [A hit made later]), or the one an earlier pass of this call had (Note [One native call per
        call of the program])."""
        i, self._next = self._next, self._next + 1
        if i < len(self._made) and self._made[i].wrapper is wrapper and _same_key(self._made[i].key, key):
            made = self._made[i]
            rewrite(made.writes)  # as the native call wrote them: Note [What a cached function writes]
            self.wrote = self.wrote or bool(made.writes)
        else:
            del self._made[i:]
            made = self._make(wrapper, key, args, kwargs, call, found)
            self._made.append(made)
        if made.error is not None:
            self._raised = made
            raise made.error
        return made.result

    # Note [A hit made later]
    # A hit the pass made natively (``hits`` counted, the entry moved to the front) stayed made where the
    # pass then stopped (a refusal, the program's exception after an effect) and the call ran eagerly: the
    # eager run hit again (``hits`` 2 where eager has 1: /tmp/eff53-probes/lru_rerun_lost.py "refusal
    # after a hit"). So the pass finds a hit in the cache (its result read from the entry, as the prologue
    # reads it) and does not make it: the computation's first run makes it (``replay_lru_call``), or the
    # call's eager run does, or a pass that raises the program's exception runs eagerly
    # (``Pass._made_effects``) to make it. Counts the pass reads count the hits found before
    # (``_counts_here``). Made natively first: a bounded cache's found hits before any miss (the miss may
    # evict by their order), and a wrapper's own before its ``cache_clear()``; those the call's eager run
    # makes again, whose count is taken back (jit/lru_reruns.py).
    #
    # Note [What a cached function writes]
    # A miss runs the function natively, and what it writes into an object the program had reached before
    # the call was part of the pass's diff: replayed on every cached call, all hits (eager log [2], [2]:
    # jit [2], [2, 2]); a second pass of the call took the call as made and lost the write, which the first
    # pass's restore had undone (/tmp/eff54-probes/miss_read_before2.py). The pass now keeps the objects'
    # states before and after the native call (``_native_writes``): a later pass of the call
    # taking the call makes those writes again there (``rewrite``), so does the call's eager run
    # (jit/lru_reruns.py), and the trace of a pass that saw such writes answers its own call only (its
    # first run replays the diff, the function's writes with the program's, reads before the call reading
    # the state as the call found it) and is not filed (``TracedProgram.filed``): the next call, a hit,
    # traces again and is kept. A write into an object the program had not reached is made once natively
    # and found by the program as the state it reaches.
    def _make(self, wrapper: Any, key: Any, args: tuple, kwargs: dict, call: Callable[[], Any] | None,
              found: CacheEntries | None) -> Made:
        made = _Made(wrapper, key, args=args, kwargs=kwargs)
        if call is not None:
            try:
                made.result = call()
            except Exception as error:  # noqa: BLE001 - the program's, raised again by ``_made_once``
                made.error = error
            return made
        if found is not None and (result := found[key]) is not _ABSENT:  # a hit: Note [A hit made later]
            made.result, made.kind = result, "pending"
            return made
        self._make_pending(lambda pending: pending.wrapper.cache_parameters()["maxsize"] is not None)
        with _values_for_native(self._snapshots), \
                _native_writes(self._snapshots) as made.writes:  # Note [What a cached function writes]
            try:  # the function run this once (as eagerly)
                made.result, made.kind = wrapper(*args, **kwargs), "miss"
            except Exception as error:  # noqa: BLE001 - the program's, raised again by ``_made_once``
                made.error, made.kind = error, "raised"
        self.wrote = self.wrote or bool(made.writes)
        return made

    def _make_pending(self, which: Callable[[Made], Any]) -> None:  # Note [A hit made later]
        """The hits this call found and did not make yet (``which`` of them) made natively, in program
        order: a miss of a bounded cache after them evicts by their order, a clear empties the cache
        (Note [A hit made later])."""
        for made in self._made:
            if made.kind == "pending" and which(made):
                made.kind = "hit"
                made.wrapper(*made.args, **made.kwargs)

    def made_natively(self) -> bool:
        """Whether this call found hits it has not made yet (Note [A hit made later]), or ran a function: the
        call's eager run makes or takes them (Note [A pass's cached calls, run again eagerly])."""
        return any(made.kind in ("pending", "miss", "raised") for made in self._made)

    def _counts_here(self, wrapper: Any) -> list[int]:
        """``wrapper``'s counts as eager has them here: its hits found and not made yet counted."""
        counts = _counts(wrapper)
        counts[0] += sum(1 for made in self._made if made.kind == "pending" and made.wrapper is wrapper)
        return counts

    def _record(self, token: _FirstRun, wrapper: Any, args: tuple, kwargs: dict) -> None:
        RECORDED[0] = True
        self._context.scopes[-1].append(
            BoundSymbol(_REPLAY, (token, wrapper, *args), dict(kwargs), None, (), self._source()))
