"""Building containers, strings and slices; unpacking.

Invariant: error messages match CPython 3.11's for the same misuse (e.g. unpacking a non-iterable).
"""

from __future__ import annotations

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

import functools
import operator
import sys
from collections.abc import Callable

from jitcore.interpreter.callbacks import native_iterable
from jitcore.interpreter.conversions import mapping_items, mapping_keys, mapping_value
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.hashed_inserts import keyed_call
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import (
    EXHAUSTED,
    NATIVE_COMPARANDS,
    NATIVE_TYPES,
    get_iter,
    next_value,
    to_format,
    to_repr,
    to_str,
)
from jitcore.interpreter.registry import handles


def _pop_n(stack: list, n: int) -> list:
    if not n:
        return []
    items = stack[-n:]
    del stack[-n:]
    return items


@handles("BUILD_TUPLE", since=(3, 11))
def build_tuple(frame: Frame, inst: Instruction) -> None:
    """Push a tuple of the top inst.arg items."""
    frame.stack.append(tuple(_pop_n(frame.stack, inst.arg)))


@handles("BUILD_LIST", since=(3, 11))
def build_list(frame: Frame, inst: Instruction) -> None:
    """Push a list of the top inst.arg items."""
    frame.stack.append(_pop_n(frame.stack, inst.arg))


@handles("BUILD_SET", since=(3, 11))
def build_set(frame: Frame, inst: Instruction) -> None:
    """Push a set of the top inst.arg items."""
    items = _pop_n(frame.stack, inst.arg)
    if _hashed_natively(items):
        frame.stack.append(set(items))
    else:
        frame.stack.append(keyed_call(frame.run, set, (items,), keys=items, insert=True))


def _hashed_natively(keys: list | tuple) -> bool:
    """Whether hashing ``keys`` into a set or dict calls no dunder of another object (else it is done by
    ``keyed_call``: Note [A keyed C call, interpreted first], hashed_inserts.py)."""
    return all(type(k) in NATIVE_COMPARANDS for k in keys)


@handles("BUILD_MAP", since=(3, 11))
def build_map(frame: Frame, inst: Instruction) -> None:
    """Push a dict of the top 2*inst.arg items (key, value, key, value, ...)."""
    items = _pop_n(frame.stack, 2 * inst.arg)
    if not _hashed_natively(items[::2]):
        frame.stack.append(keyed_call(frame.run, dict, (list(zip(items[::2], items[1::2])),), keys=items[::2],
                                      insert=True))
        return
    result = {}
    for i in range(0, len(items), 2):
        result[items[i]] = items[i + 1]
    frame.stack.append(result)


@handles("BUILD_CONST_KEY_MAP", since=(3, 11))
def build_const_key_map(frame: Frame, inst: Instruction) -> None:
    """Push a dict from a tuple of keys (TOS) and inst.arg values."""
    keys = frame.stack.pop()
    values = _pop_n(frame.stack, inst.arg)
    frame.stack.append(dict(zip(keys, values)))


@handles("BUILD_STRING", since=(3, 11))
def build_string(frame: Frame, inst: Instruction) -> None:
    """Push the concatenation of the top inst.arg strings."""
    frame.stack.append("".join(_pop_n(frame.stack, inst.arg)))


@handles("BUILD_STRING", since=(3, 11), hook="format_field")
def build_string_hooked(frame: Frame, inst: Instruction) -> None:
    """BUILD_STRING where ``hooks.format_field`` may have made pieces that are not strs (the jit's
    deferred text): those concatenate with ``+``, which their class defines."""
    pieces = _pop_n(frame.stack, inst.arg)
    try:
        frame.stack.append("".join(pieces))
    except TypeError:
        frame.stack.append(functools.reduce(operator.add, pieces))


@handles("BUILD_SLICE", since=(3, 11))
def build_slice(frame: Frame, inst: Instruction) -> None:
    """Push slice(start, stop[, step])."""
    frame.stack.append(slice(*_pop_n(frame.stack, inst.arg)))


@handles("LIST_APPEND", since=(3, 11))
def list_append(frame: Frame, inst: Instruction) -> None:
    """Append TOS to the list inst.arg deep (comprehensions)."""
    v = frame.stack.pop()
    frame.stack[-inst.arg].append(v)


