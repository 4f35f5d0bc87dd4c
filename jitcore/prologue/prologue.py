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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from jitcore.ir import compile_source
from jitcore.prologue.guards import Guard, StateGuard
from jitcore.prologue.paths import Path

__all__ = ["MISS", "MissReason", "Prologue"]


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
        place = f"{self.where}: " if self.where else ""
        return f"cache entry {self.entry}: {place}{self.detail}"


@dataclass(eq=False)
class Prologue:
    """Guards and input unpacking of one cache entry.

    Attributes:
        guards: checks on values reached through paths, in recording order.
        state: checks on implicit state (grad mode, default dtype, ...).
        inputs: paths of the computation trace's inputs, in its argument order.
        input_names: the computation's parameter names for those inputs.
        header: comment lines naming what produced the prologue.
    """

    guards: list[Guard] = field(default_factory=list)
    state: list[StateGuard] = field(default_factory=list)
    inputs: list[Path] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)

    def _render(self, name: str, miss: str) -> tuple[str, dict[str, Any], list[str]]:
        """Source of the checks (without the final return), its constants, the input variables."""
        constants: dict[str, Any] = {}
        by_id: dict[int, str] = {}

        def bind(obj: Any) -> str:
            found = by_id.get(id(obj))
            if found is None:
                found = by_id[id(obj)] = f"__c{len(constants)}"
                constants[found] = obj
            return found

        variables: dict[Path, str] = {}
        lines: list[str] = []
        locals_made = [0]  # ``v0``, ``v1``, ...: one per path with steps, in reading order

        def var(path: Path) -> str:
            if path in variables:
                return variables[path]
            if not path.steps:
                root = path.root
                expr = root.kind if root.kind in ("args", "kwargs") else bind(root.obj)
            else:
                base = var(path.parent)  # type: ignore[arg-type]
                expr = f"v{locals_made[0]}"
                locals_made[0] += 1
                lines.append(f"  {expr} = {path.render_step(base, bind)}")
            variables[path] = expr
            return expr

        for guard in self.guards:
            v = var(guard.path)
            related = tuple(var(p) for p in guard.related)
            lines.append(f"  if {guard.render_failure(v, bind, related)}: return {miss}")
        for state in self.state:
            lines.append(f"  if {state.render_failure(bind)}: return {miss}")
        inputs = [var(p) for p in self.inputs]
        body = "\n".join(lines) if lines else "  pass"
        header = "".join(f"# {_escape(line)}\n" for line in self.header)
        source = (
            f"{header}import torch\n\n"
            f"def {name}(args, kwargs):\n"
            f"  try:\n{_indent(body)}\n"
            f"  except Exception:\n    return {miss}\n"
        )
        return source, constants, inputs

    def __str__(self) -> str:
        source, _, inputs = self._render("prologue", "None")
        return source + f"  return ({', '.join(inputs)}{',' if len(inputs) == 1 else ''})\n"

    def compile(self, computation: Callable[..., Any]) -> Callable[[tuple, dict], Any]:
        """The fast path: the checks, then ``computation(*inputs)``; MISS when a check fails."""
        source, constants, inputs = self._render("cached_call", "__MISS")
        source += f"  return __computation({', '.join(inputs)})\n"
        namespace = {"torch": torch, "__MISS": MISS, "__computation": computation, **constants}
        return compile_source(source, "cached_call", namespace, tag="prologue", fast_imports=("torch",))

    def explain(self, args: tuple, kwargs: dict) -> tuple[str, str] | None:
        """The first failing check for this call as (where, detail); None when all pass."""
        for guard in self.guards:
            try:
                value = guard.path.get(args, kwargs)
                related = tuple(p.get(args, kwargs) for p in guard.related)
            except Exception as exc:  # noqa: BLE001 - a missing element is a failed guard
                return guard.path.describe(), f"could not be read ({type(exc).__name__}: {exc})"
            try:
                detail = guard.failure(value, related)
            except Exception as exc:  # noqa: BLE001
                detail = f"could not be checked ({type(exc).__name__}: {exc})"
            if detail is not None:
                where = guard.path.describe()
                if detail.startswith("."):
                    attribute, _, detail = detail.partition(": ")
                    where += attribute
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
