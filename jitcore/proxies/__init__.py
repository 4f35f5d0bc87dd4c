"""Proxies for torch values: TensorProxy (and, later, subclass and number proxies)."""

from jitcore.proxies.tensor import DTYPE_ABBREVIATIONS, TensorProxy, describe_tensor

__all__ = ["DTYPE_ABBREVIATIONS", "TensorProxy", "describe_tensor"]
