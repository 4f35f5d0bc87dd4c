"""Paths: how a value the trace relied on is reached from a call's inputs.

A path starts at a root — the call's positional ``args`` tuple, its ``kwargs`` dict, or an object
bound by reference (a function's globals dict, a closure cell, the jitted module) — and takes steps:
index, key, attribute. Invariants:
- a path is plain immutable data; it renders to a Python expression where every user-controlled
  part (keys, attribute names that are not plain ASCII identifiers, root objects) is a bound
  constant, never source text;
- ``Path.get`` evaluates it in Python, giving the same value as the rendered expression.
"""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Path", "Root", "RootKind", "Step", "StepKind", "safe_repr"]

StepKind = Literal["index", "key", "attr", "call"]
RootKind = Literal["args", "kwargs", "bound"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def safe_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` for messages: shortened, and never raising (huge ints, broken ``__repr__``); a
    tensor subclass's value is named by its class (Note [No repr of a subclass value in a message])."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor) \
            and type(value) not in (torch.Tensor, torch.nn.Parameter):
        return f"<{type(value).__qualname__} object>"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a message must not fail
        if type(value) is int:
            return f"<int of {value.bit_length()} bits>"
        return f"<{type(value).__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Note [No repr of a subclass value in a message]
# A guard's failure message (why a call missed: ``JITCORE_LOGS=recompiles``, ``explain``) once held
# ``repr`` of the value found. A tensor subclass's ``repr`` runs torch's formatting ops through the
# class's ``__torch_dispatch__``: a logging class's log got 24 entries eager never makes (``abs``,
# ``masked_select``, ``_local_scalar_dense``, ...) on the call that traced a second entry for a
# ``.grad`` that was None before. Such a value is named by its class, never formatted.


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a path: ``kind`` is ``index``, ``key``, ``attr`` or ``call`` (dereference a weakref)."""

    kind: StepKind
    value: Any

    def apply(self, obj: Any) -> Any:
        if self.kind == "attr":
            return getattr(obj, self.value)
        if self.kind == "call":
            return obj()
        return obj[self.value]

    def describe(self) -> str:
        if self.kind == "attr":
            return f".{self.value}"
        if self.kind == "call":
            return "()"
        return f"[{safe_repr(self.value)}]"

    def __eq__(self, other: object) -> bool:
        """Keys compare by identity first; an object key that is not a plain value (a Parameter
        keying an optimizer's state) only by identity (a tensor's ``==`` is elementwise)."""
        if not isinstance(other, Step) or self.kind != other.kind:
            return False
        if self.value is other.value:
            return True
        plain = (int, str, bool, float, bytes, tuple, type(None))
        same_type = type(self.value) is type(other.value)
        return same_type and type(self.value) in plain and self.value == other.value

    def __hash__(self) -> int:
        return hash((self.kind, self.value))


@dataclass(frozen=True, slots=True)
class Root:
    """Where a path starts: ``args``, ``kwargs`` or a bound object (``label`` names it for users)."""

    kind: RootKind
    label: str
    obj: Any = None

    def __hash__(self) -> int:
        return hash((self.kind, self.label, id(self.obj)))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Root)
            and (self.kind, self.label) == (other.kind, other.label)
            and self.obj is other.obj
        )


@dataclass(frozen=True, slots=True)
class Path:
    """A root and the steps from it (hashed once: guards are deduplicated by path while tracing)."""

    root: Root
    steps: tuple[Step, ...] = ()
    _hash: int = field(default=0, compare=False, repr=False)

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash((self.root, self.steps)) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def index(self, i: int) -> Path:
        return Path(self.root, self.steps + (Step("index", i),))

    def key(self, k: Any) -> Path:
        return Path(self.root, self.steps + (Step("key", k),))

    def attr(self, name: str) -> Path:
        return Path(self.root, self.steps + (Step("attr", name),))

    def call(self) -> Path:
        return Path(self.root, self.steps + (Step("call", None),))

    @property
    def parent(self) -> Path | None:
        return Path(self.root, self.steps[:-1]) if self.steps else None

    def get(self, args: tuple, kwargs: dict) -> Any:
        """The value this path reaches for a call with ``args`` and ``kwargs``."""
        value = args if self.root.kind == "args" else kwargs if self.root.kind == "kwargs" else self.root.obj
        for step in self.steps:
            value = step.apply(value)
        return value

    def same_place(self, other: Path, type_at: Callable[[Path], type | None]) -> bool:
        """Whether two paths reach one place: alike as described (``layers[0]`` by iteration and by
        subscript), or alike once ``obj.__dict__['a']`` is read as ``obj.a`` (``as_attributes``)."""
        if self.root == other.root and self.describe() == other.describe():
            return True
        mine = self.as_attributes(type_at)
        return mine is not None and mine == other.as_attributes(type_at)

    def as_attributes(self, type_at: Callable[[Path], type | None]) -> Path | None:
        """This path with each ``obj.__dict__['name']`` step pair read as ``obj.name``: the same place
        where ``obj``'s class (``type_at`` of its path, None if not known) has no data descriptor
        ``name`` (a property or slot would answer ``obj.name`` instead); None where that is not known."""
        steps: list[Step] = []
        i = 0
        while i < len(self.steps):
            step = self.steps[i]
            nxt = self.steps[i + 1] if i + 1 < len(self.steps) else None
            if step == Step("attr", "__dict__") and nxt is not None and nxt.kind == "key":
                owner = type_at(Path(self.root, tuple(steps)))
                if owner is None or type(nxt.value) is not str or _is_data_descriptor(owner, nxt.value):
                    return None
                steps.append(Step("attr", nxt.value))
                i += 2
                continue
            steps.append(step)
            i += 1
        return Path(self.root, tuple(steps))

    def describe(self) -> str:
        """How users read it: ``args[0].shape`` style (``x['a']`` for keyword arguments)."""
        return self.root.label + "".join(s.describe() for s in self.steps)

    def render_step(self, base: str, bind: Callable[[Any], str]) -> str:
        """Python source for the last step applied to the expression ``base``."""
        step = self.steps[-1]
        if step.kind == "call":
            return f"{base}()"
        if step.kind == "attr":
            name = step.value
            if (
                isinstance(name, str)
                and _IDENT.match(name)
                and not keyword.iskeyword(name)
                and name.isascii()
            ):
                return f"{base}.{name}"
            return f"getattr({base}, {bind(name)})"
        key = step.value
        if (type(key) is int and key.bit_length() <= 64) or (
            type(key) is str and len(key) < 64 and key.isascii() and key.isprintable()
        ):
            return f"{base}[{key!r}]"
        return f"{base}[{bind(key)}]"


def _is_data_descriptor(owner: type, name: str) -> bool:
    """Whether ``obj.name`` may answer something other than ``obj.__dict__['name']`` for an instance
    of ``owner``: a data descriptor of that name, or an attribute lookup of the class's own."""
    if owner.__getattribute__ is not object.__getattribute__:
        return True
    for klass in owner.__mro__:
        if name in vars(klass):
            attribute = type(vars(klass)[name])
            return hasattr(attribute, "__set__") or hasattr(attribute, "__delete__")
    return False
