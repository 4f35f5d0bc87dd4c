"""Attribute access run the CPython way: descriptors, properties, ``__getattribute__``/``__getattr__``.

Invariants:
- The fast path is native ``getattr``/``setattr``, taken when no Python code can be involved: decided per
  type, or per type and attribute name, and only such "native" decisions are cached, so a stale entry (a
  class changed after it was seen) makes a Python method run natively -- same result, untraced -- never a
  different result.
- Otherwise ``object.__getattribute__``'s algorithm is followed (data descriptors, instance dict, non-data
  descriptors, then ``__getattr__``) and every Python method involved is called through ``calls.call``.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import weakref
from types import FunctionType, MethodType
from typing import TYPE_CHECKING

from jitcore.interpreter.calls import call, looked_up
from jitcore.interpreter.generators import FRAME_ATTRIBUTES, GENERATOR_TYPES, NOT_INTERPRETED, frame_attribute

if TYPE_CHECKING:
    from jitcore.interpreter.run import Run

__all__ = [
    "MISSING",
    "NATIVE_NAMES",
    "NATIVE_STORE_NAMES",
    "claims_a_class",
    "delete_attr",
    "load_attr",
    "loaded",
    "lookup_special",
    "missed",
    "object_getattribute",
    "store_attr",
    "stood_for_owner",
]

_MISSING = object()
_NATIVE_VALUE_TYPES = frozenset(
    {int, float, complex, bool, str, bytes, tuple, frozenset, list, dict, set, type(None)}
)


def _is_py(f: object) -> bool:
    return type(f) is FunctionType


# Note [Types read without their metaclass]
# What CPython reads of a type to look an attribute up (its MRO, its classes' dicts, its slots) it reads from
# the type object itself: a metaclass's ``__getattribute__`` answers ``Class.name`` in the program, never
# these. So this module reads them through type's own descriptors (``_mro_of``, ``_dict_of``) and asks a
# type for a hook (``__getattribute__``, ``__setattr__``, ...) with ``type.__getattribute__``
# (``_type_attr``), not with ``t.__mro__``, ``vars(t)`` or ``getattr(t, ...)``.
_mro_of = type.__dict__["__mro__"].__get__
_dict_of = type.__dict__["__dict__"].__get__


def _type_attr(t: type, name: str) -> object:
    """``getattr(t, name, None)`` without ``t``'s metaclass's ``__getattribute__`` (Note [Types read
    without their metaclass])."""
    if type(t) is type:  # (most classes: no metaclass to step around)
        return getattr(t, name, None)
    try:
        return _type_getattribute(t, name)
    except AttributeError:
        return None


# Note [Per-type caches]
# The caches of this module are keyed by ``id(type)``, not by the type: a dict keyed by a class would keep
# every class the program ever used alive, with its functions, their globals and closures (a class made per
# call leaks, a weakref callback on a class or a metaclass's finalizer never runs: test_weakref's
# test_callback_in_cycle_resurrection). Each type cached gets one weak reference, whose callback drops the
# type's entries when it dies: weakref callbacks run before the type's memory is freed, so an id is never
# found in a cache after it could have been reused. Readers elsewhere (the opcode handlers' inlined fast
# paths) look up ``NATIVE_NAMES.get(id(type(obj)))`` the same way.
_WATCHED: dict[int, object] = {}


def _watch(t: type) -> int:
    """``id(t)``, after making sure the caches forget ``t`` when it dies."""
    key = id(t)
    if key not in _WATCHED:
        _WATCHED[key] = weakref.ref(t, lambda ref, key=key: _forget(key))
    return key


def _forget(key: int) -> None:
    _WATCHED.pop(key, None)
    for cache in (_NATIVE_ATTR, NATIVE_NAMES, NATIVE_STORE_NAMES, _CLAIMS):
        cache.pop(key, None)
    for owner_key in [k for k in _OWNERS if k[0] == key or k[1] == key]:
        del _OWNERS[owner_key]


_NATIVE_ATTR: dict[int, bool] = {}


def _attr_native(t: type) -> bool:
    """Whether attribute access on instances of ``t`` can involve no Python code (cached)."""
    hit = _NATIVE_ATTR.get(id(t))
    if hit is None:
        hit = _NATIVE_ATTR[_watch(t)] = _compute_attr_native(t)
    return hit


def _compute_attr_native(t: type) -> bool:
    if issubclass(t, type):
        return False  # class objects: _load_class_attr looks at the class's own MRO too
    for name in ("__getattribute__", "__getattr__", "__setattr__", "__delattr__"):
        if _is_py(_type_attr(t, name)):
            return False
    for klass in _mro_of(t):
        for value in _dict_of(klass).values():
            if _is_py_descriptor(value):
                return False
    return True


def _is_py_descriptor(value: object) -> bool:
    vt = type(value)
    if vt is FunctionType or vt in _NATIVE_VALUE_TYPES:
        return False
    if isinstance(value, property):
        return True
    return any(_is_py(getattr(vt, n, None)) for n in ("__get__", "__set__", "__delete__"))


def _mro_lookup(t: type, name: str) -> object:
    """CPython's ``_PyType_Lookup``: one lookup per class dict (a key's Python ``__eq__`` runs once), over the
    MRO as it was when the lookup began (that ``__eq__`` may assign ``__bases__``)."""
    for klass in _mro_of(t):
        value = _dict_of(klass).get(name, _MISSING)
        if value is not _MISSING:
            return value
    return _MISSING


# type -> names whose lookup on its instances runs no Python code. Public for the opcode handlers'
# inlined fast path: ``name in NATIVE_NAMES.get(id(type(obj)))`` means a native getattr is right (never
# holds for a class object: its type, a metaclass, is never entered).
NATIVE_NAMES: dict[int, set[str]] = {}  # keyed by id(type): Note [Per-type caches]


def _name_native(t: type, name: str) -> bool:
    """Whether ``name`` on instances of ``t`` involves no Python code: no Python getattr hooks on ``t`` and no
    Python descriptor under that name in its MRO. Only True is cached (see the module invariants)."""
    if t in GENERATOR_TYPES and name in FRAME_ATTRIBUTES:
        return False  # answered by the interpreted frame (Note [Generator frame attributes])
    for hook in ("__getattribute__", "__getattr__"):
        if _is_py(_type_attr(t, hook)):
            return False
    descr = _mro_lookup(t, name)
    if descr is not _MISSING and _is_py_descriptor(descr):
        return False
    names = NATIVE_NAMES.get(id(t))
    if names is None:
        names = NATIVE_NAMES[_watch(t)] = set()
    names.add(name)
    return True


def load_attr(run: Run, obj: object, name: str) -> object:
    """``obj.name`` with Python descriptors, properties, ``__getattribute__`` and ``__getattr__``
    interpreted."""
    t = type(obj)
    if t in GENERATOR_TYPES and name in FRAME_ATTRIBUTES:  # Note [Generator frame attributes]
        value = frame_attribute(obj, name)
        if value is not NOT_INTERPRETED:
            return value
    native = _NATIVE_ATTR.get(id(t))
    if native is None:
        native = _attr_native(t)
    if native:
        if name == "__class__" and run.type_of is not type:  # a symbolic size: the int it stands for
            klass = run.type_of(obj)
            if klass is not t:
                return klass
        return getattr(obj, name)
    try:
        return _load_interpreted(run, obj, t, name)
    except AttributeError as error:
        # PyObject_GetAttr's set_attribute_error_context: the error Python code raised names what was asked
        # (traceback's "Did you mean" reads them), unless it names something already
        if error.name is None and error.obj is None:
            error.name, error.obj = name, obj
        raise


def _load_interpreted(run: Run, obj: object, t: type, name: str) -> object:
    """``load_attr`` where Python code may be involved."""
    if issubclass(t, type):  # not isinstance: it would ask obj.__class__ through a __getattribute__ hook
        return _load_class_attr(run, obj, name)
    if name == "__class__" and run.type_of is not type:
        klass = run.type_of(obj)  # a stand-in object answers the class it stands for, as type() does
        if klass is not t:
            return klass
    if claims_a_class(t) and name[:2] != "__" and run.type_of is not type:  # one dict lookup for most
        owner = stood_for_owner(t, run.type_of(obj), name)
        if owner is not None:  # Note [Names a stand-in shares with the class it stands for]
            return _load_from(run, obj, owner, name)
    names = NATIVE_NAMES.get(id(t))
    if (names is not None and name in names) or _name_native(t, name):
        return getattr(obj, name)
    getattr_hook = _mro_lookup(t, "__getattr__")
    try:
        return _getattribute(run, obj, t, name)
    except AttributeError:
        own = _stood_for_hook(run, obj, t, "__getattr__")
        if own is None and getattr_hook is _MISSING:
            raise
    # the hook runs outside the clause, or what it raises would have the AttributeError it replaces as its
    # __context__ (Note [No raising inside except] in opcodes/load_store.py)
    if own is not None:
        return call(run, own, (obj, name), None)
    looked_up(run, obj, t, "__getattr__")
    return _call_hook(run, obj, t, getattr_hook, name)


# Note [A stand-in's attribute hooks are its class's]
# A stand-in whose class does not derive from the class it stands for (the proxy of a tensor subclass
# without ``__torch_dispatch__``: jitcore/proxies/typed.py) keeps jitcore's ``__getattr__``,
# ``__setattr__`` and ``__delattr__``, which jitcore's own code relies on natively. The program's
# attribute statements on it run the hooks the stood-for class defines in Python, as eagerly: a
# ``__getattr__`` answering computed names (``x.meta_foo``) raised AttributeError, and a
# ``__setattr__`` that transforms the value was skipped (``x.n = 3`` stored 3, not the hook's 6). Inside
# the hook, ``super().__setattr__`` stores on the stand-in as before (written back to the caller's
# tensor after the call).
def _stood_for_hook(run: Run, obj: object, t: type, name: str) -> FunctionType | None:
    """The Python attribute hook ``name`` of the class ``obj`` stands for, where ``t`` (its type) does
    not have that one; else None."""
    if run.type_of is type:
        return None
    klass = run.type_of(obj)
    if klass is t or not isinstance(klass, type):
        return None
    hook = _type_attr(klass, name)
    return hook if _is_py(hook) and hook is not _type_attr(t, name) else None  # type: ignore[return-value]


# Note [Names a stand-in shares with the class it stands for]
# A stand-in object (its class defines ``__class__`` as a property and ``hooks.type_of`` answers the
# class it stands for: a tensor subclass value while tracing) derives from that class and adds its
# own machinery after it in the MRO, except for what its own class body defines, which comes first.
# A name the stood-for class defines itself (a method ``describe`` or ``hold`` on the user's class)
# that the stand-in's own class body also defines is the stood-for class's to the interpreted
# program, as it is eagerly: only native code (the stand-in's own) sees the stand-in's. Names the
# stood-for class gets from classes after the stand-in's machinery (torch's) and dunder protocol
# names stay the stand-in's, except where a conversion asks for one (``repr(x)``, ``str(x)``: a tensor
# subclass's own ``__repr__``, protocols.py ``_stood_for_method``). Never cached as native
# (``_name_native`` is not asked for these names).
_CLAIMS: dict[int, bool] = {}  # keyed by id: Note [Per-type caches]
_OWNERS: dict[tuple[int, int, str], type | None] = {}


def claims_a_class(t: type) -> bool:
    hit = _CLAIMS.get(id(t))
    if hit is None:
        hit = _CLAIMS[_watch(t)] = isinstance(_dict_of(t).get("__class__"), property)
    return hit


def stood_for_owner(t: type, klass: type, name: str) -> type | None:
    """The class of ``klass``'s own (before the stand-in ``t``'s machinery in ``t``'s MRO) that defines
    ``name`` where ``t``'s own class body defines it too, else None."""
    key = (id(t), id(klass), name)
    hit = _OWNERS.get(key, _MISSING)
    if hit is _MISSING:
        hit = _compute_owner(t, klass, name)
        if isinstance(klass, type):  # (only what the caches can watch is cached)
            _watch(t)
            _watch(klass)
            _OWNERS[key] = hit
    return hit  # type: ignore[return-value]


