"""The prologue: straight-line code that validates a call against a cache entry and unpacks it.

A Prologue is built from the guards recorded while tracing and the paths of the computation's
inputs. It renders to two functions from the same statements:
- ``prologue(args, kwargs)``: the printable trace a user reads; returns the computation's inputs,
  or None when a guard fails;
- ``cached_call(args, kwargs)``: the fast path the jit runs; the same checks, then a direct call of
  the compiled computation; returns the MISS sentinel when a guard fails.
Invariants: every path is read once into a local; checks run in recording order (parents before
children); a check that raises (a missing key, a too-short tuple) counts as a failed guard; user
text reaches the source only as bound constants (see paths.py and guards.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from jitcore.ir import compile_source
from jitcore.prologue.guards import Guard, StateGuard
from jitcore.prologue.paths import Path

__all__ = ["Prologue", "MISS", "MissReason"]


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS: Any = _Miss()


@dataclass(frozen=True, slots=True)
class MissReason:
    """Why a call did not match a cache entry: the failing check, expected vs got."""

    entry: int
    where: str
    detail: str

    def __str__(self) -> str:
        source, _, inputs = self._render("prologue", "None")
        return source + f"  return ({', '.join(inputs)}{',' if len(inputs) == 1 else ''})\n"

    def compile(self, computation: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
        """The fast path: checks, then ``computation(*inputs)``; MISS when a check fails."""
        source, constants, inputs = self._render("cached_call", "__MISS")
        source += f"  return __computation({', '.join(inputs)})\n"
        namespace = {"torch": torch, "__MISS": MISS, "__computation": computation, **constants}
        return compile_source(source, "cached_call", namespace, tag="prologue")

    # --- explaining a miss -------------------------------------------------------------------------
    def explain(self, args: tuple, kwargs: dict) -> tuple[str, str] | None:
        """The first failing check for this call as (path, detail); None when all pass."""
        for guard in self.guards:
            try:
                value = guard.path.get(args, kwargs)
            except Exception as exc:  # noqa: BLE001 - a missing element is a failed guard
                return guard.path.describe(), f"could not be read ({type(exc).__name__}: {exc})"
            try:
                detail = guard.failure(value)
            except Exception as exc:  # noqa: BLE001
                detail = f"could not be checked ({type(exc).__name__}: {exc})"
            if detail is not None:
                where = guard.path.describe()
                if detail.startswith("."):
                    where, detail = where + detail.split(":", 1)[0], detail.split(":", 1)[1].strip()
                return where, detail
        for state in self.state:
            detail = state.failure()
            if detail is not None:
                return "", detail
        return None


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _escape(text: str) -> str:
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
