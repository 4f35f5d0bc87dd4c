"""Trace: an ordered program of bound symbols over named inputs, with an output.

Invariants:
- ``bound_symbols`` is in execution order; each proxy is produced once, by an input or by the
  bound symbol that first returns it (in-place ops return their input's proxy again);
- every name used in the trace comes from ``names``, so names are unique and never shadow builtins
  or the trace's imports;
- ``str(trace)`` is valid Python that defines a function computing the trace (see printer.py);
- ``drop_unread`` removes only ops that its caller declares removable and whose outputs nothing after
  them reads (a later op, any of its subsymbols, or the trace's output): the trace computes the same
  output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import optree

from jitcore.ir.names import NameGenerator
from jitcore.ir.symbol import BoundSymbol

__all__ = ["Trace", "drop_unread", "value_leaves", "walk"]


@dataclass(eq=False)
class Trace:
    """A program of bound symbols.

    Attributes:
        name: the generated function's name (``computation``, ``prologue``, ``backward``).
        args: the proxies (and parameter names) the generated function takes, in order.
        bound_symbols: the recorded calls, in order.
        output: what the function returns: proxies and constants in any nesting.
        header: lines printed as comments at the top, naming what produced the trace.
        imports: module name -> module, made available to the generated code by name.
        names: the trace's name generator.
        input_notes: argument name -> where the input comes from, printed next to its metadata
            (``linear1.weight`` for module state named ``linear1_weight``).
    """

    name: str = "computation"
    args: list[Any] = field(default_factory=list)
    bound_symbols: list[BoundSymbol] = field(default_factory=list)
    output: Any = None
    header: list[str] = field(default_factory=list)
    imports: dict[str, ModuleType] = field(default_factory=dict)
    names: NameGenerator = field(default_factory=NameGenerator)
    input_notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # An input named like an imported module would shadow it inside the generated function.
        self.names.reserve(name.split(".")[0] for name in self.imports)

    def __str__(self) -> str:
        from jitcore.ir.printer import print_trace

        return print_trace(self).source

    def python_source(self, **options: Any) -> str:
        """The trace as Python source; options as for ``jitcore.ir.printer.print_trace``."""
        from jitcore.ir.printer import print_trace

        return print_trace(self, **options).source


def walk(bound_symbols: list[BoundSymbol] | tuple[BoundSymbol, ...]) -> Iterator[tuple[int, BoundSymbol]]:
    """Yield (depth, bound symbol) for every bound symbol and, depth-first, its subsymbols."""
    stack = [(0, b) for b in reversed(bound_symbols)]
    while stack:
        depth, bsym = stack.pop()
        yield depth, bsym
        stack.extend((depth + 1, s) for s in reversed(bsym.subsymbols))


def drop_unread(trace: Trace, removable: Callable[[BoundSymbol], bool]) -> None:
    """Remove, in place, each bound symbol of ``trace`` that ``removable`` accepts and whose outputs
    nothing after it reads: no later bound symbol (nor any of its subsymbols) and not the trace's
    output. Removing one can leave the ops before it unread, so the walk goes backwards.

    Args:
        trace: the trace to rewrite (its args and output are unchanged).
        removable: whether a bound symbol may go when unread: the caller's promise that it has no
            effect besides its outputs and cannot raise where it ran once (arithmetic on numbers,
            a view of a tensor). Values are matched by identity.
    """
    read = {id(v) for v in value_leaves(trace.output)}
    kept: list[BoundSymbol] = []
    for bsym in reversed(trace.bound_symbols):
        if removable(bsym) and not any(id(v) in read for v in value_leaves(bsym.output)):
            continue
        kept.append(bsym)
        for _depth, b in walk((bsym,)):
            read.update(id(v) for v in value_leaves((b.args, b.kwargs)))
    kept.reverse()
    trace.bound_symbols[:] = kept


def value_leaves(tree: Any) -> list[Any]:
    """The leaves of ``tree``, with a slice's bounds among them (``x[:, a:n + 1]``)."""
    leaves = []
    for leaf in optree.tree_leaves(tree, none_is_leaf=True):
        if type(leaf) is slice:
            leaves.extend((leaf.start, leaf.stop, leaf.step))
        else:
            leaves.append(leaf)
    return leaves