def _compute_owner(t: type, klass: type, name: str) -> type | None:
    if klass is t or not isinstance(klass, type) or name not in _dict_of(t):
        return None
    for k in _mro_of(t)[1:]:
        if k not in _mro_of(klass):
            return None  # the machinery starts here: what follows is not the stood-for class's own
        if name in _dict_of(k):
            return k
    return None


def _load_from(run: Run, obj: object, owner: type, name: str) -> object:
    """``obj.name`` as ``owner``'s attribute (an instance dict entry first, unless a data descriptor)."""
    descr = _dict_of(owner)[name]
    dt = type(descr)
    if isinstance(descr, property) and descr.fget is not None and dt.__get__ is property.__get__:
        return call(run, descr.fget, (obj,), None)
    get = getattr(dt, "__get__", None)
    if not hasattr(dt, "__set__"):
        instance_dict = getattr(obj, "__dict__", None)
        if type(instance_dict) is dict and name in instance_dict:
            return instance_dict[name]
    if get is None:
        return descr
    if _is_py(get):
        return call(run, get, (descr, obj, owner), None)
    return get(descr, obj, owner)


def _call_hook(run: Run, obj: object, t: type, hook: object, name: str) -> object:
    """Call the ``__getattribute__``/``__getattr__`` found in t's MRO as CPython's slot does: a function
    with ``(obj, name)``, any other descriptor bound to ``obj`` by its ``__get__`` first."""
    if type(hook) is not FunctionType:
        get = getattr(type(hook), "__get__", None)
        if get is not None:
            return call(run, call(run, get, (hook, obj, t), None), (name,), None)
    return call(run, hook, (obj, name), None)


