"""Numbers formatted into text without reading their values: f-strings, ``format`` and ``str.format``.

A number that is a name of the computation (``loss.item()``, a dynamic number) formatted into text
(``print(f"step {step}: loss {loss.item():.4f}")``) gives a ``TextProxy`` (jitcore/proxies/text.py)
instead of a str: the text is made from each call's numbers where it leaves the program, so the
value is not guarded and a new loss is not a new cache entry. This module is the pass's side:
- ``format_field`` is the interpreter's ``format_field`` hook (f-string fields), ``format_percent`` its
  ``format_percent`` hook (``"loss %.4f" % n``, as logging formats ``logger.info("loss %.4f", n)``);
- ``format_lookasides`` replace ``format(n, spec)``, ``"...".format(n, ...)``, ``str(n)`` and ``repr(n)``
  of such numbers (``str`` of a TextProxy is itself: it stands for a str).
A plain tensor that requires no grad, given to an f-string field, ``str``, ``repr``, ``format`` or
``str.format`` without a format spec (``f"y = {y}"``), is a field too: a snapshot the computation takes,
whose text torch makes on each call (Note [A tensor the program prints], jit/printing.py).
Anything else (a field reaching attributes or items, ``"{:{w}}"`` nested specs, ``%`` conversions
whose text ``format`` does not make the same way, no number among the arguments) is Python's own
formatting, called as the program would call it.

A symbolic size (a ``torch.SymInt`` of a dynamic-shapes pass, alone or in a ``torch.Size``, tuple or
list) formatted into text is specialized first (Note [Sizes made into text]).

Invariant: a TextProxy is made only of strs and fields whose value is a NumberProxy, a TextProxy or a
plain tensor's snapshot; every other value's text is made while tracing, through the interpreter (its
reads are guarded).
"""

from __future__ import annotations

import _string  # CPython's parser of str.format templates, as string.Formatter uses it
import re
import types
from collections.abc import Callable
from typing import Any

import torch

from jitcore.interpreter import current_run
from jitcore.interpreter.protocols import to_format, to_repr, to_str
from jitcore.ir import tree_has
from jitcore.langctx.tensor_text import shown_snapshot
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import SYMBOLIC_NUMBERS, NumberProxy, symbolic_number_class
from jitcore.proxies.text import CONVERTERS, Field, TextProxy

__all__ = ["format_field", "format_lookasides", "format_percent", "percent_of_tensors", "specialized_sizes"]

_DEFERRED = (NumberProxy, TextProxy)
_CODES = {None: 0, "s": 1, "r": 2, "a": 3}  # a str.format conversion letter -> its code


# Note [Sizes made into text]
# In a pass with symbolic sizes (jitcore/jit/shapes.py), ``x.shape[0]`` is a ``torch.SymInt`` whose
# own text is its symbol: ``f"{n}"``, ``str(x.shape)`` or ``print(n)`` would give ``s0`` where eager
# gives ``3``, on the first call and every cached one. Text shows the value, so the value is what
# the program needs: the size is specialized (``int(n)``: a ShapeEnv guard, checked by the prologue,
# as torch.compile does), and the text is made from the int. A nested jagged tensor's ragged size
# (``j0``) prints as ``j0`` eagerly too and is left as it is.


def specialized_sizes(value: Any, _outer: set[int] | None = None) -> Any:
    """``value`` with each symbolic size in it (alone, or in a ``torch.Size``/tuple/list, nested) made
    the number it stands for, guarded (Note [Sizes made into text]); ``value`` itself where it holds
    none. A list inside itself (``a.append(a)``: ``repr`` gives ``[[...]]``) is left as it is there."""
    if (number := symbolic_number_class(value)) is not None:
        return number(value)
    outer = _outer if _outer is not None else set()
    if type(value) in (tuple, list, torch.Size) and id(value) not in outer:
        outer.add(id(value))
        items = [specialized_sizes(v, outer) for v in value]
        outer.discard(id(value))
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(items)
    return value


