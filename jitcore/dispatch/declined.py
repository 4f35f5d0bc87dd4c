"""Eager's errors for a call that every override declines (each returns ``NotImplemented``).

Invariant: the message is eager's word for word, so a program that catches it or shows it behaves as
eagerly. Eager has two: C++ (``handle_torch_function_no_python_arg_parser``) for torch's C functions and
for ``__torch_dispatch__``, naming the callable as its module and name and listing each class on its own
line; Python (``torch.overrides.handle_torch_function``) for torch's Python functions, naming them by
``__module__`` and ``__name__`` and listing the classes as a Python list. A mode that declined (asked
before the classes) comes first in the C++ list, after the classes in the Python one.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["declined_by_all", "raised_for_eager"]

_LOG_HINT = "For more information, try re-running with TORCH_LOGS=not_implemented"
_FOR_EAGER = "_jitcore_raised_for_eager"


def declined_by_all(func: Any, types: list[type] | tuple[type, ...], protocol: str,
                    mode: Any = None) -> TypeError:
    """The TypeError eager raises where every ``protocol`` (``"__torch_function__"`` or
    ``"__torch_dispatch__"``) handler returned NotImplemented for ``func``: those of ``types``, and
    ``mode``'s where a mode was asked first."""
    if protocol == "__torch_function__" and inspect.isfunction(func):
        found = f" nor in mode {mode}" if mode is not None else ""
        return _for_eager(TypeError(
            f"no implementation found for '{func.__module__}.{func.__name__}' on types that implement "
            f"__torch_function__: {list(types)}{found}"
        ))
    lines = [f"  - mode object {mode!r}"] if mode is not None else []
    names = "\n".join([*lines, *(f"  - tensor subclass {cls}" for cls in types)])
    return _for_eager(TypeError(
        f"Multiple dispatch failed for '{_c_name(func)}'; all {protocol} handlers returned "
        f"NotImplemented:\n\n{names}\n\n{_LOG_HINT}"
    ))


# Note [An error raised for eager]
# jitcore raises the error above where eager's dispatcher would, from its own code (the raise in
# resolver.call_torch_dispatch). Where that happens while autograd runs a backward jitcore records (a
# MaskedTensor whose dispatch has no ``aten.tanh_backward``), the traceback's innermost entry is
# jitcore's, a raise, under no frame of the program (MaskedTensor is torch's code), which Note
# [jitcore's own errors while recording a backward] (transforms/backward_errors.py) takes for a bug of
# jitcore's: ``backward()`` raised JC-I002 where eager raises this TypeError. The error is marked as
# made for eager, and a mark is what tells it apart, not its message (a program may raise one alike).
def _for_eager(error: TypeError) -> TypeError:
    setattr(error, _FOR_EAGER, True)
    return error


def raised_for_eager(error: BaseException) -> bool:
    """Whether jitcore made ``error`` as eager's own error (every override declined a call), so that it
    is the program's error wherever it is raised (Note [An error raised for eager])."""
    return getattr(error, _FOR_EAGER, False) is True


def _c_name(func: Any) -> str:
    """How eager's C++ names a callable: ``torch.Tensor.exp``, ``torch.add``, ``torch.nn.gelu``,
    ``torch.linalg.linalg_norm``, ``torch.Tensor.shape.__get__``, ``torch._ops.aten.exp.default``."""
    name = getattr(func, "__name__", str(func))
    owner = getattr(func, "__self__", None)
    if name == "__get__" and hasattr(owner, "__objclass__"):  # a property of torch.Tensor read
        return f"torch.Tensor.{owner.__name__}.__get__"
    module = getattr(func, "__module__", None)
    if module is None:  # a method of torch.Tensor (a C method descriptor has no module)
        return f"torch.Tensor.{name}"
    if module.startswith("torch._C._"):  # torch._C._nn.gelu is torch.nn's, torch._C._linalg torch.linalg's
        module = "torch." + module.removeprefix("torch._C._")
    return f"{module}.{name}"
