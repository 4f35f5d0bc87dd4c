"""The user's variable names in a trace: which trace value ``hidden = block(x, w1)`` assigned.

A trace names values ``t0``, ``t1``...; the user thinks in their own names. A bound symbol records
the user's stack that produced it, so the assignment statement of each frame is known: the value
a simple assignment (``NAME = ...``, ``NAME += ...``, ``a, b = ...``) gave its names is the output
of the *last* top-level op recorded from that statement's execution, which is what this module
reports (``hidden`` -> ``t2``).
Invariants: a name is bound only from the source text of a user frame; a statement that ran
several times (a loop) binds its names once per run, and the value at a point of the trace is the
last binding made before it.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass
from functools import lru_cache

from jitcore.ir import BoundSymbol, Proxy, SourceFrame

__all__ = ["Binding", "user_bindings"]


@dataclass(frozen=True, slots=True)
class Binding:
    """``name`` in the user's ``frame`` holds trace value ``proxy``, produced by top-level op ``index``."""

    name: str
    proxy: str
    index: int
    frame: SourceFrame

    def __str__(self) -> str:
        frame = self.frame
        return f"{self.name} ({frame.function}, {frame.filename}:{frame.lineno}) is {self.proxy}"


def user_bindings(bound_symbols: list[BoundSymbol] | tuple[BoundSymbol, ...]) -> list[Binding]:
    """The bindings of user names made by the top-level ``bound_symbols``, in trace order."""
    found: list[Binding] = []
    running: dict[tuple[int, SourceFrame], tuple[int, BoundSymbol]] = {}  # a statement's run: its last op
    for index, bsym in enumerate(bound_symbols):
        keys = set(enumerate(bsym.source or ()))
        for key in [k for k in running if k not in keys]:  # statements whose run ended before this op
            found += _bind(*running.pop(key), key[1])
        for key in keys:
            running[key] = (index, bsym)
    for (_depth, frame), (index, bsym) in running.items():
        found += _bind(index, bsym, frame)
    return sorted(found, key=lambda b: b.index)


def _bind(index: int, bsym: BoundSymbol, frame: SourceFrame) -> list[Binding]:
    targets = _targets(frame.filename, frame.lineno)
    if not targets:
        return []
    output = bsym.output
    if len(targets) == 1 and isinstance(targets[0], str) and isinstance(output, Proxy):
        return [Binding(targets[0], output.name, index, frame)]
    if len(targets) == 1 and isinstance(targets[0], tuple) and isinstance(output, (tuple, list)):
        names = targets[0]
        if len(names) == len(output):
            pairs = [(n, o) for n, o in zip(names, output) if n and isinstance(o, Proxy)]
            return [Binding(n, o.name, index, frame) for n, o in pairs]
    return []


@lru_cache(maxsize=4096)
def _targets(filename: str, lineno: int) -> tuple[str | tuple[str, ...], ...]:
    """The names a simple assignment statement starting at ``filename:lineno`` assigns."""
    line = linecache.getline(filename, lineno)
    if not line.strip():
        return ()
    try:
        statement = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return ()
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)) and statement.value is not None:
        target = statement.target
    else:
        return ()
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, (ast.Tuple, ast.List)):
        return (tuple(e.id if isinstance(e, ast.Name) else "" for e in target.elts),)
    return ()
