"""The calling thread's torch settings: a snapshot that can be put back.

Records of a trace change the thread's settings when they run (``no_grad()``'s
``_set_grad_enabled``, ``torch.set_default_dtype``): the probe runs them on real values and the grad
transform replays them on shadows. Both put the settings back afterwards, also when a record raises
(a replay that stopped inside ``generate``'s ``no_grad`` left grad mode off in the caller's thread).

Invariant: ``ThreadState.take()`` followed by ``restore()`` leaves grad mode, the autocast settings of
each device type, the autocast cache flag, the default dtype and the inference-mode blocks the
computation entered (``enter_inference_mode``) as they were at ``take()``. A pass that
stops with one of jitcore's own errors puts them back too (``restored_on_refusal``), whatever the
program's ``with`` exits did with the error on its way out.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from jitcore.errors import JitcoreError
from jitcore.interpreter.errors import JitcoreInterpreterError
from jitcore.ir import BoundSymbol, Symbol, current_context

__all__ = [
    "ENTER_INFERENCE_MODE", "EXIT_INFERENCE_MODE", "SET_GRAD_ENABLED", "STATE_CHANGE_SYMBOLS",
    "STATE_FUNCTION_SYMBOLS", "RngState", "ThreadState",
    "enter_inference_mode", "exit_inference_mode", "recorded_grad_mode", "restored_on_refusal", "rng_state",
    "same_rng_state", "set_rng_state", "subclass_functions_as_the_caller_had", "subclass_functions_disabled",
]

_AUTOCAST_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True, slots=True)
class ThreadState:
    grad: bool
    autocast: tuple[tuple[str, bool, torch.dtype], ...]
    autocast_cache: bool
    default_dtype: torch.dtype
    inference_depth: int
    autocast_nesting: int

    @staticmethod
    def take() -> ThreadState:
        return ThreadState(
            torch.is_grad_enabled(),
            tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES),
            torch.is_autocast_cache_enabled(),
            torch.get_default_dtype(),
            len(_inference_guards()),
            _autocast_nesting(),
        )

    def restore(self) -> None:
        torch.set_grad_enabled(self.grad)
        for device, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache)
        torch.set_default_dtype(self.default_dtype)
        guards = _inference_guards()
        while len(guards) > self.inference_depth:
            exit_inference_mode()
        # Note [The autocast nesting put back]: a ``torch.autocast`` block entered by the records a probe
        # or a raising computation ran, and never exited, left torch's nesting count raised: the thread's
        # autocast cache was then never cleared, and a later eager ``autocast(float16)`` block reused a
        # weight cast to bfloat16 ("mat1 and mat2 must have the same dtype"). The count is put back, and
        # the cache cleared where it returns to 0, as the block's ``__exit__`` does.
        level = _autocast_nesting()
        if level != self.autocast_nesting:
            while level > self.autocast_nesting:
                level = torch.autocast_decrement_nesting()
            while level < self.autocast_nesting:
                level = torch.autocast_increment_nesting()
            if level == 0:
                torch.clear_autocast_cache()


def _autocast_nesting() -> int:
    """torch's autocast nesting count of this thread (read without changing it)."""
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return level


# The record of a grad mode change (``no_grad()``'s ``torch._C._set_grad_enabled``): the computation
# changes grad mode at the same point on every call (Note [State changes inside the traced function]
# below).
SET_GRAD_ENABLED = Symbol(
    "torch._C._set_grad_enabled", "_set_grad_enabled", "torch", torch._C._set_grad_enabled,  # noqa: SLF001
    "torch._C._set_grad_enabled", torch._C._set_grad_enabled,  # noqa: SLF001
)


# Note [State changes inside the traced function]: torch keeps grad mode and autocast settings per
# thread, and ``with torch.no_grad():`` (or ``torch.autocast``) inside the function changes them
# through these builtins. They run while tracing, so the rest of the trace is computed in the new
# state, and are recorded, so that the computation changes the state at the same points on every
# call (otherwise ``y = x * 2`` under ``no_grad`` would require grad on cached calls).
# (grad mode's symbol is SET_GRAD_ENABLED, which jitcore's own code records too)
_STATE_CHANGES = {
    torch.set_autocast_enabled: "torch.set_autocast_enabled",
    torch.set_autocast_dtype: "torch.set_autocast_dtype",
    torch.autocast_increment_nesting: "torch.autocast_increment_nesting",
    torch.autocast_decrement_nesting: "torch.autocast_decrement_nesting",
    torch.set_autocast_cache_enabled: "torch.set_autocast_cache_enabled",
    torch.clear_autocast_cache: "torch.clear_autocast_cache",
}
STATE_CHANGE_SYMBOLS = {
    fn: Symbol(path, path.rsplit(".", 1)[1], "torch", fn, path, fn) for fn, path in _STATE_CHANGES.items()
} | {SET_GRAD_ENABLED.fn: SET_GRAD_ENABLED}


