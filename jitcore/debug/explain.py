"""``jitcore.explain(jfn)``: what the jit did for a function, in words.

For each cache entry: the checks its prologue makes (``args[0].shape == (4, 8)``-style, from the
guards), the implicit state it pins, its computation traces per pass, and — for ops that were
resolved into subsymbols (tensor subclasses) — a dispatch map: user line -> torch op -> subclass
-> aten ops (on which inner tensors) -> the ``__torch_dispatch__`` line that issued each, the ops
of one user line grouped under it. Then why each retrace happened.
Rendered with rich on a terminal, as plain text otherwise.
Invariant: explaining reads the jitted function's records; it never traces or calls it.
"""

from __future__ import annotations

import linecache
import sys
from dataclasses import dataclass
from typing import IO, Any

import optree

from jitcore.ir import BoundSymbol, Proxy, SourceFrame, Trace
from jitcore.prologue.paths import safe_repr

__all__ = ["DispatchRoute", "dispatch_map", "render_dispatch_map", "explain", "explain_text"]


@dataclass(frozen=True, slots=True)
class DispatchRoute:
    """How one torch-level op was resolved: the user line, the op, the subclasses, the aten ops.

    ``operands[i]`` says what ``aten_ops[i]`` acts on and makes: its arguments with inner tensors
    named after their subclass value and attribute (``(x.a, y.a) -> t0``), which the flattened
    trace cannot show (there ``x.a`` is only ``x_a``).
    """

    source: SourceFrame | None
    op: str
    subclasses: tuple[str, ...]
    aten_ops: tuple[tuple[str, SourceFrame | None], ...]  # (op id, the dispatch-code line that issued it)
    operands: tuple[str, ...] = ()

    def where(self) -> str:
        """The user line, as the map's group header."""
        if self.source is None:
            return "(no source)"
        return f"{self.source.filename}:{self.source.lineno} {_code(self.source)}"

    def lines(self, *, with_source: bool = True) -> list[str]:
        op = f"  -> {self.op}" + (f" -> {', '.join(self.subclasses)}" if self.subclasses else "")
        out = [self.where(), op] if with_source else [op]
        for i, (op, frame) in enumerate(self.aten_ops):
            issued = (
                f"   (issued at {frame.filename}:{frame.lineno} in {frame.function}: {_code(frame)})"
                if frame
                else ""
            )
            operands = self.operands[i] if i < len(self.operands) else ""
            out.append(f"     -> {op}{operands}{issued}")
        return out


DISPATCH_MAP_TITLE = "dispatch map (user line -> torch op -> subclass -> aten ops, on which inner tensors):"


def render_dispatch_map(routes: list[DispatchRoute]) -> list[str]:
    """The map's lines: routes grouped under their user line (consecutive routes of one line share it)."""
    out: list[str] = []
    previous: object = object()
    for route in routes:
        key = (route.source.filename, route.source.lineno) if route.source else None
        out += route.lines(with_source=key != previous)
        previous = key
    return out


def dispatch_map(trace: Trace) -> list[DispatchRoute]:
    """A route for every top-level bound symbol of ``trace`` that has subsymbols."""
    routes = []
    for bsym in trace.bound_symbols:
        if not bsym.subsymbols:
            continue
        outer = bsym.source[-1] if bsym.source else None
        aten, operands = [], []
        names = _inner_names(bsym)
        for sub in _leaves(bsym.subsymbols):
            issued = sub.source[-1] if sub.source and sub.source != bsym.source else None
            aten.append((sub.symbol.id, issued))
            operands.append(_operands(sub, names))
        routes.append(DispatchRoute(outer, bsym.symbol.id, _subclasses(bsym), tuple(aten), tuple(operands)))
    return routes


def _inner_names(bsym: BoundSymbol) -> dict[str, str]:
    """Proxy name -> ``outer.attr`` for the inner tensors of the subclass values ``bsym`` reads."""
    from jitcore.proxies.subclass import SubclassTensorProxy

    names: dict[str, str] = {}

    def visit(value: Any, label: str) -> None:
        if isinstance(value, SubclassTensorProxy):
            attrs, _ctx = value.inner_flatten()
            for attr in attrs:
                inner = getattr(value, attr)
                names.setdefault(inner.name, f"{label}.{attr}")
                visit(inner, f"{label}.{attr}")

    for value in _proxy_leaves((bsym.args, bsym.kwargs)):
        visit(value, value.name)
    return names


