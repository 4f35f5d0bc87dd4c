"""User ``torch.autograd.Function`` subclasses: their forward and their own backward are traced.

While interpreting, ``MyFn.apply(*args)`` records one bound symbol, ``autograd_function_apply``,
whose subsymbols are the user's ``forward`` interpreted on proxies (with a tracing stand-in for
``ctx``), so the program after it sees the forward's outputs. Where no input requires grad the
symbol runs the function as ``MyFn.apply`` (torch runs only its forward then). Where inputs require
grad, the grad transform replays the symbol natively as ``MyFn.apply`` on shadows: torch calls the
user's ``forward`` under the recording mode (its aten ops go into the forward trace) and registers
the user's ``backward`` as the autograd node, so ``torch.autograd.grad`` calls it — on shadows,
recorded into the backward trace. Nothing of the user's Function runs opaquely on a cached call.
Invariant: the gradients are the user's backward's, never ones derived from its forward's ops.
"""

from __future__ import annotations

from typing import Any

import torch

import jitcore
from jitcore.diagnostics.boundary import runs_as_function_apply
from jitcore.interpreter import current_run
from jitcore.ir import Symbol, current_context
from jitcore.proxies import TensorProxy

__all__ = ["AUTOGRAD_FUNCTION", "AUTOGRAD_FUNCTION_LOOKASIDES", "apply_autograd_function"]


def run_autograd_function(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``cls.apply(*args, **kwargs)``: how the symbol runs on real (or shadow) tensors."""
    return cls.apply(*args, **kwargs)


class TracingContext:
    """The ``ctx`` a user's ``forward`` receives while it is interpreted: it records, nothing more."""

    def __init__(self, args: tuple) -> None:
        self.needs_input_grad = tuple(isinstance(a, TensorProxy) and a.requires_grad for a in args)
        self.saved_tensors: tuple[Any, ...] = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _uses_setup_context(cls: type) -> bool:
    return getattr(cls, "setup_context", None) is not None and (
        getattr(cls.setup_context, "__func__", cls.setup_context)
        is not getattr(
            torch.autograd.Function.setup_context, "__func__", torch.autograd.Function.setup_context
        )
    )


@runs_as_function_apply
def _forward(cls: type, *args: Any, **kwargs: Any) -> Any:
    """The outputs of the user's forward, interpreted on proxies (its ops become subsymbols)."""
    context = current_context()
    if context is not None:
        context.trace.imports.setdefault("jitcore", jitcore)  # the symbol's path starts there
    run = current_run()
    call = run.call if run is not None else (lambda fn, *a, **k: fn(*a, **k))
    ctx = TracingContext(args)
    if _uses_setup_context(cls):
        output = call(cls.forward, *args, **kwargs)
        call(cls.setup_context, ctx, args, output)
        return output
    return call(cls.forward, ctx, *args, **kwargs)


AUTOGRAD_FUNCTION = Symbol(
    id="torch.autograd.Function.apply",
    name="autograd_function_apply",
    langctx="torch",
    fn=run_autograd_function,
    path="jitcore.transforms.autograd_function.run_autograd_function",
    meta=_forward,
    tags=frozenset({"autograd_function"}),
)


def apply_autograd_function(cls: type, *args: Any, **kwargs: Any) -> Any:
    """The lookaside of ``torch.autograd.Function.apply`` while interpreting."""
    return AUTOGRAD_FUNCTION(cls, *args, **kwargs)


AUTOGRAD_FUNCTION_LOOKASIDES: dict[Any, Any] = {
    torch.autograd.Function.apply.__func__: apply_autograd_function,
}
