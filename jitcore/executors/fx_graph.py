"""A region of a trace as a ``torch.fx.GraphModule``: the form torch's compilers take.

Each bound symbol becomes one ``call_function`` node. When the symbol's callable is one inductor's
caches can key by name (a builtin torch function such as ``torch.add``, an aten operator, an
``operator`` function; ``torch.Tensor.view``-style methods become ``call_method`` nodes) and its
constants are values FX prints (numbers, strings, dtypes, devices, slices and containers of them),
the node calls it directly, with the constants as the node's arguments: such a graph is what
AOTAutograd's disk cache accepts (Note [Inductor's disk cache] in inductor.py). Otherwise the
node's target is a closure calling the symbol's callable with its recorded constants and the node's
inputs in place of the proxies (constants stay Python values, never FX literals, so any constant a
trace may hold survives). A symbol with several outputs is followed by ``getitem`` nodes, one per
output proxy.

Inputs that are numbers (symbolic sizes, dynamic numbers) are placeholders too. With
``floats_as_tensors`` a float input is instead a 0-d float64 tensor (inductor's kernels take no
float arguments) and each op reading it gets it converted to the op's computation dtype, its result
converted to the traced dtype: what eager does with a Python scalar (Note [Dynamic floats as
tensors] in symbolic.py, Note [Float reads in a region] in float_reads.py).

Invariant: calling the module on real values computes what running the region's bound symbols on
them computes (with ``floats_as_tensors``, floats passed as 0-d float64 tensors).
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from jitcore.executors.float_reads import float_call, is_float_number
from jitcore.executors.interface import Region
from jitcore.ir import BoundSymbol, Proxy, proxies_in

__all__ = ["region_graph", "annotate_examples"]

_FX_CONSTANTS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                 torch.memory_format)


def region_graph(region: Region, *, floats_as_tensors: bool = False) -> fx.GraphModule:
    """The FX graph computing ``region``: placeholders for its inputs, a tuple of its outputs."""
    graph = fx.Graph()
    nodes: dict[int, fx.Node] = {}
    floats: set[int] = set()
    for proxy in region.inputs:
        node = graph.placeholder(f"in_{proxy.name}")  # a trace may name an input ``self``
        nodes[id(proxy)] = node
        if floats_as_tensors and is_float_number(proxy):
            floats.add(id(proxy))
    for bsym in region.bound_symbols:
        if floats.intersection(id(p) for p in proxies_in((bsym.args, bsym.kwargs))):
            call = float_call(graph, bsym, nodes)
        elif _direct(bsym):
            call = _direct_call(graph, bsym, nodes)
        else:
            reads = proxies_in((bsym.args, bsym.kwargs))
            unique = list({id(p): p for p in reads}.values())
            call = graph.call_function(_target(bsym, unique), tuple(nodes[id(p)] for p in unique))
        produced = proxies_in(bsym.output)
        if len(produced) == 1 and isinstance(bsym.output, Proxy):
            nodes[id(produced[0])] = call
            continue
        for i, proxy in enumerate(produced):
            nodes.setdefault(id(proxy), graph.call_function(operator.getitem, (call, i)))
    graph.output(tuple(nodes[id(p)] for p in region.outputs))
    return fx.GraphModule(torch.nn.Module(), graph)


def annotate_examples(gm: fx.GraphModule, fake_mode: Any, examples: list[Any]) -> None:
    """Give each node its example value (``meta["example_value"]``, as dynamo's graphs have): the
    cache checks that a ``call_method`` node is called on a tensor by it. Only graphs with such
    nodes are propagated (running the graph on ``examples`` in ``fake_mode``)."""
    if not any(node.op == "call_method" for node in gm.graph.nodes):
        return
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    FakeTensorProp(gm, fake_mode).propagate_dont_convert_inputs(*examples)
    for node in gm.graph.nodes:
        if "val" in node.meta:
            node.meta.setdefault("example_value", node.meta["val"])


def _direct(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` can be a node calling its callable by name, with FX-printable constants."""
    fn = bsym.symbol.fn
    ops = (types.BuiltinFunctionType, torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    nameable = isinstance(fn, ops) or (type(fn).__name__ == "method_descriptor"
                                       and getattr(fn, "__objclass__", None) is torch._C.TensorBase)
    output = bsym.output
    flat = isinstance(output, Proxy) or (type(output) in (tuple, list)
                                         and all(isinstance(o, Proxy) for o in output))
    return nameable and flat and _printable((bsym.args, bsym.kwargs))


def _printable(value: Any) -> bool:
    if isinstance(value, Proxy) or type(value) in _FX_CONSTANTS:
        return True
    if type(value) in (tuple, list):
        return all(_printable(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _printable(v) for k, v in value.items())
    if type(value) is slice:
        return all(_printable(v) for v in (value.start, value.stop, value.step))
    return False


def _direct_call(graph: fx.Graph, bsym: BoundSymbol, nodes: dict[int, fx.Node]) -> fx.Node:
    args, kwargs = _substitute((bsym.args, bsym.kwargs), nodes)
    fn = bsym.symbol.fn
    if type(fn).__name__ == "method_descriptor":  # torch.Tensor.view(t, ...) -> t.view(...)
        return graph.call_method(fn.__name__, tuple(args), kwargs)
    return graph.call_function(fn, tuple(args), kwargs)


def _target(bsym: BoundSymbol, reads: list[Proxy]) -> Callable[..., Any]:
    """A function of the read values running ``bsym`` (its leaf outputs flattened when several)."""
    fn, args, kwargs, output = bsym.symbol.fn, bsym.args, bsym.kwargs, bsym.output
    single = isinstance(output, Proxy)

    def call(*values: Any) -> Any:
        by_id = {id(p): v for p, v in zip(reads, values)}
        result = fn(*_substitute(args, by_id), **_substitute(kwargs, by_id))
        return result if single else tuple(_leaves_like(result, output))

    call.__name__ = call.__qualname__ = bsym.symbol.name.strip("_") or "op"
    return call


def _substitute(value: Any, values: dict[int, Any]) -> Any:
    if isinstance(value, Proxy):
        return values[id(value)]
    t = type(value)
    if t is tuple or t is list:
        return t(_substitute(v, values) for v in value)
    if t is dict:
        return {k: _substitute(v, values) for k, v in value.items()}
    if t is slice:
        return slice(*(_substitute(v, values) for v in (value.start, value.stop, value.step)))
    return value


def _leaves_like(result: Any, traced: Any) -> list[Any]:
    """The parts of ``result`` at the places ``traced`` holds proxies."""
    if isinstance(traced, Proxy):
        return [result]
    if isinstance(traced, (tuple, list)):
        return [leaf for r, t in zip(result, traced) for leaf in _leaves_like(r, t)]
    return []