@handles("SET_ADD", since=(3, 11))
def set_add(frame: Frame, inst: Instruction) -> None:
    """Add TOS to the set inst.arg deep."""
    v = frame.stack.pop()
    if type(v) in NATIVE_COMPARANDS:
        frame.stack[-inst.arg].add(v)
    else:  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
        container = frame.stack[-inst.arg]
        keyed_call(frame.run, set.add, (container, v), container=container, keys=(v,), insert=True)


@handles("MAP_ADD", since=(3, 11))
def map_add(frame: Frame, inst: Instruction) -> None:
    """dict[TOS1] = TOS for the dict inst.arg deep."""
    stack = frame.stack
    value = stack.pop()
    key = stack.pop()
    if type(key) in NATIVE_COMPARANDS:
        stack[-inst.arg][key] = value
    else:  # Note [A keyed C call, interpreted first] (hashed_inserts.py)
        container = stack[-inst.arg]
        keyed_call(frame.run, operator.setitem, (container, key, value), container=container, keys=(key,),
                   insert=True)


@handles("LIST_EXTEND", since=(3, 11))
def list_extend(frame: Frame, inst: Instruction) -> None:
    """Extend the list inst.arg deep with TOS."""
    iterable = frame.stack.pop()
    try:  # stepped as ``for`` steps it: Note [C builtins over a Python object's dunders] (callbacks.py)
        frame.stack[-inst.arg].extend(native_iterable(frame.run, iterable))
    except TypeError:
        if not hasattr(type(iterable), "__iter__") and not hasattr(type(iterable), "__getitem__"):
            raise TypeError(f"Value after * must be an iterable, not {type(iterable).__name__}") from None
        raise


@handles("SET_UPDATE", since=(3, 11))
def set_update(frame: Frame, inst: Instruction) -> None:
    """Update the set inst.arg deep with TOS."""
    iterable = frame.stack.pop()
    frame.stack[-inst.arg].update(native_iterable(frame.run, iterable))


@handles("DICT_UPDATE", since=(3, 11))
def dict_update(frame: Frame, inst: Instruction) -> None:
    """Update the dict inst.arg deep with the mapping TOS."""
    mapping = frame.stack.pop()
    items = None
    if hasattr(type(mapping), "keys"):
        try:  # a Python keys()/__getitem__ interpreted: Note [C builtins over a Python object's dunders]
            items = mapping if type(mapping) is dict else mapping_items(frame.run, mapping)
        except AttributeError:
            pass  # discarded, as C replaces it: Note [A mapping merged as CPython merges it]
    if items is None:
        raise TypeError(f"'{type(mapping).__name__}' object is not a mapping")
    frame.stack[-inst.arg].update(items)


def _function_str(fn: object) -> str:
    """CPython's ``_PyObject_FunctionStr``: ``module.qualname()``, else ``str(fn)``."""
    try:
        qualname = fn.__qualname__
    except AttributeError:
        return str(fn)
    module = getattr(fn, "__module__", None)
    if module is not None and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"


# How deep the callable sits under the kwargs dict of DICT_MERGE: 3.11 and 3.12 ``NULL|callable,
# callable|self, args, kwargs``; 3.13 ``callable, self|NULL, args, kwargs``.
_CALLABLE_DEPTH = 2 if sys.version_info < (3, 13) else 3


@handles("DICT_MERGE", since=(3, 11))
def dict_merge(frame: Frame, inst: Instruction) -> None:
    """Merge the mapping TOS into the kwargs dict inst.arg deep, rejecting duplicate keys."""
    stack = frame.stack
    mapping = stack.pop()
    merge_keywords(frame, stack[-inst.arg - _CALLABLE_DEPTH], stack[-inst.arg], mapping)


_NO_KEY = object()


def _merged(run: object, target: dict, mapping: object) -> object:
    """Merge ``mapping`` into ``target`` up to a key already there (returned; else ``_NO_KEY``)."""
    if type(mapping) is dict:
        for key, value in mapping.items():
            if key in target:
                return key
            target[key] = value
        return _NO_KEY
    if not hasattr(type(mapping), "keys"):
        raise AttributeError("keys")  # (PyMapping_Keys' own)
    for key in mapping_keys(run, mapping):
        if key in target:
            return key
        target[key] = mapping_value(run, mapping, key)
    return _NO_KEY


