"""Proxies: TensorProxy (and SubclassTensorProxy in ``subclass``) for tensors, NumberProxy for dynamic
numbers."""

from jitcore.proxies.number import NumberProxy
from jitcore.proxies.tensor import DTYPE_ABBREVIATIONS, TensorProxy, describe_tensor

__all__ = ["DTYPE_ABBREVIATIONS", "NumberProxy", "TensorProxy", "describe_tensor"]
