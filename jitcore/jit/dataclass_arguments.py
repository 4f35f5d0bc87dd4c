"""Dataclass arguments whose list fields the jitted function only appends to and measures.

A dataclass argument is bound as a structure (``Provenance._bind_structure``): a copy of it whose list fields
are copies too, each guarded by its length and items, so a ``TrainState`` whose ``losses`` the step appends
to was found longer by every call and traced again. ``field_appended_parameters(fn)`` proves from the jitted
function's own bytecode which fields of a parameter are only appended to (``st.log.append(x)``) or measured
(``len(st.log)``): every load of the parameter is consumed by an attribute read of a plain name, or by an
attribute store. ``bind_field_lists`` then binds those fields as list arguments only appended to
(``MeasuredLists.bind_argument``: the type guarded, the appends replayed, ``len()`` read per call), and the
other fields as ``_bind_structure`` does.
Invariant: only where every attribute the function names on the parameter is a field of the dataclass (no
method could see the copy's lists) and the argument was not bound already (passed twice, or reached as
state: then it is bound as before).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
from typing import Any, NamedTuple

from jitcore.jit.appends import parameter_uses, stored_by_object_setattr, updated_attribute
from jitcore.jit.measured_lists import MeasuredLists
from jitcore.prologue import Path

__all__ = ["FieldUses", "bind_field_lists", "field_appended_parameters", "narrows_fields"]

_APPENDING = frozenset({"append", "extend"})
_LOOKUPS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_CALLS = frozenset({"PRECALL", "CALL"})
_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST"})


class FieldUses(NamedTuple):
    """The attributes a function names on one parameter, and those of them it only appends to or measures."""

    names: frozenset[str]
    appended: frozenset[str]
    object_setattr: bool = False  # a field stored by object.__setattr__: Note [A frozen dataclass's ...]


def field_appended_parameters(fn: Any) -> dict[str, FieldUses]:
    """The parameters of ``fn`` (a Python function, or a module's ``forward``) used only through attributes,
    one attribute at least only appended to or measured (Note [A dataclass's list fields appended to])."""
    target = getattr(fn, "forward", fn)
    function = getattr(target, "__func__", target)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return {}
    found = _fields_appended(code)
    if "object" in getattr(function, "__globals__", {}):  # not the builtin: its ``__setattr__`` could read
        found = {p: (uses, measured) for p, (uses, measured) in found.items() if not uses.object_setattr}
    if "len" in getattr(function, "__globals__", {}):  # ``len`` is not the builtin there: measuring reads
        found = {p: uses._replace(appended=uses.appended - measured) for p, (uses, measured) in found.items()}
    else:
        found = {p: uses for p, (uses, _measured) in found.items()}
    return {p: uses for p, uses in found.items() if uses.appended}


def narrows_fields(value: Any, uses: FieldUses | None) -> bool:
    """Whether the dataclass instance ``value`` of a parameter with ``uses`` is bound by ``bind_field_lists``:
    each attribute named a field (no method of the class reads the copy), one of those appended a list."""
    if uses is None or not dataclasses.is_dataclass(value) or isinstance(value, (type, dict, tuple)):
        return False
    fields = {f.name for f in dataclasses.fields(value)}
    return uses.names <= fields and any(type(getattr(value, n, None)) is list for n in uses.appended)


# Note [A dataclass's list fields appended to]
# ``step(st, x)`` with ``st.losses.append(loss.item())`` and a dataclass ``st``: its list fields were bound as
# argument lists (their lengths and items guarded), so every call traced again (4 in 4). A parameter whose
# every use is ``LOAD_FAST st`` right before reading (or storing) an attribute of a plain name has fields
# that are read only at their names: a field whose every read looks ``append``/``extend`` up or is the one
# argument of ``len()`` reads nothing of the list but its length, which is read per call (jit/appends.py's
# Note [A list's length read per call]). The dataclass is copied as before, the fields so used bound as list
# arguments only appended to (their type guarded; the copy's appends replayed onto the caller's list), the
# others as ``_bind_structure`` binds them. A name that is not a field (a method, a property: its code would
# read the copy's list whole) or any other use of the parameter (passed on, ``repr``, ``dataclasses.replace``,
# captured by a closure) binds the dataclass as before.
def bind_field_lists(provenance: Any, measured: MeasuredLists, value: Any, path: Path, name: str,
                     appended: frozenset[str]) -> Any:
    """The dataclass argument ``value`` (``narrows_fields``): a copy of it, its list fields in ``appended``
    the program's own lists only appended to (Note [A dataclass's list fields appended to])."""
    provenance.guard(path, "type", type(value))
    clone = copy.copy(value)
    provenance.enter_argument(value, path, clone)  # the same object passed again is this copy
    for field in dataclasses.fields(value):
        item, at = getattr(value, field.name), path.attr(field.name)
        if field.name in appended and type(item) is list:
            bound = measured.bind_argument(item, at)
        else:
            bound = provenance.bind_argument(item, at, f"{name}_{field.name}")
        object.__setattr__(clone, field.name, bound)
    provenance.argument_copies.append((clone, path))
    return clone


@functools.cache
def _fields_appended(code: types.CodeType) -> dict[str, tuple[FieldUses, frozenset[str]]]:
    """Per parameter used only through attributes: its uses, and the attributes it measures with ``len()``."""
    found = parameter_uses(code)
    if found is None:
        return {}
    candidates, instructions, uses = found
    names: dict[str, set[str]] = {p: set() for p in candidates}
    other: dict[str, set[str]] = {p: set() for p in candidates}  # attributes used otherwise than appended to
    measured: dict[str, set[str]] = {p: set() for p in candidates}
    setattr_used: set[str] = set()
    for i, loaded, touched in uses:
        attribute = instructions[i + 1] if i + 1 < len(instructions) else None
        parameter = loaded[-1]  # the value a load pushes last (3.13's LOAD_FAST_LOAD_FAST pushes two)
        stored = stored_by_object_setattr(instructions, i)  # Note [A frozen dataclass's field set]
        if stored is not None and instructions[i].opname in _LOADS and parameter in touched \
                and loaded.count(parameter) == 1 and len(loaded) == 1:
            names[parameter].add(stored)
            other[parameter].add(stored)
            setattr_used.add(parameter)
            continue
        updated = updated_attribute(instructions, i)  # ``st.step += 1``: Note [An attribute updated in place]
        if updated is not None and instructions[i].opname in _LOADS and parameter in touched \
                and loaded.count(parameter) == 1:
            candidates -= touched - {parameter}
            names[parameter].add(updated)
            other[parameter].add(updated)
            continue
        if instructions[i].opname not in _LOADS or parameter not in touched or loaded.count(parameter) != 1 \
                or attribute is None or attribute.opname not in (*_LOOKUPS, "STORE_ATTR") \
                or attribute.argval.startswith("__"):
            candidates -= touched
            continue
        candidates -= touched - {parameter}  # a parameter pushed below it is used otherwise
        field = attribute.argval
        names[parameter].add(field)
        following = instructions[i + 2] if i + 2 < len(instructions) else None
        if attribute.opname == "LOAD_ATTR" and following is not None and following.opname in _LOOKUPS \
                and following.argval in _APPENDING:
            continue
        if attribute.opname == "LOAD_ATTR" and following is not None and following.opname in _CALLS \
                and following.arg == 1 and len(loaded) == 1 and i >= 1 \
                and instructions[i - 1].opname == "LOAD_GLOBAL" and instructions[i - 1].argval == "len":
            measured[parameter].add(field)
            continue
        other[parameter].add(field)
    return {p: (FieldUses(frozenset(names[p]), frozenset(names[p] - other[p]), p in setattr_used),
                frozenset(measured[p])) for p in candidates}
