"""Partitioning a trace among executors, and the trace that results.

``partition`` walks the top-level bound symbols in order and gives each to the first executor, in
priority order, that claims it; consecutive symbols given to the same fusion executor form one
region. ``lower`` then asks each executor for its callables and writes the *execution trace*: the
same function with each lowered region as one call (``fusion0``, ``my_gelu0``) whose subsymbols are
the calls it replaces, so the printed trace still shows every op and the user line it came from.

Invariants:
- the execution trace has the same arguments, output and observable order of effects as the trace
  it was made from: only regions of claimed (effect-free) symbols are replaced, in place;
- a region whose executor declines (raises) is kept as it was (the torch executor runs it), and
  the reason is logged on ``jitcore.executors``;
- no executor's callable is called here: lowering compiles, it never runs the program.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from jitcore.executors.interface import Executor, FusionExecutor, Region
from jitcore.ir import BoundSymbol, Proxy, Symbol, Trace, proxies_in

__all__ = ["Assignment", "partition", "merge_regions", "lower", "region_of", "ExecutionTrace", "LOG",
           "is_lowered"]

LOG = logging.getLogger("jitcore.executors")


@dataclass(frozen=True, slots=True)
class Assignment:
    """A run of consecutive top-level bound symbols and the executor that runs them (None: torch)."""

    executor: Executor | None
    bound_symbols: tuple[BoundSymbol, ...]


@dataclass(eq=False)
class ExecutionTrace:
    """The trace that runs and the callables its lowered calls name (``fusion0`` -> compiled code)."""

    trace: Trace
    callables: dict[str, Callable[..., Any]] = field(default_factory=dict)
    lowered: list[str] = field(default_factory=list)  # one line per lowered region, for the header


def partition(trace: Trace, executors: Sequence[Executor]) -> list[Assignment]:
    """The trace's top-level bound symbols grouped by the executor that claims them.

    Args:
        trace: a final computation trace (plain tensors).
        executors: in priority order; a symbol no executor claims runs on torch (None).

    Returns:
        Consecutive runs, in trace order; runs of a fusion executor are its regions, runs of an
        operator executor have one symbol each.
    """
    runs: list[Assignment] = []
    for bsym in trace.bound_symbols:
        chosen = None
        for executor in executors:
            if getattr(executor, "name", None) == "torch":
                break
            if executor.claim(bsym) is None:
                chosen = executor
                break
        last = runs[-1] if runs else None
        if (last is not None and last.executor is chosen
                and (chosen is None or isinstance(chosen, FusionExecutor))):
            runs[-1] = Assignment(chosen, last.bound_symbols + (bsym,))
        else:
            runs.append(Assignment(chosen, (bsym,)))
    return runs


# Note [Moving calls out of a region's way]
# An unclaimed call between two runs of one fusion executor splits them into two regions, each
# reading and writing memory. ``merge_regions`` moves such calls out of the way when that cannot
# change what the program computes: every moved call is *pure* (a torch/aten op or Python arithmetic
# with none of the tags of effects, value reads or random draws, no ``out=``, not lowered, no
# trailing underscore, no autograd hooks), the
# regions it moves past are pure too (a fusion executor claims nothing else), and data dependences
# are kept: the calls go before the first run when they read nothing it makes, else after the
# second when it reads nothing they make. Calls with effects keep their place, so effects keep
# their order.
_EFFECTS = frozenset({"inplace", "random", "global_state", "autograd_function", "bookkeeping", "check",
                      "data_dependent", "backward", "fusion"})
_OWN_OPERATORS = ("torch.ops.aten.", "torch.ops.prims.")
_ARITHMETIC = frozenset(f"operator.{op}" for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow",
                                                     "neg", "pos", "abs"))
_AUTOGRAD_STATE = frozenset({"retain_grad", "register_hook", "register_post_accumulate_grad_hook",
                             "backward", "detach_"})


def merge_regions(runs: list[Assignment]) -> list[Assignment]:
    """``runs`` with pure unclaimed calls moved out from between two runs of the same fusion
    executor, which become one (Note [Moving calls out of a region's way])."""
    runs = list(runs)
    i = 0
    while i + 2 < len(runs):
        first, between, second = runs[i], runs[i + 1], runs[i + 2]
        if (between.executor is not None or first.executor is not second.executor
                or not isinstance(first.executor, FusionExecutor)
                or not all(_pure(b) for b in between.bound_symbols)):
            i += 1
            continue
        merged = Assignment(first.executor, first.bound_symbols + second.bound_symbols)
        if not _reads(between.bound_symbols, _made(first.bound_symbols)):
            runs[i:i + 3] = [between, merged]
            if i and runs[i - 1].executor is None:  # two unclaimed runs in a row are one
                runs[i - 1:i + 1] = [Assignment(None, runs[i - 1].bound_symbols + between.bound_symbols)]
                i -= 1
        elif not _reads(second.bound_symbols, _made(between.bound_symbols)):
            runs[i:i + 3] = [merged, between]
        else:
            i += 1
            continue
        i = max(i - 1, 0)  # the merged run may now merge with its neighbours
    return runs


def _pure(bsym: BoundSymbol) -> bool:
    symbol = bsym.symbol
    if symbol.langctx == "python":
        return symbol.id in _ARITHMETIC
    if symbol.langctx not in ("torch", "aten") or "out" in bsym.kwargs or is_lowered(bsym):
        return False
    if symbol.id.startswith("torch.ops.") and not symbol.id.startswith(_OWN_OPERATORS):
        return False  # a custom operator may have effects its schema does not show
    # a trailing underscore (``requires_grad_``, dunders) or autograd state: kept in place too
    name = symbol.name.split(".")[-1]
    return not (symbol.tags & _EFFECTS) and not name.endswith("_") and name not in _AUTOGRAD_STATE


def _made(bound_symbols: tuple[BoundSymbol, ...]) -> set[int]:
    return {id(p) for b in bound_symbols for p in proxies_in(b.output)}


def _reads(bound_symbols: tuple[BoundSymbol, ...], made: set[int]) -> bool:
    return any(id(p) in made for b in bound_symbols for p in proxies_in((b.args, b.kwargs)))


def region_of(bound_symbols: tuple[BoundSymbol, ...], read_later: set[int],
              sizes: dict[str, Proxy] | None = None, grad: bool = False) -> Region:
    """The region of ``bound_symbols``: inputs read from outside, outputs read in ``read_later``
    (ids of proxies read after the region).

    Args:
        sizes: the trace's size inputs by name (``s0``): those whose symbol appears in the sizes or
            strides of a tensor the region reads are inputs too, so a compiler can read every
            symbol from an input (a tensor of size ``4*s0`` alone does not give ``s0``).
        grad: as ``Region.grad``.
    """
    produced: set[int] = set()
    inputs: list[Proxy] = []
    outputs: list[Proxy] = []
    for bsym in bound_symbols:
        for p in proxies_in((bsym.args, bsym.kwargs)):
            if id(p) not in produced and not any(p is q for q in inputs):
                inputs.append(p)
        for p in proxies_in(bsym.output):
            if id(p) not in produced:
                produced.add(id(p))
                if id(p) in read_later:
                    outputs.append(p)
    for name in _symbols_of(inputs) if sizes else ():
        size = sizes.get(name)
        if size is not None and not any(size is q for q in inputs):
            inputs.append(size)
    return Region(tuple(bound_symbols), tuple(inputs), tuple(outputs), grad)


def _symbols_of(inputs: list[Proxy]) -> list[str]:
    """The names of the size symbols in the sizes and strides of ``inputs``' shadows, in order."""
    names: dict[str, None] = {}
    for p in inputs:
        shadow = getattr(p, "shadow", None)
        if shadow is None:
            continue
        for n in (*shadow.shape, *shadow.stride()):
            if type(n) is not int and hasattr(n, "node"):
                names.update((str(s), None) for s in sorted(n.node.expr.free_symbols, key=str))
    return list(names)


def lower(trace: Trace, runs: list[Assignment], grad: bool = False) -> ExecutionTrace:
    """The execution trace of ``trace`` with each run lowered by its executor.

    Args:
        trace: the trace ``runs`` partitions.
        runs: from ``partition``. A fusion executor's region of fewer symbols than its
            ``min_region`` attribute (default 1) stays on torch.
        grad: the trace runs under torch's autograd (``Region.grad``).
    """
    later: list[set[int]] = []  # for each run: ids of the proxies read after it
    seen = {id(p) for p in proxies_in(trace.output)}
    for run in reversed(runs):
        later.append(set(seen))
        for bsym in run.bound_symbols:
            seen.update(id(p) for p in proxies_in((bsym.args, bsym.kwargs)))
    later.reverse()
    result = ExecutionTrace(trace)
    sizes = {a.name: a for a in trace.args if isinstance(a, Proxy) and getattr(a, "python_type", None) is int}
    body: list[BoundSymbol] = []
    for run, read_later in zip(runs, later):
        executor = run.executor
        if executor is None:
            body.extend(run.bound_symbols)
        elif isinstance(executor, FusionExecutor):
            fused, views = _peel_views(run.bound_symbols, read_later)
            region = region_of(fused, read_later | _read_ids(views), sizes, grad)
            body.extend(_fused(trace, executor, region, result) if fused else ())
            body.extend(views)
        else:
            body.append(_implemented(trace, executor, run.bound_symbols[0], result))
    if result.lowered:
        result.trace = Trace(trace.name, trace.args, body, trace.output,
                             [*trace.header, *result.lowered], trace.imports, trace.names, trace.input_notes)
    return result


# Note [Views a region returns are made after it]
# A view a run makes and the trace reads after it (``z.view(-1)`` returned, ``x.t()`` of an input) is, in
# eager, a view of its base: ``_base`` set, ``_is_view()`` true, autograd's view rules (an in-place change
# of either is seen by the other's grad_fn) apply. A compiled region returns fresh tensors; AOTAutograd's
# wrapper regenerates aliasing of outputs but not the view relation (``_base`` is None). So such a view,
# when nothing left in the region reads it, is not fused: the region returns its base and the view's own
# call runs after the region, on torch, as in eager. A view is told by its shadow (the fake tensor the
# pass made for it: ``_is_view()``), and moved only when its call writes nothing (no effect tag, no
# ``out=``, not returning an argument, as an in-place op does); a chain of views (``z.view(-1)[::2]``)
# moves whole, in order. A region left with no call is no region.
def _peel_views(bound_symbols: tuple[BoundSymbol, ...], read_later: set[int]
                ) -> tuple[tuple[BoundSymbol, ...], tuple[BoundSymbol, ...]]:
    """``bound_symbols`` split into those to fuse and the views to run after them (Note above)."""
    needed = set(read_later)  # ids read after the region or by a call moved after it
    read_inside: set[int] = set()  # ids the calls kept in the region after this one read
    kept: list[BoundSymbol] = []
    moved: list[BoundSymbol] = []
    for bsym in reversed(bound_symbols):
        output = bsym.output
        shadow = getattr(output, "shadow", None) if isinstance(output, Proxy) else None
        if (isinstance(shadow, torch.Tensor) and shadow._is_view() and id(output) in needed  # noqa: SLF001
                and id(output) not in read_inside and _without_effects(bsym)):
            moved.append(bsym)
            needed.update(_read_ids((bsym,)))
        else:
            kept.append(bsym)
            read_inside.update(_read_ids((bsym,)))
    return tuple(reversed(kept)), tuple(reversed(moved))


def _without_effects(bsym: BoundSymbol) -> bool:
    """A call that writes nothing: a torch/aten op, no effect tag, no ``out=``, not returning one of
    its arguments (an in-place op returns its target)."""
    return (bsym.symbol.langctx in ("torch", "aten") and not bsym.symbol.tags & _EFFECTS
            and "out" not in bsym.kwargs and not is_lowered(bsym)
            and not any(p is bsym.output for p in proxies_in((bsym.args, bsym.kwargs))))


def _read_ids(bound_symbols: tuple[BoundSymbol, ...]) -> set[int]:
    return {id(p) for b in bound_symbols for p in proxies_in((b.args, b.kwargs))}


def _fused(trace: Trace, executor: FusionExecutor, region: Region,
           result: ExecutionTrace) -> list[BoundSymbol]:
    if len(region.bound_symbols) < getattr(executor, "min_region", 1):
        return list(region.bound_symbols)
    if not region.outputs:  # nothing read later: dead code the torch executor runs as recorded
        return list(region.bound_symbols)
    try:
        fn = executor.fuse(region)
    except Exception as exc:  # noqa: BLE001 - any failure to compile declines the region
        LOG.info("%s declined %d ops (%s): %s: %s; they run on torch", executor.name,
                 len(region.bound_symbols), _span(region.bound_symbols), type(exc).__name__, exc)
        return list(region.bound_symbols)
    name = trace.names.fresh("fusion")
    result.callables[name] = fn
    result.lowered.append(f"{name}: {len(region.bound_symbols)} ops fused by {executor.name}")
    symbol = Symbol(f"{executor.name}.{name}", name, executor.name, fn, name, _not_traceable,
                    tags=frozenset({"fusion"}))
    return [BoundSymbol(symbol, region.inputs, {}, region.outputs, region.bound_symbols,
                        region.bound_symbols[0].source)]


def _implemented(trace: Trace, executor: Any, bsym: BoundSymbol, result: ExecutionTrace) -> BoundSymbol:
    try:
        fn = executor.implement(bsym)
    except Exception as exc:  # noqa: BLE001 - declines this symbol
        LOG.info("%s declined %s: %s: %s; it runs on torch", executor.name, bsym.symbol.id,
                 type(exc).__name__, exc)
        return bsym
    name = trace.names.fresh(f"{executor.name}_{bsym.symbol.name}".replace(".", "_"))
    result.callables[name] = fn
    result.lowered.append(f"{name}: {bsym.symbol.id} run by {executor.name}")
    symbol = Symbol(f"{executor.name}.{name}", name, executor.name, fn, name, _not_traceable,
                    tags=bsym.symbol.tags)
    return BoundSymbol(symbol, bsym.args, bsym.kwargs, bsym.output, (bsym,), bsym.source, bsym.header)


def _span(bound_symbols: tuple[BoundSymbol, ...]) -> str:
    names = [b.symbol.id for b in bound_symbols]
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])}, ... {names[-1]}"


def is_lowered(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is a call an executor made (a fused region, an implemented op): its
    subsymbols are the calls it replaces, which the torch executor runs one by one."""
    return bsym.symbol.meta is _not_traceable


def _not_traceable(*args: Any, **kwargs: Any) -> Any:
    raise TypeError("an executor's lowered call runs only in the execution trace; it is not traced again")
