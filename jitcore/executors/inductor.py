"""The ``inductor`` executor: regions of the flattened trace compiled by torch's inductor.

A region becomes an FX graph (fx_graph.py) compiled with ``torch._inductor.compile_fx.compile_fx``
on example inputs of the traced metadata: C++/OpenMP kernels on CPU, Triton on CUDA. Compiled code
is cached on disk by inductor's own caches (docs/executors.md: location, clearing).

What it does not claim (those run on torch, and the reason is what ``claim`` returns):
- symbols of other languages than torch/aten, custom operators (``torch.ops.<lib>``), lowered calls;
- tags ``inplace`` (and ``out=``), ``random`` (eager's RNG stream must be matched draw for draw),
  ``global_state``, ``check`` and ``data_dependent`` (value reads), ``subclass`` (wrapper
  rebuilds), ``autograd_function``;
- calls reading tensor-subclass proxies, tensor constants or non-strided tensors, a float number
  other than as ``t (op) x`` (Note [Dynamic floats as tensors] in symbolic.py), and calls whose
  outputs are not all plain tensors (or, for int arithmetic on numbers, ints); ``empty``-like
  factories (their memory is uninitialized, so no compiler may reuse or reorder it unseen).

Symbolic sizes and int numbers are compiled symbolically, floats as 0-d tensors (symbolic.py, Note
[Symbolic regions]); a region running under torch's autograd (``Region.grad``) is compiled with the
inputs that require grad requiring it, so inductor (through AOTAutograd) compiles its forward and
backward, as torch.compile does for a training graph.

Invariant: a compiled region is called only with inputs of the strides it was compiled for and on
which the guards its compile added hold; any other call (the prologue does not always guard
strides) runs the region's FX graph instead, which calls the same torch functions the torch
executor would.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from jitcore.executors.fx_graph import FLOAT_SCALAR_OPS, annotate_examples, is_float_number, region_graph
from jitcore.executors.interface import Region
from jitcore.executors.isolation import compiling
from jitcore.executors.regions import LOG
from jitcore.executors.symbolic import compile_inputs
from jitcore.ir import BoundSymbol, Proxy, proxies_in, tree_any
from jitcore.proxies import NumberProxy, TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["InductorExecutor", "REFUSED_TAGS"]

# tag -> why a symbol carrying it stays on torch
REFUSED_TAGS: dict[str, str] = {
    "inplace": "writes a tensor in place",
    "random": "draws random numbers (eager's RNG stream is matched by running it on torch)",
    "global_state": "changes global state",
    "check": "checks a value read while tracing",
    "data_dependent": "has an output shape that depends on values",
    "subclass": "builds a tensor subclass",
    "autograd_function": "runs a user autograd.Function",
    "fusion": "is already lowered",
}
_LANGUAGES = ("torch", "aten")
_OWN_OPERATORS = ("torch.ops.aten.", "torch.ops.prims.")
_UNINITIALIZED = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")
# Python arithmetic on ints (sizes computed from sizes, int dynamic numbers) fused with the tensors
_INT_ARITHMETIC = ("operator.add", "operator.sub", "operator.mul", "operator.floordiv", "operator.mod",
                   "operator.neg", "operator.pos")


class InductorExecutor:
    """Fuses regions of plain-tensor torch/aten calls with inductor (see the module docstring)."""

    def __init__(self, name: str = "inductor", *, min_region: int = 2, recompute: bool = True) -> None:
        """Args:
            name: the executor's name (another instance may be registered under another name).
            min_region: fewer consecutive claimed ops stay on torch: fusing one op saves nothing
                measurable and costs a compile.
            recompute: the grad transform's saved values are chosen for fusion when this executor
                fuses the traces: the backward recomputes the cheap ops it fuses instead of saving
                their outputs (jitcore/transforms/mincut.py).
        """
        self.name = name
        self.min_region = min_region
        self.recompute = recompute

    trains = True  # compiles regions that run under torch's autograd (Region.grad)

    def claim(self, bsym: BoundSymbol) -> str | None:
        symbol = bsym.symbol
        if symbol.id in _INT_ARITHMETIC:
            values = [*proxies_in((bsym.args, bsym.kwargs)), *proxies_in(bsym.output)]
            if all(isinstance(p, NumberProxy) and p.python_type is int for p in values):
                return None
            return "is arithmetic on other than ints"
        if symbol.langctx not in _LANGUAGES:
            return f"is a {symbol.langctx} symbol"
        if symbol.id.startswith("torch.ops.") and not symbol.id.startswith(_OWN_OPERATORS):
            return "is a custom operator"
        for tag in symbol.tags:
            if tag in REFUSED_TAGS:
                return REFUSED_TAGS[tag]
        if "out" in bsym.kwargs:
            return "writes an out= tensor"
        if symbol.name.split(".")[0] in _UNINITIALIZED:
            return "returns uninitialized memory"
        for value in proxies_in((bsym.args, bsym.kwargs)):
            why = _refused_float(bsym) if is_float_number(value) else _refused_input(value)
            if why is not None:
                return why
        if tree_any((bsym.args, bsym.kwargs), _is_tensor_constant):
            return "reads a tensor constant"
        outputs = proxies_in(bsym.output)
        if (not outputs or not _only_proxies(bsym.output)
                or any(not isinstance(p, TensorProxy) or _refused_input(p) for p in outputs)):
            return "returns something other than plain tensors"
        return None

    def fuse(self, region: Region) -> Callable[..., Any]:
        from torch._guards import TracingContext, tracing  # imported on first use: ~1 s
        from torch._inductor.compile_fx import compile_fx

        # what compiling sets process-wide: isolation.py, Note [Torch's process-global state while compiling]
        with compiling():
            inputs = compile_inputs(region)
            graph = region_graph(region, floats_as_tensors=bool(inputs.floats))
            annotate_examples(graph, inputs.fake_mode, inputs.examples)
            with tracing(TracingContext(inputs.fake_mode)), torch.set_grad_enabled(region.grad):
                compiled = compile_fx(graph, inputs.examples)
        return _guarded(compiled, region_graph(region), inputs)


def _guarded(compiled: Callable[..., Any], graph: Callable[..., Any], inputs: Any) -> Callable[..., Any]:
    """``compiled``, called when the guards its compile added hold and the strides are those it
    was compiled for; ``graph`` (the same torch calls) otherwise."""
    guards = inputs.guards()
    convert = inputs.converter()
    strides = [tuple(t.stride()) if isinstance(t, torch.Tensor) else None for t in inputs.examples]
    declined: list[str] = []

    def fusion(*args: Any) -> Any:
        values = convert(args) if convert is not None else args
        if guards is not None and not guards(values):
            if not declined:
                declined.append("guards")
                LOG.info("a fused region's guards failed for sizes %s; it runs on torch for them",
                         [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args])
            return graph(*args)
        try:
            return compiled(*values)
        except AssertionError:  # inductor's own input checks: sizes and strides
            if all(s is None or (all(type(n) is int for n in s) and s == a.stride())
                   for a, s in zip(args, strides)):
                raise  # the strides it was compiled for: not a layout the code rejects
        return graph(*args)  # other strides than compiled for: the same torch calls

    return fusion


def _refused_float(bsym: BoundSymbol) -> str | None:
    """None when a float number is read as ``t (op) x`` (Note [Dynamic floats as tensors])."""
    args, output = bsym.args, bsym.output
    if (bsym.symbol.fn in FLOAT_SCALAR_OPS and not bsym.kwargs and len(args) == 2
            and isinstance(args[0], TensorProxy) and is_float_number(args[1])
            and isinstance(output, TensorProxy) and output.shadow.dtype.is_floating_point):
        return None
    return "reads a float number other than as a tensor's operand"


def _refused_input(value: Proxy) -> str | None:
    if isinstance(value, SubclassTensorProxy):
        return "reads a tensor subclass"
    if isinstance(value, NumberProxy):
        return None if value.python_type is int else f"reads a {value.python_type.__name__} number"
    if not isinstance(value, TensorProxy):
        return f"reads a {type(value).__name__}"
    if value.shadow.layout != torch.strided:
        return "reads a non-strided tensor"
    return None


def _is_tensor_constant(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, Proxy)


def _only_proxies(value: Any) -> bool:
    return not tree_any(value, lambda leaf: not isinstance(leaf, Proxy))
