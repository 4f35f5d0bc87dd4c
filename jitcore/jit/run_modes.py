"""How a compiled computation is run: the grad mode and torch-function state wrapped around it.

The computation a cache entry runs is a plain function of tensors. Two states of the caller that the
recorded ops do not set are fixed around it here, once, when the entry is compiled:
- grad mode off, for a trace no output of which reaches autograd (Note [A graph no output reaches]),
  and the inference lowering of a trace made under ``no_grad`` (Note [A computation under no_grad is
  lowered for inference]);
- subclass ``__torch_function__`` disabled, for inputs of a class whose ``__torch_function__`` the
  guards and recorded operations must not call.
Invariant: the wrappers add only a context manager around the call; they never change its values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from jitcore.ir import Trace
from jitcore.langctx.thread_state import SET_GRAD_ENABLED, subclass_functions_disabled
from jitcore.proxies.typed import has_torch_function


# Note [A computation under no_grad is lowered for inference]
# A module's parameters require grad, so the shadows of a trace made under ``no_grad`` (a model's
# eval call, a generation loop) still do, and its regions were compiled for autograd: AOTAutograd's
# training graph, whose forward also writes what a backward would read, behind an autograd Function
# applied on every call (its runtime wrappers' ``save_from_forward``). Such a call builds no graph:
# grad mode is off (or inference mode on) at the call, pinned by the prologue's state checks, so
# every call the entry takes runs with grad mode off. Its regions are compiled for inference, as the
# grad transform's forward is (``grad_off``), and as torch.compile compiles a frame called under
# ``no_grad``. Not when the trace changes grad mode or other global state (``torch.enable_grad()``
# inside the program, recorded as ``SET_GRAD_ENABLED``: its ops record a graph there).
def runs_without_grad(trace: Trace) -> bool:
    """Whether every call of ``trace``, a flat computation no grad transform took, runs with grad
    mode off (Note [A computation under no_grad is lowered for inference])."""
    if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
        return False
    pending = list(trace.bound_symbols)
    while pending:
        bsym = pending.pop()
        if bsym.symbol is SET_GRAD_ENABLED or "global_state" in bsym.symbol.tags:
            return False
        pending.extend(bsym.subsymbols)
    return True


def runs_torch_function(program: Any) -> bool:
    """Whether an input's class has a ``__torch_function__`` that reading its metadata or running
    operations on it would call (a subclass checked by the prologue included)."""
    if any(has_torch_function(type(t)) for t in program.first_inputs if type(t) is not torch.Tensor):
        return True
    return any(g.kind == "type" and isinstance(g.expected, type) and issubclass(g.expected, torch.Tensor)
               and has_torch_function(g.expected) for g in program.prologue.guards)


# Note [A graph no output reaches]
# Eagerly, the ops a ``__torch_dispatch__`` runs on inner tensors run below autograd: a subclass
# built from a tensor that requires grad without passing ``requires_grad`` to
# ``_make_wrapper_subclass`` (``Wrapper(x) * 3``) starts no graph, and what its dispatch returns
# (``(Wrapper(x) * 3).sum()``, a plain tensor) does not require grad. The flattened computation runs
# those ops on the inner tensors themselves, so with grad mode on it would connect the output to
# ``x``, and the caller would get ``requires_grad=True`` (and a ``backward()`` eager refuses). When no
# output of pass 1 requires grad and nothing is written (grad.reaches_no_graph), the grad transform
# is not used and the flattened computation runs with grad mode off: its outputs are as pass 1 says,
# and without the grad-mode changes it recorded (a dispatch's ``enable_grad()``: flatten.py).
# An output that requires grad goes through the grad transform, whose replay runs the subclass's
# dispatch below torch's autograd as eager does.
def without_grad(computation: Callable[..., Any]) -> Callable[..., Any]:
    """``computation`` run with grad mode off (Note [A graph no output reaches])."""
    no_grad = torch.no_grad

    def run(*args: Any) -> Any:
        with no_grad():
            return computation(*args)

    return run


def without_torch_function(computation: Callable[..., Any]) -> Callable[..., Any]:
    """``computation`` run with subclass ``__torch_function__`` disabled: inputs of a subclass without
    ``__torch_dispatch__`` are plain data to the guards and the recorded operations."""
    disabled = subclass_functions_disabled  # Note [The torch-function state of a Function's forward]

    def run(*args: Any) -> Any:
        with disabled():
            return computation(*args)

    return run
