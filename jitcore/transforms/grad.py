"""The grad transform: a forward trace and a backward trace derived from torch's own autograd.

Given the interpretation trace of a function (torch-level calls on proxies, tensor-subclass calls
included), the transform
1. makes a *shadow* for every input: a FakeTensor with the input's metadata and ``requires_grad``,
   or, for a tensor-subclass input, a real instance of the subclass over such fake inner tensors;
2. replays every top-level call of the trace natively on those shadows under a ``RecordingMode``
   (recording.py): torch's autograd builds its graph on the shadows and the mode records the aten
   ops that run below autograd — calls on subclasses are resolved by interpreting their
   ``__torch_dispatch__`` — into the *forward* trace;
3. calls ``torch.autograd.grad(outputs, inputs, tangents, allow_unused=True)`` on the shadows under
   the same mode, recording the aten ops of autograd's backward formulas into the *backward* trace.
   The tangents of subclass outputs are instances of the output's class (as eager hands them), so
   backward ops on them resolve through the subclass's ``__torch_dispatch__`` too: the split into
   forward and backward happens before subclass resolution, as it must (a subclass may implement an
   op with ops that have no derivative). The shadows' autograd graph is kept: a backward for
   gradients of other kinds is recorded on it when they first come (``BackwardDeriver``);
4. decides what the forward saves (saving.py) and closes both traces.

Invariants:
- both traces hold only plain tensors and aten ops (subclass outputs and gradients are rebuilt at
  their end with the class's own ``__tensor_unflatten__``);
- the backward's inputs are the saved forward values, then the tangents (inner tensors of subclass
  tangents, in ``__tensor_flatten__`` order);
- the transform never runs user tensors: it works on shadows only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optree
import torch
from torch.utils._python_dispatch import _disable_current_modes

import jitcore
from jitcore.dispatch.flatten import kept_attributes, set_attributes
from jitcore.dispatch.shadow_map import DispatchState
from jitcore.errors import UnsupportedOperationError
from jitcore.ir import BoundSymbol, Proxy, Trace, TraceContext, tree_any
from jitcore.langctx import new_context
from jitcore.langctx.backward import torch_functions_of_a_backward
from jitcore.langctx.layout import LayoutReliance
from jitcore.langctx.number_tensors import keeps_numbers_as_data
from jitcore.langctx.reads import SIZE_OF
from jitcore.langctx.shadows import share_nested_int
from jitcore.langctx.thread_state import ThreadState, rng_state, set_rng_state
from jitcore.proxies import TensorProxy
from jitcore.proxies.generator import GeneratorProxy, is_generator_record
from jitcore.proxies.number import NumberProxy
from jitcore.proxies.protocol import unflatten_around
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.assembly import Assembly, assembly_of, unproduced_subclasses
from jitcore.transforms.autograd_function import run_on_shadows, with_cells_mapped
from jitcore.transforms.backward_deriver import (
    BackwardDeriver,
    DerivedBackward,
    OutputSpec,
    plain_only,
    rebuilt,
)
from jitcore.transforms.inputs_handed_back import input_flags, returned_inputs
from jitcore.transforms.recording import recording
from jitcore.transforms.replayed_numbers import Assumed, ReplayedNumbers
from jitcore.transforms.replayed_reads import ReplayedReads
from jitcore.transforms.saving import CHECKPOINT_BEGIN, CHECKPOINT_END, split_saved
from jitcore.transforms.symbolic_sizes import (
    SizesNotRewritten,
    SizesReplaced,
    SymbolicSizes,
    condition_checks,
)
from jitcore.transforms.symbolic_sizes import rewrite_sizes as rewrite_sizes
from jitcore.transforms.version_witnesses import witnessed_outputs
from jitcore.transforms.view_outputs import (
    ViewOutputs,
    drop_views_made_after,
    numbers_taken,
    plan,
    refuse_views_left,
    view_outputs,
)
from jitcore.transforms.view_round_trips import collapse_view_round_trips, drop_unread_views
from jitcore.transforms.view_versions import bumped_after_written_views, shares_a_saved_value

__all__ = [
    "BackwardDeriver", "DerivedBackward", "GradTraces", "OutputSpec", "ReplayInconsistent", "SubclassInputs",
    "grad_transform", "needs_grad", "reaches_no_graph", "unproduced_subclasses",
]



# Note [A tensor of named numbers, replayed]
# ``torch.tensor([a.shape[0], b.shape[0]])`` (an NJT's offsets, built by ``as_nested_tensor([a, b])``)
# keeps its numbers as names in pass 1 (Note [A tensor made from named numbers],
# langctx/number_tensors.py). Replayed natively on the sizes' SymInts, torch's factory pinned each one
# (``s0 == 3``), so an entry with symbolic sizes under grad ran pass 1 under torch's autograd on every
# call. Its output takes no grad and comes from no tensor: it runs in the forward as recorded.
def _tensor_of_named_numbers(bsym: BoundSymbol) -> bool:
    data = bsym.args[0] if bsym.args else bsym.kwargs.get("data")
    return keeps_numbers_as_data(bsym.symbol.fn, 0, data) and not bsym.kwargs.get("requires_grad")

class ReplayInconsistent(AssertionError):
    """A record uses a value the replay never produced (Note [A replay that loses an input's structure])."""


@dataclass(eq=False)
class GradTraces:
    """The result of the grad transform.

    Attributes:
        forward: returns ``(outputs, saved)``: the tensor outputs (flat, in ``optree`` order of the
            original output) and the values the backward needs.
        backward: takes ``(*saved, *tangents)`` and returns one gradient (or None) per input in
            ``grad_inputs``.
        output_tree, output_leaves: the structure of the original output and its leaves (proxies
            of the forward trace where the output holds tensors).
        differentiable: the tangent each differentiable output expects, in backward argument order.
        grad_inputs: the inputs gradients are computed for: ``("arg", i)`` for the i-th trace
            argument, ``("subclass", i)`` for the i-th subclass input (its outer tensor, in the
            order of the transform's ``subclass_inputs``).
        layout: which pass-1 inputs' strides and storage offset the forward and backward traces
            rely on (``layout.relies_on(arg)``; jitcore/langctx/layout.py).
        backward_body: the backward's own ops, without the forward ops saving.py made it recompute
            (what mincut.py chooses saved values from when the traces are fused).
        forward_body: every op of the forward, the views that nothing reads in ``forward`` included
            (Note [Unread views in a forward]): what mincut.py and rederive.py recompute from.
        fresh_leaves: the forward's outputs that are leaves requiring grad made by the program
            (``y = x.detach().requires_grad_()``, ``copy.deepcopy(p)``): not differentiable, they
            are given ``requires_grad`` after the call, so that they come back leaves as eagerly.
        deriver: records backwards for tangents of other kinds than ``differentiable`` names (Note
            [A backward for other tangent kinds], backward_deriver.py); None when autograd raised
            while deriving.
        input_flags: ``(position, flag)`` of each input whose ``requires_grad_`` the program set (the
            last flag): set on the caller's tensor by every call, as eagerly (the forward holds no
            such record: it runs under the transform, not under autograd).
        returned_inputs: ``(position among the output's leaves, kind, index)`` of each input the
            program returns or stores as it is, numbered as ``grad_inputs`` (Note [Inputs returned
            as they are under autograd], autograd.py).
        assembly: how the tensor outputs are made from the forward's outputs when the program
            assembles subclass outputs (None: they are the forward's outputs; assembly.py).
            ``differentiable`` then indexes the forward's outputs, ``fresh_leaves`` the tensor outputs.
        numbers: the numbers the forward computes that the output holds (``loss.item()``), each once:
            the forward returns them after its tensor outputs (Note [Numbers a grad entry returns]).
        views: how the outputs that are views are made after the Function from their bases (None:
            none is; Note [Views an autograd call returns], view_outputs.py): the forward's outputs
            are then the other tensor outputs, then ``views.hidden``, then ``numbers``.
        witnessed: the indices among the forward's outputs of the subclass outputs the Function also
            saves a witness of (Note [A saved subclass output written], version_witnesses.py).
    """

    forward: Trace
    backward: Trace
    output_tree: Any
    output_leaves: list[Any]
    differentiable: list[OutputSpec]
    grad_inputs: list[tuple[str, int]]
    layout: LayoutReliance | None = None
    backward_body: tuple[BoundSymbol, ...] = ()
    forward_body: tuple[BoundSymbol, ...] = ()
    fresh_leaves: tuple[int, ...] = ()
    deriver: BackwardDeriver | None = None
    input_flags: tuple[tuple[int, bool], ...] = ()
    returned_inputs: tuple[tuple[int, str, int], ...] = ()
    assembly: Assembly | None = None
    numbers: tuple[NumberProxy, ...] = ()
    views: ViewOutputs | None = None
    witnessed: tuple[int, ...] = ()


# (proxy, requires_grad) of each tensor-subclass input, inner ones first: the inputs the
# interpretation bound (TracedProgram.subclass_inputs), with the flag of the caller's outer tensor,
# which the prologue checks (the proxies' own metadata does not carry it)
SubclassInputs = Sequence[tuple[SubclassTensorProxy, bool]]


def needs_grad(trace: Trace, subclass_inputs: SubclassInputs) -> bool:
    """Whether a call of ``trace`` must build a backward: grad mode on and an input requires grad.

    Args:
        trace: the pass-1 trace.
        subclass_inputs: its subclass inputs, each with whether the caller's tensor requires grad.
    """
    if any("backward" in b.symbol.tags for b in trace.bound_symbols):
        return True  # the program runs a backward itself (jitcore/jit/autograd_calls.py)
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or _reaches_no_graph(trace):
        return False
    if any(isinstance(a, TensorProxy) and a.requires_grad for a in trace.args):
        return True
    return any(requires_grad for _proxy, requires_grad in subclass_inputs)


def reaches_no_graph(trace: Trace, subclass_inputs: SubclassInputs) -> bool:
    """Grad mode is on and an input requires grad, yet no output requires grad and nothing is written
    in place: eager builds a graph the caller cannot reach (Note [A graph no output reaches]).

    Args:
        trace: the pass-1 trace.
        subclass_inputs: its subclass inputs, each with whether the caller's tensor requires grad.
    """
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not _reaches_no_graph(trace):
        return False
    if any("backward" in b.symbol.tags for b in trace.bound_symbols):
        return False
    if any(isinstance(a, TensorProxy) and a.requires_grad for a in trace.args):
        return True
    return any(requires_grad for _proxy, requires_grad in subclass_inputs)


def _reaches_no_graph(trace: Trace) -> bool:
    """No output requires grad (a subclass output: nor any of its inner tensors) and nothing is written
    in place: whatever graph eager would build, the caller cannot reach it (``model.generate`` under
    ``no_grad``, an ``argmax``), so the computation needs no backward."""
    for leaf in optree.tree_leaves(trace.output, none_is_leaf=True):
        if leaf.carries_grad() if isinstance(leaf, SubclassTensorProxy) else _requires_grad(leaf):
            return False
    return not any(
        ("inplace" in b.symbol.tags or "out" in b.kwargs) and tree_any((b.args, b.kwargs), _requires_grad)
        for b in trace.bound_symbols
    )


def _made_leaf(value: SubclassTensorProxy) -> bool:
    """Whether a subclass value the program made from its inner tensors is a leaf that requires grad:
    made with ``_make_wrapper_subclass(..., requires_grad=True)``, as eagerly (its inner tensors'
    gradients do not flow through it, eagerly either)."""
    return value.outer_metadata.requires_grad


def _requires_grad(value: Any) -> bool:
    return isinstance(value, SubclassTensorProxy) or (isinstance(value, TensorProxy) and value.requires_grad)


class _Replay:
    """The state of one replay: pass-1 proxies -> proxies of the forward trace."""

    def __init__(self, trace: Trace, subclass_inputs: SubclassInputs,
                 reads: Sequence[tuple[NumberProxy, BoundSymbol]] = (),
                 sizes: SymbolicSizes | None = None, stand_ins: bool | Assumed = False) -> None:
        self.source = trace
        # t.item() results kept as names (replayed_numbers.py)
        self.numbers = ReplayedNumbers(reads, stand_ins=stand_ins)
        self.mode: Any = None  # the recording mode, while the forward is replayed
        self.subclass_inputs = [proxy for proxy, _requires_grad in subclass_inputs]
        self.subclass_grad = {id(proxy): requires_grad for proxy, requires_grad in subclass_inputs}
        header = [
            line.replace("pass 1 (interpretation)", "forward (grad transform)") for line in trace.header
        ]
        # pass 1's imports too: records copied as they are (a read number's arithmetic: ``operator``)
        self.forward = Trace(name="forward", header=header,
                             imports={**trace.imports, "torch": torch, "jitcore": jitcore})
        # the forward's records carry the user stack of the pass-1 op being replayed, so an error
        # raised while the forward runs is reported at the user's line
        self.replaying: BoundSymbol | None = None
        self.checkpoint_depth = 0  # inside how many activation-checkpointed regions (saving.py)
        self.checkpointed: set[int] = set()  # ids of the forward's records made inside one
        self.context: TraceContext = new_context(
            self.forward,
            source_provider=lambda: self.replaying.source if self.replaying is not None else None,
        )
        # subclass dispatch code reads what pass 1 read inside the call being replayed (replayed_reads.py)
        self.reads = ReplayedReads(self.context, lambda shadow: self._fake_like(shadow, contiguous=False))
        self.context.call_handler = self.reads
        self.values = self.context.values
        # Note [Symbolic sizes through the grad transform]: the pass's sizes, SymInts of its ShapeEnv
        self.sizes = sizes
        self.size_values: dict[int, Any] = {}  # id(pass-1 number) -> its SymInt (or int) in the replay
        if sizes is not None:
            self.values.fake_mode.shape_env = self.values.shape_env = sizes.env
            for number, _symbol in sizes.numbers.values():
                self.forward.names.claim(number.name)  # the records' arithmetic takes other names
                self.size_values[id(number)] = sizes.symint(number)
        self.state = DispatchState.of(self.values)
        self.env: dict[int, Proxy] = {}
        self._keep: list[Any] = []
        # autograd node -> the user stack of the pass-1 op whose replay created it (id -> (node, source))
        self.node_sources: dict[int, tuple[Any, Any]] = {}

    def symbol_names(self) -> dict[Any, NumberProxy]:
        """The numbers the records' SymInts and SymFloats stand for: the pass's sizes and the stand-ins
        of read numbers (Note [A read number under grad], replayed_numbers.py).

        Raises:
            SizesNotRewritten: a stand-in's symbol is also a size's (two ShapeEnvs named them alike).
        """
        names = {} if self.sizes is None else self.sizes.names()
        stood_in = self.numbers.names()
        if names.keys() & stood_in.keys():
            raise SizesNotRewritten("a number read from a tensor and a size have one symbol")
        return {**names, **stood_in}

    # --- inputs ------------------------------------------------------------------------------------
    def bind_inputs(self, unproduced: Sequence[SubclassTensorProxy]) -> None:
        for arg in self.source.args:
            if isinstance(arg, GeneratorProxy) or id(arg) in self.size_values:
                self.forward.args.append(arg)  # a generator the call passes, a size input: itself
                continue
            if isinstance(arg, NumberProxy):  # a number a split Function takes (function_records.py)
                self.forward.names.claim(arg.name)
                self.forward.args.append(arg)
                continue
            shadow = self._fake_like(arg.shadow, contiguous=False)
            if arg.requires_grad:
                shadow.requires_grad_(True)
            proxy = self.values.proxy_for(shadow)
            proxy.name = self.forward.names.claim(arg.name)
            self.values.layout.seed(shadow, arg)  # reliance found here is on pass 1's input
            self._map(arg, proxy)
            self.forward.args.append(proxy)
        for old in unproduced:
            self._rebuild_subclass(old, requires_grad=self.subclass_grad.get(id(old), _made_leaf(old)))

    def _rebuild_subclass(self, old: SubclassTensorProxy, *, requires_grad: bool = False) -> Any:
        """A subclass value as an instance of its class over its inner tensors' replayed shadows
        (None: an inner tensor is not produced yet)."""
        names, ctx = old.inner_flatten()
        inner = {n: self._produced(getattr(old, n)) for n in names}
        if any(v is None for v in inner.values()):
            return None
        shadow = unflatten_around(old.subclass, {n: v.shadow for n, v in inner.items()}, ctx, old.shape,
                                  old.stride())
        # Note [An output's attribute outside its flatten protocol], jitcore/dispatch/flatten.py
        set_attributes(shadow, tuple((k, self.numbers.lookup(v) if type(v) is NumberProxy else v)
                                     for k, v in kept_attributes(old)))
        if requires_grad:
            shadow.requires_grad_(True)
        self._map(old, self.state.adopt(shadow, self.forward.names.claim(old.name)))
        return self.env[id(old)]

    def _produced(self, old: Any) -> Any:
        """The replay's value of ``old`` (None: not produced yet); a subclass value the program made
        from its inner tensors (a wrapper inside a wrapper) is rebuilt as in ``lookup``."""
        found = self.env.get(id(old))
        if found is None and isinstance(old, SubclassTensorProxy):
            found = self._rebuild_subclass(old, requires_grad=_made_leaf(old))
        return found

    def _fake_like(self, t: torch.Tensor, *, contiguous: bool) -> torch.Tensor:
        """A fresh shadow like ``t``: contiguous, or with ``t``'s strides, storage offset and storage
        size (ops autograd records with absolute offsets, ``as_strided`` and its backward, must
        compute them from the caller's layout, which the prologue then guards)."""
        if contiguous:
            stride = torch._prims_common.make_contiguous_strides_for(t.shape)
            with self.values.fake_mode:
                return torch.empty_strided(tuple(t.shape), tuple(stride), dtype=t.dtype, device=t.device)
        if self.sizes is not None and any(type(v) is torch.SymInt for v in (*t.shape, *t.stride())):
            # symbolic sizes: a storage of the traced size would bound them (a guard the prologue lacks);
            # a layout the records rely on is this one, guarded (symbolic strides: pass 1, jit_hook.py)
            with self.values.fake_mode:
                return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=t.device)
        with self.values.fake_mode:
            size = max(t.untyped_storage().nbytes() // max(t.element_size(), 1), 1)
            storage = torch.empty(size, dtype=t.dtype, device=t.device).untyped_storage()
            shadow = torch.empty(0, dtype=t.dtype, device=t.device)
            return shadow.set_(storage, t.storage_offset(), tuple(t.shape), tuple(t.stride()))

    def tangent_proxy(self, shadow: torch.Tensor, name: str) -> TensorProxy:
        proxy = self.values.proxy_for(shadow)
        proxy.name = self.forward.names.claim(name)
        return proxy

    def _map(self, old: Any, new: Any) -> None:
        self.env[id(old)] = new
        self._keep.append(old)
        if isinstance(old, TensorProxy) and isinstance(new, TensorProxy):
            share_nested_int(old.shadow, new.shadow)  # Note [Nested ints in the replay], shadows.py
        if isinstance(old, SubclassTensorProxy) and isinstance(new, SubclassTensorProxy):
            for name, inner in old.inner_tensors().items():
                if id(inner) not in self.env:
                    self._map(inner, getattr(new, name))

    def lookup(self, value: Any) -> Any:
        if isinstance(value, GeneratorProxy):
            return value  # made by the forward's own records, as in pass 1
        if id(value) in self.size_values:
            return self.size_values[id(value)]
        if isinstance(value, NumberProxy):
            # the entry's dynamic numbers were specialized before the replay; reads stay names where
            # they can (replayed_numbers.py)
            return self.numbers.lookup(value)
        if isinstance(value, Proxy):
            # one the program made from its inner tensors (``OptimState8bit(codes, ...)`` in torchao's
            # optimizers): no op makes it, so it is rebuilt as a subclass input is
            found = self._produced(value)
            if found is None:
                raise ReplayInconsistent(f"grad transform: {value.name} is used before it is produced")
            return found
        return value

    # --- the forward -------------------------------------------------------------------------------
    def run_forward(self) -> None:
        """Replay pass 1 under the recording mode. Its ``global_state`` records (``_set_grad_enabled``,
        ``torch.manual_seed``) run natively; settings and RNG are restored after, also when it raises."""
        state, rng = ThreadState.take(), rng_state()  # Note [The random state while tracing]
        try:
            self._run_forward()
        finally:
            state.restore()
            set_rng_state(rng)

    def _run_forward(self) -> None:
        with recording(self.context) as mode:
            self.mode = mode
            for bsym in self.source.bound_symbols:
                if bsym.symbol is CHECKPOINT_BEGIN or bsym.symbol is CHECKPOINT_END:  # saving.py
                    self.checkpoint_depth += 1 if bsym.symbol is CHECKPOINT_BEGIN else -1
                    continue
                if "bookkeeping" in bsym.symbol.tags:
                    continue
                if "check" in bsym.symbol.tags or "data_dependent" in bsym.symbol.tags \
                        or "per_call" in bsym.symbol.tags or bsym.symbol is SIZE_OF \
                        or (self.numbers.is_arithmetic(bsym) and not self._on_sizes(bsym)) \
                        or _tensor_of_named_numbers(bsym):
                    # value reads (jitcore/langctx/reads.py), ``random.seed`` (jit/nondeterministic.py), a
                    # size values decided (Note [A size values decided, replayed], symbolic_sizes.py),
                    # ``torch.tensor([s0, s1])`` (Note [A tensor of named numbers, replayed]): run as recorded
                    self._copy_record(bsym)
                    continue
                if is_generator_record(bsym):
                    self._copy_draw(bsym)  # a generator the program made, and the draws from it
                    continue
                if "global_state" in bsym.symbol.tags:  # torch.manual_seed, set_default_dtype
                    self.forward.bound_symbols.append(bsym)  # run at this point on every call, as eagerly
                mode.calling(bsym.symbol.fn)  # Note [The detach of a variable factory]
                before = len(self.forward.bound_symbols)
                self._replay(bsym)
                if self.checkpoint_depth:
                    self.checkpointed.update(map(id, self.forward.bound_symbols[before:]))
            self.forward.bound_symbols.extend(self._replayed_check(c) for c in self.numbers.checks())

    # Note [A read's check names the replay's tensor]
    # The check of a number pass 1 read (``check_read(site, 1.54, float, t0)``) is added to the forward
    # where the forward relies on its value (replayed_numbers.py). It held pass 1's tensor: the same name
    # as the forward's where the read was of a top-level value, but a read inside a subclass's code
    # (``x.sum().item()`` of a TwoTensor: ``aten._local_scalar_dense(t0)`` on an inner tensor, under grad)
    # names an inner tensor the replay made anew (``t3``): the forward raised UnboundLocalError on
    # ``t0`` on every call (the first included), where eager computes. Its tensors are the replay's.
    def _replayed_check(self, check: BoundSymbol) -> BoundSymbol:
        args, kwargs = _tree_map(lambda v: self.lookup(v) if isinstance(v, TensorProxy) else v,
                                 (check.args, check.kwargs))
        return dataclasses.replace(check, args=args, kwargs=kwargs)

    def _copy_draw(self, bsym: BoundSymbol) -> None:
        """A generator's creation, seeding or a draw from it (jitcore/langctx/generators.py): run as
        recorded; a draw is not differentiable, so one from tensors that require grad is refused."""
        if torch.is_grad_enabled() and tree_any(
            _tree_map(self.lookup, (bsym.args, bsym.kwargs)),
            lambda v: isinstance(v, TensorProxy) and v.shadow.requires_grad,
        ):
            raise UnsupportedOperationError(
                f"{bsym.symbol.name}: a draw from a generator made inside the jitted function, from "
                "tensors that require grad, is not differentiated by jitcore",
                hints=("draw under torch.no_grad(), or pass the generator in from outside",))
        self._copy_record(bsym)

    def _copy_record(self, bsym: BoundSymbol) -> None:
        """A record that runs in the forward as it is: its tensor outputs (value-shaped, never
        differentiable) become forward values with the recorded metadata; a check compares the numbers
        the forward computes (Note [A check of a specialized read], replayed_numbers.py)."""
        checked = "check" in bsym.symbol.tags
        args, kwargs = _tree_map(
            lambda v: self.numbers.checked(v) if checked and isinstance(v, NumberProxy)
            and id(v) not in self.size_values else self.lookup(v),
            (bsym.args, bsym.kwargs))
        self.numbers.made(bsym.output)

        def output(old: Any) -> Any:
            if not isinstance(old, TensorProxy):
                return old
            with _disable_current_modes():  # made here, not recorded by the RecordingMode
                shadow = self._fake_like(old.shadow, contiguous=False)
            new = self.values.proxy_for(shadow)
            self._map(old, new)
            return new

        self.forward.bound_symbols.append(dataclasses.replace(
            bsym, args=args, kwargs=kwargs, output=_tree_map(output, bsym.output), subsymbols=()))

    def _replay(self, bsym: BoundSymbol) -> None:
        if _is_constant_value(bsym.output) and not ("inplace" in bsym.symbol.tags or "out" in bsym.kwargs):
            # its output is a constant of the trace (``bool(t)`` of a tensor made from a Python
            # number: the fake mode knew its value): nothing for autograd, and the replay's copies of
            # the shadows no longer carry that value
            return
        args, kwargs = _tree_map(lambda v: _shadow(self.lookup(v)), (bsym.args, bsym.kwargs))
        self.replaying = bsym
        try:
            numbers = self.numbers.passing(self.mode, bsym.symbol, args, kwargs)
            with self.reads.replaying(bsym), numbers as call:
                if "autograd_function" in bsym.symbol.tags:
                    # the user's forward runs natively here, with __torch_function__ on as eagerly
                    # (a quantized weight's ``.to(dtype)`` dequantizes in its __torch_function__);
                    # Note [A Function's forward that needs values]
                    # Note [A Function class whose methods close over the program's values]
                    cls = with_cells_mapped(call[0][0], lambda v: _shadow(self.lookup(v)))
                    with torch._C._EnableTorchFunction():  # noqa: SLF001
                        out = run_on_shadows(cls, *call[0][1:], **call[1])
                elif "backward" in bsym.symbol.tags:
                    # a Function's backward runs its user Python as eagerly, with __torch_function__ on
                    # (Note [The torch-function state of a backward the program runs], langctx/backward.py)
                    with torch_functions_of_a_backward(*call[0][:3], caller=False):
                        out = bsym.symbol.fn(*call[0], **call[1])
                else:
                    out = bsym.symbol.fn(*call[0], **call[1])
        finally:
            self.replaying = None
        self._note_nodes(out, bsym.source)
        self._note_returned_inputs(bsym, (args, kwargs), out)
        old_leaves = optree.tree_leaves(bsym.output, none_is_leaf=True)
        new_leaves = optree.tree_leaves(out, none_is_leaf=True)
        for old, new in zip(old_leaves, new_leaves):
            if isinstance(old, Proxy) and isinstance(new, torch.Tensor):
                self._map(old, self.state.proxy_of(new))
            elif isinstance(old, NumberProxy) and self.sizes is not None \
                    and type(new) in (int, torch.SymInt):
                self.size_values[id(old)] = new  # arithmetic on sizes, replayed on their SymInts

    def _on_sizes(self, bsym: BoundSymbol) -> bool:
        """A record of arithmetic that reads sizes: replayed on their SymInts."""
        leaves = optree.tree_leaves((bsym.args, bsym.kwargs))
        bounds = [b for s in leaves if type(s) is slice for b in (s.start, s.stop, s.step)]
        return any(id(v) in self.size_values for v in (*leaves, *bounds))


    def _note_returned_inputs(self, bsym: BoundSymbol, call: tuple, out: Any) -> None:
        """A torch-level call that returned an argument itself recorded nothing: its composite
        decided so from that argument's layout (``contiguous()``, ``reshape`` to the same shape),
        so the layout is relied on (jitcore/langctx/layout.py). In-place calls return their
        argument by definition."""
        if "inplace" in bsym.symbol.tags or "out" in bsym.kwargs:
            return
        arguments = [a for a in optree.tree_leaves(call, none_is_leaf=True) if isinstance(a, torch.Tensor)]
        outputs = [o for o in optree.tree_leaves(out, none_is_leaf=True) if isinstance(o, torch.Tensor)]
        self.values.layout.returned_inputs(bsym.symbol.fn, bsym.kwargs, arguments, outputs)

    def _note_nodes(self, out: Any, source: Any) -> None:
        """The autograd nodes this op's replay created (those not seen before, reached from its
        outputs) carry its user stack: the backward ops they run are reported at that line."""
        pending = [
            t.grad_fn for t in optree.tree_leaves(out, none_is_leaf=True) if isinstance(t, torch.Tensor)
        ]
        while pending:
            node = pending.pop()
            if node is None or id(node) in self.node_sources:
                continue
            self.node_sources[id(node)] = (node, source)
            pending.extend(n for n, _ in node.next_functions)


def _is_constant_value(output: Any) -> bool:
    leaves = optree.tree_leaves(output, none_is_leaf=True)
    return bool(leaves) and all(type(v) in (bool, int, float, complex) for v in leaves)


def _shadow(value: Any) -> Any:
    return value.shadow if isinstance(value, TensorProxy) else value


def _tree_map(fn: Any, tree: Any) -> Any:
    """``fn`` mapped over the leaves of ``tree`` and a slice's bounds (Note [Slice bounds replayed])."""
    return optree.tree_map(lambda v: _slice_map(fn, v) if type(v) is slice else fn(v), tree,
                           none_is_leaf=True)


# Note [Slice bounds replayed]
# ``z[: x.shape[0] // 2]`` holds a NumberProxy inside a slice, which is no pytree node: replayed as it
# was, the proxy became the aten op's number through ``__index__``, pass 1's value, a constant of an
# entry with symbolic sizes (a TwoTensor of 8 rows sliced as of 6: 3 rows where eager has 4).
def _slice_map(fn: Any, s: slice) -> slice:
    return slice(fn(s.start), fn(s.stop), fn(s.step))


def grad_transform(trace: Trace, subclass_inputs: SubclassInputs,
                   unproduced: Sequence[SubclassTensorProxy],
                   reads: Sequence[tuple[NumberProxy, BoundSymbol]] = (),
                   sizes: SymbolicSizes | None = None, stand_ins: bool | Assumed = False,
                   baseline: tuple | None = None) -> GradTraces:
    """Split ``trace`` (pass 1, torch level) into a forward and a backward trace over plain tensors.

    Args:
        trace: the interpretation trace of a call whose inputs require grad.
        subclass_inputs: its subclass inputs with their flags (see ``SubclassInputs``): the
            computation's trailing inputs, numbered so in ``GradTraces.grad_inputs``.
        unproduced: ``unproduced_subclasses(trace)`` (``TracedProgram.unproduced_subclasses``: pass 1
            walked once per program): rebuilt by the replay before it runs.
        reads: the numbers pass 1 read with ``item()`` and kept as names, each with its check: names in
            the forward where autograd records nothing of them, checked otherwise (replayed_numbers.py).
        sizes: the pass's symbolic sizes (None: its sizes are static; Note [Symbolic sizes through the
            grad transform], symbolic_sizes.py).
        stand_ins: ``reads`` given to calls under grad are stand-ins, names in both traces (Note [A read
            number under grad], replayed_numbers.py); an ``Assumed``: an int's stand-in is
            backed, what torch assumed of them collected there (Note [A split Function's int as a size]).
        baseline: with ``sizes``, what their ShapeEnv assumed before an earlier replay that replaced a
            size (``SizesReplaced.baseline``): the checks are of everything added since.

    Returns:
        The forward and backward traces and what the runtime needs to connect them to autograd.

    Raises:
        Exception: what torch's autograd raises for this program (e.g. an in-place op on a leaf
            that requires grad), as eager would raise it.
        SizesNotRewritten: with ``sizes``, the replay cannot keep them symbolic; with ``stand_ins``,
            torch assumed something of one.
        SizesReplaced: with ``sizes`` and no ``baseline``, the replay replaced a size midway (Note [A
            size the replay replaced], symbolic_sizes.py): to be made again with the baseline.
    """
    replay = _Replay(trace, subclass_inputs, reads, sizes, stand_ins)
    assumed, asserted = (None, []) if sizes is None else baseline or (sizes.state(), sizes.asserts())
    replay.bind_inputs(unproduced)
    replay.run_forward()
    leaves, tree = optree.tree_flatten(trace.output, none_is_leaf=True)
    outputs = [replay.lookup(v) if isinstance(v, Proxy) else v for v in leaves]
    # Note [Views an autograd call returns] (view_outputs.py): made after the Function from their base
    found = view_outputs(trace, leaves, lambda v: replay.env.get(id(v)), replay.subclass_inputs,
                         lambda n: isinstance(n, torch.SymInt) or id(n) in replay.size_values)
    tensor_outputs, views = _tensor_outputs(outputs, found, trace, leaves, replay.subclass_inputs)
    grad_inputs, wrt = _grad_inputs(trace, replay, subclass_inputs)
    # Note [Subclass outputs the program assembles]: the node's outputs are not all tensor outputs
    subclass_proxies = [replay.env.get(id(p)) for p in replay.subclass_inputs]
    assembly = assembly_of(replay.forward, tensor_outputs, subclass_proxies)
    if assembly is not None and views is not None:  # the views stay the Function's outputs
        tensor_outputs, views = _tensor_outputs(outputs, None, trace, leaves, replay.subclass_inputs)
        assembly = assembly_of(replay.forward, tensor_outputs, subclass_proxies)
    # Note [A view left to the Function] (view_outputs.py)
    refuse_views_left(trace, leaves, views, lambda v: replay.env.get(id(v)), replay.subclass_inputs,
                      assembly is not None)
    node_outputs = tensor_outputs if assembly is None else assembly.node_outputs
    deriver = BackwardDeriver(replay, node_outputs, wrt, _fresh_leaves(node_outputs, replay))
    derived = deriver.derive()

    forward = replay.forward
    forward.bound_symbols[:] = plain_only(forward.bound_symbols)
    # rebuilt before the sizes are rewritten: a subclass output's outer sizes are symbolic too
    forward_outputs = [rebuilt(forward, o) for o in node_outputs]
    replay.numbers.assumed_nothing()  # Note [A read number under grad]
    if sizes is not None:  # Note [Symbolic sizes through the grad transform]
        if baseline is None and sizes.replaced(assumed):
            raise SizesReplaced((assumed, asserted))
        added = sizes.added(assumed, asserted)  # the guards and asserts the replay and the backward added
    names = replay.symbol_names()
    # Note [View calls of symbolic sizes] (view_outputs.py): the numbers they take are returned as well
    view_numbers = [replay.lookup(n) for n in views.numbers] if views is not None else []
    if names:  # the output's sizes too (Note [Sizes a grad entry returns])
        rewritten = rewrite_sizes(forward, names, [*outputs, *view_numbers])
        outputs, view_numbers = rewritten[: len(outputs)], rewritten[len(outputs):]
    if sizes is not None and assembly is not None and not assembly.sized_statically():
        assembly.take_sizes(names, forward.args)  # Note [An assembly with symbolic sizes], assembly.py
    if sizes is not None:
        source = trace.bound_symbols[-1].source if trace.bound_symbols else None
        forward.bound_symbols.extend(condition_checks(added, sizes.names(), source))
        # Note [A size the replay replaced], symbolic_sizes.py: before any record relies on it
        replaced = sizes.replaced(assumed)
        given = {id(a) for a in forward.args}
        if any(id(names[s]) not in given for r in replaced for s in r.expr.free_symbols if s in names):
            raise SizesNotRewritten("the replay replaced a size the forward computes")
        first = trace.bound_symbols[0].source if trace.bound_symbols else None
        forward.bound_symbols[:0] = condition_checks(replaced, sizes.names(), first)
    backward = derived.backward
    body = tuple(backward.bound_symbols)
    checkpointed = frozenset(replay.checkpointed)  # activation-checkpointed regions: recomputed
    saved = split_saved(forward, backward, derived.tangent_args, derived.outputs, checkpointed)
    numbers = _numbers_made(forward, [*outputs, *view_numbers])  # Note [Sizes a grad entry returns]
    if view_numbers:
        views = numbers_taken(views, view_numbers, numbers, len(forward_outputs))
    if views is not None and views.n_strided:  # Note [The version of a written base] (view_versions.py)
        views = bumped_after_written_views(views, shares_a_saved_value(saved, lambda root: (
            tensor_outputs[root[1]] if root[0] == "output" else replay.env.get(id(trace.args[root[1]]))
            if root[0] == "arg" else None)))
# With symbolic sizes, the replay looks a size the output holds up as its SymInt (``x.shape``,
# ``x.shape[0] * 2 + 1``, ``x.numel()`` returned beside a TwoTensor requiring grad): the SymInt itself
# was kept as a constant of the entry and handed to every call (``torch.Size([s0, 3])``, ``2*s0 + 1``).
# It is rewritten as the forward's records are, into the size number the computation takes or
# arithmetic recorded on it, and returned as any number the forward makes (the Note below).

# Note [Numbers a grad entry returns]
    forward.output = (tuple(forward_outputs) + numbers, tuple(saved))
    backward.args = [*saved, *derived.tangent_args]
    backward.output = tuple(derived.outputs)
    collapse_view_round_trips(backward)  # Note [View round trips in a backward]
    forward_body = tuple(forward.bound_symbols)
    if not collapse_view_round_trips(forward):  # a jitted training step's forward holds round trips
        drop_unread_views(forward)  # Note [Unread views in a forward]
    if views is not None:
        drop_views_made_after(forward)  # Note [Views an autograd call returns], view_outputs.py
    if derived.raises:
        # Note [A backward for other tangent kinds] (backward_deriver.py): autograd raised, as it would again
        deriver = None
    return GradTraces(forward, backward, tree, outputs, derived.differentiable, grad_inputs,
                      replay.values.layout, body, forward_body, _fresh_leaves(tensor_outputs, replay),
                      deriver,
                      input_flags(trace), returned_inputs(trace, leaves, subclass_inputs), assembly,
                      numbers, views, witnessed_outputs(forward_outputs, saved))


# Note [Sizes a grad entry returns]
# With symbolic sizes, the replay looks a size the output holds up as its SymInt (``x.shape``,
# ``x.shape[0] * 2 + 1``, ``x.numel()`` returned beside a TwoTensor requiring grad): the SymInt itself
# was kept as a constant of the entry and handed to every call (``torch.Size([s0, 3])``, ``2*s0 + 1``).
# It is rewritten as the forward's records are, into the size number the computation takes or
# arithmetic recorded on it, and returned as any number the forward makes (the Note below).

# Note [Numbers a grad entry returns]
# ``return out, loss.item()`` (or ``x.a.sum().item()`` of a wrapper's inner tensor) in an entry the grad
# transform differentiates: the read stays a name of the forward where autograd records nothing of it
# (Note [A read number under grad], replayed_numbers.py), but the forward returned only tensors, and
# the call indexed its outputs for the number: IndexError on the first call (a TwoTensor requiring grad
# returned beside any ``item()``). The numbers the forward makes and the output holds are returned after
# its tensor outputs; ``torch.autograd.Function`` passes a non-tensor output through, and hands its
# backward None for it, which no tangent reads (``OutputSpec.index`` names the tensor outputs). A number
# the forward does not make (a counter computed beside it: Note [Counters under grad]) is not returned.
def _numbers_made(forward: Trace, outputs: Sequence[Any]) -> tuple[NumberProxy, ...]:
    made = {id(a) for a in forward.args}
    made.update(id(v) for b in forward.bound_symbols for v in optree.tree_leaves(b.output, none_is_leaf=True))
    found: list[NumberProxy] = []
    for value in outputs:
        if isinstance(value, NumberProxy) and id(value) in made and not any(value is f for f in found):
            found.append(value)
    return tuple(found)


def _tensor_outputs(
    outputs: list[Any], found: Any, trace: Trace, leaves: list[Any], subclass_inputs: Sequence[Any],
) -> tuple[list[TensorProxy], ViewOutputs | None]:
    """The Function's outputs, each once (a tensor returned twice is one output), without the views
    ``found`` (``view_outputs``'s result) and with the intermediates they view; their ``ViewOutputs``."""
    viewed = {position for position, _base, _proxy in found[0]} if found is not None else set()
    tensor_outputs: list[TensorProxy] = []
    for position, o in enumerate(outputs):
        if isinstance(o, TensorProxy) and position not in viewed and not any(o is t for t in tensor_outputs):
            tensor_outputs.append(o)
    if found is None:
        return tensor_outputs, None
    views = plan(*found, trace, leaves, subclass_inputs, tensor_outputs)
    return [*tensor_outputs, *views.hidden], views


def _fresh_leaves(tensor_outputs: list[TensorProxy], replay: _Replay) -> tuple[int, ...]:
    """Positions of the outputs that are leaves requiring grad and not inputs (GradTraces.fresh_leaves):
    a subclass value the program assembles from input tensors and flags is one (it is no input)."""
    inputs = {id(p.shadow) for p in replay.forward.args if isinstance(p, TensorProxy)}
    inputs.update(id(replay.env[id(p)].shadow) for p in replay.subclass_inputs if id(p) in replay.env)
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        return tuple(
            i for i, out in enumerate(tensor_outputs)
            if out.shadow.requires_grad and out.shadow.is_leaf and id(out.shadow) not in inputs
        )


def _grad_inputs(
    trace: Trace, replay: _Replay, subclass_inputs: SubclassInputs
) -> tuple[list[tuple[str, int]], list[TensorProxy]]:
    """The inputs that require grad, numbered as ``GradTraces.grad_inputs``, and their replay proxies."""
    grad_inputs: list[tuple[str, int]] = []
    wrt: list[TensorProxy] = []
    for i, arg in enumerate(trace.args):
        if isinstance(arg, TensorProxy) and arg.requires_grad:
            grad_inputs.append(("arg", i))
            wrt.append(replay.env[id(arg)])
    for i, (old, requires_grad) in enumerate(subclass_inputs):
        if requires_grad:
            grad_inputs.append(("subclass", i))
            wrt.append(replay.env[id(old)])
    return grad_inputs, wrt
