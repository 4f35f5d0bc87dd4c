"""Scaled dot-product attention on nested jagged tensors, traced on CPU (the math backend).

torch's NJT SDPA (``torch.nested._internal.sdpa.jagged_scaled_dot_product_attention``, reached from
NestedTensor's ``__torch_function__``) takes the math backend on CPU: it splits q/k/v by their
offsets' values into a *strided* nested tensor (``torch.nested.as_nested_tensor``) and runs
``torch._scaled_dot_product_attention_math`` on it. A strided nested tensor has no fake tensor, so
that part cannot be traced as written (Note [Jagged attention on components]). While tracing, the
function is replaced by ``jagged_sdpa``: the same math on the components as plain tensors.

Invariants:
- outside a trace, and for every call that would not take torch's math branch without dropout
  (flash/efficient backends on CUDA, the dense path for a ragged batch dimension, dropout, errors),
  torch's own function runs (interpreted), unchanged;
- the split by the offsets' values is a value read of the subclass's code, checked on every call
  (jitcore/jit/value_reads.py): a call with other lengths never takes this entry's answer; in a pass
  with symbolic sizes the lengths are the program's read, unbacked symbols once seen to change, and
  their sum is checked against the values' size (Note [Reads of spliced subclass code in a symbolic
  pass]).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch.nested._internal import sdpa as _sdpa
from torch.nested._internal.nested_tensor import NestedTensor, nested_view_from_values_offsets_lengths

from jitcore.interpreter import current_run
from jitcore.ir import current_context

__all__ = ["JAGGED_LOOKASIDES", "jagged_sdpa"]

_JAGGED_SDPA = _sdpa.jagged_scaled_dot_product_attention


def _copy(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` as another function object: interpreted without reaching its own lookaside."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


_TORCHS_SDPA = _copy(_JAGGED_SDPA)


def jagged_sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    """``jagged_scaled_dot_product_attention`` while tracing: its math branch on the components
    (Note [Jagged attention on components]); torch's own function otherwise."""
    run = current_run()
    arguments = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if run is None or current_context() is None:
        return _JAGGED_SDPA(*arguments)
    return run.call(_attention, *arguments)


# Note [Jagged attention on components]
# torch 2.13's math branch of NJT SDPA (sdpa.py, ``backend_choice == SDPBackend.MATH``) turns each of
# q/k/v into a strided nested tensor whose components are ``values.split(lengths)[i].transpose(0, 1)``
# (lengths: the offsets' differences, read), runs ``_scaled_dot_product_attention_math`` on those, and
# views the result's values ``(total, d1, d2)`` as an NJT over the query's offsets. ``_attention``
# below (interpreted: every op is traced) does the same per component with plain tensors and
# concatenates the outputs: the math kernel on one component is the kernel the strided nested tensor
# runs for it (equal to eager up to rounding, ~1 ulp). It is taken where torch takes that branch
# (the same checks, in the same order, on the autocast arguments), and without dropout: a dropout
# mask drawn per component is not eager's (one draw over the nested tensor); torch's function runs
# then, and its strided nested tensor makes the call run eagerly.
def _attention(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float, is_causal: bool,
               scale: Any, enable_gqa: bool) -> Any:
    arguments = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    q, k, v, mask = _sdpa._autocast(query, key, value, attn_mask)  # noqa: SLF001
    _sdpa._validate_sdpa_input(q, k, v, mask, dropout_p, is_causal, scale)  # noqa: SLF001
    if dropout_p != 0.0 or not all(isinstance(t, NestedTensor) for t in (q, k, v)) \
            or (q.dim() > 3 and k.dim() > 3 and v.dim() > 3 and q._ragged_idx == 1) \
            or _sdpa._select_sdp_backend(q, k, v, mask, dropout_p, is_causal, enable_gqa) \
            is not _sdpa.SDPBackend.MATH or _sdpa._is_computing_meta_flops(q):  # noqa: SLF001
        return _TORCHS_SDPA(*arguments)
    d1, d2 = q._size[1], v._size[-1]  # noqa: SLF001
    outputs = [
        torch._scaled_dot_product_attention_math(qi, ki, vi, mask, dropout_p, is_causal, scale=scale)[0]
        for qi, ki, vi in zip(_components(q), _components(k), _components(v), strict=True)
    ]
    out = torch.cat([o.transpose(0, 1).contiguous() for o in outputs]).view(-1, d1, d2)
    # interpreted, as eagerly it is torch's code: Note [The output's cached lengths]
    return current_run().call(
        nested_view_from_values_offsets_lengths, out, q.offsets(), lengths=q.lengths(),
        min_seqlen=q._maybe_min_seqlen, max_seqlen=q._maybe_max_seqlen,  # noqa: SLF001
    ).transpose(1, 2)


# Note [The output's cached lengths]
# ``_attention`` is jitcore's own code, so it runs natively: its torch calls on proxies are recorded
# through the proxies, but a call without one runs torch's kernel. The output keeps the query's cached
# extreme lengths (an NJT built from a list has them), stored by ``_store_val_in_tensor`` as
# ``torch.zeros(length, 0)``; in a pass with symbolic sizes ``length`` is a SymInt and the CPU kernel
# raised "SymIntArrayRef expected to contain only concrete integers": the pass traced static shapes,
# an entry per ragged structure. ``nested_view_from_values_offsets_lengths`` is interpreted instead, so
# that call is recorded as the program's own ``torch.zeros`` is.


def _components(nt: Any) -> list[torch.Tensor]:
    """The components of the strided nested tensor torch's math branch makes of ``nt``."""
    lengths = nt._offsets[1:] - nt._offsets[:-1]  # noqa: SLF001
    pieces = torch.transpose(nt, 1, 2).values().split(list(lengths), dim=0)
    return [p.transpose(0, 1).contiguous() for p in pieces]


JAGGED_LOOKASIDES: dict[Any, Any] = {_JAGGED_SDPA: jagged_sdpa}