def _specialized_all(values: Any) -> Any:
    if type(values) is dict:
        return {k: specialized_sizes(v) for k, v in values.items()}
    return specialized_sizes(values)


# Note [A converted field]
# ``f"{x!r}"`` of a subclass whose ``__repr__`` the interpreter runs (a TwoTensor's, a class's own) gives
# a TextProxy when that text holds an inner tensor's snapshot; FORMAT_VALUE then formatted it with
# ``format(text, "")``, which needs its characters (JC-T001, an eager entry). A field converted with
# ``!r``/``!s`` and no spec is its conversion's text, whatever it is made of.


def format_field(value: Any, conversion: int, spec: Any) -> Any:
    """The ``format_field`` hook: an f-string field's text (see the module docstring)."""
    specialized = specialized_sizes(value)
    if specialized is not value:  # Note [Sizes made into text]
        return to_format(current_run(), (CONVERTERS[conversion](specialized) if conversion else specialized),
                         spec.specialize() if isinstance(spec, TextProxy) else spec)
    if type(spec) is str and not spec and (snapshot := _tensor_text(value, conversion)) is not None:
        return TextProxy.field(snapshot, conversion, "")
    if type(spec) is str and not spec and conversion in (1, 2) and issubclass(type(value), TensorProxy):
        return (to_str if conversion == 1 else to_repr)(current_run(), value)  # Note [A converted field]
    made = isinstance(spec, TextProxy)  # ``f"{x:.{n}f}"``: the spec's characters are needed now
    if made:
        spec = spec.specialize()
    if isinstance(value, _DEFERRED):
        return TextProxy.field(value, conversion, spec)
    if not made:
        return NotImplemented
    run = current_run()
    if conversion:  # FORMAT_VALUE's own steps (the interpreter's protocols), with the spec's characters
        value = ascii(value) if conversion == 3 else (to_str if conversion == 1 else to_repr)(run, value)
    return to_format(run, value, spec)