# ``with torch.inference_mode(mode):`` inside the function: torch's guard object (``_InferenceMode``)
# sets the thread's inference mode on ``__enter__`` and puts the previous one back on ``__exit__``. The
# computation holds the guards of the ``with`` blocks it is inside, per thread, innermost last.
_THREAD = threading.local()


def _inference_guards() -> list:
    guards = getattr(_THREAD, "inference_guards", None)
    if guards is None:
        guards = _THREAD.inference_guards = []
    return guards


def enter_inference_mode(mode: bool) -> None:
    """``torch.inference_mode(mode).__enter__()``."""
    guard = torch._C._InferenceMode(mode)  # noqa: SLF001
    guard.__enter__()
    _inference_guards().append(guard)


def exit_inference_mode() -> None:
    """The matching ``__exit__``: the mode before the innermost ``enter_inference_mode``."""
    _inference_guards().pop().__exit__(None, None, None)


ENTER_INFERENCE_MODE = Symbol(
    "torch.inference_mode.__enter__", "enter_inference_mode", "torch", enter_inference_mode,
    "jitcore.langctx.thread_state.enter_inference_mode", enter_inference_mode,
    tags=frozenset({"global_state"}),
)
EXIT_INFERENCE_MODE = Symbol(
    "torch.inference_mode.__exit__", "exit_inference_mode", "torch", exit_inference_mode,
    "jitcore.langctx.thread_state.exit_inference_mode", exit_inference_mode,
    tags=frozenset({"global_state"}),
)
# Python functions of torch that change such state (the RNG seed of every device, the default dtype):
# replaced by lookasides that run and record them whole.
# Tagged "global_state": the grad transform's forward trace runs them at the same points too.
STATE_FUNCTION_SYMBOLS = {
    fn: Symbol(path, path.rsplit(".", 1)[1], "torch", fn, path, fn, tags=frozenset({"global_state"}))
    for fn, path in {
        torch.manual_seed: "torch.manual_seed",
        torch.set_default_dtype: "torch.set_default_dtype",
    }.items()
}


def _set_grad_mode(enabled: bool) -> None:
    torch._C._set_grad_enabled(enabled)  # noqa: SLF001
    context = current_context()
    if context is not None:
        context.scopes[-1].append(BoundSymbol(SET_GRAD_ENABLED, (enabled,), {}, None, (), context.source()))


@contextlib.contextmanager
def recorded_grad_mode(enabled: bool) -> Iterator[None]:
    """Grad mode set to ``enabled`` for the block, while tracing and in the computation: for jitcore's
    own code (which runs natively) that runs torch operations a program's ``no_grad()`` would run."""
    previous = torch.is_grad_enabled()
    _set_grad_mode(enabled)
    try:
        yield
    finally:
        _set_grad_mode(previous)


@contextlib.contextmanager
def restored_on_refusal() -> Iterator[None]:
    """The thread's settings as they were on entry, when the block raises an error of jitcore's own
    (the call then runs eagerly from the caller's settings); other exceptions leave them as the
    program's own handlers left them, as eagerly."""
    state = ThreadState.take()
    try:
        yield
    except (JitcoreError, JitcoreInterpreterError):
        state.restore()
        raise


# --- torch's default generators ----------------------------------------------------------------------
RngState = tuple[torch.Tensor, list[torch.Tensor]]


def rng_state() -> RngState:
    """The states of torch's default generators: the CPU one, and each CUDA device's where CUDA is
    initialized."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state[0])
    if state[1]:
        torch.cuda.set_rng_state_all(state[1])


def same_rng_state(a: RngState, b: RngState) -> bool:
    return torch.equal(a[0], b[0]) and len(a[1]) == len(b[1]) and all(map(torch.equal, a[1], b[1]))


class _DisabledByJitcore(threading.local):
    flag = False


_DISABLED_BY_JITCORE = _DisabledByJitcore()


@contextlib.contextmanager
def subclass_functions_disabled() -> Iterator[None]:
    """Subclass ``__torch_function__`` disabled by jitcore for a computation whose records were
    resolved while tracing; user Python the computation calls natively (a Function's forward, a
    backward) runs with them on again when the caller had them on (Note [The torch-function state of
    a Function's forward], transforms/autograd_function.py)."""
    was = _DISABLED_BY_JITCORE.flag
    _DISABLED_BY_JITCORE.flag = torch._C._is_torch_function_enabled()  # noqa: SLF001 - the caller's state
    try:
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            yield
    finally:
        _DISABLED_BY_JITCORE.flag = was


@contextlib.contextmanager
def subclass_functions_as_the_caller_had() -> Iterator[None]:
    """Inside ``subclass_functions_disabled``, subclass ``__torch_function__`` as the computation's caller
    had it; elsewhere, the thread's state as it is."""
    if not _DISABLED_BY_JITCORE.flag:
        yield
        return
    _DISABLED_BY_JITCORE.flag = False
    try:
        with torch._C._EnableTorchFunction():  # noqa: SLF001
            yield
    finally:
        _DISABLED_BY_JITCORE.flag = True
