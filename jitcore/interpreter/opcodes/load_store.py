"""Loads, stores and deletes of locals, cells, globals, names, attributes and subscripts; imports.

Invariants:
- Unbound locals and cells raise exactly CPython's UnboundLocalError/NameError messages.
- Attribute and subscript access on non-native values goes through ``protocols`` (properties, descriptors,
  ``__getattr__``, ``__getitem__`` are interpreted). The ``hook=`` variants are used only by runs that set
  that hook.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import builtins
import sys
from types import CellType

from jitcore.interpreter.attributes import (
    NATIVE_NAMES,
    NATIVE_STORE_NAMES,
    delete_attr,
    load_attr,
    store_attr,
)
from jitcore.interpreter.frame import NULL, Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import HASHED_CONTAINERS, delete_item, get_item, set_item
from jitcore.interpreter.registry import handles
from jitcore.interpreter.tracebacks import caller_stand_in

# UnboundLocalError's message (the fused handlers and superinstructions raise it too)
UNBOUND_LOCAL = "cannot access local variable '{}' where it is not associated with a value"
_UNBOUND_FREE = "cannot access free variable '{}' where it is not associated with a value in enclosing scope"


def _name_error(name: str) -> NameError:
    return NameError(f"name '{name}' is not defined", name=name)


@handles("LOAD_CONST", since=(3, 11))
def load_const(frame: Frame, inst: Instruction) -> None:
    """Push a constant."""
    frame.stack.append(inst.argval)


@handles("LOAD_FAST", since=(3, 11))
@handles("LOAD_FAST_CHECK", since=(3, 12))
def load_fast(frame: Frame, inst: Instruction) -> None:
    """Push a local."""
    v = frame.fast[inst.arg]
    if v is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.stack.append(v)


@handles("STORE_FAST", since=(3, 11))
def store_fast(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into a local."""
    frame.fast[inst.arg] = frame.stack.pop()


@handles("LOAD_FAST_AND_CLEAR", since=(3, 12))
def load_fast_and_clear(frame: Frame, inst: Instruction) -> None:
    """Push a local (NULL if unbound) and unbind it: saves an outer variable around an inlined
    comprehension (PEP 709), whose STORE_FAST later restores it, NULL included."""
    fast = frame.fast
    frame.stack.append(fast[inst.arg])
    fast[inst.arg] = NULL


@handles("LOAD_FAST_LOAD_FAST", since=(3, 13))
def load_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """Push the locals ``arg >> 4`` and ``arg & 15`` (the compiler emits it only for bound locals)."""
    fast = frame.fast
    stack = frame.stack
    stack.append(fast[inst.arg >> 4])
    stack.append(fast[inst.arg & 15])


@handles("STORE_FAST_STORE_FAST", since=(3, 13))
def store_fast_store_fast(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into the local ``arg >> 4``, then the next into ``arg & 15``."""
    fast = frame.fast
    stack = frame.stack
    fast[inst.arg >> 4] = stack.pop()
    fast[inst.arg & 15] = stack.pop()


@handles("STORE_FAST_LOAD_FAST", since=(3, 13))
def store_fast_load_fast(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into the local ``arg >> 4``, then push the local ``arg & 15``."""
    fast = frame.fast
    stack = frame.stack
    fast[inst.arg >> 4] = stack.pop()
    stack.append(fast[inst.arg & 15])


@handles("DELETE_FAST", since=(3, 11))
def delete_fast(frame: Frame, inst: Instruction) -> None:
    """Unbind a local."""
    if frame.fast[inst.arg] is NULL:
        raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))
    frame.fast[inst.arg] = NULL


_MISSING = object()
_BUILTIN_IMPORT = builtins.__import__

# Note [No raising inside except]
# A handler must not raise the user-visible exception from inside an ``except`` clause (even with
# ``from None``): CPython would chain the internal exception as __context__. Look up, leave the clause, raise.


def global_value(frame: Frame, name: str) -> object:
    """The global or builtin ``name`` as LOAD_GLOBAL finds it (NameError when neither exists)."""
    value = frame.globals.get(name, _MISSING)
    if value is _MISSING:
        value = frame.builtins.get(name, _MISSING)
        if value is _MISSING:
            value = _subscripted(frame.globals, frame.builtins, name)
            if value is _MISSING:
                raise _name_error(name)
    return value


