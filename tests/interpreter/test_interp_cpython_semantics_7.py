"""Semantics found different by the differential probes of issue 14 (2026-12-06, cpy49), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_a_called_pattern_that_is_not_a_class_says_so_in_the_versions_words() -> None:
    """``case P():`` with ``P`` not a class raises TypeError "called match pattern must be a type" on 3.11
    and "... must be a class" on 3.12+ (Note [The word for a called pattern's non-class]); interpreted, 3.11
    said "class"."""

    def f() -> list[str]:
        out = []
        for pattern in (3, "s", len, int):
            try:
                match 1:
                    case pattern():
                        out.append("matched")
            except TypeError as e:
                out.append(str(e))
        return out

    word = "type" if sys.version_info < (3, 12) else "class"
    assert check(f) == [f"called match pattern must be a {word}"] * 3 + ["matched"]
