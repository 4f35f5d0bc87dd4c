"""Special methods a protocol looks up on a class while tracing, pinned by the entry (a mixin of
``Provenance``, jit/provenance.py).

Invariants: a lookup pins, for classes that are neither the library's nor made in this pass for an object
without a path, the method the lookup found (bound as state) and its absence from the classes before it
in the MRO; each (class, name) is pinned once per pass; a class whose whole MRO is the library's is never
pinned.
"""

from __future__ import annotations

import types
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

    # Note [A value a Python __getattribute__ read from the instance dict]
    # ``config.return_dict`` on a transformers config runs two Python ``__getattribute__`` hooks
    # (PreTrainedConfig's, then HeterogeneousConfigMixin's through ``super()``), which end in
    # ``object.__getattribute__(config, "return_dict")`` (jitcore/interpreter/attributes.py
    # ``object_getattribute``). The interpreter runs the hooks, so their reads are guarded where they
    # happen; the value was guarded twice more: at ``config.return_dict``, which the fast path evaluated
    # by calling both hooks natively (~2.2 us a read, ten reads and ~25 us of the tiny Llama's ~85 us
    # prologue), and, where the program also read ``config.__dict__``, at ``config.__dict__[name]``.
    # Now the generic read is bound at ``config.__dict__[name]`` and the hooks' result is not bound
    # again, where that is what the call reads:
    # - the class is pinned (``type(config)``, a type guard), and the ``__getattribute__`` entry or its
    #   absence in every class of its MRO (the hooks' code is pinned with each function): the same
    #   hooks run, in the same order, on the same object;
    # - the hooks' own reads were guarded as they ran (``attribute_map``, the ``_heterogeneity_spec``
    #   lookup): they take the same branches and end in the same generic read;
    # - that read is ``obj.__dict__[name]``: the name is in the instance dict and no class of the MRO
    #   has a data descriptor of that name (its absence from each is guarded, or, for a class default
    #   the instance's value shadows, its identity: a property or slot added later would answer
    #   instead). The prologue reads ``obj.__dict__`` as ``obj.__dict__``, through the pinned hooks (the
    #   configs' answer with the instance dict; a hook of the class's that answers ``__dict__`` with
    #   another dict is not told apart: none is known).
    # Before, the generic read was bound at ``obj.name``, which the prologue evaluates through the
    # hooks: a hook that returns something other than the generic read (``value * 3``) had the
    # computation's input read as the hook's answer where the program had read the instance's value
    # (eager 7, jit 19 after replacing the hook: tests/jit/test_jit_hooked_attribute_reads.py).
    # The hooks' result is not bound again only where it is the object the generic read of one of the
    # hooks returned, for the same object and name (``_read_through_hooks``: the outer read, after the
    # hooks returned). A generic read the program makes itself is bound at the instance dict alone.
    # A name only a class defines (the configs' ``attribute_map``) and a generic read that raised: Note
    # [A class value or an absence a Python __getattribute__ read]. Anything else (a data descriptor; a
    # class's own ``__dict__``) keeps the binding at ``obj.name``.
    # Note [A class value or an absence a Python __getattribute__ read]
    # The same hooks also read ``attribute_map``, which only a class defines (PreTrainedConfig's and
    # each config class's), and ``hasattr(config, "vision_feature_layer")`` ends in a generic read that
    # raises AttributeError. Both kept their attribute path (``config.attribute_map``; the absence as
    # ``hasattr(config, name)``), which the prologue evaluates by calling the hooks natively: about 2.2
    # and 3.5 us of the tiny Llama's prologue, on every cached call. Now, with the class and hooks
    # pinned as above (the same hooks run, in the same order, on the same object, and their own reads
    # are guarded where they ran):
    # - a value the generic read found in a class (not the instance dict) is bound at that class's
    #   ``__dict__[name]``, with the name's absence guarded in the instance dict and in each class
    #   before it in the MRO: ``object.__getattribute__`` finds that entry, a value with no ``__get__``
    #   (so neither data descriptor nor method), and returns it as it is, since the instance dict does
    #   not have the name. A later class's entry is never consulted.
    # - a generic read that raised AttributeError is guarded by the name's absence from the instance
    #   dict and from every class of the MRO, and by ``__getattr__``'s absence from every class:
    #   ``object.__getattribute__`` then raises AttributeError (no descriptor, no instance value), and
    #   nothing turns it into a value after the hooks raise it. The program's own failed read of the
    #   same object and name (``hasattr``'s, after the hooks) is then not guarded again at its
    #   attribute path (``missing_through_hooks``), as a found value's outer read is not.
    # Library classes of the MRO (``object``) are taken as constant, as everywhere.
    def bind_read_through_hooks(self, code: Any, obj: Any, path: Path, name: str, value: Any) -> Path | None:
        """The path to bind ``object.__getattribute__(obj, name)``'s ``value`` at, for ``obj`` (at
        ``path``) whose class has a Python ``__getattribute__``, read by ``code``, with the class
        pinned; None where the read keeps its attribute path (Note [A value a Python
        __getattribute__ read from the instance dict], Note [A class value or an absence a Python
        __getattribute__ read])."""
        t = type(obj)
        mro = t.__mro__
        instance_dict = self._hooked_instance_dict(obj, mro, name)
        if instance_dict is None:
            return None
        found = instance_dict.get(name, _ABSENT)
        owner = None
        if found is not value:
            owner = next((k for k in mro if name in vars(k)), None)
            if found is not _ABSENT or owner is None or vars(owner)[name] is not value \
                    or hasattr(type(value), "__get__"):
                return None
        pinned = self._pinned_hooks(obj, path, t, mro)
        if pinned is None or (owner is not None and owner not in pinned):
            return None
        if owner is None:
            at = path.attr("__dict__").key(name)
            for klass in pinned:
                namespace = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__")
                if name in vars(klass):  # a class default the instance's value shadows: kept what it is
                    self.pin(vars(klass)[name])
                    self.guard(namespace.key(name), "identity", vars(klass)[name])
                else:
                    self.guard(namespace, "absent", name, per_expected=True)  # Note [One absence per name]
        else:  # Note [A class value or an absence a Python __getattribute__ read]
            at = Path(Root("bound", owner.__qualname__, owner)).attr("__dict__").key(name)
            self.guard(path.attr("__dict__"), "absent", name, per_expected=True)
            for klass in pinned[: pinned.index(owner)]:
                namespace = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__")
                self.guard(namespace, "absent", name, per_expected=True)
        hooks = {vars(k)["__getattribute__"] for k in mro if "__getattribute__" in vars(k)}
        if any(type(h) is types.FunctionType and h.__code__ is code for h in hooks):
            self._read_through_hooks[(id(obj), name)] = value  # a hook's read: its result follows
        return at

    def bind_absence_through_hooks(self, obj: Any, path: Path, name: str) -> None:
        """``object.__getattribute__(obj, name)`` raised AttributeError for ``obj`` (at ``path``) whose
        class has a Python ``__getattribute__``: guard the absence at the instance dict and the classes
        where that is what raised (Note [A class value or an absence a Python __getattribute__ read])."""
        t = type(obj)
        mro = t.__mro__
        if any(name in vars(k) or "__getattr__" in vars(k) for k in mro):
            return  # a descriptor raised, or a __getattr__ would answer: the program's read keeps its path
        instance_dict = self._hooked_instance_dict(obj, mro, name)
        if instance_dict is None or name in instance_dict:
            return
        pinned = self._pinned_hooks(obj, path, t, mro)
        if pinned is None:
            return
        self.guard(path.attr("__dict__"), "absent", name, per_expected=True)
        for klass in pinned:
            namespace = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__")
            self.guard(namespace, "absent", name, per_expected=True)
            self.guard(namespace, "absent", "__getattr__", per_expected=True)
        self._missing_through_hooks.add((id(obj), name))

    def missing_through_hooks(self, obj: Any, name: str) -> bool:
        """Whether a failed read of ``obj.name`` follows from a hook's generic read guarded absent
        (Note [A class value or an absence a Python __getattribute__ read])."""
        if (id(obj), name) in self._missing_through_hooks:
            self._missing_through_hooks.discard((id(obj), name))
            return True
        return False

    @staticmethod
    def _hooked_instance_dict(obj: Any, mro: tuple[type, ...], name: str) -> dict[str, Any] | None:
        """``obj``'s instance dict where a generic read of ``name`` is one the hooks' pinning describes: a
        Python ``__getattribute__``, no data descriptor of ``name``, the C instance dict; else None."""
        hook = next((vars(k)["__getattribute__"] for k in mro if "__getattribute__" in vars(k)), None)
        if type(hook) is not types.FunctionType or name == "__dict__":
            return None
        if any((name in vars(k) and _is_data_descriptor(vars(k)[name])) or ("__dict__" in vars(k) and type(
                vars(k)["__dict__"]) is not types.GetSetDescriptorType) for k in mro):
            return None  # a data descriptor, or an instance dict of a class's own making
        instance_dict = object.__getattribute__(obj, "__dict__")
        return instance_dict if type(instance_dict) is dict else None

    def _pinned_hooks(self, obj: Any, path: Path, t: type, mro: tuple[type, ...]) -> list[type] | None:
        """The non-library classes of ``mro``, with ``obj``'s class guarded and each one's
        ``__getattribute__`` entry pinned (or its absence guarded); None where some cannot be pinned."""
        pinned = self._pinned_classes(obj, mro)
        if len(pinned) != sum(not is_library_class(k) for k in mro):
            return None
        self.guard(path, "type", t)
        names = self._type_lookups.setdefault(t, set())
        if names is not None and ("__getattribute__", "every class") not in names:
            names.add(("__getattribute__", "every class"))
            for klass in pinned:
                namespace = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__")
                if "__getattribute__" in vars(klass):
                    self.bind_state(vars(klass)["__getattribute__"], namespace.key("__getattribute__"),
                                    "__getattribute__")
                else:
                    self.guard(namespace, "absent", "__getattribute__", per_expected=True)
        return pinned

    def read_through_hooks(self, obj: Any, name: str, value: Any) -> bool:
        """Whether ``obj.name``'s ``value`` is what the hooks' generic read returned, bound at the
        instance dict (Note [A value a Python __getattribute__ read from the instance dict])."""
        return self._read_through_hooks.pop((id(obj), name), _ABSENT) is value


_ABSENT = object()


def _is_data_descriptor(attribute: Any) -> bool:
    return hasattr(type(attribute), "__set__") or hasattr(type(attribute), "__delete__")