def _subscripted(globals_: dict, builtins: dict, name: str) -> object:
    """A name neither namespace holds, looked up again by subscript where one is not exactly a dict,
    as CPython does there (a ``__missing__`` runs); _MISSING when that finds nothing either."""
    for namespace in (globals_, builtins):
        if type(namespace) is not dict:
            try:
                return namespace[name]
            except KeyError:
                pass
    return _MISSING


@handles("LOAD_GLOBAL", since=(3, 11), until=(3, 12))
def load_global(frame: Frame, inst: Instruction) -> None:
    """Push a global or builtin (after a NULL when the low bit of the argument is set)."""
    if inst.arg & 1:
        frame.stack.append(NULL)
    name = inst.argval
    value = frame.globals.get(name, _MISSING)
    frame.stack.append(global_value(frame, name) if value is _MISSING else value)


@handles("LOAD_GLOBAL", since=(3, 11), until=(3, 12), hook="on_load_global")
def load_global_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_GLOBAL, passing the value through ``hooks.on_load_global``."""
    if inst.arg & 1:
        frame.stack.append(NULL)
    name = inst.argval
    frame.stack.append(frame.run.hooks.on_load_global(frame, name, global_value(frame, name)))


@handles("LOAD_GLOBAL", since=(3, 13))
def load_global_313(frame: Frame, inst: Instruction) -> None:
    """Push a global or builtin (then a NULL when the low bit of the argument is set: 3.13's CALL
    expects ``callable, self_or_NULL``)."""
    name = inst.argval
    value = frame.globals.get(name, _MISSING)
    frame.stack.append(global_value(frame, name) if value is _MISSING else value)
    if inst.arg & 1:
        frame.stack.append(NULL)


@handles("LOAD_GLOBAL", since=(3, 13), hook="on_load_global")
def load_global_313_hooked(frame: Frame, inst: Instruction) -> None:
    """3.13's LOAD_GLOBAL, passing the value through ``hooks.on_load_global``."""
    name = inst.argval
    frame.stack.append(frame.run.hooks.on_load_global(frame, name, global_value(frame, name)))
    if inst.arg & 1:
        frame.stack.append(NULL)


