"""Unique, safe names for the values of a trace.

Invariant: every name a NameGenerator hands out is a valid Python identifier (ASCII only, so NFKC
normalisation cannot merge two names), is not a keyword, does not shadow a builtin or a name the
generated code imports (``torch``), and is handed out at most once per generator.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata
from collections.abc import Iterable

__all__ = ["NameGenerator", "RESERVED_NAMES"]

# Names the generated source relies on: the imported module, the constants table and the builtins.
RESERVED_NAMES: frozenset[str] = frozenset(
    set(dir(builtins)) | set(keyword.kwlist) | set(keyword.softkwlist) | {"torch", "_C", "__constants__"}
)

_NOT_IDENT = re.compile(r"[^0-9A-Za-z_]")


class NameGenerator:
    """Hands out unique identifiers: sanitised user names (``x``, ``weight``) and fresh ones (``t0``)."""

    __slots__ = ("_taken", "_counters")

    def __init__(self) -> None:
        self._taken: set[str] = set()
        self._counters: dict[str, int] = {}

    def fresh(self, prefix: str = "t") -> str:
        """A new name ``{prefix}{n}`` not handed out before."""
        n = self._counters.get(prefix, 0)
        while True:
            name = f"{prefix}{n}"
            n += 1
            if name not in self._taken and name not in RESERVED_NAMES:
                self._counters[prefix] = n
                self._taken.add(name)
                return name

    def claim(self, hint: str) -> str:
        """A name as close to ``hint`` as allowed: sanitised to ASCII, suffixed when taken or reserved."""
        # NFKC first, as Python does to identifiers: "ﬁeld" reads as "field", "x²" as "x2".
        base = _NOT_IDENT.sub("_", unicodedata.normalize("NFKC", hint)) or "v"
        if base[0].isdigit():
            base = "_" + base
        if base not in self._taken and base not in RESERVED_NAMES and not base.startswith("__"):
            self._taken.add(base)
            return base
        stem = base.strip("_")
        # The stem may start with a digit once the underscores are gone ("__0", "_1abc" taken).
        return self.fresh("v" if not stem else f"v{stem}_" if stem[0].isdigit() else f"{stem}_")

    def reserve(self, names: Iterable[str]) -> None:
        """Never hand out ``names`` (e.g. the modules a trace imports besides ``torch``)."""
        self._taken.update(names)

    def __contains__(self, name: str) -> bool:
        return name in self._taken
