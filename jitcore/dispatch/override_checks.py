"""torch's checks for ``__torch_function__`` overrides, answered for traced values.

Python code that wants its own function overridable by tensor subclasses, as torch's Python functions
and libraries write it, asks ``torch.overrides.has_torch_function(args)`` (or the ``_unary`` /
``_variadic`` forms, C functions of ``torch._C``) and then calls ``handle_torch_function``, which asks
the arguments' ``__torch_function__`` in eager's order. Called natively on proxies, those C functions
saw jitcore's proxy classes, whose ``__torch_function__`` is disabled, and answered False: the
function's own body ran instead of the subclass's override, a wrong answer (Note [Override checks of
traced values]).

Invariants:
- a proxy is answered for the class it stands for (``python_type``): True when that class is not
  exactly ``torch.Tensor`` or ``nn.Parameter``, defines a ``__torch_function__`` that is not torch's
  disabled one (torch's default counts, as eagerly) and subclass torch functions are enabled
  (``DisableTorchFunctionSubclass`` is entered natively while tracing, so torch's own flag says);
- a function mode on the trace's stack (the program's, jitcore/dispatch/modes.py) counts as torch
  counts one on its own stack: every check is True while one is on and torch functions are not all
  disabled; ``torch._C._is_torch_function_mode_enabled`` answers the same way;
- any other value is asked natively.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from jitcore.dispatch.modes import MODE_STACK_FUNCTIONS
from jitcore.ir import Proxy
from jitcore.proxies.tensor import TensorProxy
from jitcore.proxies.typed import has_torch_function as class_has_torch_function

__all__ = ["OVERRIDE_CHECKS"]

_EXACT = (torch.Tensor, torch.nn.Parameter)  # THPVariable_CheckTypeExact: never overridable
_stack_length = MODE_STACK_FUNCTIONS[torch._C._len_torch_function_stack]  # noqa: SLF001 - the trace's too


def function_mode_enabled() -> bool:
    """``torch._C._is_torch_function_mode_enabled()`` counting the program's modes on the trace's stack."""
    return not torch._C._is_torch_function_all_disabled() and _stack_length() > 0  # noqa: SLF001


def _overridable(value: Any) -> bool:
    """Whether ``value`` has a ``__torch_function__`` torch would call (modes aside)."""
    if isinstance(value, TensorProxy):
        cls = value.python_type
        return (cls not in _EXACT and torch._C._is_torch_function_enabled()  # noqa: SLF001
                and class_has_torch_function(cls))
    if isinstance(value, Proxy):  # a number or a text: a basic Python type to torch
        return False
    return torch._C._has_torch_function_unary(value)  # noqa: SLF001 - (torch's own modes count there too)


def has_torch_function(values: Iterable[Any]) -> bool:
    """``torch._C._has_torch_function(values)`` for traced values."""
    return function_mode_enabled() or any(_overridable(v) for v in values)


def has_torch_function_unary(value: Any) -> bool:
    """``torch._C._has_torch_function_unary(value)`` for a traced value."""
    return function_mode_enabled() or _overridable(value)


def has_torch_function_variadic(*values: Any) -> bool:
    """``torch._C._has_torch_function_variadic(*values)`` for traced values."""
    return has_torch_function(values)


# Note [Override checks of traced values]
# A library function written as torch documents it (``if has_torch_function((x,)): return
# handle_torch_function(my_op, (x,), x, s)``) gave its own body's result on a subclass whose
# ``__torch_function__`` handles ``my_op``: the C check saw the proxy's class. The checks are now
# answered for the class the proxy stands for, and ``handle_torch_function`` (torch's Python,
# interpreted) asks the program's modes and the subclasses' ``__torch_function__`` as eagerly. torch's
# own Python methods that check the same way (``Tensor.split``, ``Tensor.__format__``) take the
# override path too, as eagerly; torch's default ``__torch_function__`` runs them with subclass torch
# functions disabled, where the check answers False and their body runs.
OVERRIDE_CHECKS: dict[Callable[..., Any], Callable[..., Any]] = {
    torch._C._has_torch_function: has_torch_function,  # noqa: SLF001
    torch._C._has_torch_function_unary: has_torch_function_unary,  # noqa: SLF001
    torch._C._has_torch_function_variadic: has_torch_function_variadic,  # noqa: SLF001
    torch._C._is_torch_function_mode_enabled: function_mode_enabled,  # noqa: SLF001
}