def _getattribute(run: Run, obj: object, t: type, name: str) -> object:
    hook = _mro_lookup(t, "__getattribute__")
    if type(hook) is not FunctionType and _is_py(getattr(type(hook), "__get__", None)):
        return _call_hook(run, obj, t, hook, name)  # a Python descriptor as the hook
    custom = _type_attr(t, "__getattribute__")
    if _is_py(custom):
        return call(run, custom, (obj, name), None)
    return _generic_getattribute(run, obj, t, name, custom)


def loaded(run: Run, obj: object, name: str, value: object) -> object:
    """``value``, read as ``obj.name`` for the program (``getattr`` and the C functions whose reads are
    interpreted), as the run's load hook answers it."""
    hook = run.hooks.on_load_attr
    if hook is not None and run.frames:
        value = hook(run.frames[-1], obj, name, value)
    return value


def missed(run: Run, obj: object, name: str) -> None:
    """Tell the run's hook that ``obj.name`` raised AttributeError, read for the program (as a failed
    LOAD_ATTR is told): where the program goes on without it, its absence is what it read."""
    hook = run.hooks.on_missing_attr
    if hook is not None and run.frames:
        hook(run.frames[-1], obj, name)


def object_getattribute(obj: object, name: object, /) -> object:
    """``object.__getattribute__(obj, name)``, the call a Python ``__getattribute__`` hook makes through
    ``super().__getattribute__(name)`` (transformers' configs do), with the property or Python
    descriptor it finds interpreted: natively its code ran unseen by the jit (a C call starting the
    program's code)."""
    if type(name) is not str:
        return object.__getattribute__(obj, name)  # (the slot's own error)
    from jitcore.interpreter.callbacks import active_run

    run = active_run()
    try:
        value = _generic_getattribute(run, obj, type(obj), name, object.__getattribute__)
    except AttributeError:
        missing = run.hooks.on_generic_missing
        if missing is not None and run.frames:
            missing(run.frames[-1], obj, name)
        raise
    hook = run.hooks.on_generic_attr or run.hooks.on_load_attr  # the program's read, as ``getattr``'s is
    if hook is not None and run.frames:
        value = hook(run.frames[-1], obj, name, value)
    return value