def merge_keywords(frame: Frame, fn: object, target: dict, mapping: object) -> None:
    """``_PyDict_MergeEx(target, mapping, 2)`` for ``fn(**mapping)``, with ``format_kwargs_error``'s errors.

    Note [A mapping merged as CPython merges it]: dict_merge lists a mapping's ``keys()`` first, then for each
    key refuses a duplicate before it reads the value. ``**mapping`` in a call turns an AttributeError (of a
    Python ``keys``/``__getitem__``) into "argument after ** must be a mapping", ``{**mapping}`` into "'C'
    object is not a mapping", and a call a KeyError of one argument into "got multiple values for keyword
    argument": on 3.11 only dict_merge's own while no exception is handled (its value then a tuple, not an
    instance: in an ``except`` block the duplicate raises ``KeyError(key)``), on 3.12 and later any
    (format_kwargs_error reads its ``args``). The replaced error is discarded, not chained."""
    run = frame.run
    duplicate = failed = _NO_KEY
    try:
        duplicate = _merged(run, target, mapping)
    except AttributeError:
        failed = f"{_function_str(fn)} argument after ** must be a mapping, not {type(mapping).__name__}"
    except KeyError as e:
        if sys.version_info < (3, 12) or len(e.args) != 1:
            raise
        duplicate = e.args[0]
    if failed is not _NO_KEY:
        raise TypeError(failed)
    if duplicate is not _NO_KEY:
        handled = frame.handled_exception()
        if sys.version_info < (3, 12) and (handled is not None or run.native_exc is not None):
            raise KeyError(duplicate)
        raise TypeError(f"{_function_str(fn)} got multiple values for keyword argument '{duplicate}'")


@handles("LIST_TO_TUPLE", since=(3, 11), until=(3, 11))
def list_to_tuple(frame: Frame, inst: Instruction) -> None:
    """TOS = tuple(TOS)."""
    frame.stack[-1] = tuple(frame.stack[-1])


def _unpack(frame: Frame, seq: object, count: int) -> list:
    """Up to count+1 items of seq, with CPython's messages for a non-iterable."""
    try:
        it = get_iter(frame.run, seq)
    except TypeError:
        if not hasattr(type(seq), "__iter__") and not hasattr(type(seq), "__getitem__"):
            raise TypeError(f"cannot unpack non-iterable {type(seq).__name__} object") from None
        raise
    items = []
    while len(items) <= count:
        v = next_value(frame.run, it)
        if v is EXHAUSTED:
            break
        items.append(v)
    return items


@handles("UNPACK_SEQUENCE", since=(3, 11))
def unpack_sequence(frame: Frame, inst: Instruction) -> None:
    """Replace TOS by its inst.arg items, first item on top."""
    stack = frame.stack
    seq = stack.pop()
    n = inst.arg
    if (type(seq) is tuple or type(seq) is list) and len(seq) == n:
        stack.extend(reversed(seq))
        return
    items = _unpack(frame, seq, n)
    if len(items) < n:
        raise ValueError(f"not enough values to unpack (expected {n}, got {len(items)})")
    if len(items) > n:
        raise ValueError(f"too many values to unpack (expected {n})")
    stack.extend(reversed(items))


@handles("UNPACK_EX", since=(3, 11))
def unpack_ex(frame: Frame, inst: Instruction) -> None:
    """Unpack TOS into (low byte) items before a starred list and (high byte) items after it."""
    stack = frame.stack
    seq = stack.pop()
    before, after = inst.arg & 0xFF, inst.arg >> 8
    try:
        it = get_iter(frame.run, seq)
    except TypeError:
        if not hasattr(type(seq), "__iter__") and not hasattr(type(seq), "__getitem__"):
            raise TypeError(f"cannot unpack non-iterable {type(seq).__name__} object") from None
        raise
    items = []
    while True:
        v = next_value(frame.run, it)
        if v is EXHAUSTED:
            break
        items.append(v)
    if len(items) < before + after:
        raise ValueError(
            f"not enough values to unpack (expected at least {before + after}, got {len(items)})"
        )
    middle = items[before: len(items) - after]
    out = items[:before] + [middle] + items[len(items) - after:]
    stack.extend(reversed(out))


_CONVERSIONS = {1: to_str, 2: to_repr}


@handles("FORMAT_VALUE", since=(3, 11), until=(3, 12))
def format_value(frame: Frame, inst: Instruction) -> None:
    """f-string field: convert (str/repr/ascii) then format with an optional spec."""
    stack = frame.stack
    flags = inst.arg
    spec = stack.pop() if flags & 4 else ""
    value = stack.pop()
    conversion = flags & 3
    run = frame.run
    if conversion == 3:
        value = ascii(value)
    elif conversion:
        value = _CONVERSIONS[conversion](run, value)
    if type(value) is str and not spec:
        stack.append(value)
    else:
        stack.append(to_format(run, value, spec))


