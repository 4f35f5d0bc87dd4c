"""Turning a trace's Python source into a callable, once.

Invariants:
- the source compiled is exactly the printed trace (so what a user reads is what runs);
- it is compiled under a stable file name derived from its content and registered in ``linecache``,
  so tracebacks, ``inspect`` and pdb show the trace's own lines, for as long as a function compiled
  from it is alive (Note [linecache entries]);
- user-controlled values reach the code only as bound constants (see printer.py);
- an imported module named in ``fast_imports`` is replaced, after the module body ran, by a snapshot
  module holding just the attribute chains the compiled code reads from it (found in its bytecode)
  (``torch.ops.aten.mul.Tensor``
  costs one specialised module lookup per dot instead of ``_OpNamespace.__getattr__`` calls). The
  text is unchanged; a name the snapshot lacks is looked up on the real object (PEP 562
  ``__getattr__``), so a debugger's expressions still work. A leaf of a type registered with
  ``register_call_target`` (the aten language context registers ``OpOverload``) is bound to what its
  ``__call__`` forwards to, or to a callable that takes each of the trace's recorded calls of it exactly
  as that does (the calls are handed to the unwrapper). Only import roots are snapshotted, never
  bound constants: a guard reading a user module's attribute must read it live.
"""

from __future__ import annotations

import builtins
import dis
import hashlib
import linecache
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from jitcore.ir.printer import print_trace
from jitcore.ir.trace import Trace

__all__ = ["compile_trace", "compile_source", "register_call_target", "source_filename", "trace_filename"]


def compile_source(source: str, name: str, namespace: dict[str, Any], *, tag: str = "trace",
                   fast_imports: Iterable[str] = (),
                   calls: dict[str, list] | None = None) -> Callable[..., Any]:
    """Compile ``source`` (which defines function ``name``) and return that function.

    Args:
        source: Python source text defining ``name`` at top level.
        name: the function to return.
        namespace: the globals the code runs with (imports, constants).
        tag: a word for the file name, e.g. ``computation`` or ``prologue``.
        fast_imports: module names imported by ``source`` whose attribute chains are snapshotted
            (see the module docstring).
        calls: a dotted name (``torch.ops.aten.t.default``) -> the ``(args, kwargs)`` of every call
            ``source`` makes by that name, where all are known (a compiled trace's recorded ops).

    Returns:
        The compiled function. Its code's ``co_filename`` is ``<jitcore-{tag}-{hash}>``, whose lines
        ``linecache`` serves.
    """
    filename = source_filename(source, tag)
    # mtime None: linecache.checkcache keeps the entry (there is no file to compare against).
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    globals_ = {"__builtins__": builtins, "__name__": f"jitcore_{tag}", **namespace}
    exec(code, globals_)
    _keep_lines_while_alive(globals_[name], filename)
    fast_imports = [n for n in fast_imports if isinstance(globals_.get(n), types.ModuleType)]
    if fast_imports:
        for root, chains in _attribute_chains(code, fast_imports).items():
            globals_[root] = _snapshot(globals_[root], chains, root, calls or {})
    return globals_[name]


def source_filename(source: str, tag: str) -> str:
    """The ``co_filename`` of code that ``compile_source`` compiles from ``source`` under ``tag``."""
    return f"<jitcore-{tag}-{hashlib.sha1(source.encode('utf-8')).hexdigest()[:12]}>"


def trace_filename(trace: Trace) -> str:
    """The ``co_filename`` of the function ``compile_trace(trace)`` returns."""
    return source_filename(print_trace(trace).source, trace.name)


# Note [linecache entries]: a compiled trace's lines stay in ``linecache`` while some function
# compiled from that source is alive (sources are keyed by content, so two cache entries can share
# one); then they are dropped, so a long-running program that retraces does not grow without bound.
_LIVE_SOURCES: dict[str, int] = {}


def _keep_lines_while_alive(fn: Callable[..., Any], filename: str) -> None:
    _LIVE_SOURCES[filename] = _LIVE_SOURCES.get(filename, 0) + 1
    weakref.finalize(fn, _release_lines, filename)


def _release_lines(filename: str) -> None:
    left = _LIVE_SOURCES.get(filename, 1) - 1
    if left > 0:
        _LIVE_SOURCES[filename] = left
        return
    _LIVE_SOURCES.pop(filename, None)
    linecache.cache.pop(filename, None)


# type -> how to get what a callable of that type forwards its calls to (Note above: fast_imports).
_CALL_TARGETS: dict[type, Callable[[Any, list | None], Any]] = {}


