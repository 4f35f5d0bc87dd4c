"""Modes the program enters inside the traced function: ``TorchFunctionMode`` and ``TorchDispatchMode``.

torch keeps modes on two per-thread stacks; ``with Mode():`` pushes one (``__enter__`` calls
``torch._C._push_on_torch_function_stack`` or ``_push_on_torch_dispatch_stack``) and pops it on exit.
While tracing, a mode the program enters is kept on the trace's own stacks (``UserModes``, on the
trace context), never on torch's: jitcore runs torch natively on shadows to learn metadata, and a
mode on torch's stack would see those fake tensors and its results would never reach the trace
(a mode that rewrites an op or its output gave the program's results without the rewrite).
Instead, as torch does eagerly:
- each torch-level call the program makes asks the innermost function mode's ``__torch_function__``
  (interpreted, with the torch callable eager hands it), the mode off the stack for that call; what
  it runs is recorded in place of the call;
- each aten call torch's dispatcher makes asks the innermost dispatch mode's ``__torch_dispatch__``
  (interpreted, on proxies), the mode off the stack for that call; the aten ops it runs are recorded
  in place of the torch-level call.
A cached call runs the recorded ops only: none of the modes' code, as for a subclass's protocol
code (docs/subclasses.md, "Things to know").

Invariants:
- torch's own stacks never hold a mode of the program's while jitcore records; the functions that
  read or change them (push, pop, length, element) answer from the trace's stacks, above torch's;
- ``with torch.device(...)`` (torch's ``DeviceContext``, whose factories' device the trace records)
  stays on torch's stack, as before;
- a dispatch mode's resolution runs below autograd, so a torch-level call that would carry gradients
  under one is refused (UnsupportedOperationError: the call runs eagerly, JC-T001).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optree
import torch
import torch.utils._device

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import current_context

__all__ = ["MODE_STACK_FUNCTIONS", "UserModes", "user_modes"]

# torch's own: pushed on its stack as it was (Note in the docstring)
_NATIVE_MODES = (torch.utils._device.DeviceContext,)  # noqa: SLF001
_NATIVE = object()  # a stack entry standing for a mode pushed on torch's stack


@dataclass(slots=True, eq=False)
class UserModes:
    """The modes the program entered inside the traced function, innermost last. An entry is a mode
    of the program's, or ``_NATIVE`` for one pushed on torch's stack (``torch.device``)."""

    function: list[Any] = field(default_factory=list)
    dispatch: list[Any] = field(default_factory=list)

    def innermost_function_mode(self) -> Any:
        """The function mode the next torch-level call asks, or None (none of the program's, or
        torch functions disabled: ``DisableTorchFunction``)."""
        if not self.function or self.function[-1] is _NATIVE or torch._C._is_torch_function_all_disabled():  # noqa: SLF001
            return None
        return self.function[-1]

    def innermost_dispatch_mode(self) -> Any:
        return self.dispatch[-1] if self.dispatch else None

    def run_function_mode(self, mode: Any, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """``mode.__torch_function__(func, types, args, kwargs)`` interpreted, the mode off its stack."""
        return self._run(self.function, mode, "__torch_function__", func, types, args, kwargs)

    def run_dispatch_mode(self, mode: Any, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """``mode.__torch_dispatch__(func, types, args, kwargs)`` interpreted, the mode off its stack.

        Raises:
            UnsupportedOperationError: an argument requires grad with grad mode on (the mode runs below
                autograd: the trace would differentiate what the mode ran, not the call).
        """
        if torch.is_grad_enabled() and any(
                isinstance(v, torch.Tensor) and v.requires_grad for v in optree.tree_leaves((args, kwargs))):
            raise UnsupportedOperationError(
                f"a TorchDispatchMode ({type(mode).__qualname__}) entered inside a jitted function sees an "
                f"operation ({func}) on tensors that require grad: not traced, the call runs eagerly",
                hints=("enter the mode around the call of the jitted function, or run the call under "
                       "torch.no_grad()",),
            )
        return self._run(self.dispatch, mode, "__torch_dispatch__", func, types, args, kwargs)

    @staticmethod
    def _run(stack: list[Any], mode: Any, name: str, func: Any, types: tuple, args: tuple,
             kwargs: dict) -> Any:
        from jitcore.dispatch.resolver import interpret_protocol_code

        position = len(stack) - 1 - stack[::-1].index(mode)
        del stack[position]
        try:
            return interpret_protocol_code(getattr(mode, name), func, types, args, kwargs)
        finally:
            stack.insert(position, mode)


def user_modes() -> UserModes | None:
    """The current trace's modes (None outside tracing)."""
    context = current_context()
    if context is None:
        return None
    if context.modes is None:
        context.modes = UserModes()
    return context.modes


def _stack_functions(kind: str, push: Callable[..., Any], pop: Callable[..., Any], length: Callable[[], int],
                     at: Callable[[int], Any]) -> dict[Callable[..., Any], Callable[..., Any]]:
    def stack() -> list[Any]:
        modes = user_modes()
        return getattr(modes, kind) if modes is not None else []

    def push_(mode: Any) -> None:
        if isinstance(mode, _NATIVE_MODES) or user_modes() is None:
            push(mode)
            stack().append(_NATIVE)
            return
        stack().append(mode)

    def pop_(*args: Any) -> Any:
        entries = stack()
        if args and args[0] is not None:  # an infra mode's key (FakeTensorMode, ...): torch's own
            return pop(*args)
        if entries and entries[-1] is not _NATIVE:
            return entries.pop()
        if entries:
            entries.pop()
        return pop(*args)

    def length_() -> int:
        return length() + sum(entry is not _NATIVE for entry in stack())

    def at_(index: int) -> Any:
        native = length()
        if index < native:
            return at(index)
        return [entry for entry in stack() if entry is not _NATIVE][index - native]

    return {push: push_, pop: pop_, length: length_, at: at_}


# What the program's torch code calls to change or read the mode stacks, and what runs instead while
# tracing (the interpretation's lookasides for C functions).
MODE_STACK_FUNCTIONS = {
    **_stack_functions("function", torch._C._push_on_torch_function_stack, torch._C._pop_torch_function_stack,  # noqa: SLF001
                       torch._C._len_torch_function_stack, torch._C._get_function_stack_at),  # noqa: SLF001
    **_stack_functions("dispatch", torch._C._push_on_torch_dispatch_stack, torch._C._pop_torch_dispatch_stack,  # noqa: SLF001
                       torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at),  # noqa: SLF001
}
