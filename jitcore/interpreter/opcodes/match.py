"""Structural pattern matching (``match``/``case``).

Invariant: attribute lookups made by class patterns go through ``protocols.load_attr`` (properties run
interpreted) and only AttributeError means "no match", as in CPython.
"""

from __future__ import annotations

import sys

# the interpreter's builtins, not the program's (Note [Builtins snapshot] in jitcore/interpreter/__init__.py)
__builtins__ = dict(vars(__import__("builtins")))

from jitcore.interpreter.attributes import load_attr
from jitcore.interpreter.calls import call
from jitcore.interpreter.frame import Frame
from jitcore.interpreter.instructions import Instruction
from jitcore.interpreter.protocols import length
from jitcore.interpreter.registry import handles

_TPFLAGS_SEQUENCE = 1 << 5
_TPFLAGS_MAPPING = 1 << 6
_TPFLAGS_MATCH_SELF = 1 << 22
_DUMMY = object()
# Note [The word for a called pattern's non-class]: 3.11's ceval says "must be a type", 3.12 changed it
# to "must be a class".
_NOT_A_CLASS = "type" if sys.version_info < (3, 12) else "class"


@handles("MATCH_MAPPING", since=(3, 11))
def match_mapping(frame: Frame, inst: Instruction) -> None:
    """Push whether TOS is a mapping (for pattern matching)."""
    frame.stack.append(bool(type(frame.stack[-1]).__flags__ & _TPFLAGS_MAPPING))


@handles("MATCH_SEQUENCE", since=(3, 11))
def match_sequence(frame: Frame, inst: Instruction) -> None:
    """Push whether TOS is a sequence (for pattern matching)."""
    frame.stack.append(bool(type(frame.stack[-1]).__flags__ & _TPFLAGS_SEQUENCE))


@handles("GET_LEN", since=(3, 11))
def get_len(frame: Frame, inst: Instruction) -> None:
    """Push len(TOS)."""
    frame.stack.append(length(frame.run, frame.stack[-1]))


@handles("MATCH_KEYS", since=(3, 11))
def match_keys(frame: Frame, inst: Instruction) -> None:
    """Push a tuple of subject[key] for the keys tuple TOS (or None if any is missing)."""
    keys = frame.stack[-1]
    subject = frame.stack[-2]
    if not keys:
        frame.stack.append(())
        return
    get = load_attr(frame.run, subject, "get")
    seen: set = set()
    values = []
    for key in keys:
        if key in seen:
            raise ValueError(f"mapping pattern checks duplicate key ({key!r})")
        seen.add(key)
        value = call(frame.run, get, (key, _DUMMY), None)
        if value is _DUMMY:
            frame.stack.append(None)
            return
        values.append(value)
    frame.stack.append(tuple(values))


def _match_class(frame: Frame, subject: object, cls: object, count: int, names: tuple) -> tuple | None:
    from jitcore.interpreter.lookasides import isinstance_

    if not isinstance(cls, type):
        raise TypeError(f"called match pattern must be a {_NOT_A_CLASS}")
    if not isinstance_(subject, cls):
        return None
    attrs: list = []
    seen: set = set()
    positional: tuple = ()
    if count:
        match_self = False
        try:
            positional = load_attr(frame.run, cls, "__match_args__")
        except AttributeError:
            match_self = bool(cls.__flags__ & _TPFLAGS_MATCH_SELF)
            positional = ()
        if not isinstance(positional, tuple):
            raise TypeError(
                f"{cls.__name__}.__match_args__ must be a tuple (got {type(positional).__name__})"
            )
        allowed = 1 if match_self else len(positional)
        if allowed < count:
            plural = "" if allowed == 1 else "s"
            raise TypeError(
                f"{cls.__name__}() accepts {allowed} positional sub-pattern{plural} ({count} given)"
            )
        if match_self:
            attrs.append(subject)
            positional = ()
    for name in list(positional[:count]) + list(names):
        if not isinstance(name, str):
            raise TypeError(f"__match_args__ elements must be strings (got {type(name).__name__})")
        if name in seen:
            raise TypeError(f"{cls.__name__}() got multiple sub-patterns for attribute '{name}'")
        seen.add(name)
        try:
            attrs.append(load_attr(frame.run, subject, name))
        except AttributeError:
            return None
    return tuple(attrs)


@handles("MATCH_CLASS", since=(3, 11))
def match_class(frame: Frame, inst: Instruction) -> None:
    """Pop names, class and subject; push the tuple of matched attributes, or None."""
    stack = frame.stack
    names = stack.pop()
    cls = stack.pop()
    stack[-1] = _match_class(frame, stack[-1], cls, inst.arg, names)
