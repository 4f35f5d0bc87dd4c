"""A stopped pass's native calls of ``functools.lru_cache`` wrappers, taken by the eager run of the same call
(Note [A pass's cached calls, run again eagerly]).

Invariants:
- the wrapper's C fields are written only where their offsets were found at import on a wrapper of known
  counts and function (each at one place only); elsewhere nothing is done (the eager run makes the calls
  again, as before);
- a wrapper's function is swapped only for the eager run's duration and always put back, the swapped-in
  callable owning the reference the wrapper holds meanwhile;
- the eager run's call of a wrapper that the pass made with the same key answers what the pass's call did
  (its result, or its exception), with the function's writes into the objects the program reached made
  again at that point; any other call runs the function.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable, Iterator
from typing import Any

from jitcore.jit.lru_caches import KEYWORD_MARK, CacheEntries, Made, cache_dict, lru_key, rewrite, same_key

__all__ = ["made_again"]

# Note [A pass's cached calls, run again eagerly]
# A pass that a refusal (JC-T001) or the program's exception stops after it made effects is put back
# (its snapshots restored) and the call runs eagerly. The wrapper's calls the pass made natively stay
# made: the eager run found the pass's misses cached (a hit counted where eager misses, the function not
# run, so its write into a list the program had read before the call, put back with the snapshots, was
# lost: /tmp/eff53-probes/lru_rerun_lost.py), and ran a raising function twice (its log entry doubled,
# ``misses`` counted twice: lru_raise_variants.py "uncaught after an effect"). Hits are not made by the
# pass (Note [A hit made later], jit/lru_caches.py), so the eager run makes them. For the calls that ran
# the function, the eager run takes the pass's: a miss of an unbounded cache is taken out of the cache
# and its count, a raise out of the count, and for the eager run the wrapper's function (C's ``func``
# field) is a callable that answers the call with the same key as the pass's call did, after making the
# function's writes into the objects the program reached again (``rewrite``), so C counts the miss and
# caches the very result, as eagerly. A bounded cache's miss stays cached (its link is in C's list: the
# eager run hits it; left), as does a hit a bounded cache's later miss made the pass make (its count is
# taken back).
_WORD = ctypes.sizeof(ctypes.c_ssize_t)


def _offsets() -> tuple[int, int, int] | None:
    """The offsets of a wrapper's ``hits``, ``misses`` and ``func`` fields, each found at one place of a
    wrapper with 7 hits and 11 misses; None where not."""

    def probe(n: int) -> int:
        return n

    wrapper = functools.lru_cache(maxsize=None)(probe)
    for n in range(11):
        wrapper(n)
    for _ in range(7):
        wrapper(0)
    words = [ctypes.c_ssize_t.from_address(id(wrapper) + at).value
             for at in range(0, type(wrapper).__basicsize__ - _WORD + 1, _WORD)]
    found = [[i * _WORD for i, word in enumerate(words) if word == value] for value in (7, 11, id(probe))]
    if any(len(places) != 1 for places in found):
        return None
    return found[0][0], found[1][0], found[2][0]


_FIELDS = _offsets()
_PREV_AT = object.__basicsize__  # a bounded cache's link (and the wrapper, its list's root): prev, next
_NEXT_AT = _PREV_AT + _WORD


def _links_unlinkable() -> bool:
    """Whether a bounded cache's links are in C's list at ``_PREV_AT``/``_NEXT_AT`` (checked on a cache of
    known contents: the root, the older link, the newer one)."""

    @functools.lru_cache(maxsize=4)
    def probe(n: int) -> int:
        return n

    probe(1)
    probe(2)
    cache = cache_dict(probe)
    root, older, newer = id(probe), id(cache[1]), id(cache[2])
    return [_at(root, _NEXT_AT), _at(older, _NEXT_AT), _at(newer, _NEXT_AT)] == [older, newer, root] \
        and [_at(root, _PREV_AT), _at(newer, _PREV_AT), _at(older, _PREV_AT)] == [newer, older, root]


def _at(address: int, offset: int) -> int:
    return ctypes.c_ssize_t.from_address(address + offset).value


def _unlink(cache: dict, key: Any) -> None:
    """A bounded cache's entry taken out of C's list of links and out of the cache."""
    link = id(cache[key])
    before, after = _at(link, _PREV_AT), _at(link, _NEXT_AT)
    ctypes.c_ssize_t.from_address(before + _NEXT_AT).value = after
    ctypes.c_ssize_t.from_address(after + _PREV_AT).value = before
    del cache[key]  # the link's last reference: freed (its key and result released)


def _field(wrapper: Any, at: int) -> ctypes.c_ssize_t:
    return ctypes.c_ssize_t.from_address(id(wrapper) + at)


def _answering(wrapper: Any, function: Any, made: list[Made]) -> Callable[..., Any]:
    typed = wrapper.cache_parameters()["typed"]

    def answer(*args: Any, **kwargs: Any) -> Any:
        key = lru_key(args, kwargs, typed=typed, mark=KEYWORD_MARK)
        for i, call in enumerate(made):
            if same_key(call.key, key):
                del made[i]
                rewrite(call.writes)
                if call.error is not None:
                    raise call.error.with_traceback(None)
                return call.result
        return function(*args, **kwargs)

    return answer


_UNLINKABLE = _FIELDS is not None and _links_unlinkable()


@contextlib.contextmanager
def made_again(made: list[Made]) -> Iterator[None]:
    """The eager run of a call whose stopped pass made the wrapper calls ``made`` (Note [A pass's cached
    calls, run again eagerly])."""
    if _FIELDS is None or not any(call.kind in ("hit", "miss", "raised") for call in made):
        yield
        return
    hits_at, misses_at, func_at = _FIELDS
    taken: dict[int, tuple[Any, list[Made]]] = {}
    for call in made:
        bounded = call.wrapper is not None and call.wrapper.cache_parameters()["maxsize"] is not None
        if call.kind == "hit":
            _field(call.wrapper, hits_at).value -= 1
        elif call.kind == "raised" or call.kind == "miss" and (not bounded or _UNLINKABLE):
            if call.kind == "miss":
                cache = cache_dict(call.wrapper)
                if CacheEntries(call.wrapper, cache, bounded=bounded)[call.key] is not call.result:
                    continue
                if bounded:
                    _unlink(cache, call.key)
                else:
                    del cache[call.key]
            _field(call.wrapper, misses_at).value -= 1
            taken.setdefault(id(call.wrapper), (call.wrapper, []))[1].append(call)
    swapped: list[tuple[Any, int, Any]] = []
    try:
        for wrapper, calls in taken.values():
            function = _field(wrapper, func_at).value
            answer = _answering(wrapper, ctypes.cast(function, ctypes.py_object).value, calls)
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(answer))  # the reference the wrapper holds
            _field(wrapper, func_at).value = id(answer)
            swapped.append((wrapper, function, answer))
        yield
    finally:
        for wrapper, function, answer in reversed(swapped):
            _field(wrapper, func_at).value = function
            ctypes.pythonapi.Py_DecRef(ctypes.py_object(answer))
