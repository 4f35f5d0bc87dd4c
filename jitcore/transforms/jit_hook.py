"""The grad transform's hook into the jit: from a traced program to an autograd-connected computation.

Invariant: it acts only when grad mode is on and an input (or a subclass input) requires grad — the
same state the prologue checks, so a cache entry made here is only ever used under it.
"""

from __future__ import annotations

from typing import Any

from jitcore.ir import Trace
from jitcore.prologue import Path
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.autograd import GradComputation
from jitcore.transforms.grad import grad_transform, needs_grad

__all__ = ["differentiate"]


def differentiate(program: Any, traces: list[Trace], jfn: Any) -> GradComputation | None:
    """The computation of a cache entry whose inputs require grad, or None when none does.

    Args:
        program: the TracedProgram of the miss (its prologue gets the subclass inputs' outer paths).
        traces: the entry's computation traces; the forward trace is appended.
        jfn: the JittedFunction (its ``last_traces`` / ``last_backward_traces`` are updated).

    Returns:
        A GradComputation taking the prologue's inputs, or None.
    """
    jfn.last_backward_traces = []
    if not needs_grad(program.trace):
        return None
    grad = grad_transform(program.trace)
    prologue = program.prologue
    paths = {id(arg): path for arg, path in zip(program.trace.args, prologue.inputs)}
    n_inputs = len(prologue.inputs)
    for proxy in grad.subclass_inputs:
        path = _outer_path(proxy, paths)
        paths[id(proxy)] = path
        prologue.inputs.append(path)
        prologue.input_names.append(proxy.name)
    traces.append(grad.forward)
    jfn.last_traces = list(traces)
    jfn.last_backward_traces = [grad.backward]
    return GradComputation(grad, jfn.executor.compile, n_inputs)


def _outer_path(proxy: SubclassTensorProxy, paths: dict[int, Path]) -> Path:
    """The path of a subclass input: the parent of its first inner tensor's path."""
    for inner in proxy.inner_tensors().values():
        path = paths.get(id(inner))  # inner subclass inputs come first, so nested ones are known
        if path is not None and path.parent is not None:
            return path.parent
    raise AssertionError(f"grad transform: no path to the subclass input {proxy.name}")
