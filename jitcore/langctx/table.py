"""SymbolTable: the one table mapping callables to what runs instead of them while tracing.

Invariants:
- keys are canonical callables (``torch.add``, ``torch.Tensor.add``, ``torch.Tensor.__radd__``,
  ``torch.ops.aten.add.Tensor``); a function and its method/operator forms are registered together
  from the same entry, so they cannot drift apart;
- a value is either a Symbol or an adapter (a small function calling a Symbol with rearranged
  arguments, or raising the error an unsupported callable deserves);
- every Symbol is also reachable by its id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from jitcore.ir import Symbol

__all__ = ["SymbolTable"]


class SymbolTable:
    """Callable -> Symbol (or adapter) for one language context."""

    __slots__ = ("_by_callable", "_by_id", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._by_callable: dict[Any, Callable[..., Any]] = {}
        self._by_id: dict[str, Symbol] = {}

    def add_symbol(self, symbol: Symbol) -> Symbol:
        """Make ``symbol`` known by its id; an id registered twice must be the same symbol."""
        existing = self._by_id.setdefault(symbol.id, symbol)
        if existing is not symbol:
            raise ValueError(f"symbol id {symbol.id!r} registered twice")
        return symbol

    def bind(self, fn: Any, target: Callable[..., Any]) -> None:
        """Map the callable ``fn`` to ``target`` (a Symbol or an adapter)."""
        self._by_callable[fn] = target

    def lookup(self, fn: Any) -> Callable[..., Any] | None:
        """What runs instead of ``fn`` while tracing, or None when ``fn`` is not in the table."""
        try:
            return self._by_callable.get(fn)
        except (TypeError, ValueError):  # unhashable callables (a weakref to a memoryview) are never in it
            return None

    def symbol(self, symbol_id: str) -> Symbol:
        """The symbol with this id (KeyError when there is none)."""
        return self._by_id[symbol_id]

    def symbols(self) -> Iterator[Symbol]:
        return iter(self._by_id.values())

    def callables(self) -> Iterator[tuple[Any, Callable[..., Any]]]:
        return iter(self._by_callable.items())

    def __contains__(self, fn: Any) -> bool:
        return self.lookup(fn) is not None

    def __len__(self) -> int:
        return len(self._by_callable)
