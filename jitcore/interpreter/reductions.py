"""``object.__reduce_ex__`` with the Python it calls interpreted: ``copy.copy``, ``copy.deepcopy`` and
``pickle`` of an object of a Python class whose reduction runs Python code (a ``__getattribute__``, a
``__getstate__``, a ``__getnewargs__``, a property among its slots).

Invariants:
- the result and the errors are C's (typeobject.c's ``reduce_newobj``, ``object_getstate``,
  ``_PyObject_GetNewArguments``): the same 5-tuple, the same ``__newobj__``/``__newobj_ex__``, the same
  state (the instance dict itself, or ``None``; with a dict of the set slots, the pair);
- every attribute C reads through the object's ``tp_getattro`` is read through the interpreter's
  attribute protocol and the run's load hook (as ``getattr`` is); lookups C makes on the type alone
  (``_PyObject_LookupSpecial``) are made on the type;
- protocols 0 and 1 call ``copyreg._reduce_ex`` as C does, interpreted, and ``object.__getstate__()``
  there (or anywhere) is ``object_getstate_default`` followed here;
- anything else (a class with a base written in C other than ``object``: its size and items decide what
  C does, a list or dict subclass: C iterates it) is the native call, through the run's opaque call (so
  a jit's net still watches the Python C starts there).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import copyreg
import sys
from types import BuiltinMethodType

from jitcore.interpreter.attributes import MISSING, load_attr, loaded, lookup_special, missed
from jitcore.interpreter.callbacks import active_run
from jitcore.interpreter.calls import call, opaque
from jitcore.interpreter.stand_in_reductions import STAND_IN_HOLDERS, without_stand_ins

__all__ = ["getstate", "reduce_ex"]

_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type())
_OBJECT_REDUCE = object.__dict__["__reduce__"]
_OBJECT_GETSTATE = object.__dict__["__getstate__"]
_NATIVE = object.__reduce_ex__
_ABSENT = object()  # a slot that is not set


# Note [A reduction that runs Python]
# ``copy.deepcopy(config)`` calls ``config.__reduce_ex__(4)``: C (``object.__reduce_ex__``) that reads
# ``__reduce__``, ``__getstate__`` and the slots through the object's ``tp_getattro``, so a class with a
# Python ``__getattribute__`` (transformers' configs: ``get_text_config`` deep-copies one in every
# encoder-decoder forward that makes its cache) had that Python run natively, which the jit's net refuses:
# BART's forward ran eagerly. For a class whose bases are all Python classes over ``object`` (nothing of C
# adds fields or items), protocols 2 and up follow C step by step here, each read and call interpreted.
def reduce_ex(obj: object, protocol: object, /) -> object:
    """``obj.__reduce_ex__(protocol)`` for ``object.__reduce_ex__`` (see the module doc)."""
    run = active_run()
    cls = type(obj)
    if cls in STAND_IN_HOLDERS:  # Note [A reduction shows what the program gave]
        return without_stand_ins(opaque(run, _NATIVE, (obj, protocol), None))
    if type(protocol) is not int or not _python_classes(cls) or isinstance(obj, (list, dict)):
        return opaque(run, _NATIVE, (obj, protocol), None)
    reduce = _load(run, obj, "__reduce__", MISSING)
    if reduce is not MISSING and _load(run, cls, "__reduce__", MISSING) is not _OBJECT_REDUCE:
        # the class's own __reduce__ overrides, called as C calls it: ``__reduce__ = None`` is C's
        # "'NoneType' object is not callable" (3.13's test_pickle PyPicklingErrorTests.test_reduce_None)
        return call(run, reduce, (), None)
    if protocol < 2:  # Note [Protocols 0 and 1]
        return call(run, copyreg._reduce_ex, (obj, protocol), None)  # noqa: SLF001 - what C calls
    args, kwargs = _new_arguments(run, obj)
    if not kwargs:
        newobj, newargs = copyreg.__newobj__, (cls, *(args or ()))
    else:
        newobj, newargs = copyreg.__newobj_ex__, (cls, args, kwargs)
    return newobj, newargs, _state(run, obj, required=args is None), None, None


# Note [Protocols 0 and 1]
# For protocols 0 and 1 C's ``object.__reduce_ex__`` calls ``copyreg._reduce_ex(obj, protocol)``, Python
# that it ran natively: its ``self.__getstate__()`` (``object.__getstate__``, C again) read the instance
# dict unseen, so ``pickle.dumps(obj, protocol=0)`` of a caller's object was a constant of the trace. It is
# called interpreted here, and ``object.__getstate__`` has a lookaside (``getstate``) that reads the dict
# and the slots as ``_default_state`` does for protocol 2 and up.
def getstate(obj: object, /) -> object:
    """``object.__getstate__(obj)``: C's ``object_getstate_default(obj, 0)``, its reads the program's."""
    if not _python_classes(type(obj)) or isinstance(obj, (list, dict)):
        return opaque(active_run(), _OBJECT_GETSTATE, (obj,), None)
    return _default_state(active_run(), obj)


def _python_classes(cls: type) -> bool:
    """Every class of ``cls``'s MRO but ``object`` is a Python class (so C's size checks pass)."""
    mro = cls.__mro__
    return mro[-1] is object and all(k.__flags__ & _HEAPTYPE and k.__itemsize__ == 0 for k in mro[:-1])


_REQUIRED = object()


def _load(run: object, obj: object, name: str, default: object = _REQUIRED) -> object:
    """``getattr(obj, name[, default])`` as the program's would be: interpreted, and told to the run."""
    try:
        value = load_attr(run, obj, name)
    except AttributeError:
        if default is _REQUIRED:
            raise
        missed(run, obj, name)  # an unset slot: C leaves it out while it stays unset
        return default
    return loaded(run, obj, name, value)


