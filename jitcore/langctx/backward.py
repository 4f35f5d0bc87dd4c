"""The symbol of a backward the traced program runs itself (``loss.backward()``,
``torch.autograd.grad``; the calls are handled by jitcore/jit/autograd_calls.py).

Invariant: ``autograd_grad`` keeps the graph (``retain_graph=True``): the grad transform differentiates
the same graph again for the trace's outputs, and its replay records the backward's aten ops. The
program's ``retain_graph`` is honoured on the tracing pass's own shadows instead (``free_graph``), so a
second backward through freed buffers raises eager's error at the user's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

from jitcore.langctx.shadows import BACKWARDS, STATEFUL, EagerKernels
from jitcore.langctx.torch import torch_symbol

__all__ = ["AUTOGRAD_GRAD", "autograd_grad", "free_graph", "graph_leaves", "graph_nodes"]


def autograd_grad(
    outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any],
    create_graph: bool = False,
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (None where unused); the graph is kept.
    With ``create_graph`` the backward's own ops are differentiable (a gradient penalty, a
    Hessian-vector product): the grad transform's replay records them with their autograd graph,
    so the trace's own backward differentiates through them."""
    return torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), retain_graph=True,
                               create_graph=create_graph, allow_unused=True)


def free_graph(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any],
               fake_mode: Any) -> bool:
    """Free the saved buffers of the shadows' graph as a backward without ``retain_graph`` frees eager's:
    the same backward run again natively, not retained, on the shadows (nothing is recorded). False
    where it could not run to its end: a subclass's own backward code reads values (MaskedTensor's
    binary ops compare their masks), which shadows do not have."""
    try:
        with fake_mode, EagerKernels(fake_mode):
            torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), retain_graph=False,
                                allow_unused=True)
    except (DataDependentOutputException, DynamicOutputShapeException):
        return False
    return True


STATEFUL.add(autograd_grad)
BACKWARDS.add(autograd_grad)
AUTOGRAD_GRAD = torch_symbol(autograd_grad, "jitcore.langctx.backward.autograd_grad",
                             tags=frozenset({"backward"}))


def graph_leaves(roots: Sequence[Any]) -> list[torch.Tensor]:
    """The leaves the autograd graph from the nodes ``roots`` (shadows' ``grad_fn``s; None skipped)
    accumulates into (what ``backward()`` fills), each once, in the order the graph is walked."""
    seen: dict[int, Any] = {}  # the nodes themselves: a node's Python object may be made per read, and
    leaves: list[torch.Tensor] = []  # an id is unique only while its object lives
    pending = list(roots)
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.append(variable)
        pending.extend(n for n, _ in reversed(node.next_functions))
    return leaves


def graph_nodes(roots: Sequence[Any]) -> list[Any]:
    """Every node of the autograd graph from the nodes ``roots`` (None skipped), each once."""
    seen: dict[int, Any] = {}
    pending = list(roots)
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        pending.extend(n for n, _ in node.next_functions)
    return list(seen.values())
