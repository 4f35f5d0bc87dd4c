"""The grad transform's hook into the jit: from a traced program to an autograd-connected computation.

Invariant: it acts only when grad mode is on and an input (or a subclass input) requires grad — the
same state the prologue checks, so a cache entry made here is only ever used under it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import optree

from jitcore.diagnostics.boundary import on_error as prepare_error
from jitcore.errors import DataDependentError
from jitcore.executors import record_lowered
from jitcore.ir import Trace
from jitcore.langctx.reads import runs_under_autograd
from jitcore.prologue import Guard, Path
from jitcore.prologue.guards import same_ctx, storage_pattern
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.autograd import GradComputation
from jitcore.transforms.grad import RAISE, grad_transform, needs_grad, subclass_inputs
from jitcore.transforms.mincut import saved_for_fusion

__all__ = ["Differentiated", "differentiate"]


@dataclass(frozen=True, slots=True)
class Differentiated:
    """What the grad transform made of a cache entry's program.

    Attributes:
        computation: takes the prologue's inputs, then ``inputs``; connects the call to torch autograd.
        traces: the entry's computation traces, the forward trace last (what ``last_traces`` shows; a
            trace an executor lowers the forward to is appended when it is compiled).
        backward_traces: ``[backward]`` (what ``last_backward_traces`` shows; its lowering appended too).
        inputs: the computation's further inputs, (path, name) each: the subclass inputs as objects.
    """

    computation: GradComputation
    traces: list[Trace]
    backward_traces: list[Trace]
    inputs: list[tuple[Path, str]]


def differentiate(program: Any, traces: list[Trace], executor: Any, owner: Any) -> Differentiated | None:
    """The grad transform of a cache entry whose inputs require grad, or None when none does.

    Args:
        program: the TracedProgram of the miss (its prologue gets the guards the transform relies on:
            layouts, storage sharing).
        traces: the entry's computation traces so far (not changed).
        executor: compiles the forward and backward traces (``Executors.compile_together``: lowered
            at the same run; when fused, with the saved values chosen for fusion, mincut.py).
        owner: the JittedFunction whose errors these are, held weakly, for the error boundary only.

    Returns:
        A Differentiated, or None: no input requires grad, or the trace keeps a dynamic number
        symbolic (then the computation runs under torch's autograd).
    """
    prologue = program.prologue
    paths = {id(arg): path for arg, path in zip(program.trace.args, prologue.inputs)}
    outer: list[Path] = []
    for proxy in subclass_inputs(program.trace):
        outer.append(_outer_path(proxy, paths))
        paths[id(proxy)] = outer[-1]
    specs = {g.path: g.expected for g in prologue.guards if g.kind == "tensor"}
    subclass_grad = {id(p): bool(getattr(specs.get(paths[id(p)]), "requires_grad", False))
                     for p in subclass_inputs(program.trace)}
    if not needs_grad(program.trace, subclass_grad):
        return None
    if len(traces) == 1 and program.symbolic_numbers():
        return None  # Note [Dynamic numbers under autograd]
    eager_op = runs_under_autograd(program.trace.bound_symbols)
    if eager_op is not None:  # Note [Value-shaped ops under grad] in jitcore/jit/value_reads.py
        backward = next((b for b in program.trace.bound_symbols if "backward" in b.symbol.tags), None)
        if len(traces) == 1 and backward is None:
            return None
        raise DataDependentError(
            f"{eager_op.symbol.name} has outputs whose shapes depend on tensor values and that carry "
            "gradients; " + ("with tensor subclasses" if backward is None else "with a backward inside the "
                             "function") + " the grad transform would have to replay it on fake tensors",
            hints=("keep the op or the backward outside the jitted function",),
        )
    if _pin_storage_sharing(program) and len(traces) == 1:
        return None  # Note [Inputs sharing storage under autograd]
    program.specialize_numbers()  # autograd records aten ops on values
    grad = grad_transform(program.trace, subclass_grad)
    for arg, path in zip(program.trace.args, prologue.inputs):  # tensor inputs come first
        if isinstance(arg, TensorProxy) and grad.layout is not None and grad.layout.relies_on(arg):
            prologue.pin_layout(path, tuple(arg.shadow.stride()), arg.shadow.storage_offset())
    forward_traces, backward_traces = [*traces, grad.forward], [grad.backward]
    jfn = weakref.ref(owner)  # no cycle through the cache entry that holds this computation

    def on_error(exc: BaseException) -> None:
        if jfn() is not None:
            prepare_error(jfn(), exc)

    def for_fusion(fusible: Any) -> tuple[Trace, Trace] | None:
        return saved_for_fusion(grad.forward, grad.backward, grad.backward_body, fusible)

    # each lowered trace is shown beside the one it lowers
    select = executor.compile_together(
        (grad.forward, grad.backward), (record_lowered(forward_traces), record_lowered(backward_traces)),
        None if any(b.symbol is RAISE for b in grad.backward.bound_symbols) else for_fusion)
    computation = GradComputation(grad, select, len(prologue.inputs), on_error)
    inputs = [(path, proxy.name) for proxy, path in zip(grad.subclass_inputs, outer)]
    return Differentiated(computation, forward_traces, backward_traces, inputs)


# Note [Dynamic numbers under autograd]
# The grad transform records the aten ops autograd runs on shadows, where a number is only a value:
# a dynamic number would be baked into the forward and backward traces. A trace over plain tensors
# that keeps a dynamic number symbolic is therefore not split: its computation (the torch-level
# calls of pass 1) runs under torch's own autograd, which records the graph as eagerly (same ops,
# same nodes, the number as passed). There is no backward trace to print for such an entry. With
# tensor subclasses involved (the flattened trace that runs is not the torch-level one) the numbers
# are specialized instead and the grad transform runs.


# Note [Inputs sharing storage under autograd]
# The grad transform replays the program on fresh shadows, one storage each: autograd's checks that
# depend on two inputs sharing memory (a write through ``y = x.detach()`` bumps the version of ``x``,
# which eager's backward then refuses to use) are not in the traces it records, which would compute
# a gradient where eager raises. So when the program writes in place and has several tensor inputs,
# which of them share a storage is guarded (``storages``), and an entry whose inputs do share one
# runs the torch-level calls of pass 1 under torch's own autograd, which sees the real tensors.
def _pin_storage_sharing(program: Any) -> bool:
    """Guard which tensor inputs share storage when it matters (the Note above); returns whether
    some do."""
    tensors = program.first_inputs
    if len(tensors) < 2 or not _writes_in_place(program.trace):
        return False
    paths = tuple(program.prologue.inputs[: len(tensors)])
    pattern = storage_pattern(tuple(tensors))
    program.prologue.guards.append(Guard(paths[0], "storages", (paths, pattern)))
    return pattern != tuple(range(len(pattern)))


def _writes_in_place(trace: Trace) -> bool:
    return any("inplace" in b.symbol.tags or "out" in b.kwargs for b in trace.bound_symbols)


def _outer_path(proxy: SubclassTensorProxy, paths: dict[int, Path]) -> Path:
    """The path of a subclass input: the parent of its first inner tensor's path."""
    for inner in proxy.inner_tensors().values():
        path = paths.get(id(inner))  # inner subclass inputs come first, so nested ones are known
        if path is not None and path.parent is not None:
            return path.parent
    raise AssertionError(f"grad transform: no path to the subclass input {proxy.name}")


def subclass_arguments_passed_whole(program: Any) -> list[tuple[SubclassTensorProxy, Path]]:
    """The tensor-subclass arguments the computation takes as objects, with their paths: those the
    function returns as themselves (the caller's object comes back, as eagerly: ``f(x) is x``,
    instead of an equal one rebuilt from the inner tensors), and those whose outer metadata an
    in-place view op changed (``x.t_()``: the caller's wrapper changes too, as eagerly)."""
    from jitcore.dispatch.flatten import restrided, subclass_input_records

    bound = subclass_input_records(program.trace)
    returned = {id(v) for v in optree.tree_leaves(program.trace.output, none_is_leaf=True)}
    paths = {id(arg): path for arg, path in zip(program.trace.args, program.prologue.inputs)}
    kept = []
    for proxy in subclass_inputs(program.trace):
        record = bound.get(id(proxy))
        path = _outer_path(proxy, paths)
        paths[id(proxy)] = path
        if record is None:
            continue
        names, ctx = proxy.flatten()
        inner_at_call = record.args[1]
        if (set(names) != set(inner_at_call) or any(getattr(proxy, n) is not inner_at_call[n] for n in names)
                or not same_ctx(ctx, record.args[2])):
            continue  # ``x.a = ...`` or a new ctx: the result is rebuilt from what it holds now
        if id(proxy) in returned or restrided(proxy, record):
            kept.append((proxy, path))
    return kept
