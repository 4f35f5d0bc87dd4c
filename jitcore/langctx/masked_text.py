"""The text of a traced MaskedTensor: ``print(m)``, ``repr(m)``, ``str(m)`` and ``f"{m}"`` made on each call.

``MaskedTensor.__repr__`` (torch.masked) formats each element's value with ``item()`` and writes ``--``
where the mask is False. While tracing, its values are not known: interpreted, each ``item()`` was a read
guarded by value (``repr(m)``: a new entry for every call whose values differ), and ``print(m)``,
``str(m)`` and ``f"{m}"`` stopped tracing with JC-T001 (the call ran eagerly, the class's dispatch with
it on every call). The text is now made after each run of the computation, from snapshots of the value's
data and mask (plain tensors the computation takes where the text is made), by torch's own
``_masked_tensor_str`` around the lines ``__repr__`` adds (Note [A MaskedTensor's text]).

Invariant: ``masked_repr(data, mask)`` of a call's snapshots is the text ``MaskedTensor.__repr__`` makes of
the MaskedTensor holding them, for every layout the text is made for here (strided data and mask);
another layout, or a class with a ``__repr__`` or ``__str__`` of its own, keeps the class's text as before.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from jitcore.interpreter import current_run
from jitcore.interpreter.calls import call_function
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.text import Field, TextProxy

__all__ = ["masked_lookasides", "masked_repr", "masked_text"]

_MODULE = "torch.masked.maskedtensor.core"
_FORMATTER = "{0:8.4f}"  # MaskedTensor.__repr__'s


# Note [A MaskedTensor's text]
# ``print(m * 2)`` inside the function (/tmp/ao58-probes/p_text.py ``mt_print``, ``mt_fstr``, ``mt_repr``):
# the data and the mask as the text finds them are cloned into the computation (an in-place op after the
# text must not change it; ``detach`` first: the text shows no gradient) and become the text's fields
# (a ``Field`` with ``render``, jitcore/proxies/text.py); each call's text is ``masked_repr`` of that call's
# tensors, made where the text leaves the program (a print in program order, an output, a log record).
# ``masked_repr`` is ``MaskedTensor.__repr__`` over plain tensors: ``get_data()`` is ``_masked_data.detach()``
# and ``get_mask()`` is ``_masked_mask``, so the same ``_masked_tensor_str`` makes the same characters, and
# running it reaches no ``__torch_dispatch__`` (a warm call runs none of the class's code).
def masked_repr(data: torch.Tensor, mask: torch.Tensor) -> str:
    """``MaskedTensor.__repr__`` of the MaskedTensor of ``data`` and ``mask`` (strided), from plain
    tensors."""
    if data.dim() == 0:
        value = data.item()
        shown = _FORMATTER.format(value) if isinstance(value, float) else str(value)
        if not mask.item():
            shown = "--"
        return "MaskedTensor(" + shown + ", " + str(mask.item()) + ")"
    text = sys.modules[_MODULE]._masked_tensor_str(data, mask, _FORMATTER)  # noqa: SLF001 - torch's own text
    text = "\n".join("  " + line for line in text.split("\n"))
    return "MaskedTensor(\n" + text + "\n)"


def masked_text(value: Any) -> TextProxy | None:
    """The text of ``value``, a traced MaskedTensor whose class writes its text with
    ``MaskedTensor.__repr__``, made from each call's data and mask; None for any other value."""
    core = sys.modules.get(_MODULE)
    if core is None or not isinstance(value, SubclassTensorProxy):
        return None
    cls = value.python_type
    own = _text_method(cls, "__repr__")
    if not issubclass(cls, core.MaskedTensor) or own is not core.MaskedTensor.__repr__ \
            or _text_method(cls, "__str__") is not None:
        return None
    inner = value.inner_tensors()
    data, mask = inner.get("_masked_data"), inner.get("_masked_mask")
    if data is None or mask is None or data.layout is not torch.strided or mask.layout is not torch.strided:
        return None
    run = current_run()
    shown = tuple(run.call(torch.clone, run.call(torch.Tensor.detach, t)) for t in (data, mask))
    return TextProxy((Field(shown, 0, "", masked_repr),))


def _text_method(cls: type, name: str) -> Any:
    """``cls``'s ``name`` found before ``torch.Tensor`` in its MRO (None: torch.Tensor's or none)."""
    for klass in cls.__mro__:
        if klass is torch.Tensor:
            return None
        if name in vars(klass):
            return vars(klass)[name]
    return None


def masked_lookasides() -> dict[Any, Any]:
    """``MaskedTensor.__repr__`` of a traced value: its text made per call (``repr(m)``, ``f"{m!r}"``)."""
    core = sys.modules.get(_MODULE)
    if core is None:
        return {}
    original = core.MaskedTensor.__repr__

    def repr_(self: Any) -> Any:
        text = masked_text(self)
        if text is not None:
            return text
        return call_function(current_run(), original, (self,), None)  # another layout: interpreted as before

    return {original: repr_}
