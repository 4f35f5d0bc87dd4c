"""The boundaries of a NumPy program: NumPy arrays entering as tensors, ndarray wrappers leaving as arrays.

Inside a trace a NumPy array is a ``torch._numpy.ndarray`` wrapping a TensorProxy; the wrapper never
reaches the computation trace. At the entry, the prologue reads each NumPy array input through
``array_to_tensor`` (zero-copy ``torch.from_numpy``) and guards the tensor like any other; at the
exit, the ``Epilogue`` turns the computation's tensors back into what NumPy would have returned
(an ``numpy.ndarray``, or a NumPy scalar where NumPy returns one).

Invariants:
- the computation trace takes and returns tensors only;
- an input array and the tensor the computation reads share memory (in-place NumPy operations on
  inputs reach the caller's array), except for arrays with negative strides, which are copied;
- ``Epilogue`` gives values of NumPy's own types and dtypes (``np.float64``, not Python ``float``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optree
import torch
import torch._numpy as tnp

from jitcore.numpy.errors import UnsupportedNumPyError
from jitcore.prologue.paths import Path, Step

__all__ = ["SUPPORTED_DTYPES", "Epilogue", "array_to_tensor", "check_array", "tensor_path", "wrap"]

# The dtypes torch.from_numpy accepts.
SUPPORTED_DTYPES = frozenset(
    np.dtype(name) for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)


def array_to_tensor(array: np.ndarray) -> torch.Tensor:
    """The tensor a NumPy array input is read as: shares its memory (a copy if a stride is negative)."""
    if any(s < 0 for s in array.strides):
        array = array.copy()
    if not array.flags.writeable:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "the given NumPy array is not writable"
            return torch.from_numpy(array)
    return torch.from_numpy(array)


def check_array(array: np.ndarray, where: str) -> None:
    """Raise UnsupportedNumPyError when ``array`` cannot be read as a tensor."""
    if type(array) is not np.ndarray:
        raise UnsupportedNumPyError(
            f"{where} is a {type(array).__qualname__}; jitcore accepts plain numpy.ndarray arrays",
            hints=("pass np.asarray(value) instead",),
        )
    if array.dtype not in SUPPORTED_DTYPES:
        raise UnsupportedNumPyError(
            f"{where} is a NumPy array of dtype {array.dtype}; jitcore traces arrays of bool, integer, "
            "float and complex dtypes (those torch.from_numpy accepts)",
            hints=("convert the array outside the jitted function (e.g. array.astype(np.float64))",),
        )
    if not array.dtype.isnative:
        raise UnsupportedNumPyError(
            f"{where} is a NumPy array of non-native byte order ({array.dtype.str})",
            hints=("pass array.astype(array.dtype.newbyteorder('='))",),
        )


@dataclass(frozen=True, slots=True)
class _AsTensor(Step):
    """The step from a NumPy array to the tensor the computation reads."""

    def apply(self, obj: Any) -> Any:
        return array_to_tensor(obj)

    def describe(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class _TensorOfArray(Path):
    """A path ending in ``_AsTensor``: renders as ``array_to_tensor(<array>)``."""

    def render_step(self, base: str, bind: Callable[[Any], str]) -> str:
        return f"{bind(array_to_tensor)}({base})"


def tensor_path(array_path: Path) -> Path:
    """The path of the tensor read from the NumPy array at ``array_path``."""
    return _TensorOfArray(array_path.root, array_path.steps + (_AsTensor("as_tensor", None),))


def wrap(tensor: torch.Tensor) -> Any:
    """The ``torch._numpy.ndarray`` the traced program sees for ``tensor``."""
    wrapper = tnp.ndarray.__new__(tnp.ndarray)
    wrapper.tensor = tensor  # not through __init__: natively, a proxy is no torch.Tensor instance
    return wrapper


def _to_ndarray(tensor: torch.Tensor) -> np.ndarray:
    return tensor.numpy()


def _to_scalar(tensor: torch.Tensor) -> Any:
    return tensor.numpy()[()]


@dataclass(frozen=True, slots=True)
class Epilogue:
    """Turns the computation's output (tensors where the program returned arrays) into NumPy values.

    Attributes:
        spec: the output's tree structure.
        converters: (leaf index, converter) for each leaf that the program returned as an array.
    """

    spec: Any
    converters: tuple[tuple[int, Callable[[torch.Tensor], Any]], ...]

    @staticmethod
    def split(
        output: Any, is_array: Callable[[Any], bool], is_scalar: Callable[[Any], bool]
    ) -> tuple[Any, Epilogue | None]:
        """The output with each array wrapper replaced by its tensor, and the epilogue (None: no arrays)."""
        leaves, spec = optree.tree_flatten(output, none_is_leaf=True)
        converters = []
        for i, leaf in enumerate(leaves):
            if is_array(leaf):
                converters.append((i, _to_scalar if is_scalar(leaf) else _to_ndarray))
                leaves[i] = leaf.tensor
        if not converters:
            return output, None
        return optree.tree_unflatten(spec, leaves), Epilogue(spec, tuple(converters))

    def wrap(self, computation: Callable[..., Any]) -> Callable[..., Any]:
        """``computation`` followed by the conversion of its array outputs."""
        spec, converters = self.spec, self.converters

        def computation_with_epilogue(*inputs: Any) -> Any:
            leaves = optree.tree_leaves(computation(*inputs), none_is_leaf=True)
            for i, convert in converters:
                leaves[i] = convert(leaves[i])
            return optree.tree_unflatten(spec, leaves)

        computation_with_epilogue.__wrapped__ = computation  # type: ignore[attr-defined]
        return computation_with_epilogue
