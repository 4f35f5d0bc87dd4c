"""Activation checkpointing (``torch.utils.checkpoint.checkpoint``) inside a jitted function.

Eagerly, a checkpoint runs its function without keeping the activations its backward needs and runs
it again, with the forward's random state, when the backward reaches it. Both of torch's ways of
doing so rely on what a trace does not have:
- ``use_reentrant=False`` installs saved-tensor hooks whose recomputation calls the function natively
  from inside the backward, where the module's parameters are real tensors among the pass's fake
  shadows (torch's fake mode refused them);
- ``use_reentrant=True`` is an autograd Function whose forward runs under ``no_grad`` and whose
  backward runs the function and a nested ``torch.autograd.backward`` natively: traced, the
  parameters got no gradient.

What checkpointing computes is what the function computes: the values, the gradients and the random
stream (the recomputation restores the forward's generator state and puts the stream back after it)
are the function's own. So tracing runs the function itself, interpreted, with eager's argument
checks and warnings (``checkpoint``'s own code runs interpreted), and records what it records
without a checkpoint:
- non-reentrant: the function under ``context_fn``'s forward context (the recompute context is not
  used: nothing is recomputed by autograd);
- reentrant: the function with grad mode as the Function would see it: the outputs require grad
  exactly when grad mode is on and a tensor argument requires grad; otherwise it runs under
  ``no_grad`` and, as eagerly, the parameters it uses get no gradient.
Where the backward runs outside the jitted function, what it needs from the region is recomputed as
eagerly (docs/autograd.md: not with the backward inside): the function's records lie between two markers
(``CHECKPOINT_BEGIN``/``CHECKPOINT_END``, transforms/saving.py), and the grad transform's choice of
saved values recomputes the ops between them in the backward instead of saving their outputs
(random ops excepted: a dropout's mask is saved, where eager draws it again from the saved state).
Invariant: the function runs through the interpreter (``current_run().call``), so its reads are
guarded and its effects recorded like the program's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils.checkpoint as torch_checkpoint

import jitcore
from jitcore.interpreter import current_run
from jitcore.ir import BoundSymbol, current_context
from jitcore.langctx.thread_state import recorded_grad_mode
from jitcore.transforms.autograd_function import apply_autograd_function
from jitcore.transforms.saving import CHECKPOINT_BEGIN, CHECKPOINT_END

__all__ = ["checkpoint_lookasides"]


def checkpoint_lookasides() -> dict[Any, Callable[..., Any]]:
    """The lookasides; the ``Function.apply`` one takes the place of the autograd-Function lookaside
    (it hands every other Function on to it)."""
    return {
        torch_checkpoint._checkpoint_without_reentrant_generator: _without_reentrant,  # noqa: SLF001
        torch.autograd.Function.apply.__func__: _apply,
    }


def _apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    if cls is torch_checkpoint.CheckpointFunction:
        return current_run().call(_reentrant, *args, **kwargs)
    return apply_autograd_function(cls, *args, **kwargs)


def _reentrant(run_function: Callable[..., Any], preserve_rng_state: bool, *args: Any) -> Any:
    """What ``CheckpointFunction.apply(run_function, preserve_rng_state, *args)`` computes
    (interpreted)."""
    torch_checkpoint.check_backward_validity(args)
    if torch.is_grad_enabled() and any(torch.is_tensor(a) and a.requires_grad for a in args):
        _mark(CHECKPOINT_BEGIN)
        try:
            return run_function(*args)
        finally:
            _mark(CHECKPOINT_END)
    with recorded_grad_mode(False):  # the Function's forward: recorded, so each call runs it so too
        return run_function(*args)


def _without_reentrant(fn: Callable[..., Any], preserve_rng_state: bool = True,
                       context_fn: Callable[[], Any] = torch_checkpoint.noop_context_fn,
                       determinism_check: str = torch_checkpoint._DEFAULT_DETERMINISM_MODE,  # noqa: SLF001
                       debug: bool = False, early_stop: bool = True, *args: Any, **kwargs: Any) -> Any:
    """``_checkpoint_without_reentrant_generator``: a generator that yields once around the
    function's forward, as torch's does, interpreted."""
    return current_run().call(_around_forward, context_fn, determinism_check, debug)


def _around_forward(context_fn: Callable[[], Any], determinism_check: str, debug: bool) -> Iterator[None]:
    """Eager's checks of the arguments, then the forward context around the function's run."""
    if debug and context_fn is not torch_checkpoint.noop_context_fn:
        raise ValueError("debug=True is incompatible with non-default context_fn")
    allowed = torch_checkpoint._allowed_determinism_checks_to_fns  # noqa: SLF001
    if determinism_check not in allowed:
        raise ValueError(f"determinism_check should be one of {list(allowed.keys())}, "
                         f"but got {determinism_check}")
    forward_context, _recompute_context = context_fn()
    if not torch.is_grad_enabled():
        yield
        return
    with forward_context:
        _mark(CHECKPOINT_BEGIN)
        try:
            yield
        finally:
            _mark(CHECKPOINT_END)


def _mark(symbol: Any) -> None:
    """Where the checkpointed function's records start or end (jitcore's own code: runs natively)."""
    context = current_context()
    context.trace.imports.setdefault("jitcore", jitcore)  # the markers' paths start there
    context.scopes[-1].append(BoundSymbol(symbol, (), {}, None, (), context.source()))