def _generic_getattribute(run: Run, obj: object, t: type, name: str, native: object) -> object:
    """``object.__getattribute__``'s algorithm with Python descriptors interpreted; ``native`` (the
    type's C slot) answers where no Python code is involved."""
    descr = _mro_lookup(t, name)
    if descr is _MISSING:
        return native(obj, name)
    dt = type(descr)
    get = getattr(dt, "__get__", None)
    if not _is_py(get):
        if isinstance(descr, property) and descr.fget is not None and dt.__get__ is property.__get__:
            return call(run, descr.fget, (obj,), None)
        return native(obj, name)
    if _is_py(getattr(dt, "__set__", None)) or _is_py(getattr(dt, "__delete__", None)) \
            or hasattr(dt, "__set__") or hasattr(dt, "__delete__"):
        return call(run, get, (descr, obj, t), None)
    instance_dict = getattr(obj, "__dict__", None)
    if type(instance_dict) is dict and name in instance_dict:
        return instance_dict[name]
    return call(run, get, (descr, obj, t), None)


def _load_class_attr(run: Run, cls: type, name: str) -> object:
    meta = type(cls)
    if meta is not type and _mro_lookup(meta, "__getattribute__") is not _TYPE_GETATTRIBUTE:
        return _hooked_class_attr(run, cls, meta, name)
    if not _attr_native(meta):
        meta_descr = _mro_lookup(meta, name)
        if isinstance(meta_descr, property) and meta_descr.fget is not None:
            return call(run, meta_descr.fget, (cls,), None)
        meta_getattr = getattr(meta, "__getattr__", None)
        if _is_py(meta_getattr):
            try:
                return (
                    getattr(cls, name)
                    if _mro_lookup(cls, name) is not _MISSING
                    else type.__getattribute__(cls, name)
                )
            except AttributeError:
                pass
            return call(run, meta_getattr, (cls, name), None)  # (outside the clause, as _load_interpreted)
    descr = _mro_lookup(cls, name)
    if descr is _MISSING:
        return getattr(cls, name)
    get = getattr(type(descr), "__get__", None)
    if _is_py(get):
        return call(run, get, (descr, None, cls), None)
    if meta.__getattribute__ is not _type_getattribute or _meta_data_descriptor(meta, name):
        return getattr(cls, name)
    # type.__getattribute__ would find ``descr`` again; what it returns for it, without looking the name up a
    # second time (a class dict key's Python __eq__ would run twice, and may have changed the MRO)
    return descr if get is None else get(descr, None, cls)


