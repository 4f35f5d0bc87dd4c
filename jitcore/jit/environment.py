"""Reads of the process environment (``os.environ``), guarded; writes to it and to the recursion limit
refused.

``os.environ["HOME"]``, ``os.environ.get("DEBUG")``, ``"X" in os.environ`` and ``os.getenv("X")`` all
reach ``os._Environ.__getitem__`` (os.py), standard-library code whose state jitcore takes as constant:
the value read while tracing would be a constant of the trace, stale once the environment changes.
The lookaside reads the item natively and guards what it saw: the key's value, or its absence
(``os.environ`` is a bound root of the prologue; the check is a dict lookup per key read).
Writes (``os.environ[k] = v``, ``del``, ``putenv``) change the process, not a traced value: they are
refused with UnsupportedOperationError (JC-T001), so such a call runs eagerly. So is
``sys.setrecursionlimit``: the pass runs under a raised limit of its own (jit/recursion.py) and puts
the caller's back when it ends, so a limit the program set would be lost, and a cached call would not
set it at all.

Invariant: each replacement gives the result and raises the error ``os._Environ``'s method would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.prologue import Path, Root

__all__ = ["environ_lookasides"]

# the process environment, by the name a guard shows for it
_ENVIRONMENTS = {id(os.environ): "os.environ"}
if hasattr(os, "environb"):
    _ENVIRONMENTS[id(os.environb)] = "os.environb"
_EnvironType = type(os.environ)


def environ_lookasides(guard: Callable[..., None]) -> dict[Any, Callable[..., Any]]:
    """Replacements of ``os._Environ``'s ``__getitem__``, ``__setitem__``, ``__delitem__``, of ``os.putenv``
    and ``os.unsetenv``; ``guard(path, kind, expected, per_expected=...)`` is ``Provenance.guard``."""
    getitem, setitem, delitem = _EnvironType.__getitem__, _EnvironType.__setitem__, _EnvironType.__delitem__

    def read(environ: Any, key: Any) -> Any:
        label = _ENVIRONMENTS.get(id(environ))
        if label is None:  # an _Environ of the program's own making: an ordinary object
            return getitem(environ, key)
        root = Path(Root("bound", label, environ))
        try:
            value = getitem(environ, key)
        except KeyError:
            guard(root, "member", (key, False), per_expected=True)
            raise
        guard(root.key(key), "value", value)
        return value

    def refuse_limit(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedOperationError(
            "sys.setrecursionlimit() changes the interpreter's recursion limit, which a cached call would "
            "not do",
            hints=("set the recursion limit outside the jitted function",),
        )

    def refuse(name: str) -> Callable[..., Any]:
        def write(*args: Any, **kwargs: Any) -> Any:
            raise UnsupportedOperationError(
                f"{name} changes the process environment, which a cached call would not do",
                hints=("change the environment outside the jitted function",),
            )
        return write

    return {
        getitem: read,
        setitem: refuse("os.environ[key] = value"),
        delitem: refuse("del os.environ[key]"),
        os.putenv: refuse("os.putenv()"),
        sys.setrecursionlimit: refuse_limit,
        **({os.unsetenv: refuse("os.unsetenv()")} if hasattr(os, "unsetenv") else {}),
    }
