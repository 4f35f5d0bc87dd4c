"""Subclass outputs the program assembles from tensors: built after the call's autograd node.

Note [Subclass outputs the program assembles]
``return TwoTensor(a * 2, a * 3)`` with ``a`` requiring grad: eagerly the wrapper is made by its
class (``_make_wrapper_subclass``: a leaf, with the flag its class gives it) around inner tensors
that keep their own graph, so ``torch.autograd.grad(out.a.sum(), a)`` works, and
``TwoTensor(a, a * 2)`` holds ``a`` itself. A call under autograd is one ``torch.autograd.Function``
whose forward runs with grad off: a wrapper built inside it holds inner tensors without a graph (and
TwoTensor's own check that both inner tensors require grad alike fails there). So a subclass output
that no op produced (its shadow has no ``grad_fn``) and that is no input is *assembled*: the node
returns its inner tensors, and after the node an assembly trace rebuilds the wrapper with the
class's ``__tensor_unflatten__`` around the node's outputs and the caller's own input tensors, in
the caller's grad mode, as eagerly. Nested wrappers are assembled inside out; an inner tensor that
some op produced with a graph (a plain tensor, or a subclass value with a ``grad_fn``) is a node
output.

``unproduced_subclasses`` finds, in pass 1, the subclass values no record produces (inputs, and
wrappers the program assembles from input tensors), which the grad transform's replay rebuilds.

Invariants:
- ``Assembly.node_outputs`` holds no assembled wrapper, and no input;
- ``Assembly.build(outputs, inputs)`` returns the tensor outputs in the grad transform's order
  (``GradTraces.output_leaves``), each assembled wrapper in its place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optree
import torch

from jitcore.dispatch.flatten import UNFLATTEN, rebuild_kwargs
from jitcore.ir import BoundSymbol, Proxy, Trace, compile_trace
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy

__all__ = ["Assembly", "assembly_of", "unproduced_subclasses"]

# where an assembly argument comes from: ("output", k) the node's k-th output; ("arg", i) the i-th
# computation input; ("subclass", j) the outer tensor of the j-th subclass input
Source = tuple[str, int]


@dataclass(eq=False)
class Assembly:
    """How the tensor outputs are made from the node's outputs (see the module docstring).

    Attributes:
        node_outputs: what the node returns: the tensor outputs that are not assembled, in order,
            then the assembled wrappers' inner tensors that are neither those nor inputs.
        trace: takes one value per ``sources`` entry, returns the assembled wrappers in ``positions``
            order.
        sources: where each of ``trace``'s arguments comes from.
        positions: each assembled wrapper's index among the tensor outputs.
        from_node: each tensor output's index among ``node_outputs`` (None for an assembled one).
    """

    node_outputs: list[TensorProxy]
    trace: Trace
    sources: tuple[Source, ...]
    positions: tuple[int, ...]
    from_node: tuple[int | None, ...]
    _compiled: Callable[..., Any] | None = field(default=None, repr=False)

    def sized_statically(self) -> bool:
        """Whether the assembly trace holds no symbolic number (the wrappers' outer sizes and strides,
        their ctx): it then builds the same wrappers for every call of an entry with symbolic sizes
        (Note [An assembly with static sizes])."""
        symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool, Proxy)
        return not any(
            isinstance(leaf, symbolic) and not isinstance(leaf, TensorProxy)
            for b in self.trace.bound_symbols
            for leaf in optree.tree_leaves((b.args[2:], b.kwargs), none_is_leaf=True))

    def take_sizes(self, names: dict, forward_args: Sequence[Any]) -> None:
        """Make each symbolic size of the assembly trace a number the computation takes, or arithmetic
        recorded on such numbers (Note [An assembly with symbolic sizes]).

        Raises:
            SizesNotRewritten: a size is no computation input's number, nor arithmetic on them.
        """
        from jitcore.transforms.symbolic_sizes import SizesNotRewritten, rewrite_sizes

        rewrite_sizes(self.trace, names)
        made = {id(v) for b in self.trace.bound_symbols
                for v in optree.tree_leaves(b.output, none_is_leaf=True) if isinstance(v, Proxy)}
        sources = list(self.sources)
        for b in self.trace.bound_symbols:
            for leaf in optree.tree_leaves((b.args, b.kwargs), none_is_leaf=True):
                if not isinstance(leaf, Proxy) or isinstance(leaf, TensorProxy) or id(leaf) in made \
                        or any(leaf is a for a in self.trace.args):
                    continue
                i = next((i for i, a in enumerate(forward_args) if a is leaf), None)
                if i is None:
                    raise SizesNotRewritten(f"the assembly's size {leaf} is no input of the computation")
                self.trace.args.append(leaf)
                sources.append(("arg", i))
        self.sources = tuple(sources)

    def build(self, outputs: Sequence[Any], inputs: Sequence[Any], n_inputs: int) -> list[Any]:
        """The tensor outputs of one call from the node's ``outputs`` and the call's ``inputs`` (the
        computation's ``n_inputs`` inputs, then subclass inputs' outer tensors)."""
        if self._compiled is None:
            self._compiled = compile_trace(self.trace)
        args = [
            outputs[i] if kind == "output" else inputs[i if kind == "arg" else n_inputs + i]
            for kind, i in self.sources
        ]
        built = self._compiled(*args)
        full = [None if k is None else outputs[k] for k in self.from_node]
        for position, wrapper in zip(self.positions, built):
            full[position] = wrapper
        return full


def assembly_of(
    forward: Trace, tensor_outputs: list[TensorProxy], subclass_inputs: Sequence[TensorProxy | None]
) -> Assembly | None:
    """The assembly of ``tensor_outputs`` (None when no output is assembled).

    Args:
        forward: the forward trace: its arguments are the computation's inputs; the assembly trace
            shares its names.
        tensor_outputs: the grad transform's tensor outputs, each once.
        subclass_inputs: the forward's proxies of the subclass inputs, in the computation's order
            (None for one the forward does not use).
    """
    inputs: dict[int, Source] = {
        id(a.shadow): ("arg", i) for i, a in enumerate(forward.args) if isinstance(a, TensorProxy)
    }
    inputs.update((id(p.shadow), ("subclass", j)) for j, p in enumerate(subclass_inputs) if p is not None)
    positions = tuple(i for i, out in enumerate(tensor_outputs) if _assembled(out, inputs))
    if not positions:
        return None
    node_outputs = [out for i, out in enumerate(tensor_outputs) if i not in positions]
    trace = Trace(name="assemble", header=["# the subclass outputs the program assembles (assembly.py)"],
                  imports=dict(forward.imports), names=forward.names)
    sources: list[Source] = []

    def argument(value: TensorProxy, source: Source) -> TensorProxy:
        if not any(value is a for a in trace.args):
            trace.args.append(value)
            sources.append(source)
        return value

    def build(value: TensorProxy) -> TensorProxy:
        if id(value.shadow) in inputs:
            return argument(value, inputs[id(value.shadow)])
        if not _assembled(value, inputs):
            k = next((k for k, o in enumerate(node_outputs) if o is value), None)
            if k is None:
                k = len(node_outputs)
                node_outputs.append(value)
            return argument(value, ("output", k))
        names, ctx = value.inner_flatten()
        inner = {name: build(getattr(value, name)) for name in names}
        shadow = value.shadow
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            args = (value.subclass, inner, ctx, tuple(shadow.shape), tuple(shadow.stride()))
        if not any(b.output is value for b in trace.bound_symbols):
            trace.bound_symbols.append(BoundSymbol(UNFLATTEN, args, rebuild_kwargs(value), value))
        return value

    trace.output = tuple(build(tensor_outputs[i]) for i in positions)
    from_node = tuple(
        None if i in positions else next(k for k, o in enumerate(node_outputs) if o is out)
        for i, out in enumerate(tensor_outputs)
    )
    return Assembly(node_outputs, trace, tuple(sources), positions, from_node)


# Note [An assembly with static sizes]
# An entry with symbolic sizes (a batch that changes between calls) keeps them symbolic through the
# grad transform only where it can rewrite each SymInt of its records as a number of the computation
# (Note [Symbolic sizes through the grad transform], symbolic_sizes.py). The assembly trace is no record
# of the forward: its wrappers' outer sizes and strides are literals, so one of symbolic size could not
# be built per call, and such an entry runs pass 1 under torch's autograd (every warm call runs the
# subclass's ``__torch_dispatch__``). Where every size, stride and ctx value the assembly trace holds is
# a plain number, it builds the same wrappers whatever the call's sizes: a training step over a model
# with TwoTensor parameters returning ``loss.detach()`` (a 0-d TwoTensor the node hands out as its
# inner tensors) on changing batch sizes is differentiated, its warm calls running no dispatch (before:
# 74 dispatches a call).


# Note [An assembly with symbolic sizes]
# Where the assembly holds symbolic sizes (``TwoTensor(a * 2, b * 3)`` returned, or ``out.detach()`` of a
# TwoTensor activation, over a batch that changes between calls), each SymInt of its records is made a
# number of the computation as the forward's are (``rewrite_sizes``: ``s0``, or ``n0 = operator.mul(2,
# s0)`` recorded in the assembly trace), and the size inputs it names become arguments of the assembly
# trace taken from the call's inputs (``("arg", i)``). Before, the replay refused it (SizesNotRewritten):
# the entry ran pass 1 under torch's autograd (33 TwoTensor dispatches a warm call for a step returning
# its detached activation), or each batch size traced again (an entry per call for ``TwoTensor(a * 2, b
# * 3)``). A size that is no computation input's number still refuses, as before.


def _assembled(value: TensorProxy, inputs: dict[int, Source]) -> bool:
    if not isinstance(value, SubclassTensorProxy) or id(value.shadow) in inputs:
        return False
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        return value.shadow.grad_fn is None


def unproduced_subclasses(trace: Trace) -> list[SubclassTensorProxy]:
    """The tensor-subclass values a pass-1 trace uses without any record producing them, each over
    input tensors only, inner ones before the ones holding them.

    These are its subclass inputs (arguments, rebuilt by bookkeeping records at the top of the
    trace; subclass tensors read from state, which are not) and the subclass values the program
    assembles from input tensors (``TwoTensor(a, b)``, ``OptimState8bit(codes, ...)``: no op makes
    them). The replay rebuilds each over its inner tensors before it runs; only the inputs among
    them (``SubclassInputs``) are inputs of the computation.
    """
    found: list[SubclassTensorProxy] = []
    seen: set[int] = set()
    args = {id(a) for a in trace.args}

    def visit(proxy: SubclassTensorProxy) -> bool:
        if id(proxy) in seen:
            return True
        inner = list(proxy.inner_tensors().values())
        for t in inner:
            if isinstance(t, SubclassTensorProxy):
                if not visit(t):
                    return False
            elif id(t) not in args:
                return False
        seen.add(id(proxy))
        found.append(proxy)
        return True

    produced: set[int] = set()
    for bsym in trace.bound_symbols:
        if "bookkeeping" in bsym.symbol.tags:
            visit(bsym.output)
            continue
        for value in optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True):
            if isinstance(value, SubclassTensorProxy) and id(value) not in produced:
                visit(value)
        produced.update(
            id(v) for v in optree.tree_leaves(bsym.output, none_is_leaf=True) if isinstance(v, Proxy)
        )
    for value in optree.tree_leaves(trace.output, none_is_leaf=True):
        if isinstance(value, SubclassTensorProxy) and id(value) not in produced:
            visit(value)
    return found