@handles("STORE_GLOBAL", since=(3, 11))
def store_global(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into a global."""
    frame.globals[inst.argval] = frame.stack.pop()


@handles("DELETE_GLOBAL", since=(3, 11))
def delete_global(frame: Frame, inst: Instruction) -> None:
    """Delete a global."""
    if inst.argval not in frame.globals:
        raise _name_error(inst.argval)
    del frame.globals[inst.argval]


def _name(frame: Frame, name: str) -> object:
    local_names = frame.locals
    if local_names is None:
        raise SystemError(f"no locals when loading '{name}'")
    if type(local_names) is dict:
        value = local_names.get(name, _MISSING)
    else:
        value = _mapping_get(frame, local_names, name)
    return global_value(frame, name) if value is _MISSING else value


@handles("LOAD_NAME", since=(3, 11))
def load_name(frame: Frame, inst: Instruction) -> None:
    """Push a name looked up in locals, globals, then builtins."""
    frame.stack.append(_name(frame, inst.argval))


@handles("LOAD_NAME", since=(3, 11), hook="on_load_global")
def load_name_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_NAME; a value found in globals/builtins passes through ``hooks.on_load_global``."""
    name = inst.argval
    local_names = frame.locals
    if local_names is not None:
        if type(local_names) is dict:
            value = local_names.get(name, _MISSING)
        else:
            value = _mapping_get(frame, local_names, name)
        if value is not _MISSING:
            frame.stack.append(value)
            return
    frame.stack.append(frame.run.hooks.on_load_global(frame, name, _name(frame, name)))


@handles("STORE_NAME", since=(3, 11))
def store_name(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into a local name (class bodies, module code)."""
    local_names = frame.locals
    if type(local_names) is dict:
        local_names[inst.argval] = frame.stack.pop()
    elif local_names is None:
        raise SystemError(f"no locals found when storing '{inst.argval}'")
    else:  # a class namespace from __prepare__ (enum's _EnumDict): its Python __setitem__ is interpreted
        set_item(frame.run, local_names, inst.argval, frame.stack.pop())


@handles("DELETE_NAME", since=(3, 11))
def delete_name(frame: Frame, inst: Instruction) -> None:
    """Delete a local name."""
    try:
        delete_item(frame.run, frame.locals, inst.argval)
        return
    except KeyError:
        pass
    raise _name_error(inst.argval)


def _cell_value(frame: Frame, inst: Instruction) -> object:
    try:
        return frame.fast[inst.arg].cell_contents
    except ValueError:
        pass
    if inst.argval in frame.code.co_freevars:
        raise NameError(_UNBOUND_FREE.format(inst.argval), name=inst.argval)
    raise UnboundLocalError(UNBOUND_LOCAL.format(inst.argval))


@handles("LOAD_DEREF", since=(3, 11))
def load_deref(frame: Frame, inst: Instruction) -> None:
    """Push the contents of a cell."""
    frame.stack.append(_cell_value(frame, inst))


@handles("LOAD_DEREF", since=(3, 11), hook="on_load_deref")
def load_deref_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_DEREF through ``hooks.on_load_deref``."""
    frame.stack.append(frame.run.hooks.on_load_deref(frame, inst.argval, _cell_value(frame, inst)))


def _classderef(frame: Frame, inst: Instruction) -> object:
    local_names = frame.locals
    if local_names is not None:
        if type(local_names) is dict:
            value = local_names.get(inst.argval, _MISSING)
        else:
            value = _mapping_get(frame, local_names, inst.argval)
        if value is not _MISSING:
            return value
    return _cell_value(frame, inst)


@handles("LOAD_CLASSDEREF", since=(3, 11), until=(3, 11))
def load_classderef(frame: Frame, inst: Instruction) -> None:
    """Push a name from the class namespace, else from its cell."""
    frame.stack.append(_classderef(frame, inst))


@handles("LOAD_CLASSDEREF", since=(3, 11), until=(3, 11), hook="on_load_deref")
def load_classderef_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_CLASSDEREF through ``hooks.on_load_deref``."""
    frame.stack.append(frame.run.hooks.on_load_deref(frame, inst.argval, _classderef(frame, inst)))


def _dict_or_deref(frame: Frame, inst: Instruction) -> object:
    mapping = frame.stack.pop()
    name = inst.argval
    value = mapping.get(name, _MISSING) if type(mapping) is dict else _mapping_get(frame, mapping, name)
    return _cell_value(frame, inst) if value is _MISSING else value


def _mapping_get(frame: Frame, mapping: object, name: str) -> object:
    """``mapping[name]`` (a Python ``__getitem__`` interpreted, as CPython's PyObject_GetItem calls it), or
    _MISSING for a KeyError."""
    try:
        return get_item(frame.run, mapping, name)
    except KeyError:
        return _MISSING


@handles("LOAD_FROM_DICT_OR_DEREF", since=(3, 12))
def load_from_dict_or_deref(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS[name] if the mapping TOS (a class namespace) has it, else the cell's contents."""
    frame.stack.append(_dict_or_deref(frame, inst))


@handles("LOAD_FROM_DICT_OR_DEREF", since=(3, 12), hook="on_load_deref")
def load_from_dict_or_deref_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_FROM_DICT_OR_DEREF through ``hooks.on_load_deref``."""
    frame.stack.append(frame.run.hooks.on_load_deref(frame, inst.argval, _dict_or_deref(frame, inst)))


@handles("LOAD_FROM_DICT_OR_GLOBALS", since=(3, 12))
def load_from_dict_or_globals(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS[name] if the mapping TOS has it, else the global or builtin (annotation scopes)."""
    mapping = frame.stack.pop()
    value = _mapping_get(frame, mapping, inst.argval)
    frame.stack.append(global_value(frame, inst.argval) if value is _MISSING else value)


@handles("LOAD_LOCALS", since=(3, 12))
def load_locals(frame: Frame, inst: Instruction) -> None:
    """Push the frame's locals mapping (class bodies, module code)."""
    if frame.locals is None:
        raise SystemError("no locals found")
    frame.stack.append(frame.locals)


@handles("STORE_DEREF", since=(3, 11))
def store_deref(frame: Frame, inst: Instruction) -> None:
    """Pop TOS into a cell."""
    frame.fast[inst.arg].cell_contents = frame.stack.pop()


@handles("DELETE_DEREF", since=(3, 11))
def delete_deref(frame: Frame, inst: Instruction) -> None:
    """Empty a cell."""
    _cell_value(frame, inst)
    del frame.fast[inst.arg].cell_contents


@handles("LOAD_CLOSURE", since=(3, 11), until=(3, 12))
def load_closure(frame: Frame, inst: Instruction) -> None:
    """Push the cell itself (to build a closure)."""
    frame.stack.append(frame.fast[inst.arg])


@handles("MAKE_CELL", since=(3, 11))
def make_cell(frame: Frame, inst: Instruction) -> None:
    """Turn a local slot into a cell holding its current value."""
    v = frame.fast[inst.arg]
    frame.fast[inst.arg] = CellType() if v is NULL else CellType(v)


@handles("COPY_FREE_VARS", since=(3, 11))
def copy_free_vars(frame: Frame, inst: Instruction) -> None:
    """Copy the function's closure cells into the free-variable slots."""
    closure = frame.function.__closure__
    frame.fast[len(frame.fast) - inst.arg:] = closure


@handles("LOAD_ATTR", since=(3, 11), until=(3, 11))
def load_attr_(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS.name."""
    stack = frame.stack
    obj = stack[-1]
    name = inst.argval
    names = NATIVE_NAMES.get(id(type(obj)))  # load_attr's cached fast path, inlined
    stack[-1] = getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)


def _hooked_load(frame: Frame, obj: object, name: str) -> object:
    """``obj.name``, telling ``hooks.on_missing_attr`` when it raises AttributeError."""
    try:
        return load_attr(frame.run, obj, name)
    except AttributeError:
        missing = frame.run.hooks.on_missing_attr
        if missing is not None:
            missing(frame, obj, name)
        raise


@handles("LOAD_ATTR", since=(3, 11), until=(3, 11), hook="on_load_attr")
def load_attr_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_ATTR through ``hooks.on_load_attr``."""
    stack = frame.stack
    obj = stack[-1]
    stack[-1] = frame.run.hooks.on_load_attr(frame, obj, inst.argval, _hooked_load(frame, obj, inst.argval))


@handles("LOAD_METHOD", since=(3, 11), until=(3, 11))
def load_method(frame: Frame, inst: Instruction) -> None:
    """Replace TOS by (NULL, TOS.name): the bound attribute, called by the following CALL."""
    stack = frame.stack
    stack.append(load_attr(frame.run, stack[-1], inst.argval))
    stack[-2] = NULL


@handles("LOAD_METHOD", since=(3, 11), until=(3, 11), hook="on_load_attr")
def load_method_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_METHOD through ``hooks.on_load_attr``."""
    stack = frame.stack
    obj = stack[-1]
    value = frame.run.hooks.on_load_attr(frame, obj, inst.argval, _hooked_load(frame, obj, inst.argval))
    stack.append(value)
    stack[-2] = NULL


@handles("LOAD_ATTR", since=(3, 13))
def load_attr_313(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS.name; with the low bit of the argument (3.11's LOAD_METHOD), push ``TOS.name, NULL``: the
    bound attribute, called by the following CALL."""
    stack = frame.stack
    obj = stack[-1]
    name = inst.argval
    names = NATIVE_NAMES.get(id(type(obj)))  # load_attr's cached fast path, inlined
    stack[-1] = getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
    if inst.arg & 1:
        stack.append(NULL)


@handles("LOAD_ATTR", since=(3, 13), hook="on_load_attr")
def load_attr_313_hooked(frame: Frame, inst: Instruction) -> None:
    """3.13's LOAD_ATTR through ``hooks.on_load_attr``."""
    stack = frame.stack
    obj = stack[-1]
    stack[-1] = frame.run.hooks.on_load_attr(frame, obj, inst.argval, _hooked_load(frame, obj, inst.argval))
    if inst.arg & 1:
        stack.append(NULL)


@handles("LOAD_ATTR", since=(3, 12), until=(3, 12))
def load_attr_312(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS.name; with the low bit of the argument (3.11's LOAD_METHOD), replace TOS by ``NULL,
    TOS.name``: 3.12 keeps 3.11's order, the NULL under the bound attribute that the following CALL calls."""
    stack = frame.stack
    obj = stack[-1]
    name = inst.argval
    names = NATIVE_NAMES.get(id(type(obj)))  # load_attr's cached fast path, inlined
    value = getattr(obj, name) if names is not None and name in names else load_attr(frame.run, obj, name)
    if inst.arg & 1:
        stack[-1] = NULL
        stack.append(value)
    else:
        stack[-1] = value


@handles("LOAD_ATTR", since=(3, 12), until=(3, 12), hook="on_load_attr")
def load_attr_312_hooked(frame: Frame, inst: Instruction) -> None:
    """3.12's LOAD_ATTR through ``hooks.on_load_attr``."""
    stack = frame.stack
    obj = stack[-1]
    value = frame.run.hooks.on_load_attr(frame, obj, inst.argval, _hooked_load(frame, obj, inst.argval))
    if inst.arg & 1:
        stack[-1] = NULL
        stack.append(value)
    else:
        stack[-1] = value


def _super_attr(frame: Frame, inst: Instruction) -> tuple[object, str]:
    """Pop ``super, class, self``; the super object and the attribute name (``super().name``)."""
    from jitcore.interpreter.calls import call

    stack = frame.stack
    first = stack.pop()
    cls = stack.pop()
    global_super = stack.pop()
    if global_super is super and isinstance(cls, type):  # as CPython's LOAD_SUPER_ATTR: super(cls, first)'s
        # own check of ``first`` (an instance or subclass of ``cls`` by the MRO, or by ``__class__``), which
        # ``isinstance(first, cls)`` is not: a metaclass's __instancecheck__ would run (typing.Any's raises)
        try:
            return super(cls, first), inst.argval
        except TypeError:
            pass  # ``first`` fails that check natively: a stand-in object (a plain tensor subclass's proxy)
            # is answered by the run's ``super`` lookaside, as a call of ``super`` is; else it raises there
    # ``super`` rebound, or a class that is not a type: call it as CPython does (zero-argument form: no args)
    return call(frame.run, global_super, (cls, first) if inst.arg & 2 else (), None), inst.argval


_NULL_FIRST = sys.version_info < (3, 13)  # a method load's NULL: under the attribute on 3.12, above on 3.13


def _push_super_attr(frame: Frame, inst: Instruction, value: object) -> None:
    stack = frame.stack
    if not inst.arg & 1:
        stack.append(value)
    elif _NULL_FIRST:
        stack.append(NULL)
        stack.append(value)
    else:
        stack.append(value)
        stack.append(NULL)


@handles("LOAD_SUPER_ATTR", since=(3, 12))
def load_super_attr(frame: Frame, inst: Instruction) -> None:
    """``super().name`` (``super(cls, self).name``): push the attribute (with a NULL for a method call:
    before it on 3.12, after it on 3.13, as LOAD_ATTR)."""
    proxy, name = _super_attr(frame, inst)
    _push_super_attr(frame, inst, load_attr(frame.run, proxy, name))


@handles("LOAD_SUPER_ATTR", since=(3, 12), hook="on_load_attr")
def load_super_attr_hooked(frame: Frame, inst: Instruction) -> None:
    """LOAD_SUPER_ATTR through ``hooks.on_load_attr``."""
    proxy, name = _super_attr(frame, inst)
    value = frame.run.hooks.on_load_attr(frame, proxy, name, _hooked_load(frame, proxy, name))
    _push_super_attr(frame, inst, value)


@handles("STORE_ATTR", since=(3, 11))
def store_attr_(frame: Frame, inst: Instruction) -> None:
    """TOS.name = TOS1."""
    stack = frame.stack
    obj = stack.pop()
    name = inst.argval
    names = NATIVE_STORE_NAMES.get(id(type(obj)))  # store_attr's cached fast path, inlined
    if names is not None and name in names:
        setattr(obj, name, stack.pop())
    else:
        store_attr(frame.run, obj, name, stack.pop())


@handles("STORE_ATTR", since=(3, 11), hook="on_store")
def store_attr_hooked(frame: Frame, inst: Instruction) -> None:
    """STORE_ATTR (or ``hooks.store_attr`` where it performs the store), then ``hooks.on_store`` once the
    value is stored."""
    stack = frame.stack
    obj = stack[-1]
    hooks = frame.run.hooks
    if hooks.store_attr is not None and hooks.store_attr(frame, obj, inst.argval, stack[-2]):
        del stack[-2:]
    else:
        store_attr_(frame, inst)
    hooks.on_store(frame, obj, inst.argval, "attr")


@handles("DELETE_ATTR", since=(3, 11))
def delete_attr_(frame: Frame, inst: Instruction) -> None:
    """del TOS.name."""
    delete_attr(frame.run, frame.stack.pop(), inst.argval)


@handles("BINARY_SUBSCR", since=(3, 11))
def binary_subscr(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS1[TOS]."""
    stack = frame.stack
    key = stack.pop()
    stack[-1] = get_item(frame.run, stack[-1], key)


@handles("BINARY_SUBSCR", since=(3, 11), hook="on_load_subscr")
def binary_subscr_hooked(frame: Frame, inst: Instruction) -> None:
    """BINARY_SUBSCR through ``hooks.on_load_subscr`` (and ``hooks.item_key`` for a hashed container)."""
    stack = frame.stack
    key = stack.pop()
    container = stack[-1]
    item_key = frame.run.hooks.item_key
    if item_key is not None and isinstance(container, HASHED_CONTAINERS):
        key = item_key(frame, container, key)
    value = get_item(frame.run, container, key)
    stack[-1] = frame.run.hooks.on_load_subscr(frame, container, key, value)


@handles("BINARY_SLICE", since=(3, 12))
def binary_slice(frame: Frame, inst: Instruction) -> None:
    """TOS = TOS2[TOS1:TOS]."""
    stack = frame.stack
    stop = stack.pop()
    start = stack.pop()
    stack[-1] = get_item(frame.run, stack[-1], slice(start, stop))


@handles("BINARY_SLICE", since=(3, 12), hook="on_load_subscr")
def binary_slice_hooked(frame: Frame, inst: Instruction) -> None:
    """BINARY_SLICE through ``hooks.on_load_subscr`` (the key is the slice)."""
    stack = frame.stack
    stop = stack.pop()
    key = slice(stack.pop(), stop)
    container = stack[-1]
    stack[-1] = frame.run.hooks.on_load_subscr(frame, container, key, get_item(frame.run, container, key))


@handles("STORE_SLICE", since=(3, 12))
def store_slice(frame: Frame, inst: Instruction) -> None:
    """TOS2[TOS1:TOS] = TOS3."""
    stack = frame.stack
    stop = stack.pop()
    start = stack.pop()
    container = stack.pop()
    set_item(frame.run, container, slice(start, stop), stack.pop())


@handles("STORE_SUBSCR", since=(3, 11))
def store_subscr(frame: Frame, inst: Instruction) -> None:
    """TOS1[TOS] = TOS2."""
    stack = frame.stack
    key = stack.pop()
    container = stack.pop()
    set_item(frame.run, container, key, stack.pop())


@handles("STORE_SUBSCR", since=(3, 11), hook="on_store")
def store_subscr_hooked(frame: Frame, inst: Instruction) -> None:
    """STORE_SUBSCR (``hooks.item_key`` standing in for a hashed container's key), then ``hooks.on_store``
    once the value is stored."""
    stack = frame.stack
    key = stack.pop()
    container = stack.pop()
    item_key = frame.run.hooks.item_key
    if item_key is not None and isinstance(container, HASHED_CONTAINERS):
        key = item_key(frame, container, key)
    set_item(frame.run, container, key, stack.pop())
    frame.run.hooks.on_store(frame, container, key, "item")


@handles("DELETE_SUBSCR", since=(3, 11))
def delete_subscr(frame: Frame, inst: Instruction) -> None:
    """del TOS1[TOS]."""
    stack = frame.stack
    key = stack.pop()
    delete_item(frame.run, stack.pop(), key)


@handles("DELETE_SUBSCR", since=(3, 11), hook="item_key")
def delete_subscr_hooked(frame: Frame, inst: Instruction) -> None:
    """del TOS1[TOS], ``hooks.item_key`` standing in for a hashed container's key."""
    stack = frame.stack
    key = stack.pop()
    container = stack.pop()
    if isinstance(container, HASHED_CONTAINERS):
        key = frame.run.hooks.item_key(frame, container, key)
    delete_item(frame.run, container, key)


@handles("IMPORT_NAME", since=(3, 11))
def import_name(frame: Frame, inst: Instruction) -> None:
    """TOS = __import__(name, globals, locals, fromlist=TOS, level=TOS1)."""
    from jitcore.interpreter.calls import call, opaque

    stack = frame.stack
    fromlist = stack.pop()
    level = stack.pop()
    importer = frame.builtins.get("__import__", _MISSING)
    if importer is _MISSING:
        raise ImportError("__import__ not found")
    args = (inst.argval, frame.globals, frame.locals, fromlist, level)
    if importer is _BUILTIN_IMPORT and importer not in frame.run.lookasides:
        # the imported module's code sees the frame's line as its importer's (Note [A caller stand-in])
        stack.append(opaque(frame.run, caller_stand_in(frame), (importer, args), None))
        return
    stack.append(call(frame.run, importer, args, None))


@handles("IMPORT_FROM", since=(3, 11))
def import_from(frame: Frame, inst: Instruction) -> None:
    """Push TOS.name (falling back to ``sys.modules`` for a submodule being imported)."""
    module = frame.stack[-1]
    name = inst.argval
    try:
        frame.stack.append(getattr(module, name))
        return
    except AttributeError:
        pass
    package = getattr(module, "__name__", None)
    if isinstance(package, str) and f"{package}.{name}" in sys.modules:
        frame.stack.append(sys.modules[f"{package}.{name}"])
        return
    path = getattr(module, "__file__", None)
    where = path if path is not None else "unknown location"
    pkg = package if isinstance(package, str) else "<unknown module name>"
    spec = getattr(module, "__spec__", None)
    if getattr(spec, "_initializing", False):
        msg = f"cannot import name '{name}' from partially initialized module '{pkg}' " \
              f"(most likely due to a circular import) ({where})"
    else:
        msg = f"cannot import name '{name}' from '{pkg}' ({where})"
    raise ImportError(msg, name=package, path=path)


def import_star(frame: Frame, module: object) -> None:
    """``from module import *`` into the frame's locals (IMPORT_STAR; 3.12+: CALL_INTRINSIC_1)."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        frame.locals[name] = getattr(module, name)


@handles("IMPORT_STAR", since=(3, 11), until=(3, 11))
def import_star_(frame: Frame, inst: Instruction) -> None:
    """from TOS import * (into the frame's locals)."""
    import_star(frame, frame.stack.pop())


@handles("LOAD_BUILD_CLASS", since=(3, 11))
def load_build_class(frame: Frame, inst: Instruction) -> None:
    """Push builtins.__build_class__."""
    value = frame.builtins.get("__build_class__", _MISSING)
    if value is _MISSING:
        raise NameError("__build_class__ not found")
    frame.stack.append(value)


@handles("LOAD_ASSERTION_ERROR", since=(3, 11))
def load_assertion_error(frame: Frame, inst: Instruction) -> None:
    """Push AssertionError."""
    frame.stack.append(AssertionError)


@handles("SETUP_ANNOTATIONS", since=(3, 11))
def setup_annotations(frame: Frame, inst: Instruction) -> None:
    """Create ``__annotations__`` in the locals if missing."""
    if "__annotations__" not in frame.locals:
        frame.locals["__annotations__"] = {}
