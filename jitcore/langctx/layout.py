"""Layout reliance: which trace inputs' strides and storage offset the recorded ops depended on.

A torch-level call (``x.reshape(-1)``) decides its decomposition again on every call, from the
tensors it gets. An aten-level record does not: torch's composite kernels decided it while tracing,
on the shadows' layout (``reshape`` became ``aten.view`` because the shadow was contiguous; ``clone``
+ ``_unsafe_view`` otherwise; ``contiguous()`` became nothing at all), and ops such as
``aten.as_strided`` take absolute strides and a storage offset computed from that layout. Such a
record is only right for inputs laid out as the traced ones were: the prologue must then guard
their strides (``TensorSpec.strides``), and their storage offset where an op took absolute offsets
(``TensorSpec.storage_offset``; Note [Strides apart from the storage offset]).

``LayoutReliance`` collects this where the decomposition is recorded (``shadows.evaluate``, for every
symbol call on shadows): each shadow carries the set of trace inputs its layout derives from (the
inputs it was computed from: an output's strides follow its inputs' strides); a call that relies on
its arguments' layout (``relies_on_layout``) adds their sources to ``relied``. The grad transform
and ``evaluate`` add the calls that vanished: a call that returned its input itself (``contiguous()``
on a contiguous shadow) made that choice from the input's layout; at torch level too, since the
trace then names the result as the input (``x = x.contiguous()``) for the code after it.

Invariants:
- ``relied`` over-approximates, never under-approximates: a source is dropped only where no layout
  can flow (a shadow made from no input has no sources);
- sources are *keys* of trace inputs, compared by identity: pass 1 uses its input proxies; the grad
  transform seeds its replayed inputs with the pass-1 proxies they stand for, so reliance found in
  the forward or backward trace maps to the same prologue input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._ops import OpOverload

__all__ = ["LAYOUT_OPS", "OFFSET_OPS", "LayoutReliance", "relies_on_layout"]

_aten = torch.ops.aten

# Aten operators whose result (or whether they succeed) depends on their input's strides or
# storage offset, not only on its shape and values: view-by-size (fails on a layout it cannot
# view), explicit strides/offset (reads other elements for another layout), ``view(dtype)`` (checks
# the last stride). View ops computed from the input's own strides (transpose, slice, select,
# diagonal, expand, unfold, permute, ...) are right for any layout and are not listed.
LAYOUT_OPS = frozenset(
    {
        _aten.view,
        _aten.view_copy,
        _aten._unsafe_view,
        _aten._reshape_alias,
        _aten.as_strided,
        _aten.as_strided_,
        _aten.as_strided_copy,
        _aten.as_strided_scatter,
        _aten.set_,
    }
)
# Note [Strides apart from the storage offset]
# Of the layout ops, only those that take absolute strides with an offset (``as_strided``: its
# ``storage_offset`` argument, or the input's own where it is None, read again on every call) and
# ``set_`` depend on where the input starts in its storage. A view by size, ``_reshape_alias`` and a
# decision to copy (or not) for a memory format read the strides alone and keep the input's offset as
# it is, whatever it is. So reliance on the offset is kept apart (``LayoutReliance.relied_offset``):
# an input whose strides a record relied on is guarded on its strides, and on its storage offset
# only when an op of this set relied on it, so a window of a growing buffer (a sliding-window KV cache,
# ``full[:, :, -w:]``: the same strides at another offset on every prompt length) keeps its entry.
OFFSET_OPS = frozenset({_aten.as_strided, _aten.as_strided_, _aten.as_strided_copy, _aten.as_strided_scatter,
                        _aten.set_})
# Copies whose *being a copy* was decided from the layout when they name a memory format
# (``contiguous()`` on a non-contiguous shadow records ``clone(memory_format=contiguous_format)``;
# on a contiguous one it records nothing and returns the input).
_FORMAT_COPIES = frozenset({_aten.clone, _aten._to_copy})


# Conversions that return their input itself when its dtype and device already match (both guarded).
_DTYPE_DEVICE_CONVERSIONS = frozenset(
    {"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "short", "char", "byte",
     "bool", "cpu", "cuda"}
)


def relies_on_layout(fn: Any, kwargs: dict) -> bool:
    """Whether a recorded call of ``fn`` depends on its tensor arguments' strides or storage offset."""
    if not isinstance(fn, OpOverload):
        return False  # torch-level calls decide again on every call, from the tensors they get
    packet = fn.overloadpacket
    if packet in LAYOUT_OPS:
        return True
    fmt = kwargs.get("memory_format")
    return packet in _FORMAT_COPIES and fmt is not None and fmt is not torch.preserve_format


class LayoutReliance:
    """Per trace family: the inputs each shadow's layout derives from, and those relied on.

    Attributes:
        relied: ``id`` of each input key whose strides a recorded call relied on.
        relied_offset: ``id`` of each input key whose storage offset a recorded call relied on too
            (Note [Strides apart from the storage offset]).
    """

    __slots__ = ("_keys", "_sources", "relied", "relied_offset")

    _NONE: frozenset[int] = frozenset()

    def __init__(self) -> None:
        self._sources: dict[int, tuple[torch.Tensor, frozenset[int]]] = {}
        self._keys: dict[int, Any] = {}  # keeps the keys alive, so that their ids stay theirs
        self.relied: set[int] = set()
        self.relied_offset: set[int] = set()

    def seed(self, shadow: torch.Tensor, key: Any) -> None:
        """``shadow`` is the trace input ``key`` (compared by identity)."""
        self._keys[id(key)] = key
        self._sources[id(shadow)] = (shadow, frozenset((id(key),)))

    def relies_on(self, key: Any) -> bool:
        """Whether a recorded call relied on the strides of the input ``key``."""
        return id(key) in self.relied and self._keys.get(id(key)) is key

    def relies_on_offset(self, key: Any) -> bool:
        """Whether a recorded call relied on the storage offset of the input ``key``."""
        return id(key) in self.relied_offset and self._keys.get(id(key)) is key

    def sources(self, shadow: torch.Tensor) -> frozenset[int]:
        found = self._sources.get(id(shadow))
        return found[1] if found is not None and found[0] is shadow else self._NONE

    def record(self, fn: Any, kwargs: dict, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        """One call on shadows: its outputs derive their layout from its inputs' sources; the call
        may rely on those layouts itself (``relies_on_layout``)."""
        sources = self._NONE
        for shadow in inputs:
            found = self.sources(shadow)
            if found:
                sources = sources | found if sources else found
        if not sources:
            return
        if relies_on_layout(fn, kwargs):
            self.relied.update(sources)
            if isinstance(fn, OpOverload) and fn.overloadpacket in OFFSET_OPS:
                self.relied_offset.update(sources)
        for out in outputs:
            if not any(out is i for i in inputs):  # an in-place result keeps its own sources
                self._sources[id(out)] = (out, sources)

    def returned_inputs(
        self, fn: Any, kwargs: dict, inputs: list[torch.Tensor], outputs: list[torch.Tensor]
    ) -> None:
        """A call returned an argument itself (checked by the caller to write no input): outside the
        conversions that decide by dtype or device alone, it decided so from the layout."""
        if getattr(fn, "__name__", None) in _DTYPE_DEVICE_CONVERSIONS and "memory_format" not in kwargs:
            return
        for out in outputs:
            if any(out is i for i in inputs):
                self.decided_by(out)

    def decided_by(self, shadow: torch.Tensor) -> None:
        """A decision was made from ``shadow``'s layout (a call that returned its input itself)."""
        self.relied.update(self.sources(shadow))
