"""Dynamic numbers given where torch needs a size: backed symbols of a pass with symbolic sizes.

Note [Dynamic numbers as sizes]
A dynamic number (an int argument seen with two values, a counter of state the program reads and
writes back: jitcore/jit/numbers.py) stays a name of the computation where torch takes it as a value
(jitcore/langctx/scalars.py). Where torch needs it as a size, a dimension or an index
(``x.view(n, -1)``, ``torch.arange(n)``, ``x.narrow(0, start, n)``, a sliding-window cache's offset) it
was specialized: one entry per value. In a pass with symbolic sizes it is a symbol of the pass's
ShapeEnv there instead, as torch.compile makes an int that changes between calls: each dynamic-number
input it is computed from gets a backed symbol (``s3``, with the input's value as its hint, neither
0 nor 1 specialized, no sign assumed), the number is its formula over those symbols (``n - 3`` is
``s3 - 3``), and torch computes sizes from it and guards what it assumed. ``finish`` (jit/shapes.py)
names each symbol by its number input (an input of the computation already) and turns the ShapeEnv's
guards over it into prologue checks of the number (``{0} % 2 == 0``, ``{0} >= 4``).

Invariants: only int numbers computed from int dynamic-number inputs by recorded arithmetic become
symbols (a float, a bool, a number read from a tensor, or one computed by a function that does not give
a SymInt is specialized as before); one symbol per input per pass; a symbol exists only in a pass with a
ShapeEnv, whose ``finish`` runs.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
from torch._dynamo.source import LocalSource
from torch.fx.experimental.symbolic_shapes import DimDynamic

from jitcore.prologue import Path
from jitcore.proxies.number import NumberProxy, formula

__all__ = ["NumberSizes"]


class NumberSizes:
    """The symbols one pass made of its dynamic numbers (Note [Dynamic numbers as sizes])."""

    def __init__(self, provenance: Any, values: Any) -> None:
        self.provenance = provenance
        self.values = values
        self.symbols: dict[sympy.Symbol, tuple[Path, NumberProxy, torch.SymInt]] = {}  # with path, input
        self._made: dict[int, torch.SymInt] = {}  # id(input) -> its SymInt

    def as_size(self, number: NumberProxy) -> torch.SymInt | None:
        """``number`` as a SymInt over its inputs' symbols; None where it is specialized instead."""
        env = self.values.shape_env
        if env is None or type(number.value) is not int:
            return None
        paths = {id(proxy): path for path, proxy in self.provenance.number_inputs}
        if any(id(root) not in paths or type(root.value) is not int or root.specialized
               for root in number.roots):
            return None
        symbols = [self._symbol(root, paths[id(root)]) for root in number.roots]
        compute, _text = formula(number)
        try:
            size = compute(*symbols)
        except Exception:  # noqa: BLE001 - an operation without a symbolic form: specialized instead
            return None
        return size if type(size) is torch.SymInt else None

    def _symbol(self, root: NumberProxy, path: Path) -> torch.SymInt:
        made = self._made.get(id(root))
        if made is None:
            env = self.values.shape_env
            made = env.create_unspecified_symint_and_symbol(root.value, LocalSource(root.name),
                                                            DimDynamic.DYNAMIC)
            self._made[id(root)] = made
            self.symbols[made.node.expr] = (path, root, made)
        return made