def _new_arguments(run: object, obj: object) -> tuple[tuple | None, dict | None]:
    """C's ``_PyObject_GetNewArguments``: ``__getnewargs_ex__``, else ``__getnewargs__``, else none."""
    getnewargs_ex = lookup_special(obj, "__getnewargs_ex__")
    if getnewargs_ex is not MISSING:
        pair = call(run, getnewargs_ex, (), None)
        if not isinstance(pair, tuple):
            raise TypeError(f"__getnewargs_ex__ should return a tuple, not '{type(pair).__name__}'")
        if len(pair) != 2:
            raise ValueError(f"__getnewargs_ex__ should return a tuple of length 2, not {len(pair)}")
        args, kwargs = pair
        if not isinstance(args, tuple):
            raise TypeError("first item of the tuple returned by __getnewargs_ex__ must be a tuple, "
                            f"not '{type(args).__name__}'")
        if not isinstance(kwargs, dict):
            raise TypeError("second item of the tuple returned by __getnewargs_ex__ must be a dict, "
                            f"not '{type(kwargs).__name__}'")
        return args, kwargs
    getnewargs = lookup_special(obj, "__getnewargs__")
    if getnewargs is not MISSING:
        args = call(run, getnewargs, (), None)
        if not isinstance(args, tuple):
            raise TypeError(f"__getnewargs__ should return a tuple, not '{type(args).__name__}'")
        return args, None
    return None, None


def _state(run: object, obj: object, required: bool) -> object:
    """C's ``object_getstate``: the class's ``__getstate__`` called, or ``object.__getstate__``'s default."""
    getstate = _load(run, obj, "__getstate__")
    if type(getstate) is BuiltinMethodType and getstate == _OBJECT_GETSTATE.__get__(obj, type(obj)):
        return _default_state(run, obj, required)
    return call(run, getstate, (), None)


def _default_state(run: object, obj: object, required: bool = False) -> object:
    """``object.__getstate__()`` of a Python class's instance: its dict (None if it has none or it is
    empty), paired with a dict of the slots that are set (``copyreg._slotnames``: C asks it too). C's
    size checks (``required``) pass for such a class: its size is object's, a dict, a weak reference
    and its slots; a class made in C (a heap type of an extension module, or a Python class over one) may
    be larger: Note [C's size check of a required state]."""
    try:
        state = object.__getattribute__(obj, "__dict__")  # (PyObject_GenericGetDict: no Python hook)
    except AttributeError:
        state = None
    else:
        state = loaded(run, obj, "__dict__", state) or None  # (an empty dict: None)
    names = copyreg._slotnames(type(obj))  # noqa: SLF001 - what C's _PyType_GetSlotNames calls
    if required and type(obj).__basicsize__ > _python_size(type(obj), names):
        raise TypeError(f"cannot pickle '{_type_name(obj)}' object")
    if names:
        slots = {}
        for name in names:
            value = _load(run, obj, name, _ABSENT)
            if value is not _ABSENT:
                slots[name] = value
        if slots:
            state = (state, slots)
    return state


# Note [C's size check of a required state]
# ``_python_classes`` takes every heap type for a Python class, but an extension module's classes are heap
# types too (``_random.Random``, made by ``PyType_FromSpec``), with C fields a state of the dict and the
# slots would lose. C's ``object_getstate_default`` refuses such an object when the state is required (no
# ``__getnewargs__``): its ``tp_basicsize`` is more than ``object``'s plus a pointer for an unmanaged dict,
# one for a weak-reference list and one per slot name. ``pickle.dumps(_random.Random(), 2)`` raised that
# TypeError natively and pickled interpreted (test_random's ``test_bug_41052``). The same sum, here, raises
# C's error, named by the type's ``tp_name`` (dotted for an extension's class), which ``object.__format__``'s
# own error gives without running anything of the object.
_MANAGED_DICT = 1 << 4  # Py_TPFLAGS_MANAGED_DICT (3.11-3.13)
_POINTER = 8 if sys.maxsize > 2**32 else 4


def _python_size(cls: type, slot_names: list) -> int:
    """The largest ``tp_basicsize`` C's check lets pass: ``object``'s, an unmanaged dict, a weak-reference
    list and the slots."""
    size = object.__basicsize__ + _POINTER * len(slot_names)
    if cls.__dictoffset__ and not cls.__flags__ & _MANAGED_DICT:
        size += _POINTER
    if cls.__weakrefoffset__ > 0:  # (3.12+: a managed one's offset is negative, not counted)
        size += _POINTER
    return size


def _type_name(obj: object) -> str:
    """``Py_TYPE(obj)->tp_name`` (``_random.Random`` for an extension's class, the bare name for a Python
    class's), truncated to 200 characters as ``%.200s`` is."""
    try:
        object.__format__(obj, "x")
    except TypeError as e:
        text = str(e)
        return text[text.rindex(" ") + 1:-len(".__format__")]
    return type(obj).__name__[:200]  # (unreachable: a non-empty format is always refused)