def register_call_target(cls: type, unwrap: Callable[[Any, list | None], Any]) -> None:
    """Let generated code call ``unwrap(obj, calls)`` for a module attribute ``obj`` of type ``cls``, where
    ``calls`` are the ``(args, kwargs)`` of each call the code makes of ``obj`` (None when not known):
    it must behave exactly as ``obj`` does for those calls (e.g. ``OpOverload._op``, what
    ``OpOverload.__call__`` calls, for any)."""
    _CALL_TARGETS[cls] = unwrap


# A trie of attribute names: name -> sub-trie; _VALUE marks a chain that is read as a value itself.
_Trie = dict
_VALUE = ""


def _attribute_chains(code: types.CodeType, roots: list[str]) -> dict[str, _Trie]:
    """For each root name, the trie of the attribute chains the compiled ``code`` (and the code
    objects nested in it) reads from it: a global load of the root followed by attribute or method
    loads (``torch.ops.aten.mul.Tensor``). Read from the bytecode, so that names in strings and
    comments never count, at a fraction of the cost of parsing the source again."""
    tries: dict[str, _Trie] = {root: {} for root in roots}

    def finish(chain: list[str] | None) -> None:
        if chain is not None:
            trie = tries[chain[0]]
            for attr in chain[1:]:
                trie = trie.setdefault(attr, {})
            trie[_VALUE] = True

    pending = [code]
    while pending:
        co = pending.pop()
        pending.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
        if tries.keys().isdisjoint(co.co_names):
            continue  # no root is loaded here (a prologue names its objects as bound constants)
        raw, names = co.co_code, co.co_names
        chain: list[str] | None = None
        extended = 0
        for i in range(0, len(raw), 2):
            op, arg = raw[i], raw[i + 1] | extended
            if op == _EXTENDED_ARG:
                extended = arg << 8
                continue
            extended = 0
            if op == _CACHE:
                continue
            if op in _ATTRIBUTE_LOADS and chain is not None:
                chain.append(names[arg >> _ATTR_SHIFT])
                continue
            finish(chain)
            chain = None
            if op == _LOAD_GLOBAL or op == _LOAD_NAME:
                name = names[arg >> 1 if op == _LOAD_GLOBAL else arg]
                if name in tries:
                    chain = [name]
        finish(chain)
    return tries


_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_CACHE = dis.opmap.get("CACHE", -1)
_LOAD_GLOBAL = dis.opmap["LOAD_GLOBAL"]  # its argument is the name's index shifted left by one (3.11+)
_LOAD_NAME = dis.opmap["LOAD_NAME"]
_ATTRIBUTE_LOADS = frozenset(dis.opmap[n] for n in ("LOAD_ATTR", "LOAD_METHOD") if n in dis.opmap)
_ATTR_SHIFT = 1 if sys.version_info >= (3, 12) else 0  # 3.12 folds LOAD_METHOD into LOAD_ATTR's low bit


def _snapshot(obj: Any, trie: _Trie, label: str, calls: dict[str, list]) -> Any:
    """A module holding ``obj``'s attributes along ``trie``; ``obj`` itself where it is read as a value."""
    if _VALUE in trie:
        unwrap = _CALL_TARGETS.get(type(obj)) if len(trie) == 1 else None
        if unwrap is None:
            return obj
        return unwrap(obj, calls.get(label))
    snapshot = types.ModuleType(label, f"jitcore snapshot of {label}'s attributes read by generated code")
    for attr, sub in trie.items():
        try:
            setattr(snapshot, attr, _snapshot(getattr(obj, attr), sub, f"{label}.{attr}", calls))
        except AttributeError:
            pass  # read lazily through __getattr__ below (and fails there as it would have)
    snapshot.__getattr__ = lambda attr: getattr(obj, attr)  # type: ignore[attr-defined]
    return snapshot


def compile_trace(trace: Trace, callables: dict[str, Any] | None = None) -> Callable[..., Any]:
    """Compile ``trace`` into a Python callable taking ``trace.args`` positionally.

    Args:
        trace: the trace.
        callables: globals the trace's symbols name by ``path`` without an import (an executor's
            ``fusion0``: jitcore/executors).

    Returns:
        A function whose source is ``print_trace(trace).source``.
    """
    printed = print_trace(trace)
    namespace = {**trace.imports, **printed.constants, **(callables or {})}
    return compile_source(printed.source, trace.name, namespace, tag=trace.name, fast_imports=trace.imports,
                          calls=_calls_of(trace.bound_symbols))


def _calls_of(bsyms: Iterable[Any]) -> dict[str, list]:
    """A symbol's printed name -> [(args, kwargs), ...] over the bound symbols and their subsymbols (a
    superset of the calls the printed trace makes by that name)."""
    calls: dict[str, list] = {}
    pending = list(bsyms)
    while pending:
        bsym = pending.pop()
        if bsym.symbol.path is not None:
            calls.setdefault(bsym.symbol.path, []).append((bsym.args, bsym.kwargs))
        pending.extend(bsym.subsymbols)
    return calls
