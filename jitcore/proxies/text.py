"""TextProxy: text formatted from numbers that are names, made into a string from each call's numbers.

Formatting a number that is a name of the computation (``f"loss {loss.item():.3f}"``, a dynamic
number) needs its value, and a value read while tracing is guarded: each new loss would be a new cache
entry. Where the text only leaves the program (printed, stored into an object that outlives the call,
returned), its characters are not needed while tracing. The interpreter's ``format_field`` hook then
makes a TextProxy: the f-string's pieces, with each number as a ``Field`` (the number, the f-string's
conversion and its format spec). The jit makes the string on every call from that call's numbers
(``text_of``): ``print`` (jit/printing.py), the side effects that store values (jit/effects.py) and
the output (jit/outputs.py) hand the numbers out of the computation and format them afterwards.

- ``+`` with a str or a TextProxy gives a TextProxy; ``format(n, spec)`` and ``"...".format(n)`` of such
  numbers give one too (their lookasides in jit/interpretation.py).
- Every other use needs the characters (comparing, hashing, ``len``, indexing, str methods, a C
  function it is passed to): the text is *specialized*, each number through ``NumberProxy.value_for_text``
  (a computed int guarded as ``number == value``, any other number as any use of its value), and the use
  gets the str.
- In interpreted code ``type(t)`` is ``str`` and ``isinstance(t, str)`` holds (dispatch/lookasides.py).
- A field may also be a plain tensor of the computation (``f"y = {y}"``: a snapshot the computation takes
  where the text is made, Note [A tensor the program prints], jit/printing.py): its text is torch's, made
  from each call's tensor. Such a text cannot be specialized (its characters are the tensor's values,
  which tracing does not have): that raises UnsupportedOperationError (JC-T001), and the call runs
  eagerly, as any use of a traced tensor's text does.

Invariant: ``text_of`` of the values the numbers (and tensors) have in a call is exactly the text eager's
formatting makes in that call: each field applies eager's conversion (``str``/``repr``/``ascii``) and
then ``format(value, spec)``, in the order of the pieces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.tensor import TensorProxy

__all__ = ["CONVERTERS", "Field", "TextProxy", "plain_key"]

# an f-string conversion (CPython's FORMAT_VALUE numbering) -> the function it applies
CONVERTERS = {0: None, 1: str, 2: repr, 3: ascii}


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One formatted value: ``format(conversion(value), spec)``; with ``render``, ``value`` is a tuple of
    tensors and the text ``format(render(*values), spec)`` (a tensor subclass's text made from its inner
    tensors' snapshots: Note [A MaskedTensor's text], langctx/masked_text.py)."""

    value: NumberProxy | TextProxy | TensorProxy | tuple[TensorProxy, ...]
    conversion: int  # 0: none, 1: !s, 2: !r, 3: !a (the numbering of CPython's FORMAT_VALUE)
    spec: str
    render: Callable[..., str] | None = None


