"""The text of a traced nested jagged tensor: ``print(nt)``, ``str(nt)`` and ``f"{nt}"`` made on each call.

``NestedTensor.__repr__`` (torch.nested) shows the outer size with its ragged dimension's nested int
(``j3``: the id torch's registry gives the offsets tensor), the offsets' values and whether the values are
contiguous. While tracing the offsets' values are not known and the pass's nested int is its own, so such
a text stopped tracing with JC-T001 (the call ran eagerly, the class's dispatch with it on every call).
The text is now made after each run of the computation (Note [A nested jagged tensor's text]);
``repr(nt)`` still interprets the class's ``__repr__``.

Invariant: ``jagged_repr`` of a call's tensors is the text ``NestedTensor.__repr__`` makes of the NJT
holding them, where the ragged source (offsets, or lengths) is the caller's own tensor, so that torch's
registry gives it the caller's nested int; any other NJT (one made inside with new offsets, whose nested
int eager takes from a global counter at construction), one requiring grad (its text names a ``grad_fn``
object), or a class with a ``__repr__`` or ``__str__`` of its own keeps the refusal.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from jitcore.interpreter import current_run
from jitcore.ir import current_context
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.text import Field, TextProxy

__all__ = ["jagged_repr", "jagged_text"]

_MODULE = "torch.nested._internal.nested_tensor"


# Note [A nested jagged tensor's text]
# ``print(nt.sin())`` inside the function (/tmp/sub59-probes/p_text.py ``njt_print``, ``njt_fstr``): the text
# is rendered per call from the ragged source as the call holds it (the caller's own tensor object: torch's
# registry answers its nested int, ``get_tensor_symint``, with the id eager's NJT has), a clone of the
# offsets taken where the text is made (their values), and the values (their shape and contiguity).
# ``jagged_repr`` builds ``NestedTensor.__repr__``'s string from those as ``NestedTensor.__new__`` builds
# ``_size`` (``(B, *values.shape[:r], j, *values.shape[r + 1:])``, r = ragged_idx - 1). Running it reaches
# no ``__torch_dispatch__`` (a warm call runs none of the class's code).
def jagged_repr(ragged_source: torch.Tensor, offsets: torch.Tensor, values: torch.Tensor, *,
                ragged_idx: int, has_lengths: bool) -> str:
    """``NestedTensor.__repr__`` of the NJT of ``values`` and ``offsets`` whose nested int is
    ``ragged_source``'s, without grad (plain tensors)."""
    nested = sys.modules[_MODULE]
    ragged_size = nested.get_tensor_symint(ragged_source, coeff=1)
    r = ragged_idx - 1
    size = (offsets.shape[0] - 1, *values.shape[:r], ragged_size, *values.shape[r + 1:])
    contiguous = False if has_lengths else values.is_contiguous()
    return f"NestedTensor(size={size}, offsets={offsets}, contiguous={contiguous})"


def jagged_text(value: Any) -> TextProxy | None:
    """The text of ``value``, a traced NJT without grad whose class writes its text with
    ``NestedTensor.__repr__`` and whose ragged source is the caller's own tensor; None for any other."""
    nested = sys.modules.get(_MODULE)
    if nested is None or not isinstance(value, SubclassTensorProxy) or value.carries_grad():
        return None
    cls = value.python_type
    if cls is not nested.NestedTensor:
        return None
    inner = value.inner_tensors()
    values, offsets, lengths = inner.get("_values"), inner.get("_offsets"), inner.get("_lengths")
    if values is None or offsets is None:
        return None
    source = offsets if lengths is None else lengths
    if id(source) not in current_context().values.nested_int_inputs:  # made inside: eager's id unknown
        return None
    ragged_idx = _ragged_idx(value)
    if ragged_idx is None:
        return None
    run = current_run()
    shown = (source, run.call(torch.clone, offsets), values)

    def render(ragged: torch.Tensor, offsets_now: torch.Tensor, values_now: torch.Tensor) -> str:
        return jagged_repr(ragged, offsets_now, values_now, ragged_idx=ragged_idx,
                           has_lengths=lengths is not None)

    return TextProxy((Field(shown, 0, "", render),))


def _ragged_idx(value: SubclassTensorProxy) -> int | None:
    """The ragged dimension of a traced NJT, from its flatten ctx (None: not found)."""
    _names, ctx = value.inner_flatten()
    ragged_idx = ctx.get("ragged_idx") if isinstance(ctx, dict) else None
    return ragged_idx if type(ragged_idx) is int else None
