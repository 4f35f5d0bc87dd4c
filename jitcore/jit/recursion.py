"""The program's recursion limit while a pass interprets it.

Note [The program's recursion limit]
Every interpreted frame costs several native ones, and subclass resolution nests interpreted
``__torch_dispatch__`` calls inside torch's dispatcher, so a pass runs under a raised native limit of
its own (``TRACING_LIMIT``). The program must still see the caller's: ``sys.getrecursionlimit()`` answers
it, and a call of a Python function deeper than eager could go (the caller's limit less the depth of the
frame that called the jitted function) raises RecursionError in its caller (``Hooks.max_depth``), where
eagerly the same program would raise it. The depth counts the program's interpreted frames; a native
frame between two of them (``sorted(key=f)``) is not counted, so the limit can be a few frames off.
C code that recurses through the objects it is given (``repr``, ``str``, ``ascii``, ``format`` of a
container or an instance: a list nested 1100 deep; an exception group's ``split``/``subgroup``) runs
under a native limit set for the call to the native depth now plus the frames eager would have left, so
it raises RecursionError where eager does. Other C code (``==`` of nested lists, ``pickle``) recurses
under the pass's limit: RecursionError comes deeper than eagerly.
``sys.setrecursionlimit`` inside runs the call eagerly (jit/environment.py).

Invariant: the caller's limit is in force again when the pass ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["TRACING_LIMIT", "ProgramLimit", "program_recursion"]

# CPython 3.11 runs pure-Python calls without growing the C stack, so a deep native limit is safe.
TRACING_LIMIT = 20000
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PASSED_THROUGH = (_PACKAGE, contextlib.__file__)


@dataclass(frozen=True)
class ProgramLimit:
    """The caller's recursion limit, and the program frames it leaves from the jitted call's caller."""

    limit: int
    max_depth: int

    def lookasides(self) -> dict[Callable[..., Any], Callable[..., Any]]:
        return {sys.getrecursionlimit: lambda: self.limit}

    def recurses(self, fn: Any, args: tuple) -> bool:
        """Whether C code ``fn`` may recurse through ``args`` as deep as they are nested."""
        if id(fn) in _RECURSING:
            return len(args) >= 1 and type(args[0]) not in _FLAT
        return getattr(fn, "__name__", None) in ("split", "subgroup") and \
            isinstance(getattr(fn, "__self__", None), BaseExceptionGroup)  # a group nested 2000 deep

    def call_native(self, program_depth: int, call: Callable[[], Any]) -> Any:
        """``call()`` under the native limit that leaves it the frames eager would have, the program
        being ``program_depth`` frames deep."""
        native = _native_depth()
        limit = native + max(1, self.max_depth - program_depth)
        previous = sys.getrecursionlimit()
        if limit >= previous:
            return call()
        sys.setrecursionlimit(limit)
        try:
            return call()
        finally:
            sys.setrecursionlimit(previous)


@contextlib.contextmanager
def program_recursion() -> Iterator[ProgramLimit]:
    """Raise the native limit to ``TRACING_LIMIT`` for the pass; yields the program's."""
    previous = sys.getrecursionlimit()
    program = ProgramLimit(previous, max(1, previous - _caller_depth()))
    if previous < TRACING_LIMIT:
        sys.setrecursionlimit(TRACING_LIMIT)
    try:
        yield program
    finally:
        if previous < TRACING_LIMIT:
            sys.setrecursionlimit(previous)


_RECURSING = frozenset(map(id, (repr, str, ascii, format)))
_FLAT = frozenset((str, int, float, bool, bytes, complex, type(None)))


def _native_depth() -> int:
    frame, depth = sys._getframe(1), 0  # noqa: SLF001 - counting the frames on the stack
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


def _caller_depth() -> int:
    """The depth of the frame that called the jitted function (jitcore's own frames passed through)."""
    frame = sys._getframe(1)  # noqa: SLF001 - the stack as eager would have it
    while frame is not None and frame.f_code.co_filename.startswith(_PASSED_THROUGH):
        frame = frame.f_back
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth
