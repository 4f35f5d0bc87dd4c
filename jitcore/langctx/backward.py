"""The symbol of a backward the traced program runs itself (``loss.backward()``,
``torch.autograd.grad``; the calls are handled by jitcore/jit/autograd_calls.py).

Invariant: ``autograd_grad`` keeps the graph (``retain_graph=True``): the grad transform differentiates
the same graph again for the trace's outputs, and its replay records the backward's aten ops. The
program's ``retain_graph`` is honoured on the tracing pass's own shadows instead (``free_graph``), so a
second backward through freed buffers raises eager's error at the user's line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
)

from jitcore.langctx.shadows import BACKWARDS, STATEFUL, EagerKernels
from jitcore.langctx.thread_state import subclass_functions_as_the_caller_had
from jitcore.langctx.torch import torch_symbol
from jitcore.proxies.typed import has_torch_function

__all__ = [
    "AUTOGRAD_GRAD", "autograd_grad", "free_graph", "graph_leaves", "graph_nodes",
    "torch_functions_of_a_backward",
]


def autograd_grad(
    outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], grad_outputs: Sequence[Any],
    create_graph: bool = False,
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (None where unused); the graph is kept.
    With ``create_graph`` the backward's own ops are differentiable (a gradient penalty, a
    Hessian-vector product): the grad transform's replay records them with their autograd graph,
    so the trace's own backward differentiates through them."""
    functions = torch_functions_of_a_backward(outputs, inputs, grad_outputs, caller=True)
    with functions, _hooks_traced_apart(inputs):
        return torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), retain_graph=True,
                                   create_graph=create_graph, allow_unused=True)


# Note [Tensor hooks run by the trace]
# A caller's tensor with hooks (``w.register_hook(fn)``) as an input of the record: the pass interprets
# its hooks after the record (Note [A caller's tensor hooks], jitcore/jit/autograd_calls.py), so the
# trace holds what they compute and do. Run natively on the caller's tensors (the probe, a computation
# that runs its backward under torch's autograd), torch's engine would run them a second time: the
# gradient scaled twice, a hook's append made again with the probe's values. They are taken off the
# tensors for the record's own run and put back (the same dicts: the caller's handles stay valid).
@contextlib.contextmanager
def _hooks_traced_apart(inputs: Sequence[Any]) -> Iterator[None]:
    hooked = [(t, t._backward_hooks) for t in inputs  # noqa: SLF001 - torch's hook dict of a tensor
              if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) and t._backward_hooks]  # noqa: SLF001
    if not hooked:
        yield
        return
    for t, _hooks in hooked:
        t._backward_hooks = None  # noqa: SLF001
    try:
        yield
    finally:
        for t, hooks in hooked:
            t._backward_hooks = hooks  # noqa: SLF001


def torch_functions_of_a_backward(outputs: Sequence[Any], inputs: Sequence[Any], grad_outputs: Sequence[Any],
                                  *, caller: bool) -> contextlib.AbstractContextManager[Any]:
    """The subclass ``__torch_function__`` state a backward the program runs has: on (the caller's state
    with ``caller``, else on), unless one of its tensors has a ``__torch_function__`` of its own, which
    eagerly takes the call and runs it with them off (Note [The torch-function state of a backward the
    program runs])."""
    if any(_has_own_torch_function(t) for t in (*outputs, *inputs, *grad_outputs)):
        return contextlib.nullcontext()
    return subclass_functions_as_the_caller_had() if caller else torch._C._EnableTorchFunction()  # noqa: SLF001


def _has_own_torch_function(value: Any) -> bool:
    """Whether ``value`` is a tensor whose class takes torch functions (whatever the thread's state:
    ``has_torch_function`` says no while they are off)."""
    cls = type(value)
    return cls is not torch.Tensor and isinstance(value, torch.Tensor) and has_torch_function(cls)


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


# Note [The torch-function state of a backward the program runs]
# ``loss.backward()`` inside the program runs the Python backward of each Function in the graph as
# eagerly: with subclass ``__torch_function__`` on (the state of the backward's caller). torchao's NF4
# (QLoRA's frozen base weight) dequantizes in LinearNF4.backward with ``weight.to(grad.dtype)``, which
# its ``__torch_function__`` answers; with it off the weight stayed NF4, ``@`` went to its
# ``__torch_dispatch__`` mm and raised "mat1 and mat2 shapes cannot be multiplied" where eager trains.
# Two places ran the backward with them off: the grad transform's replay, under the recording's
# ``DisableTorchFunctionSubclass`` (jitcore/transforms/grad.py turns them on around a backward record,
# as around a Function's forward), and a computation with subclass functions disabled by jitcore (an
# entry taking such a weight whole, with symbolic sizes), where they are turned back on when the
# caller had them on, as for a Function's forward. A backward the program calls from inside a
# subclass's ``__torch_function__`` (``super().__torch_function__`` runs ``Tensor.backward`` with them
# off) is replayed with them on: a known limit. A backward over tensors of a class with a
# ``__torch_function__`` of its own keeps them off: eagerly that class takes ``torch.autograd.grad``
# (its default ``__torch_function__`` runs the engine with them off and returns gradients of its
# class), and with them on the gradients of a plain subclass parameter came back of its class (an
# entry more per training step, Adam over ``Marked`` parameters).
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
