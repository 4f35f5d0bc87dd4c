"""Proxy: the base of every named stand-in for a value while a program is traced.

Invariant: a proxy's ``name`` is handed out by the trace's NameGenerator, so it is a safe, unique
identifier in that trace. Subclasses (``jitcore.proxies``) add what a kind of value knows.
"""

from __future__ import annotations

__all__ = ["Proxy"]


class Proxy:
    """A named stand-in for a value while tracing.

    The class adds no instance layout (``__slots__ = ()``), so a proxy kind can also derive from a
    C type with a layout of its own (TensorProxy is a ``torch.Tensor``); each kind declares ``name``.
    """

    __slots__ = ()
    name: str

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def python_type(self) -> type:
        """The class the traced program sees for this value (``type(x)`` answers it)."""
        return type(self)

    def describe(self) -> str:
        """The metadata printed in trace comments ('' when there is none)."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"