def _operands(bsym: BoundSymbol, names: dict[str, str]) -> str:
    def show(value: Any) -> str:
        if isinstance(value, Proxy):
            return names.get(value.name, value.name)
        if isinstance(value, (tuple, list)):
            inner = ", ".join(show(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
        return safe_repr(value, 40)

    parts = [show(a) for a in bsym.args] + [f"{k}={show(v)}" for k, v in bsym.kwargs.items()]
    outputs = [p.name for p in _proxy_leaves(bsym.output)]
    return f"({', '.join(parts)})" + (f" -> {', '.join(outputs)}" if outputs else "")


def _proxy_leaves(tree: Any) -> list[Proxy]:
    leaves = optree.tree_leaves(tree, none_is_leaf=True, is_leaf=lambda v: isinstance(v, Proxy))
    return [v for v in leaves if isinstance(v, Proxy)]


def _leaves(bound_symbols: tuple[BoundSymbol, ...]) -> list[BoundSymbol]:
    out = []
    for bsym in bound_symbols:
        if "bookkeeping" in bsym.symbol.tags:  # how a subclass output is rebuilt: not an aten op of the route
            continue
        out.extend(_leaves(bsym.subsymbols) if bsym.subsymbols else [bsym])
    return out


def _subclasses(bsym: BoundSymbol) -> tuple[str, ...]:
    found: list[str] = []
    for value in list(bsym.args) + list(bsym.kwargs.values()):
        for leaf in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(leaf, Proxy):
                cls = leaf.python_type
                name = getattr(cls, "__qualname__", str(cls))
                if name != "Tensor" and name not in found and not name.endswith("Proxy"):
                    found.append(name)
    if not found and bsym.header:
        found.append(bsym.header)
    return tuple(found)


def _code(frame: SourceFrame) -> str:
    return linecache.getline(frame.filename, frame.lineno).strip()


def _read_lines(trace: Any) -> list[str]:
    """The tensor values the trace read while tracing (its splits), each with the ops around it."""
    from jitcore.langctx.reads import READ

    records = trace.bound_symbols
    positions = [i for i, b in enumerate(records) if b.symbol is READ]
    if not positions:
        return []
    lines = ["\n  value reads (checked on every call; another value sends the call to another entry):"]
    start = 0
    for i in positions:
        site, value = records[i].args[0], records[i].args[1]
        lines.append(f"    - {site}: traced with {value!r} ({i - start} ops since the previous read)")
        start = i + 1
    lines.append(f"    {len(records) - start} ops after the last read")
    return lines


def explain_text(jfn: Any) -> str:
    """Everything ``explain`` shows, as plain text."""
    from jitcore.jit.inspection import as_jitted

    jfn = as_jitted(jfn)
    out = [
        f"jitcore.explain: {jfn._label}",
        f"  calls answered from the cache: {jfn.hits}; traced: {jfn.misses}",
    ]
    entries = jfn.entries
    if not entries:
        out.append("  no cache entries yet (call the function first)")
    for entry in entries:
        out.append(f"\ncache entry {entry.number}: accepts a call when")
        out += [f"  - {line}" for line in entry.prologue.sentences()]
        if entry.eager_reason is not None:  # Note [Eager entries] in jitcore/jit/api.py
            out.append(
                "  an eager entry: the calls it accepts run the function eagerly, because "
                f"{entry.eager_reason}"
            )
            continue
        if entry.prologue.inputs:
            names = ", ".join(
                f"{n} = {p.describe()}" for n, p in zip(entry.prologue.input_names, entry.prologue.inputs)
            )
            out.append(f"  computation inputs: {names}")
        if entry.autograd_reason is not None:  # GradStage.reason (transforms/jit_hook.py)
            out.append(f"  pass 1 runs under torch's autograd, because {entry.autograd_reason}")
        for number, trace in enumerate(entry.traces, start=1):
            out.append(f"\n  computation trace, pass {number}:")
            out += [f"    {line}" for line in trace.python_source().splitlines()]
        out += _read_lines(entry.traces[0])
        routes = [r for trace in entry.traces[:1] for r in dispatch_map(trace)]
        if routes:
            out.append(f"\n  {DISPATCH_MAP_TITLE}")
            out += [f"    {line}" for line in render_dispatch_map(routes)]
    for number, reasons in enumerate(jfn.miss_log, start=1):
        if number == 1 and not reasons:
            out.append("\ntrace 1: the first call")
            continue
        why = (
            "; ".join(str(r) for r in reasons) or "no entry was left to try (the cache was empty or evicted)"
        )
        out.append(f"trace {number}: {why}")
    if jfn.eager_reason is not None:
        out.append(f"runs eagerly since: {jfn.eager_reason}")
    if getattr(jfn, "fallback_reason", None) is not None:
        out.append(f"a call ran eagerly (the last one shown; docs/errors/JC-J002.md): {jfn.fallback_reason}")
    return "\n".join(out) + "\n"


def explain(jfn: Any, file: IO[str] | None = None, *, color: bool | None = None) -> None:
    """Show what the jit did for ``jfn``: cache entries, their checks in words, traces, retraces.

    Args:
        jfn: a function returned by ``jitcore.jit``.
        file: where to write (default ``sys.stdout``).
        color: force rich rendering (True) or plain text (False); default: rich on a terminal.

    Raises:
        TypeError: ``jfn`` is not a jitted function.
    """
    file = sys.stdout if file is None else file
    text = explain_text(jfn)
    terminal = color if color is not None else bool(getattr(file, "isatty", lambda: False)())
    if not terminal:
        file.write(text)
        return
    from rich.console import Console
    from rich.syntax import Syntax

    console = Console(file=file, force_terminal=True)
    for block in text.split("\n\n"):
        if "computation trace" in block.splitlines()[0]:
            header, _, body = block.partition("\n")
            console.print(f"[bold]{header.strip()}[/bold]")
            console.print(Syntax("\n".join(line[4:] for line in body.splitlines()), "python"))
        else:
            console.print(block, highlight=True, markup=False)
        console.print()