_type_getattribute = type.__getattribute__
_TYPE_GETATTRIBUTE = vars(type)["__getattribute__"]


def _hooked_class_attr(run: Run, cls: type, meta: type, name: str) -> object:
    """``cls.name`` where ``cls``'s metaclass overrides ``__getattribute__``: the hook answers (interpreted
    when it is Python code), then the metaclass's ``__getattr__`` if it raised AttributeError."""
    hook = _mro_lookup(meta, "__getattribute__")
    getattr_hook = _mro_lookup(meta, "__getattr__")
    python_descriptor = type(hook) is not FunctionType and _is_py(getattr(type(hook), "__get__", None))
    if not (_is_py(hook) or python_descriptor):
        return getattr(cls, name)  # a hook of C code's: nothing to interpret
    try:
        return _call_hook(run, cls, meta, hook, name)
    except AttributeError:
        if getattr_hook is _MISSING:
            raise
    return _call_hook(run, cls, meta, getattr_hook, name)  # (outside the clause, as _load_interpreted)


def _meta_data_descriptor(meta: type, name: str) -> bool:
    """Whether the metaclass ``meta`` has a data descriptor ``name`` (it takes precedence over the class's
    own attribute: ``__doc__``, ``__name__``, ``__dict__``, a metaclass property, ...)."""
    descr = _mro_lookup(meta, name)
    return descr is not _MISSING and hasattr(type(descr), "__set__")


