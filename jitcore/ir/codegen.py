"""Turning a trace's Python source into a callable, once.

Invariants:
- the source compiled is exactly the printed trace (so what a user reads is what runs);
- it is compiled under a stable file name derived from its content and registered in ``linecache``,
  so tracebacks, ``inspect`` and pdb show the trace's own lines, for as long as a function compiled
  from it is alive (Note [linecache entries]);
- user-controlled values reach the code only as bound constants (see printer.py);
- an imported module named in ``fast_imports`` is replaced, after the module body ran, by a snapshot
  module holding just the attribute chains the source reads from it (``torch.ops.aten.mul.Tensor``
  costs one specialised module lookup per dot instead of ``_OpNamespace.__getattr__`` calls). The
  text is unchanged; a name the snapshot lacks is looked up on the real object (PEP 562
  ``__getattr__``), so a debugger's expressions still work. A leaf of a type registered with
  ``register_call_target`` (the aten language context registers ``OpOverload``) is bound to what its
  ``__call__`` forwards to. Only import roots are snapshotted, never
  bound constants: a guard reading a user module's attribute must read it live.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import linecache
import types
import weakref
from typing import Any, Callable, Iterable

from jitcore.ir.printer import print_trace
from jitcore.ir.trace import Trace

__all__ = ["compile_trace", "compile_source", "register_call_target"]


def compile_source(source: str, name: str, namespace: dict[str, Any], *, tag: str = "trace",
                   fast_imports: Iterable[str] = ()) -> Callable[..., Any]:
    """Compile ``source`` (which defines function ``name``) and return that function.

    Args:
        source: Python source text defining ``name`` at top level.
        name: the function to return.
        namespace: the globals the code runs with (imports, constants).
        tag: a word for the file name, e.g. ``computation`` or ``prologue``.
        fast_imports: module names imported by ``source`` whose attribute chains are snapshotted
            (see the module docstring).

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
    _keep_lines_while_alive(globals_[name], filename)
    fast_imports = [n for n in fast_imports if isinstance(globals_.get(n), types.ModuleType)]
    if fast_imports:
        for root, chains in _attribute_chains(ast.parse(source), fast_imports).items():
            globals_[root] = _snapshot(globals_[root], chains, root)
    return globals_[name]


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
_CALL_TARGETS: dict[type, Callable[[Any], Any]] = {}


def register_call_target(cls: type, unwrap: Callable[[Any], Any]) -> None:
    """Let generated code call ``unwrap(obj)`` for a module attribute ``obj`` of type ``cls``; it must
    behave exactly as calling ``obj`` (e.g. ``OpOverload._op``, what ``OpOverload.__call__`` calls)."""
    _CALL_TARGETS[cls] = unwrap


# A trie of attribute names: name -> sub-trie; _VALUE marks a chain that is read as a value itself.
_Trie = dict
_VALUE = ""


def _attribute_chains(tree: ast.AST, roots: list[str]) -> dict[str, _Trie]:
    """For each root name, the trie of the attribute chains read from it (``torch.ops.aten.mul``)."""
    tries: dict[str, _Trie] = {root: {} for root in roots}
    inner: set[int] = set()  # ids of nodes that are the .value of an enclosing Attribute
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if id(node) in inner or not isinstance(node, (ast.Attribute, ast.Name)):
            continue
        names = []
        while isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        if not (isinstance(node, ast.Name) and node.id in tries):
            continue
        trie = tries[node.id]
        for attr in reversed(names):
            trie = trie.setdefault(attr, {})
        trie[_VALUE] = True
    return tries


def _snapshot(obj: Any, trie: _Trie, label: str) -> Any:
    """A module holding ``obj``'s attributes along ``trie``; ``obj`` itself where it is read as a value."""
    if _VALUE in trie:
        unwrap = _CALL_TARGETS.get(type(obj)) if len(trie) == 1 else None
        return unwrap(obj) if unwrap is not None else obj
    snapshot = types.ModuleType(label, f"jitcore snapshot of {label}'s attributes read by generated code")
    for attr, sub in trie.items():
        try:
            setattr(snapshot, attr, _snapshot(getattr(obj, attr), sub, f"{label}.{attr}"))
        except AttributeError:
            pass  # read lazily through __getattr__ below (and fails there as it would have)
    snapshot.__getattr__ = lambda attr: getattr(obj, attr)  # type: ignore[attr-defined]
    return snapshot


def compile_trace(trace: Trace) -> Callable[..., Any]:
    """Compile ``trace`` into a Python callable taking ``trace.args`` positionally.

    Returns:
        A function whose source is ``print_trace(trace).source``.
    """
    printed = print_trace(trace)
    namespace = {**trace.imports, **printed.constants}
    return compile_source(printed.source, trace.name, namespace, tag=trace.name, fast_imports=trace.imports)
