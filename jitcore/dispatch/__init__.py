"""Tensor-subclass dispatch: resolving ``__torch_dispatch__`` while interpreting.

``resolve_call(symbol, args, kwargs)`` is the call handler of a trace: a call without subclass
proxies computes its outputs from torch's metadata (``symbol.meta``); a call with them is resolved
through the subclass's ``__torch_dispatch__`` (see resolver.py).
"""

from jitcore.dispatch.resolver import resolve_call

__all__ = ["resolve_call"]
