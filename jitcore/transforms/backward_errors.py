"""A backward torch's autograd could not derive, kept as one that raises.

When autograd raises while the grad transform records the backward (a derivative torch does not
implement, a user ``backward`` or ``__torch_dispatch__`` that raises), eager raises that error in
``backward()``: the backward trace is then one ``RAISE`` record, which raises a fresh copy of the
error with the frames autograd ran, on every backward (Note [A backward that raises],
jitcore/transforms/autograd.py). Invariant: the kept frames are finished and hold no locals.

An error jitcore's own code raised while recording (a bug of jitcore's, not the program's) is not
eager's: it is kept as a ``BackwardRecordingError`` (JC-I002) naming the user's line whose backward
was being derived, its cause the original error (Note [jitcore's own errors while recording a
backward]).
"""

from __future__ import annotations

import dis
import os
from types import TracebackType
from typing import Any

import torch

from jitcore.diagnostics import JITCORE_DIR
from jitcore.diagnostics.boundary import replays_backward_errors
from jitcore.diagnostics.tracebacks import entries
from jitcore.dispatch.declined import raised_for_eager
from jitcore.interpreter.errors import InterpreterError
from jitcore.ir import recorded_symbol

__all__ = ["RAISE", "BackwardRecordingError", "jitcores_own", "kept_traceback", "raise_backward_error",
           "recording_error"]


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
        fresh.__cause__, fresh.__suppress_context__ = error.__cause__, error.__suppress_context__
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


class BackwardRecordingError(InterpreterError):
    """jitcore's own code raised while it recorded a backward: a jitcore bug, not the program's error.
    Its ``__cause__`` is the error jitcore's code raised."""

    def __reduce__(self) -> tuple:  # copies (raise_backward_error) rebuild it from its parts
        return (type(self), (self.summary, self.where, self.hint))


# Note [jitcore's own errors while recording a backward]
# An error autograd raises while jitcore records a backward is kept and raised again by every
# backward() as eager's own (Note [A backward that raises], autograd.py). jitcore's own code runs
# there too (its dispatch mode, the recording's call handler, the backward-effects watch), and an error
# of its own was shown as if the user's backward had raised it. Which code raised is read from the
# traceback, after autograd's engine frame:
# - the innermost entry is jitcore's and its instruction is not a call or a raise: jitcore's own
#   Python failed (an attribute, a subscript, an operator, an unpacking). Interpreted user code
#   never ends there: the interpreter puts the user's frame innermost for what it raises (measured:
#   ``None + 1``, ``{}["k"]``, a missing attribute in a ``__torch_dispatch__``);
# - an AssertionError raised in jitcore's code: its invariants (ReplayInconsistent, which the jit
#   hook handles, excepted);
# - no entry after the engine is the program's (every one jitcore's or torch's), the innermost is
#   jitcore's, and the error is not a RuntimeError: jitcore made the failing call. A RuntimeError
#   there is torch's own (a backward formula's op run on shadows: langctx/shadows.py raises it again).
# An error jitcore raises where eager's dispatcher would (every override declined the call) is eager's
# wherever it is raised (Note [An error raised for eager], dispatch/declined.py).
# Everything else is kept as eager's: a call or a raise in jitcore's code under a user's frame runs
# the program's call (``int("q")``, ``len(5)`` or an aten op in a ``__torch_dispatch__`` end in
# jitcore's call sites), so an error there may be the program's; such a jitcore bug is still shown
# as the user's (the classification errs towards eager's errors, never the other way).
_ENGINE = os.path.join(os.path.dirname(torch.__file__), "autograd", "graph.py")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_CALLING = frozenset({"CALL", "PRECALL", "CALL_FUNCTION_EX", "CALL_KW", "CALL_INTRINSIC_1",
                      "RAISE_VARARGS", "RERAISE", "SEND", "YIELD_VALUE"})


def jitcores_own(exc: BaseException) -> bool:
    """Whether ``exc``, raised while autograd ran a backward jitcore records, was raised by jitcore's
    own code rather than by the program, its subclasses' code or torch (see the Note above)."""
    if isinstance(getattr(exc, "code", None), str) or type(exc).__name__ == "ReplayInconsistent":
        return False
    if raised_for_eager(exc):  # Note [An error raised for eager] (dispatch/declined.py)
        return False
    found = entries(exc.__traceback__)
    engine = [i for i, e in enumerate(found) if e.tb_frame.f_code.co_filename == _ENGINE]
    after = found[engine[-1] + 1 :] if engine else found[1:]
    if not after or not _jitcores(after[-1]):
        return False
    if isinstance(exc, AssertionError) or _instruction(after[-1]) not in _CALLING:
        return True
    programs = [e for e in after if not _jitcores(e) and not _filename(e).startswith(_TORCH_DIR)]
    return not programs and not isinstance(exc, RuntimeError)


def _filename(entry: TracebackType) -> str:
    return entry.tb_frame.f_code.co_filename


def _jitcores(entry: TracebackType) -> bool:
    return _filename(entry).startswith(JITCORE_DIR)


def _instruction(entry: TracebackType) -> str | None:
    for instruction in dis.get_instructions(entry.tb_frame.f_code):
        if instruction.offset == entry.tb_lasti:
            return instruction.opname
    return None


def recording_error(exc: BaseException, source: Any) -> BackwardRecordingError:
    """The JC-I002 error kept in place of ``exc``, jitcore's own, naming the user's line whose
    backward was being recorded (``source``: its user stack, or None)."""
    frame = source[-1] if source else None
    where = f"{frame.filename}:{frame.lineno}" if frame is not None else ""
    error = BackwardRecordingError(
        f"jitcore's own code raised {type(exc).__name__}: {exc} while it derived the backward of "
        "your program; this is a jitcore bug, not an error of your program or of its backward",
        where, "run the function eagerly (jfn.fn) to continue, and report it (docs/errors/JC-I002.md)")
    error.__cause__ = exc
    return error


RAISE = recorded_symbol(raise_backward_error, langctx="grad",
                        path="jitcore.transforms.backward_errors.raise_backward_error")
