"""Reads of a dict's items through its C methods, bound as subscripts are.

``d.get(k, 0)``, ``d.pop(k)`` and ``d.setdefault(k, v)`` read an item without BINARY_SUBSCR, so the
interpreter's subscript hook never sees them: on a dict of state the value read would be a constant
of the trace. These lookasides read the item through that hook (``Pass._load_subscr``), so the
value is bound to its path like ``d[k]``: guarded, or a dynamic number when the program writes it
back (a counter: ``d["m"] = d.get("m", 0) + 1`` is one cache entry, not one per value). A read the
hook leaves unbound (library code, which jitcore does not bind item by item) of an item that is a
counter is reported to ``Provenance.native_reads``, which guards it by value (Note [Counters read
natively] in jitcore/jit/provenance.py).

The same holds for an OrderedDict's own ``pop`` and ``setdefault`` (its ``get`` is dict's): they change the
OrderedDict through its own methods (dict's would leave its key list behind).

Invariants: each replacement behaves as the dict method (same result, same errors, same change of
the dict; ``get`` and ``setdefault`` hash the key once, and ``pop`` does on a dict the program made);
dict subclasses that override the method never reach it (their own method is called).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from jitcore.interpreter import current_run
from jitcore.interpreter.hashed_inserts import keyed_call
from jitcore.interpreter.hashed_lookup import dict_get
from jitcore.proxies.number import NumberProxy

__all__ = ["dict_read_lookasides"]

_ABSENT = object()
_SETDEFAULTS = (dict.setdefault, collections.OrderedDict.setdefault)


def dict_read_lookasides(
    load_subscr: Callable[[Any, Any, Any, Any], Any],
    native_arguments: Callable[[Any, tuple, dict], tuple[tuple, dict]],
    provenance: Any,
) -> dict[Any, Callable[..., Any]]:
    """``{dict.get: ..., dict.pop: ..., dict.setdefault: ...}`` (and OrderedDict's ``pop``, ``setdefault``)
    reading present items through ``load_subscr(frame, container, key, value)``; their arguments are
    first what C code is handed (``native_arguments(fn, args, kwargs)``, called with the method
    descriptor and the dict as its first argument, as the interpreter calls it: a caller's object as a
    key pins its identity, numbers are values), as for any opaque call."""

    def read(d: dict, key: Any, value: Any) -> Any:
        run = current_run()
        if run is None or not run.frames:
            return value
        bound = load_subscr(run.frames[-1], d, key, value)
        if bound is value and provenance.counters and not isinstance(value, NumberProxy):
            path = provenance.path_of(d)
            if path is not None and path.key(key) in provenance.counters:
                provenance.native_reads.add(path.key(key))
        return bound

    def lookup(d: dict, key: Any, default: Any) -> Any:
        run = current_run()  # the key's Python ``__hash__``/``__eq__`` interpreted (Note [A hashed lookup,
        return dict.get(d, key, default) if run is None else dict_get(run, d, key, default)  # interpreted])

    def get(d: dict, key: Any, default: Any = None, /) -> Any:
        (_, key, default), _ = native_arguments(dict.get, (d, key, default), {})
        if provenance.path_of(d) is None:  # a dict the program made: nothing to bind
            return lookup(d, key, default)
        value = lookup(d, key, _ABSENT)
        return default if value is _ABSENT else read(d, key, value)

    def popper(native_pop: Callable[..., Any]) -> Callable[..., Any]:
        def pop(d: dict, key: Any, /, *default: Any) -> Any:
            (_, key, *default), _ = native_arguments(native_pop, (d, key, *default), {})
            if provenance.path_of(d) is None:  # a dict the program made: the key is hashed once, as eagerly
                return native(native_pop, d, key, *default)
            value = lookup(d, key, _ABSENT)
            if value is _ABSENT:
                return native(native_pop, d, key, *default)
            bound = read(d, key, value)
            native(native_pop, d, key)
            return bound
        return pop

    def defaulter(native_setdefault: Callable[..., Any]) -> Callable[..., Any]:
        def setdefault(d: dict, key: Any, default: Any = None, /) -> Any:
            (_, key, default), _ = native_arguments(native_setdefault, (d, key, default), {})
            size = dict.__len__(d)
            value = native(native_setdefault, d, key, default)  # the key hashed once, as eagerly (test_dict's
            # test_setdefault_atomic): the item was present where the dict did not grow
            return value if dict.__len__(d) != size else read(d, key, value)
        return setdefault

    def native(method: Callable[..., Any], *args: Any) -> Any:
        """A dict method that changes the dict, its key's Python ``__hash__``/``__eq__`` interpreted first,
        then called watched (Note [A keyed C call, interpreted first], interpreter/hashed_inserts.py)."""
        run = current_run()
        if run is None:
            return method(*args)
        return keyed_call(run, method, args, container=args[0], keys=args[1:2],
                          insert=method in _SETDEFAULTS)

    ordered = collections.OrderedDict
    return {dict.get: get, dict.pop: popper(dict.pop), dict.setdefault: defaulter(dict.setdefault),
            ordered.pop: popper(ordered.pop), ordered.setdefault: defaulter(ordered.setdefault)}
