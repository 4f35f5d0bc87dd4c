"""The flattening pass: a trace over tensor subclasses becomes a trace over plain tensors.

Pass 1 (interpretation) records each torch-level call on subclass proxies as one bound symbol whose
subsymbols are its resolution (aten ops on the inner tensors). This pass keeps only what runs on
plain tensors: a bound symbol that involves a subclass proxy is replaced by its (recursively
flattened) subsymbols; the bookkeeping that rebuilds subclass inputs is dropped (the prologue passes
their inner tensors); subclass outputs are rebuilt at the end with the class's own
``__tensor_unflatten__``, except the subclass arguments the computation takes whole (returned as
themselves, or restrided in place: ``subclass_arguments_passed_whole``). It serves the entries whose
inputs need no grad (the grad transform flattens its own forward and backward traces). Invariants:
the result holds no subclass proxy except as a trailing argument taken whole or the output of a final
``unflatten_tensor_subclass``; intermediate subclass objects are never built at run time.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optree
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._mode_utils import no_dispatch

from jitcore.errors import EagerOnlyValue
from jitcore.ir import BoundSymbol, Proxy, Symbol, SymbolTag, Trace, tree_any, tree_has
from jitcore.langctx.backward import graph_leaves
from jitcore.langctx.thread_state import SET_GRAD_ENABLED
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.prologue import Path
from jitcore.prologue.guards import same_ctx
from jitcore.prologue.literals import is_literal_value
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import (
    has_own_protocol,
    instance_attributes,
    is_torch_cache,
    replaced_at,
    size_places,
    tensor_unflatten,
)
from jitcore.proxies.subclass import SubclassTensorProxy, made_in_inference_mode

__all__ = [
    "Flattened",
    "flatten_program",
    "flatten_subclasses",
    "involves_subclasses",
    "subclass_arguments_passed_whole",
    "rebuild_kwargs",
    "unflatten_tensor_subclass",
    "kept_attributes",
    "outside_attributes",
    "set_attributes",
    "UNFLATTEN",
    "UNFLATTEN_RESULT",
    "bind_subclass_input",
    "record_subclass_results",
    "without_grad_mode_changes",
]


def unflatten_tensor_subclass(
    cls: type, inner: dict[str, Any], ctx: Any, outer_size: Any, outer_stride: Any, *,
    inference: bool = False, sizes_in_ctx: tuple = (), policy: str | None = None, attributes: tuple = (),
) -> Any:
    """Build a subclass instance from its inner tensors (jitcore/proxies/protocol.py); with
    ``inference``, inside inference mode (Note [A subclass output made in inference mode]);
    ``sizes_in_ctx``: the places of ``ctx`` that are torch.Size (Note [A torch.Size in a flatten ctx]);
    ``policy``: Note [A wrapper that answers its own layout]; ``attributes``: ``(name, value)`` pairs
    set on it where its unflatten gave another (Note [An output's attribute outside its flatten
    protocol])."""
    for keys in sizes_in_ctx:
        ctx = replaced_at(ctx, keys, torch.Size)
    if inference:
        with torch.inference_mode():
            out = tensor_unflatten(cls, inner, ctx, outer_size, outer_stride, policy)
    else:
        out = tensor_unflatten(cls, inner, ctx, outer_size, outer_stride, policy)
    set_attributes(out, attributes)
    return out


def set_attributes(value: Any, attributes: tuple[tuple[str, Any], ...]) -> None:
    """Set each ``(name, item)`` on ``value`` where it lacks it or holds another (Note [An output's
    attribute outside its flatten protocol])."""
    for name, item in attributes:
        held = value.__dict__.get(name, _ABSENT)
        if held is not item and not (is_literal_value(item) and type(held) is type(item) and held == item):
            object.__setattr__(value, name, item)  # a number proxy is never compared (that would guard it)


# Note [An output's attribute outside its flatten protocol]
# A subclass output is rebuilt at the computation's end by its class's ``__tensor_unflatten__``, which
# often passes only what ``__tensor_flatten__`` reports: ``K(t * k, k)`` made by the dispatch came back
# as ``K(inner["a"])``, ``k`` the constructor's default 1.0 where eager's output holds 3.0. The record
# that rebuilds it names the literal instance attributes (numbers, strings, tuples of them) and enum
# members (a mode the dispatch sets: a constant, kept by identity) the traced value held outside its
# flatten protocol, and sets those the rebuilt value lacks or holds otherwise.
# Only for classes with their own protocol and not torch's own (as for inputs: Note [An attribute the
# flatten protocol does not report], jitcore/jit/tensor_binding.py); a number the computation computes
# per call (a number proxy: a ``k`` that changed between calls is read per call) is the record's input.
# The grad transform's replay rebuilds the subclass values of pass 1 the same way, and sets them (a
# number proxy as the replay's: ``_rebuild_subclass``, jitcore/transforms/grad.py): its dispatch read
# ``k`` 1.0 there, values and gradients scaled by 1.0.
_ABSENT = object()


def kept_attributes(value: SubclassTensorProxy) -> tuple[tuple[str, Any], ...]:
    """The literal instance attributes of ``value`` outside its flatten protocol, a number proxy
    included (Note [An output's attribute outside its flatten protocol])."""
    return outside_attributes(value, value.subclass, value.inner_flatten()[0], numbers=True)


def outside_attributes(
    value: Any, cls: type, names: Sequence[str], *, numbers: bool = False
) -> tuple[tuple[str, Any], ...]:
    """The literal and enum-member instance attributes of ``value`` (a real instance of ``cls`` or its
    proxy) that are not its inner tensors ``names``, sorted by name; with ``numbers``, number proxies
    too. None (empty) for a class without its own protocol (its derived ctx holds them) or torch's own."""
    module = getattr(cls, "__module__", "") or ""
    if not has_own_protocol(cls) or (module.startswith("torch.") and not module.startswith("torch.testing.")):
        return ()
    inner = set(names)
    return tuple((k, v) for k, v in sorted(instance_attributes(value, cls).items()) if k not in inner
                 and not is_torch_cache(k) and (is_literal_value(v) or isinstance(v, enum.Enum)
                                                  or numbers and type(v) is NumberProxy))


# Note [A subclass output made in inference mode]: eagerly a wrapper made inside
# ``torch.inference_mode()`` is an inference tensor (a nested jagged tensor's ``values()`` outside the
# block is then allowed). The computation rebuilds subclass outputs at its end, after it has left the
# block: a wrapper that was an inference tensor while traced is rebuilt inside inference mode (it was
# not, and ``values()`` of such an NJT output raised "Cannot set version_counter for inference tensor").
#
# Note [A torch.Size in a flatten ctx]
# A class keeping its shape in its ctx as a torch.Size (``return ["elem"], self.shape``) got a list
# back in a subclass output's ctx from an entry with symbolic sizes (``[4, 2]`` where eager has
# ``torch.Size([4, 2])``, a wrong answer): the computation computes the ctx's sizes per call, and the
# record that rebuilds the output takes them as a list (a torch.Size cannot hold a number of the
# computation, jitcore/transforms/symbolic_sizes.py's ``map_symbolic``). The record now names the
# places of the ctx that are torch.Size (``sizes_in_ctx``, from the traced value's own ctx), and
# ``unflatten_tensor_subclass`` makes them torch.Size again before the class's ``__tensor_unflatten__``.
#
# Note [A wrapper that answers its own layout]
# A wrapper made with ``dispatch_sizes_strides_policy`` ("sizes", "strides": torch's
# WrapperTensorWithCustomSizes/Strides) answers ``x.stride()`` (and with "sizes" ``x.shape``) through its
# ``__torch_dispatch__`` (``aten.sym_stride``...), eagerly from its inner tensor: ``x.t() * 2`` of a
# WrapperTensorWithCustomSizes answers the transposed inner tensor's strides, ``(1, 2)``. A class without
# a flatten protocol of its own is rebuilt by jitcore (``_make_wrapper_subclass`` around its attributes,
# jitcore/proxies/protocol.py), which dropped the policy: the output answered the contiguous strides
# it was made with, ``(3, 1)``, a wrong answer. The proxy keeps the policy its class's ``__new__`` gave
# (``subclass_proxy``) and the record that rebuilds an output passes it on. A class with its own
# ``__tensor_unflatten__`` builds through its constructor, which gives the policy itself.
def rebuild_kwargs(value: SubclassTensorProxy) -> dict[str, Any]:
    """The keyword arguments of the ``unflatten_tensor_subclass`` record that rebuilds ``value``."""
    kwargs: dict[str, Any] = {"inference": True} if made_in_inference_mode(value) else {}
    places = size_places(value.inner_flatten()[1])
    if places:
        kwargs["sizes_in_ctx"] = places
    policy = object.__getattribute__(value, "_jitcore_policy")
    if policy is not None and not has_own_protocol(value.subclass):
        kwargs["policy"] = policy
    attributes = kept_attributes(value)
    if attributes:
        kwargs["attributes"] = attributes
    return kwargs


def restride_wrapper(obj: torch.Tensor, size: tuple, stride: tuple, offset: int) -> None:
    """Give the caller's wrapper-subclass object new outer metadata, as ``return_and_correct_aliasing``
    does eagerly after an in-place view op (``x.t_()``): a metadata change below ``__torch_dispatch__``."""
    with no_dispatch():
        torch.Tensor.as_strided_(obj, size, stride, offset)


def _no_meta(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("unflatten_tensor_subclass is recorded directly, never called on proxies")


def _unflatten_symbol(role: str, *tags: SymbolTag) -> Symbol:
    """A symbol calling ``unflatten_tensor_subclass``; ``role`` tells the records apart."""
    return Symbol(
        id=f"unflatten_tensor_subclass{role}",
        name="unflatten_tensor_subclass",
        langctx="dispatch",
        fn=unflatten_tensor_subclass,
        path="jitcore.dispatch.flatten.unflatten_tensor_subclass",
        meta=_no_meta,
        tags=frozenset(tags),
    )


RESTRIDE = Symbol(
    id="restride_wrapper",
    name="restride_wrapper",
    langctx="dispatch",
    fn=restride_wrapper,
    path="jitcore.dispatch.flatten.restride_wrapper",
    meta=_no_meta,
    tags=frozenset({"inplace"}),
)
# Rebuilds a subclass output at the end of pass 2.
UNFLATTEN = _unflatten_symbol("")
# Rebuilds a subclass input from its inner tensors in pass 1 (so that pass 1 is runnable Python too).
UNFLATTEN_INPUT = _unflatten_symbol("_input", "bookkeeping")
# Closes the resolution of a torch-level call with a subclass output in pass 1: how the output is
# built from the inner tensors the resolution computed (shown in the trace, never executed: pass 2
# drops it and keeps the inner tensors).
UNFLATTEN_RESULT = _unflatten_symbol("_result", "bookkeeping")


def record_subclass_results(scope: list[BoundSymbol], outputs: Any, source: Any = None) -> None:
    """Append to ``scope`` (a resolution's subsymbols) how each subclass output is built; ``source``
    is the user's stack of the call."""
    for value in optree.tree_leaves(outputs, none_is_leaf=True):
        if isinstance(value, SubclassTensorProxy):
            scope.append(_unflatten_record(UNFLATTEN_RESULT, value, source))


def _unflatten_record(symbol: Symbol, proxy: SubclassTensorProxy, source: Any = None,
                      kwargs: dict[str, Any] | None = None, layout: tuple | None = None) -> BoundSymbol:
    """The record building ``proxy`` from its inner tensors; ``layout``: its outer sizes, strides,
    storage offset and ctx as the computation computes them (Note [Subclass values' sizes],
    jitcore/jit/shapes.py), else the shadow's."""
    names, ctx = proxy.inner_flatten()
    inner = {n: getattr(proxy, n) for n in names}
    size, stride = (tuple(proxy.shape), tuple(proxy.stride())) if layout is None else layout[:2]
    args = (proxy.subclass, inner, ctx if layout is None else layout[3], size, stride)
    return BoundSymbol(symbol, args, kwargs or {}, proxy, source=source)


def bind_subclass_input(trace: Trace, proxy: SubclassTensorProxy) -> None:
    """Record, in pass 1, how a subclass input is rebuilt from its inner tensors (inner ones first)."""
    trace.bound_symbols.append(_unflatten_record(UNFLATTEN_INPUT, proxy))


def subclass_input_records(trace: Trace) -> dict[int, BoundSymbol]:
    """``id(proxy) -> `` the pass-1 record rebuilding that subclass argument (its state at the call)."""
    return {id(b.output): b for b in trace.bound_symbols if b.symbol is UNFLATTEN_INPUT}


def restrided(proxy: SubclassTensorProxy, record: BoundSymbol) -> bool:
    """Whether an in-place view op changed the outer shape or strides of the argument since ``record``."""
    return (tuple(proxy.shape), tuple(proxy.stride())) != (record.args[3], record.args[4])


# Note [Subclass values that require grad]
# ``requires_grad_()`` on a subclass value the program made sets its *outer* tensor's flag: below
# autograd, ``__torch_dispatch__`` sees no operation, so the call's resolution is empty and pass 2
# (used only when no input requires grad) would drop it. A subclass output whose pass-1 value is such
# a leaf gets the flag back once rebuilt. A subclass value computed from such a leaf would come back a
# leaf too, where eager's has a grad_fn: ``p = nn.Parameter(x); return p * 2`` gave ``is_leaf`` True,
# ``grad_fn`` None, and ``out.grad`` filled by ``out.sum().backward()`` where eager's stays None (it was
# let through while the leaf was out of the caller's reach; /tmp/ao58-probes/p_leaf.py). When the caller
# can reach that leaf too (returned, stored), ``y.backward()`` must fill the leaf's ``.grad``, and a plain
# value computed from a subclass leaf must require grad; pass 2 has no graph for any of these (it
# rebuilds subclass values from inner tensors and computes plain ones from them). Such a program runs eagerly
# (``refuse_values_computed_from_leaves_made_inside``, JC-J002). So does a subclass value computed from a
# *plain* leaf the program made (a module built inside: ``F.linear(x, w)`` of a TwoTensor weight and a new
# ``nn.Parameter`` bias): eagerly its class's dispatch runs below autograd, so its inner tensors require no
# grad; pass 2 computes them from that leaf with autograd, and they required grad (``out.a.requires_grad``).
_REQUIRES_GRAD = TORCH_TABLE.lookup(torch.Tensor.requires_grad_)


def _involves_subclass(bsym: BoundSymbol) -> bool:
    return tree_has((bsym.args, bsym.kwargs, bsym.output), SubclassTensorProxy)


def _emit(bsym: BoundSymbol, out: list[BoundSymbol]) -> None:
    if "bookkeeping" in bsym.symbol.tags:
        return
    if not _involves_subclass(bsym):
        out.append(bsym)
        return
    for sub in bsym.subsymbols:
        _emit(sub, out)


def involves_subclasses(trace: Trace) -> bool:
    """Whether a pass-1 trace has a record or an output that holds a subclass proxy (else it is
    its own pass 2, and runs as it is)."""
    return any(_involves_subclass(b) for b in trace.bound_symbols) or tree_has(
        trace.output, SubclassTensorProxy
    )


def subclass_arguments_passed_whole(
    trace: Trace, subclass_inputs: Sequence[tuple[SubclassTensorProxy, Path]]
) -> list[tuple[SubclassTensorProxy, Path]]:
    """The tensor-subclass arguments the computation takes as objects, with their paths: those the
    function returns as themselves (the caller's object comes back, as eagerly: ``f(x) is x``,
    instead of an equal one rebuilt from the inner tensors), and those whose outer metadata an
    in-place view op changed (``x.t_()``: the caller's wrapper changes too, as eagerly).

    Args:
        trace: pass 1.
        subclass_inputs: the subclass inputs bound for it, with the paths they were bound at
            (``TracedProgram.subclass_inputs``); only arguments have a record rebuilding them.
    """
    bound = subclass_input_records(trace)
    returned = {id(v) for v in optree.tree_leaves(trace.output, none_is_leaf=True)}
    kept = []
    for proxy, path in subclass_inputs:
        record = bound.get(id(proxy))
        if record is None:
            continue
        names, ctx = proxy.inner_flatten()
        inner_at_call = record.args[1]
        if (set(names) != set(inner_at_call) or any(getattr(proxy, n) is not inner_at_call[n] for n in names)
                or not same_ctx(ctx, record.args[2])):
            continue  # ``x.a = ...`` or a new ctx: the result is rebuilt from what it holds now
        if id(proxy) in returned or restrided(proxy, record):
            kept.append((proxy, path))
    return kept


@dataclass(frozen=True, slots=True)
class Flattened:
    """The flattening stage's result.

    Attributes:
        trace: pass 2, or pass 1 itself when it involves no subclass.
        inputs: the computation's further inputs, (path, name) each: the subclass arguments it takes
            whole (``subclass_arguments_passed_whole``), its trailing arguments.
    """

    trace: Trace
    inputs: list[tuple[Path, str]]


# Note [A trace without subclasses is walked once]
# ``involves_subclasses`` walks every record of a trace that has no subclass value (it stops at the first
# record that has one). ``flatten_program`` asked it three times for such a trace: itself, through
# ``refuse_values_computed_from_leaves_made_inside`` and through ``flatten_subclasses``, ~2% of a plain
# 1000-op chain's first call. It now asks once: without a subclass value nothing is refused, no
# argument is kept (a kept one is returned or has a record rebuilding it, so the trace involves it) and
# pass 1 is its own pass 2, which is what the three calls answered.
def flatten_program(trace: Trace, subclass_inputs: Sequence[tuple[SubclassTensorProxy, Path]],
                    layouts: dict[int, tuple] | None = None) -> Flattened:
    """The flattening stage of an entry whose inputs need no grad: pass 2, with the subclass
    arguments it takes whole as trailing inputs.

    Args:
        trace: pass 1.
        subclass_inputs: its bound subclass inputs with their paths (``TracedProgram.subclass_inputs``).
        layouts: the outer layouts of the subclass values pass 2 builds, where sizes are symbolic
            (``TracedProgram.outer_layouts``).

    Raises:
        EagerOnlyValue: ``refuse_values_computed_from_leaves_made_inside``.
    """
    if not involves_subclasses(trace):  # its own pass 2 (Note [A trace without subclasses is walked once])
        return Flattened(trace, [])
    refuse_values_computed_from_leaves_made_inside(trace)
    # a kept argument is returned or restrided, so the trace involves it: flatten_subclasses does not
    # return pass 1 itself then
    kept = subclass_arguments_passed_whole(trace, subclass_inputs) if subclass_inputs else []
    flat = flatten_subclasses(trace, keep=tuple(proxy for proxy, _path in kept), layouts=layouts)
    return Flattened(flat, [(path, proxy.name) for proxy, path in kept])


def without_grad_mode_changes(trace: Trace) -> Trace:
    """``trace`` without its records of grad-mode changes, for a computation run with grad mode off
    (Note [A graph no output reaches], jit/api.py). A subclass's ``__torch_dispatch__`` that enters
    ``torch.enable_grad()`` (subclass_zoo's inner-autograd tensor) changes grad mode below autograd,
    where eagerly its ops record nothing; run on the inner tensors, the recorded change turned grad mode
    back on and connected the output to an inner tensor that requires grad (``requires_grad`` True
    where eager's is False). The pass read the modes it needed while tracing; nothing of this
    computation's outputs requires grad, so the changes have no other effect to keep."""
    return dataclasses.replace(
        trace, bound_symbols=[b for b in trace.bound_symbols if b.symbol is not SET_GRAD_ENABLED])


def pass_1_runs(trace: Trace, subclass_inputs: Sequence[tuple[SubclassTensorProxy, Path]]) -> bool:
    """Whether pass 1, with its subclass inputs taken whole (``pass_1_under_autograd``), computes
    every value its calls use: not so where a call uses a value only its resolution made (the
    meta-tensor NJT that ``_nested_view_from_jagged`` is given, a subclass built by its constructor)."""
    defined = {id(a) for a in trace.args}
    defined.update(id(proxy) for proxy, _path in subclass_inputs)

    def undefined(value: Any) -> bool:
        return isinstance(value, Proxy) and id(value) not in defined

    for bsym in trace.bound_symbols:
        if bsym.symbol is UNFLATTEN_INPUT:
            continue
        if tree_any((bsym.args, bsym.kwargs), undefined):
            return False
        defined.update(id(v) for v in optree.tree_leaves(bsym.output, none_is_leaf=True))
    return not tree_any(trace.output, undefined)


def pass_1_under_autograd(trace: Trace,
                          subclass_inputs: Sequence[tuple[SubclassTensorProxy, Path]]) -> Flattened:
    """Pass 1 as it runs under torch's autograd (Note [Symbolic sizes of subclass programs under
    autograd], jitcore/transforms/jit_hook.py): the subclass inputs its calls use taken whole, as
    trailing inputs (the caller's objects, whose autograd graph eager extends), instead of rebuilt
    from their inner tensors (Note [Subclass inputs taken whole]).

    Args:
        trace: pass 1.
        subclass_inputs: its bound subclass inputs with their paths (``TracedProgram.subclass_inputs``).
    """
    records, used = subclass_input_records(trace), _used_values(trace)
    kept = [(proxy, path) for proxy, path in subclass_inputs if id(proxy) in records or id(proxy) in used]
    whole = {id(proxy) for proxy, _path in kept}
    header = [line.replace("pass 1 (interpretation)", "pass 1 under torch's autograd")
              for line in trace.header]
    run = Trace(name=trace.name, args=[*trace.args, *(proxy for proxy, _path in kept)], header=header,
                imports=dict(trace.imports), names=trace.names)
    run.bound_symbols[:] = [
        b for b in trace.bound_symbols if not (b.symbol is UNFLATTEN_INPUT and id(b.output) in whole)
    ]
    run.output = trace.output
    _read_ragged_sizes(run, [proxy for proxy, _path in kept])
    return Flattened(run, [(path, proxy.name) for proxy, path in kept])


# Note [Subclass inputs taken whole]
# Pass 1 under torch's autograd takes its subclass inputs whole: the caller's arguments (rebuilt
# from their inner tensors in pass 1: their UNFLATTEN_INPUT records are dropped) and those its calls
# use that the program reached through state (a quantized module's weight, bound where the
# program first read it, with no record). Taking only the arguments left a state weight undefined,
# so a training step over a torchao model with changing batch sizes traced static shapes, an entry
# per size.
def _used_values(trace: Trace) -> set[int]:
    """The ids of the proxies pass 1's calls and output use."""
    used: set[int] = set()
    for bsym in trace.bound_symbols:
        if bsym.symbol is not UNFLATTEN_INPUT:
            used.update(id(v) for v in optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True))
    used.update(id(v) for v in optree.tree_leaves(trace.output, none_is_leaf=True))
    return used


def ragged_size(njt: torch.Tensor, coefficient: int) -> Any:
    """``coefficient`` times the ragged size of the nested jagged tensor ``njt`` (its nested int)."""
    return njt.size(njt._ragged_idx) * coefficient  # noqa: SLF001


RAGGED_SIZE = Symbol(id="ragged_size", name="ragged_size", langctx="dispatch", fn=ragged_size,
                     path="jitcore.dispatch.flatten.ragged_size", meta=_no_meta)


# Note [Ragged sizes under autograd]
# Pass 1 run under torch's autograd takes the caller's NJTs whole, and its records hold the sizes the
# program gave them: ``flatten(-2)`` of an NJT (a multi-head attention's heads merged back) is
# ``reshape(t, (3, s2, 8))``, ``s2`` the symbol of the NJT's ragged size in the pass. Run on a call's
# NJT, only that call's nested int (``j3``) names that size: each such size is read from the NJT it
# belongs to (``ragged_size``) before the first record that uses it, and the records take the read.
# Before, the trace's symbol reached NestedTensor's ``view``: "cannot view shape (3, j3, 2, 4) as
# [3, s2, 8]" from the second ragged structure on, where eager computes. The NJT is an input, or one
# the program made (``nested_tensor_from_jagged(values, offsets)``), which names its nested int from
# its record on.
def _read_ragged_sizes(run: Trace, njts: list[SubclassTensorProxy]) -> None:
    symbols: dict[Any, SubclassTensorProxy] = {}  # a pass's nested int -> an NJT defined with it

    def know(proxy: Any) -> None:
        shadow = getattr(proxy, "shadow", None)
        if isinstance(proxy, SubclassTensorProxy) and shadow.layout is torch.jagged:
            expr = _nested_expr(shadow.shape[shadow._ragged_idx])  # noqa: SLF001
            if expr is not None:
                symbols.setdefault(expr, proxy)

    for proxy in njts:
        know(proxy)
    reads: dict[Any, Any] = {}
    records: list[BoundSymbol] = []

    def read(leaf: Any) -> Any:
        expr = _nested_expr(leaf)
        if expr is None:
            return leaf
        if expr not in reads:
            found = next(((p, c) for sym, p in symbols.items() if (c := _coefficient(expr, sym))), None)
            if found is None:
                return leaf
            from jitcore.proxies.number import NumberProxy
            number = NumberProxy(run.names.fresh("n"), leaf)
            records.append(BoundSymbol(RAGGED_SIZE, found, {}, number))  # before the record that uses it
            reads[expr] = number
        return reads[expr]

    for b in run.bound_symbols:
        if tree_any((b.args, b.kwargs), lambda v: _nested_expr(v) is not None):
            b = BoundSymbol(b.symbol, *optree.tree_map(read, (b.args, b.kwargs), none_is_leaf=True), b.output,
                            b.subsymbols, b.source, b.header)
        records.append(b)
        for value in optree.tree_leaves(b.output, none_is_leaf=True):
            know(value)  # an NJT the program made names its nested int from here on
    run.bound_symbols[:] = records


def _nested_expr(value: Any) -> Any:
    """The expression of a pass's ragged size (a nested int's symbol, times a coefficient); None for
    anything else."""
    node = getattr(value, "node", None) if type(value) is torch.SymInt else None
    if node is None or not node.is_nested_int():
        return None
    return getattr(node, "expr", None)


def _coefficient(expr: Any, symbol: Any) -> int | None:
    """``expr / symbol`` where it is a whole number."""
    ratio = expr / symbol
    return int(ratio) if ratio.is_Integer and int(ratio) != 0 else None


def refuse_values_computed_from_leaves_made_inside(trace: Trace) -> None:
    """Raise EagerOnlyValue (JC-J002) when an output or a stored value of pass 1 requires grad through a
    graph pass 2 cannot give and the caller could tell (Note [Subclass values that require grad]): a
    subclass value computed from a leaf the program made (pass 2 would rebuild it as a leaf, where
    eager's has a grad_fn; from a plain leaf its inner tensors would require grad), or a plain value
    computed from a subclass leaf the program made (pass 2 computes it from inner tensors: it would not
    require grad). Programs without subclasses are fine. Used only where no input requires grad: every
    leaf of such a graph is one the program made."""
    if not involves_subclasses(trace):
        return
    values = [v for v in optree.tree_leaves(trace.output, none_is_leaf=True) if isinstance(v, TensorProxy)]
    for value in values:
        shadow = value.shadow
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
            if not shadow.requires_grad or shadow.grad_fn is None:
                continue
        if isinstance(value, SubclassTensorProxy):  # rebuilt from inner tensors: a leaf, not eager's node
            refused = True
        else:  # shadows: a plain one a FakeTensor
            refused = any(not isinstance(leaf, FakeTensor) for leaf in graph_leaves([shadow.grad_fn]))
        if refused:
            raise EagerOnlyValue(
                f"{value.name} requires grad through a leaf made inside the function with requires_grad, "
                "in a tensor-subclass program: that gradient graph is not traced",
                hints=("make the leaf outside the jitted function and pass it in",),
            )


def flatten_subclasses(trace: Trace, keep: tuple[SubclassTensorProxy, ...] = (),
                       layouts: dict[int, tuple] | None = None) -> Trace:
    """Pass 2: the trace that runs, over plain tensors only (``trace`` itself when it has no subclass).

    Args:
        trace: pass 1.
        keep: subclass inputs returned as themselves: they become trailing arguments of pass 2 and
            are returned as passed (their outer metadata updated where an in-place view op changed
            it), instead of being rebuilt from their inner tensors.
        layouts: ``id(value) -> (sizes, strides, storage offset, ctx)`` of the subclass values it builds
            or restrides, computed per call where the pass's sizes are symbolic (Note [Subclass values'
            sizes], jitcore/jit/shapes.py).
    """
    layouts = layouts or {}
    if not involves_subclasses(trace):
        return trace
    import jitcore

    header = [
        line.replace("pass 1 (interpretation)", "pass 2 (tensor subclasses flattened)")
        for line in trace.header
    ]
    flat = Trace(name=trace.name, args=list(trace.args), header=header,
                 imports={**trace.imports, "jitcore": jitcore}, names=trace.names)
    for bsym in trace.bound_symbols:
        _emit(bsym, flat.bound_symbols)
    rebuilt: dict[int, SubclassTensorProxy] = {id(p): p for p in keep}
    flat.args.extend(keep)
    records = subclass_input_records(trace)
    for proxy in keep:  # an in-place view op changed a kept argument's outer metadata: change it too
        record = records.get(id(proxy))
        if record is not None and restrided(proxy, record):
            layout = layouts.get(id(proxy))
            metadata = (tuple(proxy.shape), tuple(proxy.stride()), proxy.storage_offset()) if layout is None \
                else layout[:3]
            flat.bound_symbols.append(BoundSymbol(RESTRIDE, (proxy, *metadata), {}, None))

    def rewrap(value: Any) -> Any:
        if isinstance(value, SubclassTensorProxy) and id(value) not in rebuilt:
            for inner in value.inner_tensors().values():
                rewrap(inner)
            flat.bound_symbols.append(_unflatten_record(UNFLATTEN, value, kwargs=rebuild_kwargs(value),
                                                        layout=layouts.get(id(value))))
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
                requires_grad = value.shadow.requires_grad
            if requires_grad:  # Note [Subclass values that require grad]
                flat.bound_symbols.append(BoundSymbol(_REQUIRES_GRAD, (value, True), {}, value))
            rebuilt[id(value)] = value
        return value

    optree.tree_map(rewrap, trace.output, none_is_leaf=True)
    flat.output = trace.output
    return flat
