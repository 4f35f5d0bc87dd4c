"""Turning a trace's Python source into a callable, once.

Invariants:
- the source compiled is exactly the printed trace (so what a user reads is what runs);
- it is compiled under a stable file name derived from its content and registered in ``linecache``,
  so tracebacks, ``inspect`` and pdb show the trace's own lines;
- user-controlled values reach the code only as bound constants (see printer.py).
"""

from __future__ import annotations

import builtins
import hashlib
import linecache
from typing import Any, Callable

from jitcore.ir.printer import print_trace
from jitcore.ir.trace import Trace

__all__ = ["compile_trace", "compile_source"]


def compile_source(source: str, name: str, namespace: dict[str, Any], *, tag: str = "trace") -> Callable[..., Any]:
    """Compile ``source`` (which defines function ``name``) and return that function.

    Args:
        source: Python source text defining ``name`` at top level.
        name: the function to return.
        namespace: the globals the code runs with (imports, constants).
        tag: a word for the file name, e.g. ``computation`` or ``prologue``.

    Returns:
        The compiled function. Its code's ``co_filename`` is ``<jitcore-{tag}-{hash}>``, whose lines
        ``linecache`` serves.
    """
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:12]
    filename = f"<jitcore-{tag}-{digest}>"
    # mtime None: linecache.checkcache keeps the entry (there is no file to compare against).
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    globals_ = {"__builtins__": builtins, "__name__": f"jitcore_{tag}", **namespace}
    exec(code, globals_)
    return globals_[name]


def compile_trace(trace: Trace) -> Callable[..., Any]:
    """Compile ``trace`` into a Python callable taking ``trace.args`` positionally.

    Returns:
        A function whose source is ``print_trace(trace).source``.
    """
    printed = print_trace(trace)
    namespace = {**trace.imports, **printed.constants}
    return compile_source(printed.source, trace.name, namespace, tag=trace.name)
