"""What an overridable torch function written in Python hands ``__torch_function__``: the callable and
the arguments its own ``handle_torch_function`` call names, asked of the function itself.

Invariant: asking runs none of the function's computation (it stops at the first ``__torch_function__``
call, before any operation), and changes nothing where the answer is not the function's own.
"""

from __future__ import annotations

import functools
from types import FunctionType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["as_handed", "overridable"]


@functools.cache
def overridable() -> frozenset[Any]:
    """The callables torch offers to ``__torch_function__`` (``torch.overrides``)."""
    return frozenset(fn for fns in torch.overrides.get_overridable_functions().values() for fn in fns)


# Note [Python functions that hand their arguments]
# An overridable torch function written in Python (``F.softmax``, ``torch.norm``, ``Tensor.split``,
# ``torch.unique``) asks ``__torch_function__`` itself, with the arguments its body names:
# ``handle_torch_function(softmax, (input,), input, dim=dim, _stacklevel=3, dtype=dtype)``. Handed the
# program's arguments as written instead (``(x, -1)``), a ``__torch_function__`` reading
# ``kwargs["dim"]`` or ``args[1]`` saw another call than eagerly (MaskedTensor's reductions computed
# ``torch.norm(m)``, where eager hands ``p=`` and its table raises). Such a function is called natively
# on the proxies under a function mode that stops it at the first ``__torch_function__`` it asks (every
# one of them asks before computing anything): the callable and arguments it hands are eager's. Where
# the first call asked is another one (the function computed first), the program's arguments stand.
class _Asked(Exception):
    """Raised by _AskedMode at the first ``__torch_function__`` call, with what it was handed."""


class _AskedMode(TorchFunctionMode):
    def __torch_function__(
        self, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        raise _Asked(func, args, kwargs or {})


def as_handed(func: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple, dict]:
    """``func`` and its arguments as ``func`` hands them to ``__torch_function__`` (the Note above)."""
    if not (isinstance(func, FunctionType) and func in overridable()):
        return func, args, kwargs
    try:
        with _AskedMode():
            func(*args, **kwargs)
    except _Asked as asked:
        handed, handed_args, handed_kwargs = asked.args
        if handed is func or getattr(handed, "__wrapped__", None) is func:
            return handed, tuple(handed_args), dict(handed_kwargs)
    except Exception:  # noqa: BLE001 - its own argument checks: the call below raises them as eagerly
        pass
    return func, args, kwargs
