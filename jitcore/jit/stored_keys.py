"""The stored keys of a dict or set of state, reached by identity: what a hashed lookup reads of them
through their Python ``__hash__``/``__eq__`` is the trace's state, guarded.

Invariant: a stored key is remembered at a root bound to the key object itself (``<path> key``), only
where it is an instance of a class the program defined with a Python ``__hash__`` or ``__eq__`` and has
no path yet; the container's own guards (its keys, its contents) say which objects it holds.
"""

from __future__ import annotations

from types import FunctionType
from typing import Any

from jitcore.jit.code_kinds import is_programs_class
from jitcore.prologue import Path, Root

__all__ = ["remember_stored_keys"]

_SCANNED_KEYS = 256  # stored keys looked at per container reached


# Note [The stored keys of a container of state]
# A lookup in a dict or set of state interprets the stored keys' Python ``__hash__`` and ``__eq__``
# (Note [A hashed lookup, interpreted], interpreter/hashed_lookup.py). A stored key reached only as a key
# had no path, so its ``self.v`` read there was taken for the program's own object's: unguarded, and a
# cached call returned the first call's answer after the caller changed the stored key's ``v``. Such a
# key is remembered at a root bound to it, so what its dunders read is guarded like any attribute of the
# caller's. Keys past the first 256 of a container are left (docs/user-guide.md).
def remember_stored_keys(provenance: Any, container: Any, path: Path) -> None:
    """Remember the stored keys of the dict or set ``container`` at ``path`` whose class has a Python
    ``__hash__`` or ``__eq__`` (Note [The stored keys of a container of state])."""
    if type(container) not in (dict, set, frozenset) and not isinstance(container, dict):
        return
    for i, key in enumerate(container):
        if i >= _SCANNED_KEYS:
            return
        kind = type(key)
        if kind.__module__ == "builtins" or not is_programs_class(kind) or \
                provenance.path_of(key) is not None:
            continue
        if type(getattr(kind, "__hash__", None)) is FunctionType or \
                type(getattr(kind, "__eq__", None)) is FunctionType:
            provenance.remember(key, Path(Root("bound", f"{path.describe()} key", key)))
