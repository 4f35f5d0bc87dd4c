"""Numbers of the program's state that only count, under the grad transform: computed on every call.

The grad transform replays pass 1 on values (jitcore/transforms/grad.py), so a cache entry's dynamic
numbers are made constants first (``TracedProgram.specialized``), each guarded by value. A counter the
program keeps in its state (``cls.calls += 1``, ``TOTAL[0] += 1``, ``COUNTS[op] = COUNTS.get(op, 0) + 1``
in a tensor subclass's ``__torch_dispatch__``) is such a number, read and written back (jit/effects.py):
guarded by value, it made a new entry on every call, where without grad it is replayed as arithmetic.
A number input whose value flows into arithmetic on numbers only (no tensor op, no control flow the
program specialized, no C call) needs no value in the forward or backward: here it stays an input of
the entry, unguarded, and each output it reaches (the value written back) is computed from the call's
inputs with the recorded arithmetic (``formula``), after the forward.

Invariants:
- a number is kept only if every record that uses it, at any depth of subclass resolution, is
  arithmetic on numbers: the forward and backward never depend on its value;
- an output computed here has a complete formula over its roots, all number inputs; a root that is
  not kept is a constant of the entry (its value is guarded), so the formula gets that value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optree

from jitcore.ir import BoundSymbol, Trace, tree_has, value_leaves
from jitcore.prologue import Path
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy, formula

__all__ = ["StateNumbers", "counting_numbers", "state_numbers"]


@dataclass(frozen=True, slots=True)
class StateNumbers:
    """The kept numbers of one grad entry: where the computation's inputs hold them, and the output
    leaves computed from them.

    Attributes:
        positions: the kept numbers' positions among the computation's inputs (the prologue passes
            them; the forward does not take them).
        outputs: ``(position among the output's leaves, compute)``; ``compute`` takes the kept
            numbers' values, in ``positions`` order.
    """

    positions: tuple[int, ...]
    outputs: tuple[tuple[int, Callable[[Sequence[Any]], Any]], ...]

    def split(self, inputs: Sequence[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """The kept numbers' values, and the other inputs (what the forward takes)."""
        kept = set(self.positions)
        return [inputs[i] for i in self.positions], tuple(v for i, v in enumerate(inputs) if i not in kept)

    def fill(self, leaves: list[Any], values: Sequence[Any]) -> None:
        """Write each computed output into the output's ``leaves`` (this call's values)."""
        for position, compute in self.outputs:
            leaves[position] = compute(values)


def counting_numbers(trace: Trace, inputs: Sequence[tuple[Path, NumberProxy]],
                     pinned: set[Path]) -> list[tuple[Path, NumberProxy]]:
    """The number inputs of ``trace`` that flow into arithmetic on numbers only, and whose every
    output that depends on them has a formula (the module docstring); ``pinned``: paths already
    guarded by value (the program specialized them)."""
    candidates = {id(proxy) for path, proxy in inputs if path not in pinned}
    if not candidates:
        return []
    excluded: set[int] = set()
    pending = list(trace.bound_symbols)
    while pending:
        bsym = pending.pop()
        pending.extend(bsym.subsymbols)
        used = _roots_of(value_leaves((bsym.args, bsym.kwargs))) & candidates
        if used and not _arithmetic(bsym):
            excluded |= used
    number_inputs = {id(proxy) for _path, proxy in inputs}
    for leaf in optree.tree_leaves(trace.output, none_is_leaf=True):
        # a root that is no number input (a number read from a tensor) has no value for the entry
        if isinstance(leaf, NumberProxy) and (
                not _has_formula(leaf) or not _roots_of([leaf]) <= number_inputs):
            excluded |= _roots_of([leaf])
    return [(path, proxy) for path, proxy in inputs if id(proxy) in candidates - excluded]


def state_numbers(trace: Trace, kept: Sequence[tuple[Path, NumberProxy]],
                  positions: Sequence[int]) -> StateNumbers | None:
    """The ``StateNumbers`` of ``kept`` (each at ``positions`` among the computation's inputs), or None
    when no output depends on them."""
    index = {id(proxy): i for i, (_path, proxy) in enumerate(kept)}
    outputs = []
    for position, leaf in enumerate(optree.tree_leaves(trace.output, none_is_leaf=True)):
        if isinstance(leaf, NumberProxy) and any(id(r) in index for r in leaf.roots):
            outputs.append((position, _computed(leaf, index)))
    return StateNumbers(tuple(positions), tuple(outputs)) if outputs else None


def _computed(number: NumberProxy, index: dict[int, int]) -> Callable[[Sequence[Any]], Any]:
    compute, _text = formula(number)
    sources = [(index.get(id(root)), root.value) for root in number.roots]

    def run(values: Sequence[Any]) -> Any:
        return compute(*(value if i is None else values[i] for i, value in sources))

    return run


def _roots_of(leaves: Sequence[Any]) -> set[int]:
    return {id(root) for leaf in leaves if isinstance(leaf, NumberProxy) for root in leaf.roots}


def _arithmetic(bsym: BoundSymbol) -> bool:
    """A record that makes numbers from numbers (``operator.add(n, 1)``), with a formula for each."""
    outputs = optree.tree_leaves(bsym.output, none_is_leaf=True)
    return bool(outputs) and all(isinstance(o, NumberProxy) and _has_formula(o) for o in outputs) \
        and not tree_has((bsym.args, bsym.kwargs), TensorProxy)


def _has_formula(number: NumberProxy) -> bool:
    """Whether ``number`` is computed from its roots by recorded operations only."""
    roots = {id(r) for r in number.roots}
    pending, seen = [number], set()
    while pending:
        node = pending.pop()
        if id(node) in seen or id(node) in roots:
            continue
        seen.add(id(node))
        if node.made_by is None:
            return False
        pending.extend(o for o in node.made_by[1] if isinstance(o, NumberProxy))
    return True
