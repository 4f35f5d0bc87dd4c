"""jitcore's NumPy bridge: NumPy programs on tensors and arrays, traced through torch's NumPy layer.

NumPy calls inside a jitted function run as ``torch._numpy`` code on jitcore's interpreter, so the
computation trace records torch operations on tensors only; NumPy arrays are converted to tensors
in the prologue and back to NumPy values in the epilogue. See docs/numpy.md.

Invariants:
- importing this package does not import NumPy; ``is_numpy_value`` answers without it, and the
  modules that need NumPy (``bridge``, ``boundary``, ``table``) are imported only once a traced
  program has NumPy in reach;
- no ``torch._numpy.ndarray`` wrapper ever appears in a computation trace.
"""

from __future__ import annotations

import sys
from typing import Any

from jitcore.numpy.errors import UnsupportedNumPyError

__all__ = ["UnsupportedNumPyError", "is_numpy_value", "new_bridge"]


def is_numpy_value(value: Any) -> bool:
    """Whether ``value`` is a NumPy array or NumPy scalar (without importing NumPy)."""
    np = sys.modules.get("numpy")
    return np is not None and issubclass(type(value), (np.ndarray, np.generic))


def new_bridge(provenance: Any) -> Any:
    """The NumPy bridge for one tracing pass, or None when NumPy has not been imported."""
    if "numpy" not in sys.modules:
        return None
    from jitcore.numpy.bridge import NumpyBridge

    return NumpyBridge(provenance)
