"""The default device, as a prologue's check of implicit state reads it (Note [Reading the default
device]).

Invariant: ``default_device()`` returns what ``torch.get_default_device()`` returns, in every state of
the calling thread; it only skips that call where torch's own code can answer nothing but ``cpu``.
"""

from __future__ import annotations

import torch

__all__ = ["default_device"]

_CPU = torch.device("cpu")
_stack_length = torch._C._len_torch_function_stack  # noqa: SLF001

# Note [Reading the default device]
# A trace that makes tensors without tensor inputs (``torch.arange``, ``torch.zeros``) depends on the
# default device, so its prologue checks it on every call. ``torch.get_default_device()``
# (torch/__init__.py) imports two modules and filters the torch-function mode stack each time: about
# 6 us, more than the rest of a small function's prologue, and a tenth of a tiny HF Llama's 321
# checks. Its answer is, in order: the device of the innermost ``DeviceContext`` on the
# torch-function mode stack (``with torch.device(d):``; ``torch.set_default_device(d)`` enters one
# too), else the device of the thread's global context (``torch._GLOBAL_DEVICE_CONTEXT
# .device_context``, which ``set_default_device`` sets), else ``torch.device("cpu")``. With the mode
# stack empty and no global context, neither of the first two can answer: the answer is ``cpu``,
# read here from the two states in about 0.1 us. In every other state (any mode on the stack, a
# global context, even one a caller popped off the stack) torch's function is called, as before.


def default_device() -> torch.device:
    """``torch.get_default_device()``, without calling it where its answer can only be ``cpu``."""
    if _stack_length() == 0 and getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None:  # noqa: SLF001
        return _CPU
    return torch.get_default_device()
