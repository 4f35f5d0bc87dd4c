"""Shape conditions: the guards a ShapeEnv recorded about symbolic sizes, as prologue checks.

A trace with symbolic sizes (docs/user-guide.md, "Dynamic shapes") holds for every call whose input
sizes satisfy what torch assumed about the symbols while tracing: ranges (``2 <= x.shape[0]``, sizes
0 and 1 are specialized), relations (``y.shape[0] == x.shape[0]`` where shapes broadcast or
contract), strides computed from sizes, and every value the program read in Python
(``if x.shape[1] > 4``). Each is one ShapeCondition: a Python expression over the sizes, strides
and storage offsets of the tensors at its paths, written with placeholders ``{0}``, ``{1}`` for
those tensors. The guard kind ``shape`` (jitcore/prologue/guards.py) checks it.

Invariants:
- the expression is torch's own (``ShapeEnv.produce_guards``), with the tensors renamed only;
- names it calls (``math.floor``, torch's sympy helpers) are bound constants of the prologue, never
  looked up in user code's namespace;
- check, render and describe read the same expression.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from jitcore.prologue.paths import Path

__all__ = ["ShapeCondition", "shape_check", "shape_describe", "shape_render"]

_PLACEHOLDER = re.compile(r"\{(\d+)\}")
_NAME = re.compile(r"(?<![\w.}])([A-Za-z_]\w*)")
_KEYWORDS = frozenset({"and", "or", "not", "True", "False", "None", "shape", "stride", "storage_offset",
                       "if", "else", "in", "is"})


@dataclass(frozen=True, slots=True)
class ShapeCondition:
    """One condition on symbolic sizes: ``expression`` over the tensors at ``paths`` (``{i}`` is the
    tensor at ``paths[i]``)."""

    expression: str
    paths: tuple[Path, ...]


def _namespace() -> dict[str, Any]:
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

    return {**SYMPY_INTERP, "__builtins__": __builtins__}


def _names(expression: str) -> list[str]:
    """The free names the expression calls (helpers of torch's printer), in order."""
    bare = _PLACEHOLDER.sub("_", expression)
    return sorted({m for m in _NAME.findall(bare) if m not in _KEYWORDS and m != "_"})


def shape_check(_value: Any, condition: ShapeCondition, related: tuple) -> str | None:
    """None when the sizes satisfy the condition; otherwise the condition and the sizes seen."""
    names = {f"__t{i}": t for i, t in enumerate(related)}
    code = _PLACEHOLDER.sub(lambda m: f"__t{m.group(1)}", condition.expression)
    if eval(code, _namespace(), names):  # noqa: S307 - torch's guard text over the call's own tensors
        return None
    got = ", ".join(f"{p.describe()}.shape == {tuple(t.shape)}" if isinstance(t, torch.Tensor)
                    else f"{p.describe()} == {t!r}" for p, t in zip(condition.paths, related))
    return f"expected {shape_describe('', condition)}, got {got}"


def shape_render(
    _v: str, condition: ShapeCondition, bind: Callable[[Any], str], related: tuple[str, ...]
) -> str:
    """Python that is true when the condition fails, over the variables holding the tensors."""
    namespace = _namespace()
    code = _PLACEHOLDER.sub(lambda m: related[int(m.group(1))], condition.expression)
    for name in _names(condition.expression):
        if name in namespace and name != "__builtins__":
            code = re.sub(rf"(?<![\w.]){name}\b", bind(namespace[name]), code)
    return f"not ({code})"


def shape_describe(_where: str, condition: ShapeCondition) -> str:
    """The condition with the tensors' paths in place of the placeholders."""
    return _PLACEHOLDER.sub(lambda m: condition.paths[int(m.group(1))].describe(), condition.expression)
