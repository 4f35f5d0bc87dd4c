"""The copies of a call's outputs that autograd saves while a shadow computation builds its graph.

A call evaluated on shadows (shadows.py) runs torch natively under the trace's fake mode. Where
autograd runs there too (a subclass's ``__torch_dispatch__`` computing on inner tensors that require
grad inside ``enable_reentrant_dispatch()``), a node that saves its output keeps a ``detach`` of it
made below autograd, under the fake mode: a shadow no record names. ``SavedOutputs`` sees those
``detach`` calls, and ``adopt_saved`` makes each copy known as its output's proxy (Note [The saved
output of a graph built below a dispatch]).

Invariants:
- only a ``detach`` of one of the call's own outputs, itself not an output, is made known, and as
  that output's proxy (``TensorValues.alias``: the call's outputs and their names are unchanged);
- the mode is entered only where autograd runs natively on the shadows: grad mode on, the autograd
  keys not excluded on the thread, a shadow requiring grad.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["SavedOutputs", "adopt_saved", "builds_graph"]

_DETACH = torch.ops.aten.detach.default
_AUTOGRAD = torch._C.DispatchKey.AutogradFunctionality  # noqa: SLF001


# Note [The saved output of a graph built below a dispatch]
# A subclass's ``__torch_dispatch__`` that runs ``func`` on its inner tensors inside
# ``enable_reentrant_dispatch()`` builds autograd's graph on them, below the dispatch; the inner
# tensors' shadows are evaluated natively under the fake mode, autograd included. ``softmax``, ``exp``
# or ``tanh`` save their output for the backward as ``SavedVariable`` does, a ``detach`` of it, and
# that ``detach`` ran under the fake mode, unrecorded. The grad transform's backward unpacked the copy
# as a shadow no op of the forward made, and the pair was refused (Note [A saved value the forward
# does not make], transforms/saving.py): the call ran eagerly. The copy has its output's values (a
# ``detach`` without grad), and autograd raises where the output changed after it was saved, so it is
# known as the output's proxy: the backward reads (and detaches) the forward's output, as it does for
# a graph built above the dispatch.
class SavedOutputs(TorchDispatchMode):
    """Above the fake mode, below autograd: notes each ``detach`` (its input and result shadows)."""

    def __init__(self) -> None:
        super().__init__()
        self.detached: list[tuple[Any, Any]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is _DETACH:
            self.detached.append((args[0], out))
        return out


def builds_graph(fakes: list[FakeTensor]) -> bool:
    """Whether torch's autograd records a graph when a call runs natively on the shadows ``fakes``."""
    return (
        torch.is_grad_enabled()
        and not torch._C._dispatch_tls_local_exclude_set().has(_AUTOGRAD)  # noqa: SLF001
        and any(f.requires_grad for f in fakes)
    )


def adopt_saved(values: Any, saved: SavedOutputs, out_fakes: list[FakeTensor]) -> None:
    """Make each ``detach`` of an output among ``out_fakes`` that ``saved`` noted known as that output's
    proxy in ``values`` (the trace's ``TensorValues``; the outputs' proxies exist already)."""
    outputs = {id(o): o for o in out_fakes}
    for source, copy in saved.detached:
        if outputs.get(id(source)) is source and id(copy) not in outputs and isinstance(copy, FakeTensor):
            proxy = values.known(source)
            if proxy is not None and values.known(copy) is None:
                values.alias(copy, proxy)
