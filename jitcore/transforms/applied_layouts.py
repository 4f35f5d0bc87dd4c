"""The layouts of the subclass inputs given to a grad entry's autograd Function, answered without dispatch.

torch's C ``Function.apply`` records a ``VariableInfo`` of each tensor argument (the node's
``input_info``), and reads each argument's layout again after the forward. A wrapper subclass made
with ``dispatch_layout=True`` (MaskedTensor) answers ``layout`` in its ``__torch_dispatch__``
(``prim.layout``): two of its dispatches on every cached call of an entry whose subclass input requires
grad. ``AppliedLayouts`` is a dispatch mode entered around the apply that answers ``prim.layout`` of
those arguments with the layouts they had on the entry's first run, and passes every other call on.

Invariants: the mode answers only ``prim.layout`` of the very objects the apply was given, with the
layout their class answered on the entry's first run (the prologue's tensor guard checks the layout
such a class derives from its inner tensors, so a call reaching the entry has the same answer); the
Function's forward runs with the mode popped (its ops are the computation's, not the apply's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode, _pop_mode_temporarily

__all__ = ["AppliedLayouts", "apply_with_layouts", "outside_applied_layouts"]

_LAYOUT = torch.ops.prim.layout.default


class AppliedLayouts(TorchDispatchMode):
    """Answers ``prim.layout`` of ``tensors`` with ``layouts`` (see the module doc)."""

    def __init__(self, tensors: Sequence[torch.Tensor], layouts: Sequence[torch.layout]) -> None:
        super().__init__()
        self.tensors = tensors
        self.layouts = layouts

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if func is _LAYOUT and len(args) == 1:
            for tensor, layout in zip(self.tensors, self.layouts):
                if args[0] is tensor:
                    return layout
        return func(*args, **(kwargs or {}))


def apply_with_layouts(apply: Callable[[], Any], outer: Sequence[torch.Tensor],
                       layouts: Sequence[torch.layout]) -> Any:
    """``apply()`` with ``prim.layout`` of ``outer`` answered by ``layouts``."""
    with AppliedLayouts(outer, layouts):
        return apply()


def outside_applied_layouts(run: Callable[[], Any]) -> Any:
    """``run()`` with an ``AppliedLayouts`` on top of the dispatch modes popped for its duration (the
    Function's forward, entered from inside the apply)."""
    if type(_get_current_dispatch_mode()) is AppliedLayouts:
        with _pop_mode_temporarily():
            return run()
    return run()
