"""The jit's options read against the function it jits: which parameters are dynamic numbers
(``jit(fn, dynamic_numbers=...)``), whether ``fn`` is a module's bound ``forward`` (jitted as its
module), and the label a function or module is named by in traces, logs and errors.

Invariant: each answer depends only on ``fn`` and the option given, never on a call's arguments.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Container
from typing import Any

import torch

__all__ = ["dynamic_numbers_of", "is_module_forward", "label_of"]


def is_module_forward(fn: Any) -> bool:
    """``module.forward`` (bound): jitted with the module's state named and guarded as for modules."""
    return (
        isinstance(getattr(fn, "__self__", None), torch.nn.Module)
        and getattr(fn, "__name__", None) == "forward"
    )


def dynamic_numbers_of(fn: Any, names: Any) -> tuple[frozenset[str] | bool, Container[int]]:
    """The ``dynamic_numbers`` option checked against ``fn``'s parameters, and the positions of the
    named positional parameters (the cache files calls by those arguments' types, not values)."""
    if names is True:
        return True, range(sys.maxsize)  # every position
    if names is False or names is None:
        return frozenset(), frozenset()
    if isinstance(names, str):
        names = (names,)
    names = frozenset(names)
    if not all(isinstance(n, str) for n in names):
        raise TypeError("dynamic_numbers must be True or a collection of parameter names")
    if not names:
        return names, frozenset()
    try:
        parameters = list(
            inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters.values()
        )
    except (TypeError, ValueError):
        return names, frozenset()  # a callable without a signature: names are matched per call
    if not any(p.kind == p.VAR_KEYWORD for p in parameters):
        unknown = sorted(names - {p.name for p in parameters})
        if unknown:
            raise ValueError(
                f"dynamic_numbers names {', '.join(map(repr, unknown))}, which "
                f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of {label_of(fn)} "
                f"(its parameters: {', '.join(p.name for p in parameters) or 'none'})"
            )
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names, frozenset(i for i, name in enumerate(positional) if name in names)


def label_of(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return f"module {type(fn).__qualname__}"
    return getattr(fn, "__qualname__", None) or repr(fn)
