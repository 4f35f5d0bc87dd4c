"""Namespace arguments the jitted function only reads and writes attributes of: no guard on their items.

A ``types.SimpleNamespace`` of state is guarded item by item, its ``__dict__`` as a plain dict (Note
[Items C reads natively], jit/state_kinds.py), because C reads its items past the hooks (``repr(ns)``,
``ns == other``, ``copy.copy(ns)``). ``attribute_parameters(fn)`` proves from the jitted function's own
bytecode that C never gets such an argument from it: every load of the parameter is consumed by an
attribute read, a method load or an attribute store of a plain name (``s.log``, ``s.step = n``).
Invariant: a namespace so proved is guarded by its identity alone (as before), each attribute the program
reads bound through its own path; reached again any other way (passed twice, a global, an item of a
container of state), it is bound as before, its items guarded (``Provenance._remember_object``).
"""

from __future__ import annotations

import functools
import types
from typing import Any

from jitcore.jit.appends import parameter_uses, stored_by_object_setattr, updated_attribute
from jitcore.prologue import Path

__all__ = ["attribute_parameters", "bind_namespace_argument", "is_namespace"]

# What may consume the parameter the load pushed: ``s.name`` read, ``s.name(...)`` looked up, ``s.name = v``.
_ATTRIBUTE_USES = frozenset({"LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK"})


# Note [A namespace argument only used through its attributes]
# ``step(s, x)`` with ``s.log.append(x.sum())`` and ``s = types.SimpleNamespace(log=[])``: the namespace's
# items were guarded as C may read them (``repr(s)``), so the log's length was guarded, and every call found
# a longer list and traced again (3 entries in 3 calls, where an instance of a plain class takes 1). C reads
# a namespace's items only when it is handed the namespace (or a container holding it), never through an
# attribute read, which the hooks see and bind at its own path (``s.log``: its type, as only appended to).
# So a parameter whose every use in the function's own bytecode is ``LOAD_FAST s`` right before reading,
# looking up or storing an attribute of a name that is not a dunder (a ``SimpleNamespace`` has no other
# attribute than its instance's: none of its class is such a name), or ``COPY`` into an update of one
# (``s.n += 1``: Note [An attribute updated in place], jit/appends.py), or the object of
# ``object.__setattr__(s, "n", v)`` with a constant plain name (Note [A frozen dataclass's field set],
# jit/appends.py; 20 traces in 20 beside a log before: C's ``object.__setattr__`` stores that one item, as
# ``STORE_ATTR`` does on a class without a ``__setattr__`` of its own) never gives C the namespace to read:
# it is guarded by identity, its items not. A parameter passed on (``helper(s, x)``), captured
# by a closure, stored, compared or read through ``vars``/``locals`` keeps the items guarded, as does a
# subclass (its methods may read the items) or an ``argparse.Namespace`` (``_get_kwargs`` is such a method).
def attribute_parameters(fn: Any) -> frozenset[str]:
    """The parameters of ``fn`` (a Python function, or a module's ``forward``) that its bytecode only
    uses through attributes of plain names (Note [A namespace argument only used through its attributes])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return frozenset()
    found, set_by_object = _attribute_parameters(code)
    if "object" in getattr(function, "__globals__", {}):  # not the builtin: its ``__setattr__`` could read
        return found - set_by_object  # the namespace (Note [A frozen dataclass's field set], jit/appends.py)
    return found


def is_namespace(value: Any) -> bool:
    """Whether ``value`` is a namespace whose every attribute is its instance's (not a subclass's)."""
    return type(value) is types.SimpleNamespace


@functools.cache
def _attribute_parameters(code: types.CodeType) -> tuple[frozenset[str], frozenset[str]]:
    """The parameters used only through attributes, and those of them set by ``object.__setattr__``."""
    found = parameter_uses(code)
    if found is None:
        return frozenset(), frozenset()
    candidates, instructions, uses = found
    set_by_object: set[str] = set()
    for i, names, touched in uses:
        if instructions[i].opname in _LOADS and len(names) == 1 and names[0] in touched \
                and stored_by_object_setattr(instructions, i) is not None:  # object.__setattr__(s, "n", v)
            set_by_object.add(names[0])
            continue
        following = instructions[i + 1] if i + 1 < len(instructions) else None
        pushed_last = names[-1] if instructions[i].opname.startswith("LOAD_FAST") else None
        by_attribute = following is not None and following.opname in _ATTRIBUTE_USES \
            and not following.argval.startswith("__")
        if (by_attribute or updated_attribute(instructions, i) is not None) and pushed_last in touched \
                and names.count(pushed_last) == 1:  # ``s.n += 1``: Note [An attribute updated in place]
            touched = touched - {pushed_last}  # the other names a 3.13 LOAD_FAST_LOAD_FAST pushes below it
        candidates -= touched
    return frozenset(candidates), frozenset(set_by_object & candidates)


def bind_namespace_argument(provenance: Any, value: Any, path: Path, name: str) -> Any:
    """A namespace argument of a parameter in ``attribute_parameters``: guarded by identity, its items not;
    one reached already is bound as any argument is (its items guarded), and ``Provenance._remember_object``
    guards them when it is reached again later."""
    if provenance.path_of(value) is not None:
        return provenance.bind_argument(value, path, name)
    provenance.pin(value)
    provenance.guard(path, "identity", value)
    provenance.remember(value, path)
    return value
