"""``Debugger``: run a computation trace one bound symbol at a time, on the call's real inputs.

The debugger finds the cache entry that accepts the call (tracing one if none does), reads the
computation's inputs through the entry's prologue paths, and then interprets the trace itself:
each bound symbol runs as ``bsym.symbol.fn(*args, **kwargs)`` with proxies replaced by values
from ``values`` (keyed by proxy name), and its outputs are bound by the same structure.
Stepping *into* a bound symbol with subsymbols (a decomposition, a tensor subclass's resolved
aten ops, the ops of a region an executor fused) runs those one at a time instead; if they do not
produce all of the parent's outputs, the parent runs as a whole when they are done. With
``executed=True`` the trace is the one that runs (fused regions as calls): ``next`` runs a region's
compiled code, ``step`` its ops one by one on torch, ``diff_region`` compares the two.

Breakpoints (jitcore/debug/breakpoints.py) that can never be hit are refused with the reason;
an op breakpoint also stops before a torch-level op that runs that aten op. Expressions see the
trace's names, the user's names that hold them (jitcore/debug/names.py: ``hidden`` -> ``t1``)
and names set with ``execute``.

Invariants:
- ``current`` is the bound symbol that runs next (None when the trace has finished);
- a value in ``values`` is the real result of the op that produced it in this debugger; nothing
  runs twice except a parent whose subsymbols did not produce its outputs;
- a tensor-subclass value's inner tensors are in ``values`` too, under their proxies' names
  (Note [Inner values]): the subsymbols of a later op read them, whether or not the op that
  produced the subclass value was stepped into.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import optree

from jitcore.debug.breakpoints import Breakpoint, op_names, refusal
from jitcore.debug.names import Binding, user_bindings
from jitcore.diagnostics.markers import markers_of
from jitcore.ir import BoundSymbol, Proxy, SourceFrame, Trace
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["Breakpoint", "Debugger", "debug", "find_entry"]


@dataclass(slots=True)
class _Level:
    """One list of bound symbols being stepped through: the trace's, or a parent's subsymbols."""

    bound_symbols: tuple[BoundSymbol, ...]
    index: int = 0
    parent: BoundSymbol | None = None


def find_entry(jfn: Any, args: tuple, kwargs: dict) -> Any:
    """The cache entry of ``jfn`` that accepts this call; traces (by calling ``jfn``) when none does."""
    for attempt in range(2):
        for entry in reversed(jfn.entries):
            if entry.prologue.explain(args, kwargs) is None:
                return entry
        if attempt == 0:
            jfn(*args, **kwargs)
    raise RuntimeError("no cache entry accepts this call (the function runs eagerly?)")


class Debugger:
    """Steps through the computation trace of one call of a jitted function.

    Args:
        jfn: a function returned by ``jitcore.jit`` (None with ``trace=`` and ``inputs=``).
        args, kwargs: the call.
        trace: a trace to run instead of the entry's (e.g. a modified copy).
        inputs: the trace's input values, in ``trace.args`` order (default: read by the prologue).
        executed: step the entry's last trace, the one that runs (for a lowered entry: fused regions
            as calls, whose subsymbols ``step`` runs one by one on torch; docs/executors.md),
            instead of the torch-level trace.
    """

    def __init__(
        self,
        jfn: Any = None,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        trace: Trace | None = None,
        inputs: Iterable[Any] | None = None,
        executed: bool = False,
    ) -> None:
        kwargs = kwargs or {}
        self.jfn, self.args, self.kwargs = jfn, tuple(args), kwargs
        self.entry = None
        self.executed = executed
        marked = [trace] if trace is not None else []
        if inputs is None or trace is None:
            self.entry = find_entry(jfn, self.args, kwargs)
            if self.entry.eager_reason is not None:
                raise ValueError(
                    f"cache entry {self.entry.number} runs the function eagerly (no trace to step through): "
                    f"{self.entry.eager_reason}"
                )
            if trace is None:
                trace = self.entry.traces[-1] if executed else _torch_level_trace(self.entry)
            marked = list(self.entry.traces)
            if inputs is None:
                inputs = [path.get(self.args, kwargs) for path in self.entry.prologue.inputs]
        self.trace: Trace = trace
        self.values: dict[str, Any] = {}
        for param, value in zip(trace.args, inputs):
            self.values[_name(param)] = value
        self._initial = dict(self.values)
        self._levels = [_Level(tuple(trace.bound_symbols))]
        self.breakpoints: list[Breakpoint] = _marker_breakpoints(trace, marked)
        self.output: Any = None
        self.scratch: dict[str, Any] = {}  # names the user assigned with ``!name = ...``
        self._bindings: list[Binding] | None = None
        self.finished = not trace.bound_symbols
        if self.finished:
            self.output = self._resolve(trace.output)

    # --- where we are ------------------------------------------------------------------------------
    @property
    def current(self) -> BoundSymbol | None:
        """The bound symbol that runs next, or None when the trace has finished."""
        if self.finished:
            return None
        level = self._levels[-1]
        return level.bound_symbols[level.index]

    @property
    def depth(self) -> int:
        """0 at the trace's top level, n inside n parents' subsymbols."""
        return len(self._levels) - 1

    @property
    def index(self) -> int:
        """The position of the next top-level bound symbol."""
        return self._levels[0].index

    def stack(self) -> tuple[SourceFrame, ...]:
        """The user's stack that recorded the current op (outermost first)."""
        bsym = self.current
        return tuple(bsym.source or ()) if bsym is not None else ()

    # --- moving ------------------------------------------------------------------------------------
    def step(self) -> BoundSymbol | None:
        """Step into the current op's subsymbols if it has any, else run it. Returns the new ``current``."""
        bsym = self.current
        if bsym is None:
            return None
        if bsym.subsymbols:
            self._levels.append(_Level(tuple(bsym.subsymbols), parent=bsym))
            return self.current
        self._run(bsym)
        self._advance()
        return self.current

    def next(self) -> BoundSymbol | None:
        """Run the current op whole (subsymbols included). Returns the new ``current``."""
        bsym = self.current
        if bsym is None:
            return None
        self._run(bsym)
        self._advance()
        return self.current

    def continue_(self) -> BoundSymbol | None:
        """Run until a breakpoint (descending into subsymbols that hold one) or the end."""
        first = True
        while not self.finished:
            bsym = self.current
            assert bsym is not None
            if not first and self._hits(bsym):
                return bsym
            first = False
            if bsym.subsymbols and any(self._hits(s, top=False) for s in _walk(bsym.subsymbols)):
                self.step()
                if self.current is not None and self._hits(self.current):
                    return self.current
                first = True
                continue
            self.next()
        return None

    def run_to_end(self) -> Any:
        """Run every remaining op, ignoring breakpoints; returns the trace's output."""
        while not self.finished:
            self.next()
        return self.output

    def break_at(self, spec: str) -> Breakpoint:
        """Add a breakpoint (``FILE:LINE`` or an op name); returns it.

        Raises:
            ValueError: the breakpoint can never be hit in this trace (the message says why: no
                such file, a line past its end or without ops, an op the trace never runs).
        """
        point = Breakpoint.parse(spec)
        reason = refusal(point, self.trace)
        if reason is not None:
            raise ValueError(f"cannot stop at {spec}: {reason}")
        self.breakpoints.append(point)
        return point

    def hit_detail(self, bsym: BoundSymbol) -> str | None:
        """How an op breakpoint stops before ``bsym`` when ``bsym`` is not that op but runs it."""
        for point in self.breakpoints:
            aten = point.runs_op(bsym)
            if aten is not None and point.op not in op_names(bsym.symbol.id):
                return f"{bsym.symbol.id} runs {aten.removeprefix('torch.ops.')} here"
        return None

    # --- the user's names --------------------------------------------------------------------------
    def bindings(self) -> list[Binding]:
        """Which trace value each of the user's assignments holds (jitcore/debug/names.py)."""
        if self._bindings is None:
            self._bindings = user_bindings(self.trace.bound_symbols)
        return self._bindings

    def user_names(self) -> dict[str, Any]:
        """The user's names whose values are computed by now (the latest assignment of each)."""
        done = self.index if not self.finished else len(self.trace.bound_symbols)
        return {
            b.name: self.values[b.proxy] for b in self.bindings() if b.index < done and b.proxy in self.values
        }

    def binding_of(self, name: str) -> Binding | None:
        """The assignment of ``name`` that holds now, else the next one (for 'computed by a later op')."""
        done = self.index if not self.finished else len(self.trace.bound_symbols)
        made = [b for b in self.bindings() if b.name == name]
        before = [b for b in made if b.index < done]
        return before[-1] if before else (made[0] if made else None)

    def _namespace(self) -> dict[str, Any]:
        return {**self.user_names(), **self.scratch, **self.values}

    def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` with the values computed so far (and ``torch``) in scope: trace
        names (``t3``), the user's names that hold them (``hidden``), names set with ``execute``.

        Raises:
            NameError: a name is unknown; for a user name whose value a later op computes, the
                message names that op and its trace value.
        """
        import torch

        try:
            return eval(expression, {"torch": torch, "__builtins__": __builtins__}, self._namespace())
        except NameError as exc:
            raise self._explained(exc) from None

    def execute(self, statement: str) -> None:
        """Run a statement (``!t3 = t3 * 0``): assigning a trace name changes that value for the ops
        that follow; other names are kept for later expressions."""
        import torch

        namespace = self._namespace()
        before = dict(namespace)
        try:
            exec(statement, {"torch": torch, "__builtins__": __builtins__}, namespace)  # noqa: S102
        except NameError as exc:
            raise self._explained(exc) from None
        for name, value in namespace.items():
            if name in before and before[name] is value:
                continue
            if name in self.values:
                self.values[name] = value
            else:
                self.scratch[name] = value

    def _explained(self, exc: NameError) -> NameError:
        name = getattr(exc, "name", None)
        binding = self.binding_of(name) if name else None
        if binding is not None:
            what, index = str(binding), binding.index
        else:  # a trace name of a later op?
            made = [{p.name for p in _proxies(b.output)} for b in self.trace.bound_symbols]
            index = next((i for i, names in enumerate(made) if name in names), None)
            if index is None:
                return exc
            what = f"{name} is a trace value"
        op = self.trace.bound_symbols[index]
        return NameError(
            f"{what}, computed by op [{index}] ({op.symbol.id}), which has not run yet; "
            "'c' with a breakpoint after it, or 'n', gets there",
            name=name,
        )

    def restarted(self) -> Debugger:
        """A new debugger for the same call, from the first op, with this one's breakpoints."""
        fresh = (
            Debugger(self.jfn, self.args, self.kwargs, executed=self.executed)
            if self.entry is not None
            else Debugger(trace=self.trace, inputs=[self._initial.get(_name(a)) for a in self.trace.args])
        )
        fresh.breakpoints += [p for p in self.breakpoints if p.index is None and p not in fresh.breakpoints]
        return fresh

    def diff(self) -> Any:
        """Run the original function eagerly and return the first op whose value diverges (or None)."""
        from jitcore.debug.diff import first_divergence

        return first_divergence(self)

    def diff_region(self) -> Any:
        """Compare the current op, a fused region (or another call an executor made), with its
        subsymbols run one by one on torch, on the values computed so far (``RegionDiff``).

        Raises:
            ValueError: the current op is not such a call.
        """
        from jitcore.debug.diff import region_divergence

        if self.current is None:
            raise ValueError("the trace has finished")
        return region_divergence(self.current, self.values)

    # --- internals ---------------------------------------------------------------------------------
    def _hits(self, bsym: BoundSymbol, top: bool = True) -> bool:
        index = self._levels[0].index if top and self.depth == 0 else None
        return any(b.matches(bsym, index) for b in self.breakpoints if b.index is None or index is not None)

    def _run(self, bsym: BoundSymbol) -> None:
        args, kwargs = self._resolve((bsym.args, bsym.kwargs))
        result = bsym.symbol.fn(*args, **kwargs)
        self._bind(bsym.output, result)

    def _advance(self) -> None:
        while True:
            level = self._levels[-1]
            level.index += 1
            if level.index < len(level.bound_symbols):
                return
            if level.parent is None:
                self.finished = True
                self.output = self._resolve(self.trace.output)
                return
            self._levels.pop()
            parent = level.parent
            if not all(p.name in self.values for p in _proxies(parent.output)):
                self._run(parent)  # its subsymbols did not produce its outputs

    def _resolve(self, tree: Any) -> Any:
        def value(leaf: Any) -> Any:
            if isinstance(leaf, Proxy):
                if leaf.name not in self.values:
                    raise KeyError(f"{leaf.name} has no value yet (it is computed by a later op)")
                return self.values[leaf.name]
            return leaf

        return optree.tree_map(value, tree, none_is_leaf=True, is_leaf=lambda x: isinstance(x, Proxy))

    def _bind(self, output: Any, result: Any) -> None:
        if isinstance(output, Proxy):
            self.values[output.name] = result
            if isinstance(output, SubclassTensorProxy) and hasattr(result, "__tensor_flatten__"):
                # Note [Inner values]: the subsymbols of later ops read the inner tensors by name.
                names, _ctx = output.inner_flatten()
                for name in names:
                    self._bind(getattr(output, name), getattr(result, name, None))
        elif isinstance(output, (tuple, list)) and isinstance(result, (tuple, list)):
            for o, r in zip(output, result):
                self._bind(o, r)
        elif isinstance(output, dict) and isinstance(result, dict):
            for k, o in output.items():
                self._bind(o, result[k])


def _name(param: Any) -> str:
    return param.name if isinstance(param, Proxy) else str(param)


def _walk(bound_symbols: Iterable[BoundSymbol]) -> Iterable[BoundSymbol]:
    for bsym in bound_symbols:
        yield bsym
        yield from _walk(bsym.subsymbols)


def _proxies(value: Any) -> list[Proxy]:
    if isinstance(value, Proxy):
        return [value]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in _proxies(v)]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _proxies(v)]
    return []


def _torch_level_trace(entry: Any) -> Trace:
    """The entry's first (torch-level) trace when it takes the prologue's inputs, else the last.

    The first pass keeps tensor-subclass calls as torch-level ops whose subsymbols are the resolved
    aten ops, so ``step`` can go into them; later passes (flattening) only inline those.
    """
    first = entry.traces[0]
    names = [a.name if isinstance(a, Proxy) else str(a) for a in first.args]
    return first if names == list(entry.prologue.input_names) else entry.traces[-1]


def _marker_breakpoints(trace: Trace, traces: list[Trace]) -> list[Breakpoint]:
    """Breakpoints for the ``breakpoint()`` markers recorded on ``traces``, placed in ``trace``."""
    points = []
    for marked in traces:
        for marker in markers_of(marked):
            index = _place(marker.index, marked, trace)
            if index is not None:
                where = f" at {marker.source[-1]}" if marker.source else ""
                points.append(Breakpoint(f"breakpoint(){where}", index=index))
    return points


def _place(index: int, marked: Trace, trace: Trace) -> int | None:
    if marked is trace:
        return index if index < len(trace.bound_symbols) else None
    if index >= len(marked.bound_symbols):
        return None
    # Another pass rewrote the trace: stop at the first op recorded from the same user line.
    source = marked.bound_symbols[index].source
    for i, bsym in enumerate(trace.bound_symbols):
        if bsym.source == source:
            return i
    return None


def debug(jfn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """Debug one call of ``jfn`` interactively (pdb's commands; ``help`` lists them).

    Args:
        jfn: a function returned by ``jitcore.jit``.
        args, kwargs: the call to debug.

    Returns:
        The call's result, as far as it was computed (None if the session quit early).
    """
    from jitcore.debug.shell import DebuggerShell

    shell = DebuggerShell(Debugger(jfn, args, kwargs))
    shell.cmdloop()
    return shell.debugger.output