NATIVE_STORE_NAMES: dict[int, set[str]] = {}  # the same, for setattr


def _store_native(t: type, name: str) -> bool:
    """Whether ``obj.name = v`` on instances of ``t`` runs no Python code (only True is cached)."""
    if _is_py(_type_attr(t, "__setattr__")):
        return False
    descr = _mro_lookup(t, name)
    if descr is not _MISSING and _is_py_descriptor(descr):
        return False
    names = NATIVE_STORE_NAMES.get(id(t))
    if names is None:
        names = NATIVE_STORE_NAMES[_watch(t)] = set()
    names.add(name)
    return True


def store_attr(run: Run, obj: object, name: str, value: object) -> None:
    """``obj.name = value`` with Python ``__setattr__``, ``__set__`` and property setters interpreted."""
    t = type(obj)
    native = _NATIVE_ATTR.get(id(t))
    if native is None:
        native = _attr_native(t)
    if native or issubclass(t, type):  # (as in load_attr: no obj.__class__ lookup)
        setattr(obj, name, value)
        return
    own = _stood_for_hook(run, obj, t, "__setattr__")
    if own is not None:
        call(run, own, (obj, name, value), None)
        return
    names = NATIVE_STORE_NAMES.get(id(t))
    if (names is not None and name in names) or _store_native(t, name):
        setattr(obj, name, value)
        return
    custom = _type_attr(t, "__setattr__")
    if _is_py(custom):
        call(run, custom, (obj, name, value), None)
        return
    descr = _mro_lookup(t, name)
    if descr is not _MISSING:
        dt = type(descr)
        setter = getattr(dt, "__set__", None)
        if _is_py(setter):
            call(run, setter, (descr, obj, value), None)
            return
        if isinstance(descr, property) and dt.__set__ is property.__set__ and _is_py(descr.fset):
            call(run, descr.fset, (obj, value), None)
            return
    setattr(obj, name, value)


def delete_attr(run: Run, obj: object, name: str) -> None:
    """``del obj.name`` with Python ``__delattr__``, ``__delete__`` and property deleters interpreted."""
    t = type(obj)
    if _attr_native(t) or issubclass(t, type):
        delattr(obj, name)
        return
    own = _stood_for_hook(run, obj, t, "__delattr__")
    if own is not None:
        call(run, own, (obj, name), None)
        return
    custom = _type_attr(t, "__delattr__")
    if _is_py(custom):
        call(run, custom, (obj, name), None)
        return
    descr = _mro_lookup(t, name)
    if descr is not _MISSING:
        dt = type(descr)
        deleter = getattr(dt, "__delete__", None)
        if _is_py(deleter):
            call(run, deleter, (descr, obj), None)
            return
        if isinstance(descr, property) and dt.__delete__ is property.__delete__ and _is_py(descr.fdel):
            call(run, descr.fdel, (obj,), None)
            return
    delattr(obj, name)


def lookup_special(obj: object, name: str) -> object:
    """CPython's ``_PyObject_LookupSpecial``: ``name`` looked up on the type and bound to ``obj``, or
    _MISSING."""
    f = _mro_lookup(type(obj), name)
    if f is _MISSING:
        return _MISSING
    if type(f) is FunctionType:
        return MethodType(f, obj)
    get = getattr(type(f), "__get__", None)
    return f if get is None else get(f, obj, type(obj))


MISSING = _MISSING
