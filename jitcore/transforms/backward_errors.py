"""A backward torch's autograd could not derive, kept as one that raises.

When autograd raises while the grad transform records the backward (a derivative torch does not
implement, a user ``backward`` or ``__torch_dispatch__`` that raises), eager raises that error in
``backward()``: the backward trace is then one ``RAISE`` record, which raises a fresh copy of the
error with the frames autograd ran, on every backward (Note [A backward that raises],
jitcore/transforms/autograd.py). Invariant: the kept frames are finished and hold no locals.
"""

from __future__ import annotations

from typing import Any

from jitcore.diagnostics.boundary import replays_backward_errors
from jitcore.ir import recorded_symbol

__all__ = ["RAISE", "kept_traceback", "raise_backward_error"]


@replays_backward_errors
def raise_backward_error(error: BaseException, traceback: Any = None) -> None:
    """What a backward trace runs when torch's autograd could not differentiate the forward (a
    derivative that is not implemented, a user ``backward`` or ``__torch_dispatch__`` that raises):
    eager raises the error in ``backward()``, and so does this, a fresh copy each time, with the
    frames autograd ran when it raised (``traceback``: the user's ``backward`` or
    ``__torch_dispatch__`` line; jitcore's error boundary shows them as eager does)."""
    import copy

    try:
        fresh = copy.copy(error)
        fresh.__notes__ = list(getattr(error, "__notes__", ()))
        if not fresh.__notes__:
            del fresh.__notes__
    except Exception:  # noqa: BLE001 - an exception that cannot be copied is raised itself,
        fresh = error  # without what the error boundary attached when it was last raised
        vars(fresh).pop("_jitcore_noted", None)
        notes = [n for n in getattr(fresh, "__notes__", ()) if not str(n).startswith("jitcore: ")]
        if hasattr(fresh, "__notes__"):
            fresh.__notes__ = notes
    raise fresh.with_traceback(traceback)


def kept_traceback(exc: BaseException) -> Any:
    """The entries below ``_record_backward`` of an error autograd raised: finished frames, whose
    locals (shadows, the replay) are cleared so that the cache entry does not keep them alive."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    entry = tb
    while entry is not None:
        try:
            entry.tb_frame.clear()
        except RuntimeError:  # a frame still running (never expected here): keep its locals
            pass
        entry = entry.tb_next
    return tb


RAISE = recorded_symbol(raise_backward_error, langctx="grad",
                        path="jitcore.transforms.backward_errors.raise_backward_error")
