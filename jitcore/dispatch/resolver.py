"""Resolving a symbol call whose arguments include tensor-subclass proxies.

(Filled in by the subclass work; until then every call takes the plain path.)
"""

from __future__ import annotations

from typing import Any

from jitcore.ir import Symbol

__all__ = ["resolve_call"]


def resolve_call(symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """The outputs of ``symbol(*args, **kwargs)`` on proxies."""
    return symbol.meta(*args, **kwargs)
