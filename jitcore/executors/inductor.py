"""The ``inductor`` executor: regions of the flattened trace compiled by torch's inductor.

A region becomes an FX graph (fx_graph.py) compiled with ``torch._inductor.compile_fx.compile_fx``
on example inputs of the traced metadata: C++/OpenMP kernels on CPU, Triton on CUDA. Compiled code
is cached on disk by inductor's own caches (docs/executors.md: location, clearing).

What it does not claim (those run on torch, and the reason is what ``claim`` returns):
- symbols of other languages than torch/aten, custom operators (``torch.ops.<lib>``), lowered calls;
- tags ``inplace`` (and ``out=``), ``random`` (eager's RNG stream must be matched draw for draw),
  ``global_state``, ``check`` and ``data_dependent`` (value reads), ``subclass`` (wrapper
  rebuilds), ``autograd_function``;
- calls reading dynamic numbers, tensor-subclass proxies, tensor constants or non-strided tensors,
  and calls whose outputs are not all plain tensors; ``empty``-like factories (their memory is
  uninitialized, so no compiler may reuse or reorder it unseen).

Invariant: a compiled region is called only with inputs of the strides it was compiled for; a call
with other strides (the prologue does not always guard strides) runs the region's FX graph instead,
which calls the same torch functions the torch executor would.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import jitcore.executors.background as background
from jitcore.executors.fx_graph import example_inputs, region_graph
from jitcore.executors.interface import Region
from jitcore.ir import BoundSymbol, Proxy, proxies_in, tree_any
from jitcore.proxies import TensorProxy
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

    def claim(self, bsym: BoundSymbol) -> str | None:
        symbol = bsym.symbol
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
            why = _refused_input(value)
            if why is not None:
                return why
        if tree_any((bsym.args, bsym.kwargs), _is_tensor_constant):
            return "reads a tensor constant"
        outputs = proxies_in(bsym.output)
        if not outputs or not _only_proxies(bsym.output) or any(_refused_input(p) for p in outputs):
            return "returns something other than plain tensors"
        return None

    def fuse(self, region: Region) -> Callable[..., Any]:
        from torch._guards import TracingContext, tracing  # imported on first use: ~1 s
        from torch._inductor.compile_fx import compile_fx
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        graph = region_graph(region)
        # Note [Inductor's disk cache]: the FX graph cache needs a ShapeEnv (dynamo always has one);
        # without one every compile bypasses it. Inputs are static-shaped fakes of that mode.
        fake_mode = FakeTensorMode(shape_env=ShapeEnv())
        inputs = example_inputs(region, fake_mode)
        # inductor's configuration is process-global: Note [Compiling in the background]
        with background.COMPILE_LOCK, tracing(TracingContext(fake_mode)):
            compiled = compile_fx(graph, inputs)
        strides = tuple(tuple(t.stride()) for t in inputs)

        def fusion(*args: Any) -> Any:
            try:
                return compiled(*args)
            except AssertionError:  # inductor's own input checks: sizes and strides
                if tuple(a.stride() for a in args) == strides:
                    raise
            return graph(*args)  # other strides than compiled for: the same torch calls

        return fusion


def _refused_input(value: Proxy) -> str | None:
    if isinstance(value, SubclassTensorProxy):
        return "reads a tensor subclass"
    if not isinstance(value, TensorProxy):
        return f"reads a {type(value).__name__}"
    if value.shadow.layout != torch.strided:
        return "reads a non-strided tensor"
    if not all(type(n) is int for n in (*value.shadow.shape, *value.shadow.stride())):
        return "has symbolic sizes"  # inductor is given static shapes (docs/executors.md)
    return None


def _is_tensor_constant(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, Proxy)


def _only_proxies(value: Any) -> bool:
    return not tree_any(value, lambda leaf: not isinstance(leaf, Proxy))
