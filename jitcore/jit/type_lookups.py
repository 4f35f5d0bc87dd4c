"""Special methods a protocol looks up on a class while tracing, pinned by the entry (a mixin of
``Provenance``, jit/provenance.py).

Invariants: a lookup pins, for classes that are neither the library's nor made in this pass for an object
without a path, the method the lookup found (bound as state) and its absence from the classes before it
in the MRO; each (class, name) is pinned once per pass; a class whose whole MRO is the library's is never
pinned.
"""

from __future__ import annotations

from typing import Any

from jitcore.jit.state_kinds import is_library_class
from jitcore.prologue import Path, Root

__all__ = ["TypeLookups"]


class TypeLookups:
    """The special-method pinning of ``Provenance`` (jit/provenance.py), which owns the state it uses
    (``_type_lookups``: the names pinned per class, None for a class wholly the library's) and gives it
    ``path_of``, ``bind_state`` and ``guard``."""

    # Note [A special method is looked up on the class]
    # ``a + b``, ``len(c)``, ``bool(o)``, ``for x in o``, ``o[k]``, ``with o:``, ``o(x)`` and a missing
    # attribute's ``__getattr__`` find their method on the class, never reading it as an attribute, so
    # no load hook saw it: a cached call kept the traced ``__mul__`` (or the traced absence of one,
    # ``divmod`` raising TypeError) after the caller replaced it on the class, where eager called the
    # new one. The interpreter now tells the jit each such lookup (``on_type_lookup``), and the entry
    # pins what it found: the entry of the first class in the MRO that has the name, and its absence
    # from the classes before it (from all of them when none has it). Classes of torch, jitcore and the
    # standard library are taken as constant, as for attribute reads. A class the program made itself
    # in this pass is not pinned (Note [A class the program made is its own]).
    def bind_type_lookup(self, obj: Any, t: type, name: str) -> None:
        """The special method ``name`` a protocol looked up on class ``t`` for ``obj``: pin what it found
        (Note [A special method is looked up on the class])."""
        names = self._type_lookups.get(t, ())
        if names is None or name in names:
            return
        mro = t.__mro__
        if names == () and all(is_library_class(klass) for klass in mro):
            self._type_lookups[t] = None
            return
        pinned = self._pinned_classes(obj, mro)
        if not pinned:
            # not remembered: an object with a path may meet the class later, and a class the program made
            # and dropped is freed as eagerly (the key would hold it to the pass's end: 3.13's test_inspect
            # TestGetattrStatic.test_cache_does_not_cause_classes_to_persist jitted)
            return
        if names == ():
            names = self._type_lookups[t] = set()
        names.add(name)
        owner = next((klass for klass in mro if name in vars(klass)), None)
        if owner is not None and owner in pinned:
            entry = Path(Root("bound", owner.__qualname__, owner)).attr("__dict__").key(name)
            self.bind_state(vars(owner)[name], entry, name)
        for klass in mro if owner is None else mro[: mro.index(owner)]:
            if klass in pinned:
                namespace = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__")
                self.guard(namespace, "absent", name, per_expected=True)  # Note [One absence per name]

    # Note [A class the program made is its own]
    # A class the jitted function defines is new on every call. Pinned as state, its ``__setitem__`` was
    # bound with the cell of the function's own ``log`` it appends to, so every cached call replayed the
    # append on the pass's list and returned it, growing (/tmp/cpy51-probes/prep_jit2.py). As for attribute
    # reads (jit/state_reads.py): for an object without a path, a class of its MRO without one is not pinned.
    def _pinned_classes(self, obj: Any, mro: tuple[type, ...]) -> list[type]:
        """The classes of ``mro`` a lookup for ``obj`` pins (Note [A class the program made is its own])."""
        callers = self.path_of(obj) is not None
        return [klass for klass in mro
                if not is_library_class(klass) and (callers or self.path_of(klass) is not None)]
