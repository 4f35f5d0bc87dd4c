"""Checks that torch's backward formulas make on values, recorded into a backward trace as checks.

Some derivative formulas of aten refuse a gradient by its values: the complex ``svd_backward`` and
``linalg_eig_backward`` ``TORCH_CHECK`` that ``at::allclose`` of two tensors they computed holds (the
loss must not depend on the phase of the singular vectors or eigenvectors). Recording the backward on
fake tensors cannot answer ``allclose``. The answer that lets the formula go on is ``True``; the
backward trace records ``check_close`` on the same tensors in its place, which raises eager's kind of
error (``RuntimeError``) when the call's values are not close.

Invariants:
- ``allclose`` is answered only while a backward is recorded, where aten calls it only inside a
  ``TORCH_CHECK`` (its ``False`` raises, so ``True`` is the one answer under which the formula computes
  anything);
- the answer reaches the gradients only behind ``check_close`` on the call's own tensors: a call whose
  values are not close raises where eager raises, in the backward, and no gradient comes out of it.
"""

from __future__ import annotations

from typing import Any

import torch

from jitcore.ir import BoundSymbol, Inlined, Symbol, current_context, recorded_symbol
from jitcore.transforms.recording import resolve_flat

__all__ = ["CHECK_CLOSE", "check_close", "resolve_backward_call"]

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


def resolve_backward_call(symbol: Symbol, args: tuple, kwargs: dict) -> Any:
    """The call handler of a backward's recording: ``resolve_call``, with ``aten.allclose`` answered
    ``True`` behind a recorded ``check_close`` on the same arguments."""
    if symbol.fn is not _ALLCLOSE:
        return resolve_flat(symbol, args, kwargs)
    context = current_context()
    context.scopes[-1].append(BoundSymbol(CHECK_CLOSE, args, kwargs, None, (), context.source()))
    return Inlined(True, splice=True)
