"""What the grad transform's computation does with the call's own inputs besides differentiating them:
the ``requires_grad_`` flags the program sets on them, and which of them it returns or stores as they
are (both fields of ``GradTraces``, used by ``GradComputation`` in autograd.py).

Invariant: positions are those of pass 1's arguments (``("arg", i)``) and of its subclass inputs
(``("subclass", i)``), numbered as ``GradTraces.grad_inputs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from jitcore.ir import Trace
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["input_flags", "returned_inputs"]


InputPosition = tuple[int, str, int]  # (position among the output's leaves, "arg" or "subclass", index)


def returned_inputs(trace: Trace, leaves: list[Any],
                    subclass_inputs: Sequence[tuple[SubclassTensorProxy, bool]]) -> tuple[InputPosition, ...]:
    """``(position among the output's leaves, kind, index)`` of each output leaf that is an input of
    pass 1, returned or stored as it is (GradTraces.returned_inputs; Note [Inputs returned as they
    are under autograd] in autograd.py)."""
    args = {id(a): i for i, a in enumerate(trace.args) if isinstance(a, TensorProxy)}
    subclasses = {id(proxy): i for i, (proxy, _requires_grad) in enumerate(subclass_inputs)}
    found = []
    for position, value in enumerate(leaves):
        if id(value) in args:
            found.append((position, "arg", args[id(value)]))
        elif id(value) in subclasses:
            found.append((position, "subclass", subclasses[id(value)]))
    return tuple(found)


def input_flags(trace: Trace) -> tuple[tuple[int, bool], ...]:
    """GradTraces.input_flags: the last ``requires_grad_`` of each input of ``trace``."""
    position = {id(a): i for i, a in enumerate(trace.args) if isinstance(a, TensorProxy)}
    flags: dict[int, bool] = {}
    for bsym in trace.bound_symbols:
        if bsym.symbol.fn is torch.Tensor.requires_grad_ and id(bsym.args[0]) in position:
            flag = bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("requires_grad", True)
            flags[position[id(bsym.args[0])]] = bool(flag)
    return tuple(flags.items())
