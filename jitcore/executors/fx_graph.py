"""A region of a trace as a ``torch.fx.GraphModule``: the form torch's compilers take.

Each bound symbol becomes one ``call_function`` node whose target calls the symbol's callable with
its recorded constants and the node's tensor inputs in place of the proxies (constants stay Python
values, never FX literals, so any constant a trace may hold survives); a symbol with several outputs
is followed by ``getitem`` nodes, one per output proxy. Invariant: calling the module on real
tensors computes what running the region's bound symbols on them computes.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
import torch.fx as fx

from jitcore.executors.interface import Region
from jitcore.ir import BoundSymbol, Proxy, proxies_in

__all__ = ["region_graph", "example_inputs"]


def region_graph(region: Region) -> fx.GraphModule:
    """The FX graph computing ``region``: placeholders for its inputs, a tuple of its outputs."""
    graph = fx.Graph()
    nodes: dict[int, fx.Node] = {}
    for proxy in region.inputs:
        nodes[id(proxy)] = graph.placeholder(f"in_{proxy.name}")  # a trace may name an input ``self``
    for bsym in region.bound_symbols:
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


def _target(bsym: BoundSymbol, reads: list[Proxy]) -> Callable[..., Any]:
    """A function of the read tensors running ``bsym`` (its leaf outputs flattened when several)."""
    fn, args, kwargs, output = bsym.symbol.fn, bsym.args, bsym.kwargs, bsym.output
    single = isinstance(output, Proxy)

    def call(*tensors: Any) -> Any:
        values = {id(p): t for p, t in zip(reads, tensors)}
        result = fn(*_substitute(args, values), **_substitute(kwargs, values))
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


def example_inputs(region: Region, fake_mode: Any) -> list[torch.Tensor]:
    """Fake tensors of ``fake_mode`` with the exact metadata (sizes, strides, dtype, device) of the
    region's inputs: compilers trace them, static shapes."""
    with fake_mode:
        return [torch.empty_strided(tuple(p.shadow.shape), tuple(p.shadow.stride()), dtype=p.shadow.dtype,
                                    device=p.shadow.device) for p in region.inputs]
