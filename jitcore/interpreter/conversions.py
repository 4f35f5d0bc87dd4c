"""C builtins that convert or combine an object through its Python dunders, replaced so that the dunders
are interpreted: ``bool``, ``complex``, ``round``, ``divmod``, ``pow``, ``ascii``, ``bytes``,
``bytearray``, ``dict`` and ``dict.update`` of a mapping (``keys()`` + ``__getitem__``), ``dict.fromkeys``
(Note [C builtins over a Python object's dunders], callbacks.py; the ``**`` of a call and of a dict
display take their mapping's items through ``mapping_items`` too).

Invariants (those of jitcore/interpreter/lookasides.py, whose table lists these):
- each gives the result and raises the exceptions of the builtin it replaces, calling the object's
  Python dunders in CPython's order; where no argument has a Python dunder the builtin itself runs;
- what a dunder returns is checked as CPython checks it, then handed to the builtin as its value
  (Note [A stand-in's number is given to C as its value], protocols.py);
- the builtin itself is called as the run calls C (``opaque``: the hooks' opaque call), as it was without
  the lookaside.
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import array
import sys
import warnings
from types import FunctionType

from jitcore.interpreter.callbacks import active_run, native_iterable, native_iterator
from jitcore.interpreter.calls import call, looked_up, opaque
from jitcore.interpreter.hashed_inserts import keyed_iterable_call
from jitcore.interpreter.protocols import (
    NATIVE_TYPES,
    binary,
    get_item,
    has_python_index,
    index,
    iter_with_callers_error,
    ssize_index,
    to_repr,
    truth,
)
from jitcore.interpreter.run import Run

__all__ = ["ascii_", "bool_", "bytearray_", "bytes_", "complex_", "dict_", "dict_update", "divmod_",
           "fromkeys_", "mapping_items", "mapping_keys", "mapping_value", "math_dunder", "pow_",
           "real_argument", "round_"]

_BUFFERS = (bytes, bytearray, memoryview, array.array)


def _builtin(fn: object, *args: object, **kwargs: object) -> object:
    """``fn(*args, **kwargs)`` as the run calls a C function (its hooks' opaque call: the jit gives C its
    numbers' values, notes the writes): the call the program would have made without the lookaside."""
    return opaque(active_run(), fn, args, kwargs)


def _python_dunder(v: object, name: str) -> FunctionType | None:
    """``type(v).name`` where it is a Python function (not for the builtin types: none is)."""
    t = type(v)
    if t in NATIVE_TYPES:
        return None
    looked_up(active_run(), v, t, name)
    f = getattr(t, name, None)
    return f if type(f) is FunctionType else None


def bool_(*args: object, **kwargs: object) -> bool:
    """bool() with a Python ``__bool__``/``__len__`` interpreted."""
    if len(args) == 1 and not kwargs:
        return truth(active_run(), args[0])
    return _builtin(bool, *args, **kwargs)


def round_(number: object, ndigits: object = None) -> object:
    """round() with a Python ``__round__`` interpreted (called without ``ndigits`` when it is None)."""
    f = _python_dunder(number, "__round__")
    if f is None:
        return _builtin(round, number, ndigits)
    return call(active_run(), f, (number,) if ndigits is None else (number, ndigits), None)


def divmod_(a: object, b: object, /) -> object:
    """divmod() with a Python ``__divmod__``/``__rdivmod__`` interpreted (the binary operator protocol)."""
    return binary(active_run(), a, b, "__divmod__", "__rdivmod__", "divmod()", divmod)


def pow_(base: object, exp: object, mod: object = None) -> object:
    """pow() with a Python ``__pow__``/``__rpow__`` interpreted; with a modulus, only the base's
    ``__pow__`` is asked (three-argument power does not use ``__rpow__``)."""
    run = active_run()
    if mod is None:
        return binary(run, base, exp, "__pow__", "__rpow__", "**", pow)
    f = _python_dunder(base, "__pow__")
    if f is not None:
        result = call(run, f, (base, exp, mod), None)
        if result is not NotImplemented:
            return result
    return _builtin(pow, base, exp, mod)


def _complex_part(run: Run, v: object, real: bool) -> object:
    """``v`` as ``complex()`` reads it natively: a real part's ``__complex__`` (then ``__float__``,
    ``__index__``), an imaginary part's ``__float__`` (then ``__index__``), each interpreted."""
    f = _python_dunder(v, "__complex__") if real else None
    if f is not None:
        result = call(run, f, (v,), None)
        if type(result) is not complex:
            if not isinstance(result, complex):
                raise TypeError(f"__complex__ returned non-complex (type {type(result).__name__})")
            warnings.warn(f"__complex__ returned non-complex (type {type(result).__name__}).  The ability to "
                          "return an instance of a strict subclass of complex is deprecated, and may be "
                          "removed in a future version of Python.", DeprecationWarning, stacklevel=1)
            result = complex(result.real, result.imag)
        return result
    f = _python_dunder(v, "__float__")
    if f is not None:
        result = call(run, f, (v,), None)
        if type(result) is not float:
            if not isinstance(result, float):
                raise TypeError(f"{type(v).__name__}.__float__ returned non-float (type "
                                f"{type(result).__name__})")
            result = float(result)
        return result
    return index(run, v) if has_python_index(run, v) else v


def complex_(*args: object, **kwargs: object) -> complex:
    """complex() with its arguments' Python ``__complex__``/``__float__``/``__index__`` interpreted."""
    if len(args) > 2 or set(kwargs) - {"real", "imag"} or not (args or kwargs):
        return _builtin(complex, *args, **kwargs)
    run = active_run()
    parts = dict(zip(("real", "imag"), args), **kwargs)
    if any(type(v) is str for v in parts.values()):
        return _builtin(complex, *args, **kwargs)  # (it parses text, and refuses it beside a part)
    return _builtin(complex, **{k: _complex_part(run, v, k == "real") for k, v in parts.items()})


def ascii_(obj: object, /) -> str:
    """ascii() with a Python ``__repr__`` interpreted: its text with non-ASCII characters escaped."""
    if _python_dunder(obj, "__repr__") is None:
        return _builtin(ascii, obj)
    text = to_repr(active_run(), obj)
    text = text if isinstance(text, str) else str(text)  # (a stand-in for text: its characters)
    return text if text.isascii() else text.encode("ascii", "backslashreplace").decode("ascii")


def _is_buffer(v: object) -> bool:
    return issubclass(type(v), _BUFFERS) or (sys.version_info >= (3, 12) and hasattr(type(v), "__buffer__"))


def _byte_source(run: Run, v: object, target: type) -> object:
    """What ``bytes(v)``/``bytearray(v)`` (``target``) read of ``v`` past ``__bytes__``: its Python
    ``__index__`` (a size), a buffer as it is, else its items as the ``for`` statement steps them.

    Note [bytes() past an __index__ raising TypeError]: CPython's bytes_new and bytearray___init__ ask
    ``PyNumber_AsSsize_t`` for a size and, when that raises a TypeError (``__index__`` raising it, or
    returning a non-int), clear it and read ``v`` as a buffer or an iterable (bpo-29159, bpo-34974;
    test_bytes' ``test_from_buffer``). Any other exception propagates. Text refuses first ("string
    argument without an encoding"), without asking its ``__index__``: the builtin gets it as it is."""
    if isinstance(v, str):
        return v
    if has_python_index(run, v):
        try:
            return ssize_index(run, v, OverflowError)  # Note [An index too large names its own type]
        except TypeError:
            pass  # cleared, as PyErr_Clear: what follows is not chained to it
    if _is_buffer(v):
        return v
    # Note [A TypeError of iter() replaced by the caller's] (protocols.py)
    return iter_with_callers_error(native_iterable, run, v,
                                   f"cannot convert '{type(v).__name__}' object to {target.__name__}")


def bytes_(*args: object, **kwargs: object) -> bytes:
    """bytes() with a Python ``__bytes__``, ``__index__`` or ``__iter__`` of its one argument interpreted."""
    if len(args) != 1 or kwargs or type(args[0]) in NATIVE_TYPES:
        return _builtin(bytes, *args, **kwargs)
    run = active_run()
    f = _python_dunder(args[0], "__bytes__")
    if f is not None:
        result = call(run, f, (args[0],), None)
        if not isinstance(result, bytes):
            raise TypeError(f"__bytes__ returned non-bytes (type {type(result).__name__})")
        return result
    return _builtin(bytes, _byte_source(run, args[0], bytes))


def bytearray_(*args: object, **kwargs: object) -> bytearray:
    """bytearray() with a Python ``__index__`` or ``__iter__`` of its one argument interpreted."""
    if len(args) != 1 or kwargs or type(args[0]) in NATIVE_TYPES:
        return _builtin(bytearray, *args, **kwargs)
    return _builtin(bytearray, _byte_source(active_run(), args[0], bytearray))


def fromkeys_(*args: object) -> dict:
    """dict.fromkeys() over its iterable as the ``for`` statement iterates it."""
    if not args or len(args) > 2:
        return _builtin(dict.fromkeys, *args)
    run = active_run()  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
    return keyed_iterable_call(run, dict.fromkeys, native_iterable(run, args[0]), args[1:],
                               through_opaque=True)


def _python_mapping(v: object) -> bool:
    """Whether C code takes ``v``'s items through a Python ``keys()`` (and its ``__getitem__``)."""
    if _python_dunder(v, "keys") is None:
        return False
    # (PyDict_Merge takes a dict subclass's items as a dict's unless it overrides __iter__)
    return not issubclass(type(v), dict) or getattr(type(v), "__iter__", None) is not dict.__iter__


def mapping_keys(run: Run, mapping: object) -> list[object]:
    """``PyMapping_Keys(mapping)``: ``list(mapping.keys())`` with ``keys()`` and its iteration interpreted,
    all the keys listed before any value is read (CPython's dict_merge reads the values after). A ``keys()``
    answering a non-iterable raises "C.keys() returned a non-iterable (type T)" (Note [A TypeError of iter()
    replaced by the caller's], protocols.py)."""
    if not _python_mapping(mapping):
        return list(mapping.keys())  # noqa: SIM118 - the mapping protocol
    keys = call(run, getattr(mapping, "keys"), (), None)  # noqa: B009 - a bound method, as C gets it
    if type(keys) is list:
        return keys
    message = f"{type(mapping).__name__}.keys() returned a non-iterable (type {type(keys).__name__})"
    return list(iter_with_callers_error(native_iterator, run, keys, message))


def mapping_value(run: Run, mapping: object, key: object) -> object:
    """``mapping[key]`` as C's dict_merge reads it: a Python ``__getitem__`` interpreted."""
    return get_item(run, mapping, key) if _python_mapping(mapping) else mapping[key]


def mapping_items(run: Run, mapping: object) -> list[tuple[object, object]]:
    """``[(k, mapping[k]) for k in mapping.keys()]`` with ``keys()``, its iteration and ``__getitem__``
    interpreted (a dict's items as they are)."""
    if not _python_mapping(mapping):
        return [(k, mapping[k]) for k in mapping.keys()]  # noqa: SIM118 - the mapping protocol
    return [(k, get_item(run, mapping, k)) for k in mapping_keys(run, mapping)]


def dict_(*args: object, **kwargs: object) -> dict:
    """dict() of a mapping with a Python ``keys()``, or of pairs stepped as ``for`` steps them."""
    if len(args) != 1:
        return _builtin(dict, *args, **kwargs)
    run = active_run()
    if _python_mapping(args[0]):
        return keyed_iterable_call(run, dict, mapping_items(run, args[0]), (), kwargs, pairs=True,
                                   through_opaque=True)
    if hasattr(args[0], "keys"):  # another mapping: the builtin takes its items
        return _builtin(dict, args[0], **kwargs)
    # its keys' Python ``__hash__``/``__eq__`` interpreted first: Note [A keyed C call, interpreted first]
    return keyed_iterable_call(run, dict, native_iterable(run, args[0]), (), kwargs, pairs=True,
                               through_opaque=True)


def dict_update(self: dict, *args: object, **kwargs: object) -> None:
    """dict.update() of a mapping with a Python ``keys()``, or of pairs stepped as ``for`` steps them."""
    if len(args) != 1 or not issubclass(type(self), dict):
        return _builtin(dict.update, self, *args, **kwargs)
    run = active_run()
    if _python_mapping(args[0]):
        return _builtin(dict.update, self, mapping_items(run, args[0]), **kwargs)
    if hasattr(args[0], "keys"):
        return _builtin(dict.update, self, args[0], **kwargs)
    # its keys' Python ``__hash__``/``__eq__`` interpreted first: Note [A keyed C call, interpreted first]
    return keyed_iterable_call(run, dict.update, native_iterable(run, args[0]), (), kwargs, pairs=True,
                               through_opaque=True, receiver=self)


_ROUNDING = ("floor", "ceil", "trunc")


def math_dunder(name: str, v: object) -> FunctionType | None:
    """``v``'s Python ``__floor__``/``__ceil__``/``__trunc__``, which ``math.<name>`` calls (else None)."""
    return _python_dunder(v, f"__{name}__") if name in _ROUNDING else None


def real_argument(name: str, v: object) -> object:
    """What ``math.<name>`` (a function of one real number) reads of ``v``: its Python ``__float__`` (else
    ``__index__``) interpreted, as ``PyFloat_AsDouble`` asks; ``v`` itself where C asks nothing Python."""
    t = type(v)
    if t in NATIVE_TYPES or issubclass(t, float) or name == "trunc" or (name in _ROUNDING and
                                                                       hasattr(t, f"__{name}__")):
        return v
    run = active_run()
    f = _python_dunder(v, "__float__")
    if f is not None:
        result = call(run, f, (v,), None)
        return result if run.type_of(result) is float else v  # (else the builtin's own error)
    return index(run, v) if has_python_index(run, v) else v
