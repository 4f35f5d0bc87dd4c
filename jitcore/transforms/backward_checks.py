"""Checks that torch's backward formulas make on values, recorded into a backward trace as checks.

Some derivative formulas of aten refuse a gradient by its values: the complex ``svd_backward`` and
``linalg_eig_backward`` ``TORCH_CHECK`` that ``at::allclose`` of two tensors they computed holds (the
loss must not depend on the phase of the singular vectors or eigenvectors). Recording the backward on
fake tensors cannot answer ``allclose``. The answer that lets the formula go on is ``True``; the
backward trace records ``check_close`` on the same tensors in its place, which raises eager's kind of
error (``RuntimeError``) when the call's values are not close.

MaskedTensor's own backward code compares masks the same way: ``_tensors_match(mask_a, mask_b)``
reads ``torch.eq(a, b).all().item()``, and every caller raises a ValueError when it is False. Inside that
function, the read is answered ``True`` behind ``check_masks_match`` on the same masks (Note [Mask checks
in a backward]).

Invariants:
- ``allclose`` is answered only while a backward is recorded, where aten calls it only inside a
  ``TORCH_CHECK`` (its ``False`` raises, so ``True`` is the one answer under which the formula computes
  anything);
- the answer reaches the gradients only behind ``check_close`` on the call's own tensors: a call whose
  values are not close raises where eager raises, in the backward, and no gradient comes out of it.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from jitcore.errors import DataDependentError
from jitcore.interpreter import current_run
from jitcore.ir import BoundSymbol, Inlined, Symbol, current_context, recorded_symbol
from jitcore.transforms.recording import resolve_flat

__all__ = ["CHECK_CLOSE", "CHECK_MASKS_MATCH", "check_close", "check_masks_match", "resolve_backward_call"]

_ALLCLOSE = torch.ops.aten.allclose.default


def check_close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5, atol: float = 1e-8,
                equal_nan: bool = False) -> None:
    """What the backward trace runs in place of a backward formula's ``TORCH_CHECK(allclose(...))``.

    Raises:
        RuntimeError: the values are not close (eager's backward raises a RuntimeError there too).
    """
    if not torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan):
        raise RuntimeError(
            "a check of torch's backward formula failed (allclose of two tensors it computed is False): "
            "for svd and eig of complex inputs, the loss depends on the phase of the singular vectors or "
            "eigenvectors, which makes the gradient ill-defined"
        )


CHECK_CLOSE = recorded_symbol(check_close, langctx="jitcore", tags=frozenset({"check"}),
                              path="jitcore.transforms.backward_checks.check_close")


def check_masks_match(a: torch.Tensor, b: torch.Tensor) -> None:
    """What the backward trace runs in place of MaskedTensor's mask comparison (``_tensors_match``).

    Raises:
        ValueError: the masks differ (each of MaskedTensor's callers raises a ValueError then).
    """
    if a.dim() != b.dim() or not bool(torch.eq(a, b.to(a.dtype)).all()):
        raise ValueError("Input masks must match. If you need support for this, please open an issue on "
                         "Github.")


CHECK_MASKS_MATCH = recorded_symbol(check_masks_match, langctx="jitcore", tags=frozenset({"check"}),
                                    path="jitcore.transforms.backward_checks.check_masks_match")


def resolve_backward_call(symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """The call handler of a backward's recording: ``resolve_call``, with ``aten.allclose`` answered
    ``True`` behind a recorded ``check_close`` on the same arguments, and MaskedTensor's mask
    comparison behind ``check_masks_match``."""
    if symbol.fn is _ALLCLOSE:
        context = current_context()
        context.scopes[-1].append(BoundSymbol(CHECK_CLOSE, args, kwargs, None, (), context.source()))
        return Inlined(True, splice=True)
    try:
        return resolve_flat(symbol, args, kwargs)
    except DataDependentError:
        masks = _compared_masks() if symbol.fn is torch.Tensor.item else None
        if masks is None:
            raise
    context = current_context()
    context.scopes[-1][:] = [BoundSymbol(CHECK_MASKS_MATCH, masks, {}, None, (), context.source())]
    return Inlined(True, splice=True)  # the check takes the read's place


# Note [Mask checks in a backward]
# MaskedTensor's binary ops, its softmax backward and ``where`` check that their operands' masks are
# equal with ``_tensors_match(a, b, exact=True)``: ``torch.eq(a, b).all().item()``, a value the
# backward's recording does not have (its masks come from the forward and from the tangent). The
# gradient of a MaskedTensor loss taken outside the function ran the whole call eagerly. Every caller
# raises a ValueError when the masks differ, so ``True`` is the one answer under which the backward
# computes anything; the backward trace checks it on the call's masks, and raises eager's kind of
# error when they differ. Only that function's read is answered (found on the Python stack: the
# backward's recording interprets MaskedTensor's code).
def _compared_masks() -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(a, b)`` of MaskedTensor's ``_tensors_match(a, b, exact=True)`` when the read is that function's
    own: the innermost interpreted frame is its (the backward's recording interprets the subclass's
    code, jitcore/dispatch/resolver.py)."""
    core = sys.modules.get("torch.masked.maskedtensor.core")
    code = getattr(getattr(core, "_tensors_match", None), "__code__", None)
    run = current_run()
    frame = run.frames[-1] if run is not None and run.frames else None
    if code is None or frame is None or frame.code is not code:
        return None
    a, b, exact = (frame.fast[code.co_varnames.index(n)] for n in ("a", "b", "exact"))
    if exact is not True or not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return None
    return a, b
