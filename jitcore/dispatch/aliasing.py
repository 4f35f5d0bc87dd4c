"""``return_and_correct_aliasing`` answered without interpretation for an op that aliases nothing.

A wrapper subclass's ``__torch_dispatch__`` (TwoTensor's, torchao's) ends with torch's
``return_and_correct_aliasing(func, args, kwargs, out)``, interpreted on every op of a first call (Note
[An op that aliases nothing returns its output]).

Invariants:
- the answer is ``out`` only where torch's own body provably returns ``out`` with no other effect: ``func``
  is exactly an ``OpOverload``, ``args`` exactly a tuple, torch's function, its ``get_alias_info`` and
  ``_correct_storage_aliasing`` are the ones this module was imported with, and the op's cached schema
  information (``get_alias_info``, asked natively as the interpreted body asks it) has no read-only alias
  of an input, is not an in-place view op and has no output that writes an input;
- anything else (a view op, ``add_``, an op whose schema information raises, a patched torch) interprets
  torch's body, as before.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _python_dispatch

from jitcore.interpreter import current_run
from jitcore.interpreter.calls import call_function

__all__ = ["ALIASING_LOOKASIDES", "return_and_correct_aliasing"]

_ORIGINAL = _python_dispatch.return_and_correct_aliasing
_CODE = _ORIGINAL.__code__
_GLOBALS = _ORIGINAL.__globals__
_GET_ALIAS_INFO = _python_dispatch.get_alias_info
_CORRECT_STORAGE = _python_dispatch._correct_storage_aliasing  # noqa: SLF001
_OP_OVERLOAD = torch._ops.OpOverload  # noqa: SLF001


# Note [An op that aliases nothing returns its output]
# torch's ``return_and_correct_aliasing`` reads the op's schema information (``get_alias_info``, cached
# per op by ``functools.cache``), asserts the types of ``func``, ``args`` and the outputs, aliases the
# storage of outputs that are read-only aliases of inputs (view ops), redoes an in-place view op on the
# wrapper, and returns the input an output writes (``add_``); when none of the three applies it returns
# ``out``. Its assertions cannot fail for an ``OpOverload`` and a tuple of arguments (the outputs are
# ``out`` or ``(out,)``, a tuple either way), and nothing it does before returning is seen by the program
# (no torch function is called, so no mode is offered one). So for such an op the answer is ``out``,
# given without interpreting the ~40 lines: a TwoTensor 50-op chain's first call, median of 25 in one
# process, 104.6 -> 99.6 ms of thread CPU time (/tmp/perf45-probes/ab_aliasing.py).
def return_and_correct_aliasing(func: Any, args: Any, kwargs: Any, out: Any) -> Any:
    """torch's ``return_and_correct_aliasing``: ``out`` for an op that aliases nothing (Note [An op that
    aliases nothing returns its output]); torch's body interpreted otherwise."""
    if _aliases_nothing(func, args):
        return out
    return call_function(current_run(), _ORIGINAL, (func, args, kwargs, out), None)


def _aliases_nothing(func: Any, args: Any) -> bool:
    if type(func) is not _OP_OVERLOAD or type(args) is not tuple or not _unpatched():
        return False
    try:
        info = _GET_ALIAS_INFO(func)
    except Exception:  # noqa: BLE001 - torch's body, interpreted, raises it where the program sees it
        return False
    return (not info.read_only_alias_match_indexes and not info.is_inplace_view_op
            and info.outs_write_aliases is None)


def _unpatched() -> bool:
    """Whether torch's function and the helpers it reads are the ones read at import."""
    return (_ORIGINAL.__code__ is _CODE and _GLOBALS.get("get_alias_info") is _GET_ALIAS_INFO
            and _GLOBALS.get("_correct_storage_aliasing") is _CORRECT_STORAGE
            and _GLOBALS.get("torch") is torch and torch._ops.OpOverload is _OP_OVERLOAD)  # noqa: SLF001


ALIASING_LOOKASIDES = {_ORIGINAL: return_and_correct_aliasing}
