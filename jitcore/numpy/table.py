"""The table from NumPy's callables to ``torch._numpy``'s, built once from the two namespaces.

Each public callable of ``numpy``, ``numpy.linalg`` and ``numpy.fft`` is paired with the
``torch._numpy`` callable of the same name (or of the name NumPy 2 gave it an alias for), or with
None where torch's NumPy layer has no counterpart. ``numpy.random`` (and the methods of
``np.random.Generator``) are paired with None throughout: their values come from NumPy's own
generators, which no torch operation reproduces.

Invariant: the table only names callables; what runs for each (interpreted ``torch._numpy`` code,
a native call on constants, or an error) is decided by ``jitcore.numpy.bridge``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["ARRAY_RETURNING", "NumpyCallable", "numpy_callables"]

# NumPy 2 names torch._numpy knows under their older spelling.
_ALIASES: dict[str, str] = {
    "acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
    "atanh": "arctanh", "atan2": "arctan2", "pow": "power", "concat": "concatenate",
    "bitwise_invert": "invert", "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
    "permute_dims": "transpose", "asanyarray": "asarray",
}

# Functions that return a 0-d *array* (not a NumPy scalar) for a 0-d result; used only when asking
# NumPy itself (on placeholder arrays) fails. See Note [NumPy scalars] in bridge.py.
ARRAY_RETURNING: frozenset[str] = frozenset({
    "array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "copy", "empty", "zeros",
    "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "reshape", "squeeze",
    "transpose", "broadcast_to", "where", "moveaxis", "swapaxes", "view", "astype", "fill",
})


@dataclass(frozen=True, slots=True)
class NumpyCallable:
    """A NumPy callable, the name users read (``np.linalg.norm``), and its torch._numpy counterpart."""

    numpy_fn: Any
    name: str
    short_name: str
    torch_fn: Any


def _namespaces() -> list[tuple[Any, ModuleType | None, str]]:
    import torch._numpy as tnp

    return [
        (np, tnp, "np"), (np.linalg, tnp.linalg, "np.linalg"), (np.fft, tnp.fft, "np.fft"),
        (np.random, None, "np.random"), (np.random.Generator, None, "np.random.Generator"),
    ]


@functools.cache
def numpy_callables() -> tuple[NumpyCallable, ...]:
    """Every public NumPy callable the bridge intercepts (classes other than scalar types excluded)."""
    entries: dict[int, NumpyCallable] = {}
    for module, torch_module, prefix in _namespaces():
        for attr, fn in sorted(vars(module).items()):  # vars, not dir: no lazy submodule imports
            if attr.startswith("_"):
                continue
            if isinstance(module, type):
                fn = getattr(module, attr)  # a method descriptor, as calls are keyed
            if not callable(fn) or isinstance(fn, ModuleType):
                continue
            if isinstance(fn, type) and not issubclass(fn, np.generic):
                continue  # np.ndarray, np.dtype, np.errstate, np.finfo ...: NumPy's own, used natively
            counterpart = None
            if torch_module is not None:
                counterpart = getattr(torch_module, _ALIASES.get(attr, attr), None)
                if isinstance(fn, type) and not isinstance(counterpart, type):
                    counterpart = None
            if id(fn) not in entries or (entries[id(fn)].torch_fn is None and counterpart is not None):
                entries[id(fn)] = NumpyCallable(fn, f"{prefix}.{attr}", _ALIASES.get(attr, attr), counterpart)
    return tuple(entries.values())
