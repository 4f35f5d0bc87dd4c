"""The NumPy bridge's error: a NumPy feature that cannot be traced through torch's NumPy layer.

Invariant: raised only for what jitcore cannot trace (object and string dtypes, NumPy functions that
``torch._numpy`` does not implement, NumPy's own random generator); errors NumPy semantics demand
(bad shapes, bad axes) reach the user as the exceptions ``torch._numpy`` raises for them.
"""

from __future__ import annotations

from jitcore.errors import JitcoreError

__all__ = ["UnsupportedNumPyError", "user_position"]


class UnsupportedNumPyError(JitcoreError, TypeError):
    """A NumPy feature inside a jitted function that jitcore cannot trace."""

    code = "JC-N001"


def user_position() -> str | None:
    """``file:line in function`` of the innermost interpreted frame outside torch and jitcore."""
    import os

    import torch

    from jitcore.diagnostics import JITCORE_DIR
    from jitcore.interpreter import current_run

    run = current_run()
    if run is None:
        return None
    libraries = (os.path.dirname(torch.__file__) + os.sep, JITCORE_DIR)
    for frame in reversed(run.frames):
        position = frame.position()
        if not position.filename.startswith(libraries):
            return str(position)
    return None


def unsupported(what: str, reason: str, *, hints: tuple[str, ...] = ()) -> UnsupportedNumPyError:
    """The error for ``what`` (``np.frompyfunc``, ``an object array``), placed at the user's line."""
    default_hints = (
        "compute this part outside the jitted function and pass the result in as an array",
        "or use the equivalent torch operation on the tensor (x.numpy() -> x)",
    )
    return UnsupportedNumPyError(f"{what}: {reason}", hints=hints or default_hints, where=user_position())
