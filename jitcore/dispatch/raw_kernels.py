"""C functions that launch kernels on their tensor arguments' memory outside torch's dispatcher.

Most of torch reaches a tensor's data through the dispatcher, where a traced value records the aten
op it is handed (docs/architecture.md, "Traced tensors are torch.Tensor instances"). A few C
functions read the data pointers themselves: a CUDA jiterator kernel
(``torch.cuda.jiterator._create_jit_fn``) is compiled from a string and launched by
``torch._C._cuda_jiterator_compile_and_launch_kernel`` with no aten op to record. Handed a traced
value, such a function would launch its kernel on memory the value does not own (on CUDA an illegal
memory access, which ends the process's CUDA context), and the trace would hold nothing of it. So
reaching one runs the program eagerly, with jitcore's warning (EagerOnlyValue, JC-J002).

Invariant: every function listed here raises before any argument's memory is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from jitcore.errors import EagerOnlyValue

__all__ = ["raw_kernel_lookasides"]

_RAW_KERNEL_LAUNCHERS: dict[str, str] = {  # the torch._C name -> what the user called
    "_cuda_jiterator_compile_and_launch_kernel": "a CUDA jiterator kernel (torch.cuda.jiterator)",
}


def raw_kernel_lookasides() -> dict[Any, Callable[..., Any]]:
    """A lookaside refusing each launcher this torch build has (CPU builds have none of them)."""
    found = {}
    for name, what in _RAW_KERNEL_LAUNCHERS.items():
        launcher = getattr(torch._C, name, None)  # noqa: SLF001
        if launcher is not None:
            found[launcher] = _refusal(what)
    return found


def _refusal(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise EagerOnlyValue(
            f"{what} launches its kernel on its tensors' memory outside torch's dispatcher: there is no "
            "op to record, so the function runs eagerly")
    return refuse