# Containers are the hook's too: the items' text is made by Python's formatting of the whole.
_HOOKED_NATIVE = frozenset({tuple, list, dict, set, frozenset})


def _field(frame: Frame, value: object, conversion: int, spec: object) -> object:
    """``hooks.format_field(value, conversion, spec)`` for a value of a class that is not Python's own
    (the jit's stand-ins for numbers), a container, or a spec that is not a str (one the hook made):
    the field's text, or NotImplemented for Python's formatting."""
    if type(value) in NATIVE_TYPES and type(value) not in _HOOKED_NATIVE and type(spec) is str:
        return NotImplemented
    return frame.run.hooks.format_field(value, conversion, spec)


@handles("FORMAT_VALUE", since=(3, 11), until=(3, 12), hook="format_field")
def format_value_hooked(frame: Frame, inst: Instruction) -> None:
    """FORMAT_VALUE through ``hooks.format_field`` first."""
    flags = inst.arg
    stack = frame.stack
    text = _field(frame, stack[-2] if flags & 4 else stack[-1], flags & 3, stack[-1] if flags & 4 else "")
    if text is NotImplemented:
        format_value(frame, inst)
        return
    del stack[-2 if flags & 4 else -1:]
    stack.append(text)


def _field_of_top(frame: Frame, inst: Instruction, conversion: int, handler: Callable) -> None:
    """TOS through ``hooks.format_field`` (no spec), else the opcode's own ``handler``."""
    text = _field(frame, frame.stack[-1], conversion, "")
    if text is NotImplemented:
        handler(frame, inst)
    else:
        frame.stack[-1] = text


@handles("CONVERT_VALUE", since=(3, 13), hook="format_field")
def convert_value_hooked(frame: Frame, inst: Instruction) -> None:
    """CONVERT_VALUE through ``hooks.format_field`` first."""
    _field_of_top(frame, inst, inst.arg, convert_value)


@handles("FORMAT_SIMPLE", since=(3, 13), hook="format_field")
def format_simple_hooked(frame: Frame, inst: Instruction) -> None:
    """FORMAT_SIMPLE through ``hooks.format_field`` first."""
    _field_of_top(frame, inst, 0, format_simple)


@handles("FORMAT_WITH_SPEC", since=(3, 13), hook="format_field")
def format_with_spec_hooked(frame: Frame, inst: Instruction) -> None:
    """FORMAT_WITH_SPEC through ``hooks.format_field`` first."""
    stack = frame.stack
    text = _field(frame, stack[-2], 0, stack[-1])
    if text is NotImplemented:
        format_with_spec(frame, inst)
    else:
        del stack[-1]
        stack[-1] = text


@handles("CONVERT_VALUE", since=(3, 13))
def convert_value(frame: Frame, inst: Instruction) -> None:
    """f-string ``!s``/``!r``/``!a``: TOS = str/repr/ascii(TOS) (inst.arg 1/2/3)."""
    value = frame.stack[-1]
    frame.stack[-1] = ascii(value) if inst.arg == 3 else _CONVERSIONS[inst.arg](frame.run, value)


@handles("FORMAT_SIMPLE", since=(3, 13))
def format_simple(frame: Frame, inst: Instruction) -> None:
    """f-string field without a spec: TOS = format(TOS, "")."""
    value = frame.stack[-1]
    if type(value) is not str:
        frame.stack[-1] = to_format(frame.run, value, "")


@handles("FORMAT_WITH_SPEC", since=(3, 13))
def format_with_spec(frame: Frame, inst: Instruction) -> None:
    """f-string field with a spec: TOS = format(TOS1, TOS)."""
    stack = frame.stack
    spec = stack.pop()
    stack[-1] = to_format(frame.run, stack[-1], spec)


def print_expr(frame: Frame, value: object) -> None:
    """Interactive-mode expression statement: ``sys.displayhook(value)``."""
    hook = getattr(sys, "displayhook", None)
    if hook is None:
        raise RuntimeError("lost sys.displayhook")
    hook(value)


@handles("PRINT_EXPR", since=(3, 11), until=(3, 11))
def print_expr_(frame: Frame, inst: Instruction) -> None:
    """Interactive-mode expression statement: sys.displayhook(TOS)."""
    print_expr(frame, frame.stack.pop())
