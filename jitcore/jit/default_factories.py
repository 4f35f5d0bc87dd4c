"""What a defaultdict of state makes for a missing key: its ``default_factory``, bound by what it runs.

Note [A defaultdict's factory]
A defaultdict of state read by the program (``counts[key] += 1``) makes its missing items with its
``default_factory``, which C's ``__missing__`` calls natively: the prologue must guard what that call
makes. Bound as any state, a function is guarded by its identity, so a dict made anew per call with a
lambda of its own (``self.flop_counts = defaultdict(lambda: defaultdict(int))`` in an ``__init__``:
``FlopCounterMode`` entered around each call) made every call a new cache entry. A function without
closure cells or defaults runs its code on its globals alone: it is guarded by those (its type, the
identity of its code, of its globals, and that it has no cells and no defaults), not its identity.
Any other factory (``int``, ``list``, a closure, a partial) is bound as any state.

Invariant: two factories that pass these guards make equal items for every key (same code, same
globals, nothing else read).
"""

from __future__ import annotations

import types
from typing import Any

from jitcore.prologue import Path

__all__ = ["bind_default_factory"]


def bind_default_factory(provenance: Any, factory: Any, path: Path) -> None:
    """Guard ``factory`` (at ``path``, a defaultdict's ``default_factory``) by what it runs
    (Note [A defaultdict's factory]); ``provenance`` is the pass's Provenance (jit/provenance.py)."""
    if type(factory) is types.FunctionType and factory.__closure__ is None \
            and factory.__defaults__ is None and not factory.__kwdefaults__:
        provenance.guard(path, "type", types.FunctionType)
        provenance.guard(path.attr("__code__"), "identity", factory.__code__)
        provenance.guard(path.attr("__globals__"), "identity", factory.__globals__)
        provenance.guard(path.attr("__closure__"), "identity", None)
        provenance.guard(path.attr("__defaults__"), "identity", None)
        provenance.guard(path.attr("__kwdefaults__"), "identity", factory.__kwdefaults__)
        return
    provenance.bind_state(factory, path, "default_factory")
