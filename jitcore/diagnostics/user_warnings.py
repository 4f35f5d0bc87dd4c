"""Warnings jitcore gives about the user's code, attributed to the user's line.

``warnings.warn`` blames the frame ``stacklevel`` levels up, which for a call jitcore meets while
interpreting is jitcore's own code. These helpers call ``warnings.warn_explicit`` with the user's
file and line instead, so that the printed location, ``-W`` filters by module and ``pytest.warns``
all see the user's line.
Invariant: a warning made here names a file and line of the user's code (never jitcore's), and
repeats per location as Python's own warnings do (one registry per file).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from types import FrameType

from jitcore.diagnostics import JITCORE_DIR
from jitcore.ir import SourceFrame

__all__ = ["warn_at_caller", "warn_user"]

_REGISTRIES: dict[str, dict] = {}


def warn_user(
    message: str, source: Sequence[SourceFrame] | None, category: type[Warning] = UserWarning
) -> None:
    """Warn at the innermost frame of ``source`` (a bound symbol's user stack, outermost first).

    Without a user frame (``source`` empty or None) the warning goes to the first caller outside jitcore.
    """
    if not source:
        warn_at_caller(message, category)
        return
    frame = source[-1]
    warnings.warn_explicit(
        message,
        category,
        frame.filename,
        frame.lineno,
        module=_module_name(frame.filename),
        registry=_REGISTRIES.setdefault(frame.filename, {}),
    )


def warn_at_caller(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn at the innermost frame of the running Python stack that is neither jitcore's nor importlib's."""
    frame = _first_user_frame(sys._getframe(1))
    if frame is None:
        warnings.warn(message, category, stacklevel=2)
        return
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=frame.f_globals.get("__name__"),
        registry=frame.f_globals.setdefault("__warningregistry__", {}),
        module_globals=frame.f_globals,
    )


def _first_user_frame(frame: FrameType | None) -> FrameType | None:
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((JITCORE_DIR, "<frozen", "<jitcore")):
            return frame
        frame = frame.f_back
    return None


def _module_name(filename: str) -> str:
    return os.path.splitext(os.path.basename(filename))[0] or filename