class TextProxy:
    """The concatenation of ``parts`` (strings and fields), formatted once its numbers are known."""

    __slots__ = ("parts",)
    python_type = str

    def __init__(self, parts: tuple[str | Field, ...]) -> None:
        self.parts = parts

    @classmethod
    def field(cls, value: NumberProxy | TextProxy, conversion: int, spec: str) -> TextProxy:
        """The text of one f-string field; a text field without conversion or spec is that text."""
        if isinstance(value, TextProxy) and not conversion and not spec:
            return value
        return cls((Field(value, conversion, spec),))

    def numbers(self) -> list[NumberProxy | TensorProxy]:
        """The numbers (and tensors) the text is made from, in the order ``text_of`` takes their values."""
        found: list[NumberProxy | TensorProxy] = []
        for part in self.parts:
            if isinstance(part, Field):
                found.extend(part.value.numbers() if isinstance(part.value, TextProxy)
                             else part.value if part.render is not None else (part.value,))
        return found

    def text_of(self, values: tuple | list) -> str:
        """The text when the numbers (``numbers()``, in order) have these values."""
        it = iter(values)
        text = self._text(it)
        if next(it, _END) is not _END:
            raise ValueError("more values than the text's numbers")
        return text

    def _text(self, values: Iterator[Any]) -> str:
        pieces: list[str] = []
        for part in self.parts:
            if type(part) is str:
                pieces.append(part)
                continue
            if part.render is not None:
                pieces.append(format(part.render(*(next(values) for _ in part.value)), part.spec))
                continue
            value = part.value._text(values) if isinstance(part.value, TextProxy) else next(values)
            convert = CONVERTERS[part.conversion]
            pieces.append(format(value if convert is None else convert(value), part.spec))
        return "".join(pieces)

    def specialize(self) -> str:
        """The text, its numbers guarded by value from now on (``NumberProxy.specialize``)."""
        return self.text_of([_specialized(n) for n in self.numbers()])

    def shows_tensors(self) -> bool:
        """Whether a tensor's text is among the fields (the text cannot be made while tracing)."""
        return any(isinstance(n, TensorProxy) for n in self.numbers())

    def __repr__(self) -> str:
        return repr(self.specialize())

    def __str__(self) -> str:
        return self.specialize()

    def __format__(self, spec: str) -> str:
        return format(self.specialize(), spec)

    def __add__(self, other: Any) -> Any:
        if type(other) is str:
            return TextProxy((*self.parts, other))
        if isinstance(other, TextProxy):
            return TextProxy(self.parts + other.parts)
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if type(other) is str:
            return TextProxy((other, *self.parts))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.specialize())

    def __eq__(self, other: Any) -> bool:
        return self.specialize() == _text(other)

    def __ne__(self, other: Any) -> bool:
        return self.specialize() != _text(other)

    def __lt__(self, other: Any) -> bool:
        return self.specialize() < _text(other)

    def __le__(self, other: Any) -> bool:
        return self.specialize() <= _text(other)

    def __gt__(self, other: Any) -> bool:
        return self.specialize() > _text(other)

    def __ge__(self, other: Any) -> bool:
        return self.specialize() >= _text(other)

    def __bool__(self) -> bool:
        return bool(self.specialize())

    def __len__(self) -> int:
        return len(self.specialize())

    def __iter__(self) -> Iterator[str]:
        return iter(self.specialize())

    def __getitem__(self, key: Any) -> str:
        return self.specialize()[key]

    def __contains__(self, item: Any) -> bool:
        return _text(item) in self.specialize()

    def __mul__(self, count: Any) -> str:
        return self.specialize() * count

    __rmul__ = __mul__

    def __mod__(self, values: Any) -> str:
        return self.specialize() % values

    def __getattr__(self, name: str) -> Any:
        # ``t.upper()``, ``t.encode()``: a str's own methods need the characters
        if name.startswith("__") or not hasattr(str, name):
            raise AttributeError(f"'str' object has no attribute '{name}'")
        return getattr(self.specialize(), name)


_END = object()


def _text(value: Any) -> Any:
    return value.specialize() if isinstance(value, TextProxy) else value


def plain_key(value: Any) -> Any:
    """``value`` as a key or element of a dict or set that outlives the pass: a TextProxy's text, a
    NumberProxy's value (hashing either guarded it already, so this adds no guard; Note [A key of
    the computation's numbers], jitcore/jit/effects.py), also inside a tuple or frozenset key
    (``d[(k, "a")]``): a copy then, ``value`` itself where nothing in it is such a proxy.

    A computed number's hash guards only its value (``(i % 4) == 0``: Note [Hashing a computed number],
    number.py): its value is taken through that same guard, as specializing it would pin the inputs it
    was computed from (``i == 4``: an entry per ``i``)."""
    if type(value) is NumberProxy and value.made_by is not None and value.value == value.value:
        hash(value)  # the guard the set's or dict's own hash of it made (no new one)
        return value.value
    if isinstance(value, (TextProxy, NumberProxy)):
        return value.specialize()
    if type(value) in (tuple, frozenset):
        items = [plain_key(v) for v in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value)) else value
    return value


def _specialized(value: NumberProxy | TensorProxy) -> Any:
    """A number's value, guarded; a tensor's text is refused (see the module docstring)."""
    if isinstance(value, TensorProxy):
        raise UnsupportedOperationError(
            "the text of a traced tensor shows its values, which are not known while tracing",
            hints=("print the text or return it: its characters are made on each call",))
    return value.value_for_text()  # Note [The text of a computed number], number.py