def format_lookasides(opaque: Callable[[Callable[..., Any], tuple, dict], Any]) -> dict[Any, Callable]:
    """``format`` and ``str.format``: a TextProxy when a number among the arguments is a name;
    otherwise the call as the program makes it (``opaque``: the pass's call of a C function)."""

    def format_(*args: Any, **kwargs: Any) -> Any:
        args = tuple(specialized_sizes(a) for a in args)  # Note [Sizes made into text]
        if not kwargs and 1 <= len(args) <= 2 and issubclass(type(args[0]), _DEFERRED) \
                and type(args[-1] if len(args) == 2 else "") is str:
            return TextProxy.field(args[0], 0, args[1] if len(args) == 2 else "")
        if not kwargs and (len(args) == 1 or len(args) == 2 and type(args[1]) is str and not args[1]) \
                and (snapshot := _tensor_text(args[0], 0)) is not None:
            return TextProxy.field(snapshot, 0, "")
        if not kwargs and 1 <= len(args) <= 2 and type(args[-1] if len(args) == 2 else "") is str \
                and _python_text(args[0]):
            return to_format(current_run(), args[0], args[1] if len(args) == 2 else "")  # interpreted
        return opaque(format, args, kwargs)

    def str_format(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = _specialized_all(args), _specialized_all(kwargs)  # Note [Sizes made into text]
        if args and type(args[0]) is str and (tree_has((args[1:], kwargs), (*_DEFERRED, TensorProxy))
                                              or any(map(_python_text, (*args[1:], *kwargs.values())))):
            text = _template_text(args[0], args[1:], kwargs)
            if text is not None:
                return text
        return opaque(str.format, args, kwargs)

    def converter(fn: Callable[..., Any], conversion: int) -> Callable[..., Any]:
        method, protocol = ("__str__", to_str) if fn is str else ("__repr__", to_repr)

        def convert(*args: Any, **kwargs: Any) -> Any:  # ``str(n)``, ``repr(n)``, ``str(obj)``
            if len(args) == 1 and not kwargs:
                value = specialized_sizes(args[0])  # Note [Sizes made into text]
                args = (value,)
                if issubclass(type(value), _DEFERRED):
                    return value if fn is str and isinstance(value, TextProxy) else \
                        TextProxy.field(value, conversion, "")
                if (snapshot := _tensor_text(value, conversion)) is not None:
                    return TextProxy.field(snapshot, conversion, "")
                if issubclass(type(value), torch.Tensor):  # a subclass's own text method: interpreted
                    if type(getattr(type(value), method, None)) is types.FunctionType:
                        return protocol(current_run(), value)
                elif _python_method(type(value), method) or (
                        fn is str and _str_is_repr(type(value)) and _python_method(type(value), "__repr__")):
                    return protocol(current_run(), value)  # a Python ``__str__``/``__repr__``: interpreted
            return opaque(fn, args, kwargs)

        return convert

    def size_repr(size: Any) -> str:  # ``SymInt.__repr__`` reached through another object's text
        return repr(specialized_sizes(size))

    return {format: format_, str.format: str_format, str: converter(str, 1), repr: converter(repr, 2),
            NumberProxy.__format__: lambda n, spec: TextProxy.field(n, 0, spec),  # Tensor.__format__'s
            **{kind.__repr__: size_repr for kind in SYMBOLIC_NUMBERS}}


def _tensor_text(value: Any, conversion: int) -> TensorProxy | None:
    """The snapshot whose text a field of ``value`` with ``conversion`` and no format spec shows, where
    ``value`` is a plain traced tensor that requires no grad (``shown_snapshot``); None otherwise, and for a
    0-dim tensor without a conversion, whose ``Tensor.__format__`` formats its number (``item()``)."""
    if not issubclass(type(value), TensorProxy) or (conversion == 0 and value.ndim == 0):
        return None
    return shown_snapshot(value)


def _python_text(value: Any) -> bool:
    """Whether ``value``'s text comes from a Python ``__format__``/``__str__``/``__repr__`` of its class
    (not a tensor's: the tensor-text rule has those), which ``str.format`` would call natively: its reads
    of the caller's state unguarded (Note [C builtins over a Python object's dunders], callbacks.py)."""
    t = type(value)
    return not issubclass(t, (torch.Tensor, *_DEFERRED)) and any(
        _python_method(t, name) for name in ("__format__", "__str__", "__repr__"))


def _python_method(t: type, name: str) -> bool:
    """Whether ``t``'s ``name`` is a Python function, found without running a descriptor."""
    for klass in t.__mro__:
        if name in vars(klass):
            return type(vars(klass)[name]) is types.FunctionType
    return False


def _str_is_repr(t: type) -> bool:
    """Whether ``str(v)`` of a ``t`` is ``object.__str__``, which calls ``repr(v)``. Not so for an
    ``IntEnum``: its ``__str__`` is ``int.__repr__`` (C) and its ``__repr__`` Enum's (Python)."""
    for klass in t.__mro__:
        if "__str__" in vars(klass):
            return vars(klass)["__str__"] is object.__str__
    return True


def _template_text(template: str, args: tuple, kwargs: dict) -> TextProxy | str | None:
    """``template.format(*args, **kwargs)`` as a TextProxy, or None where Python's own ``str.format``
    must run (a field naming attributes or items, a nested spec, a malformed template, a missing
    argument: its error is Python's)."""
    parts: list[str | Field] = []
    automatic: int | None = 0  # the next ``{}``'s index; None once a field was numbered
    run = current_run()
    try:
        parsed = list(_string.formatter_parser(template))
    except ValueError:
        return None
    for literal, name, spec, conversion in parsed:
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if "{" in spec or "." in name or "[" in name or conversion not in _CODES:
            return None
        if name == "":
            if automatic is None:
                return None
            key: int | str = automatic
            automatic += 1
        elif name.isdigit():
            if automatic:  # mixing ``{}`` and ``{0}``: Python's ValueError
                return None
            automatic, key = None, int(name)
        else:
            key = name
        try:
            value = args[key] if isinstance(key, int) else kwargs[key]
        except (IndexError, KeyError):
            return None
        code = _CODES[conversion]
        if isinstance(value, _DEFERRED):
            parts.append(Field(value, code, spec))
        elif spec == "" and (snapshot := _tensor_text(value, code)) is not None:
            parts.append(Field(snapshot, code, ""))
        else:
            parts.append(run.call(format, run.call(CONVERTERS[code], value) if code else value, spec))
    if all(type(p) is str for p in parts):  # (every field a program's object's text, made while tracing)
        return "".join(parts)
    return TextProxy(tuple(p if type(p) in (str, Field) else Field(p, 0, "") for p in parts))


# One ``%`` conversion: ``%(key)`` ``flags`` ``width`` ``.precision`` length modifier, type.
_PERCENT = re.compile(r"%(?:\((?P<key>[^)]*)\))?(?P<flags>[-+ #0]*)(?P<width>\d*)(?:\.(?P<precision>\d*))?"
                      r"[hlL]?(?P<type>[diouxXeEfFgGcrsa%])")
_FLOATS = frozenset("eEfFgG")
_INTEGERS = {"d": "d", "i": "d", "u": "d", "x": "x", "X": "X", "o": "o"}
_TEXTS = {"s": 1, "r": 2, "a": 3}


def format_percent(template: str, values: Any) -> Any:
    """The ``format_percent`` hook: ``template % values`` as a TextProxy when a value among ``values``
    is a number of the computation; NotImplemented (Python's ``%``) otherwise, and wherever a
    conversion's text could differ from ``format``'s (``*`` widths, ``%c``, ``%d`` of a float, ``%.3d``)
    or Python raises (a missing key, too few or too many values)."""
    specialized = _specialized_all(values)  # Note [Sizes made into text]
    text = _percent_text(template, specialized)
    changed = any(a is not b for a, b in zip(specialized.values(), values.values())) \
        if type(values) is dict else specialized is not values
    return template % specialized if text is NotImplemented and changed else text


def _percent_text(template: str, values: Any) -> Any:
    """``format_percent`` of values holding no symbolic size."""
    items = values if type(values) in (tuple, dict) else (values,)
    if not any(isinstance(v, _DEFERRED) for v in (items.values() if type(items) is dict else items)):
        return NotImplemented
    parts: list[str | Field] = []
    position, end = 0, 0
    for match in _PERCENT.finditer(template):
        if match.start() != end and "%" in template[end:match.start()]:
            return NotImplemented  # a conversion this parser does not read (``%*d``): Python's
        parts.append(template[end:match.start()])
        end = match.end()
        kind, key = match["type"], match["key"]
        if kind == "%":
            if key is not None or match.group(0) != "%%":
                return NotImplemented
            parts.append("%")
            continue
        if key is not None:
            if type(items) is not dict or key not in items:
                return NotImplemented
            value = items[key]
        else:
            if type(items) is dict or position >= len(items):
                return NotImplemented
            value, position = items[position], position + 1
        field = _percent_field(value, match)
        if field is None:
            return NotImplemented
        parts.append(field)
    if "%" in template[end:] or type(items) is tuple and position != len(items):
        return NotImplemented
    parts.append(template[end:])
    return TextProxy(tuple(p for p in parts if p != ""))


def _percent_field(value: Any, match: re.Match) -> Field | str | None:
    """One conversion's text: a Field for a number of the computation, the str for any other value
    (made by Python's ``%`` as eagerly), None where it must be Python's own ``%`` of everything."""
    kind, flags, width, precision = match["type"], match["flags"], match["width"], match["precision"]
    if not isinstance(value, _DEFERRED):
        if kind in _TEXTS and type(value) not in (str, int, float, bool, type(None)):
            return None  # an object's own __str__/__repr__: through Python's ``%`` of the whole
        return f"%{flags}{width}{'' if precision is None else '.' + precision}{kind}" % (value,)
    digits = "" if precision is None else "." + (precision or "0")
    if kind in _TEXTS:
        return Field(value, _TEXTS[kind], f"{'<' if '-' in flags else '>'}{width}{digits}")
    align = "<" if "-" in flags else ""  # numbers align right; ``0`` pads after the sign, as ``%`` does
    if isinstance(value, TextProxy) or kind == "c":
        return None  # ``%d`` of text raises; ``%c`` of a number: Python's
    sign = "+" if "+" in flags else " " if " " in flags else ""
    fill = "0" if "0" in flags and "-" not in flags else ""
    alternate = "#" if "#" in flags else ""
    if kind in _FLOATS:
        return Field(value, 0, f"{align}{sign}{alternate}{fill}{width}{digits}{kind}")
    if value.python_type is not int or precision is not None:
        return None  # ``%d`` of a float truncates and ``%.3d`` pads with zeros: ``format`` does neither
    return Field(value, 0, f"{align}{sign}{alternate}{fill}{width}{_INTEGERS[kind]}")


# Note [A tensor's text with a width]
# ``logger.info("x = %30s", x)``: Python's ``%`` pads (or, with a precision, cuts) the text ``str(x)`` gives,
# flags other than ``-`` ignored, as it does any str; ``%30r`` and ``%30a`` the ``repr``/``ascii`` text. The
# tensor's text is the f-string field's (a TextProxy made from each call's values), and the conversion is
# rewritten as ``%30s`` of that text, which ``format_percent`` makes the field ``format(text, ">30")``
# (``%-30s``: ``"<30"``; ``%.8s``: ``">.8"``), what ``%`` makes of a str. Before, a width or a precision
# refused the record (JC-T001: the call ran eagerly, a subclass's dispatch with it on every call).
def percent_of_tensors(template: str, values: Any) -> Any:
    """``template % values`` where ``values`` holds traced tensors (a logging record's message: Note [A
    record's tensor arguments], jit/log_records.py): each tensor converted by ``%s``, ``%r`` or ``%a``
    has the text the f-string field ``{x!s}`` (``!r``, ``!a``) makes of it (``format_field``, from each
    call's values), put in as ``%s`` with the conversion's flags, width and precision (Note [A tensor's
    text with a width]); the rest is ``format_percent``'s. NotImplemented
    where a tensor is converted otherwise, or the template does not read as Python's ``%`` would."""
    items = values if type(values) in (tuple, dict) else (values,)
    texts: Any = dict(items) if type(items) is dict else list(items)
    pieces: list[str] = []
    position, end = 0, 0
    for match in _PERCENT.finditer(template):
        if "%" in template[end:match.start()]:
            return NotImplemented  # a conversion this parser does not read
        pieces.append(template[end:match.start()])
        end = match.end()
        kind, key = match["type"], match["key"]
        if kind == "%":
            pieces.append(match.group(0))
            continue
        if (key is not None) != (type(items) is dict) or (key is not None and key not in items) \
                or (key is None and position >= len(items)):
            return NotImplemented
        where = key if key is not None else position
        position += key is None
        value = items[where]
        if not issubclass(type(value), TensorProxy):
            pieces.append(match.group(0))
            continue
        if kind not in _TEXTS:  # (flags, a width and a precision apply to the text: Note [A tensor's text ...
            return NotImplemented  # ... with a width])
        text = format_field(value, _TEXTS[kind], "")
        if text is NotImplemented:
            return NotImplemented
        texts[where] = text
        pieces.append(match.group(0)[:-1] + "s")  # the text, as it is
    if "%" in template[end:] or (type(items) is tuple and position != len(items)):
        return NotImplemented
    pieces.append(template[end:])
    rewritten = "".join(pieces)
    converted = texts if type(texts) is dict else tuple(texts)
    text = format_percent(rewritten, converted)
    return rewritten % converted if text is NotImplemented else text
