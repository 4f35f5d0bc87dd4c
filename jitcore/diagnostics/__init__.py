"""Diagnostics: the hooks the jit and the transforms call while they work, below them.

``context`` (what jitcore knows about an error, attached to the exception), ``boundary`` (what an
exception looks like when it leaves a jitted function), ``tracebacks`` (entries made to order),
``user_warnings`` (warnings at the user's line), ``markers`` (``breakpoint()`` in a traced program)
and ``logs`` (``JITCORE_LOGS``).

Invariants: nothing here changes how a program is traced or run; this package imports only the IR
below it (and the standard library), never the jit, the transforms or the debugging tools above:
where it must recognise their frames, their owners register them (``boundary.replays_backward_errors``,
``boundary.runs_as_function_apply``). The tools that read a jitted function (explain, the stepping
debugger, reports) are ``jitcore/debug/``, above the jit.
"""

from __future__ import annotations

import os

__all__ = ["JITCORE_DIR"]

# jitcore's package directory, with a trailing separator: frames of files under it are jitcore's own.
JITCORE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
