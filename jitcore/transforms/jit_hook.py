"""The grad transform's hook into the jit: from a traced program to an autograd-connected computation.

Invariant: it acts only when grad mode is on and an input (or a subclass input) requires grad — the
same state the prologue checks, so a cache entry made here is only ever used under it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import optree
import torch

from jitcore.diagnostics.boundary import on_error as prepare_error
from jitcore.dispatch.flatten import involves_subclasses, pass_1_runs
from jitcore.errors import DataDependentError, EagerOnlyValue
from jitcore.executors import record_lowered
from jitcore.ir import Proxy, Trace
from jitcore.langctx.backward import graph_leaves
from jitcore.langctx.reads import runs_under_autograd
from jitcore.prologue import Guard, Path
from jitcore.prologue.guards import storage_pattern
from jitcore.proxies import TensorProxy
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.transforms.autograd import GradComputation
from jitcore.transforms.backward_effects import BackwardWatch, EffectsByState, watching
from jitcore.transforms.backward_errors import RAISE
from jitcore.transforms.function_numbers import backward_guards
from jitcore.transforms.function_records import FunctionsSplit, split_functions
from jitcore.transforms.grad import (
    GradTraces,
    ReplayInconsistent,
    grad_transform,
    needs_grad,
    reaches_no_graph,
)
from jitcore.transforms.mincut import saved_for_fusion
from jitcore.transforms.saved_values import SavedValues
from jitcore.transforms.state_numbers import StateNumbers, counting_numbers, state_numbers
from jitcore.transforms.symbolic_sizes import SizesReplaced
from jitcore.transforms.view_outputs import ViewLeftToTheFunction

__all__ = ["Differentiated", "GradStage", "StaticSizesNeeded", "differentiate"]


class StaticSizesNeeded(Exception):
    """The entry cannot keep its symbolic sizes under autograd: the jit traces it again with static
    shapes (the message says why; it is logged)."""


@dataclass(frozen=True, slots=True)
class Differentiated:
    """What the grad transform made of a cache entry's program.

    Attributes:
        computation: takes the prologue's inputs, then ``inputs``; connects the call to torch autograd.
        traces: the entry's computation traces: pass 1, then the forward trace (what ``last_traces``
            shows; a trace an executor lowers the forward to is appended when it is compiled).
        backward_traces: ``[backward]`` (what ``last_backward_traces`` shows; its lowering appended too).
        inputs: the computation's further inputs, (path, name) each: the subclass inputs as objects.
        layouts: (path, strides, storage offset) of each tensor input whose layout the forward or
            backward trace relies on: its tensor guard must check them too (``Prologue.pin_layout``).
    """

    computation: GradComputation
    traces: list[Trace]
    backward_traces: list[Trace]
    inputs: list[tuple[Path, str]]
    layouts: list[tuple[Path, tuple[int | None, ...], int | None]]


@dataclass(frozen=True, slots=True)
class GradStage:
    """The grad stage's answer for one cache entry.

    Attributes:
        differentiated: the transform's result, or None: no input requires grad, or the entry runs
            pass 1 under torch's own autograd (the Notes below).
        guards: checks that answer relies on, for the prologue: the values of the dynamic numbers
            the transform made constants, which inputs share storage.
        dropped_inputs: positions of the prologue's inputs the computation no longer takes (the
            dynamic numbers made constants).
        without_graph: the flattened computation must run with grad mode off: an input requires
            grad, but no output does and nothing is written (Note [A graph no output reaches]).
        pass_1: the entry runs pass 1 itself under torch's autograd, though it involves tensor
            subclasses (Note [Symbolic sizes of subclass programs under autograd]): its subclass
            arguments are taken whole (``pass_1_under_autograd``).
        functions: where pass 1 runs under torch's autograd with dynamic numbers, its Function
            records whose forwards make subclass values, each split alone (function_records.py).
        reason: why the entry runs pass 1 under torch's autograd where the grad transform refused it
            (what ``jitcore.explain`` shows; None: not said).
    """

    differentiated: Differentiated | None
    guards: tuple[Guard, ...] = ()
    dropped_inputs: frozenset[int] = frozenset()
    without_graph: bool = False
    pass_1: bool = False
    functions: FunctionsSplit | None = None
    reason: str | None = None


def differentiate(program: Any, executor: Any, owner: Any) -> GradStage:
    """The grad transform of a cache entry whose inputs require grad.

    Args:
        program: the TracedProgram of the miss: pass 1, its prologue, its subclass inputs with the
            paths they were bound at. Read, not changed: where the transform runs, it runs on the
            program with its dynamic numbers made constants (``TracedProgram.specialized``: autograd
            records aten ops on values), and returns the guards and dropped inputs that takes.
        executor: compiles the forward and backward traces (``Executors.compile_together``: lowered
            at the same run; when fused, with the saved values chosen for fusion, mincut.py).
        owner: the JittedFunction whose errors these are, held weakly, for the error boundary only.

    Returns:
        A GradStage: the transform's result, or None in it when no input requires grad or the trace
        must run under torch's autograd (a dynamic number kept symbolic, a value-shaped op, inputs
        sharing storage), with the guards that choice relies on.
    """
    trace, prologue = program.trace, program.prologue
    subclass_inputs = _subclass_inputs(program)
    flags = [(proxy, requires_grad) for proxy, _path, requires_grad in subclass_inputs]
    runs_pass_1 = not involves_subclasses(trace)  # pass 1 can run as it is, under torch's autograd
    if _changes_an_input_flag(program):  # Note [requires_grad_ on an input]
        if runs_pass_1:
            return GradStage(None)
        return _pass_1_or_eager(trace, program.subclass_inputs, (
            "requires_grad_() or detach_() on an input changes the caller's requires_grad flag, in a "
            "program whose calls use values only their resolution made: that change is not traced",
        ), "set requires_grad on the input before calling the jitted function")
    if not needs_grad(trace, flags):
        return GradStage(None, without_graph=reaches_no_graph(trace, flags))
    if program.modes_under_autograd:  # Note [A dispatch mode under autograd] (jitcore/dispatch/modes.py)
        inside = any("backward" in b.symbol.tags for b in trace.bound_symbols)
        texts = program.effects is not None and any(e.kind in _TEXTS for e in program.effects.effects)
        if runs_pass_1 and not inside and not texts:
            return GradStage(None)
        raise EagerOnlyValue(
            "a TorchDispatchMode ran over tensors that require grad in a program " + (
                "that logs or prints: replayed after the computation, the text would show its tensors "
                "with autograd's grad_fn, which the mode's tensors have not yet" if texts else
                ("with a backward inside the function" if inside else "over tensor subclasses")
                + ": the backward's operations it sees eagerly are not traced"),
            hints=("run the call under torch.no_grad() or torch.inference_mode() to have it traced",))
    if _logs_in_dispatch(program) and not runs_pass_1:  # Note [A library's dispatch logs its ops]
        return _pass_1_or_eager(trace, program.subclass_inputs, (
            "a tensor subclass's __torch_dispatch__ (torch's LoggingTensor) logs the ops it is given, "
            "under autograd: the backward's ops it logs eagerly are not traced",
        ), "disable the logger, or call the function with inputs that do not require grad")
    if _through_leaves_made_inside(trace, program.subclass_inputs, flags):  # Note [Leaves made inside ...]
        if runs_pass_1:
            return GradStage(None)
        raise EagerOnlyValue(
            "an output or a stored value requires grad through a leaf the function makes and hands out "
            "(nn.Parameter or requires_grad_ inside, returned or stored), in a tensor-subclass program: "
            "that gradient graph is not traced",
            hints=("make the leaf outside the jitted function and pass it in",),
        )
    if runs_pass_1 and program.symbolic_numbers():  # Note [Dynamic numbers under autograd]
        watched = _watched(program, subclass_inputs)
        functions = split_functions(  # function_records.py
            trace, executor, owner, lambda: _state_as_found(program), watched, program.symbolic_sizes)
        # Note [A split Function's backward computing with its numbers] (function_numbers.py)
        return GradStage(None, tuple(backward_guards(functions.conditions, program.number_inputs)),
                         functions=functions)
    if _writes_a_non_leaf_input(trace, program.subclass_inputs):  # Note [In-place writes to non-leaf inputs]
        if runs_pass_1:
            return GradStage(None)
        return _pass_1_or_eager(trace, program.subclass_inputs, (
            "an in-place write into a tensor-subclass input that requires grad and is no leaf, in a "
            "program whose calls use values only their resolution made: the caller's graph behind "
            "that input is not traced",
        ), "write into a clone of the input (x = x.clone()) inside the function")
    # Note [Symbolic sizes through the grad transform] (transforms/symbolic_sizes.py), where it applies
    sizes = program.symbolic_sizes  # value-decided sizes too: Note [A size values decided, replayed]
    if (program.size_inputs or program.read_sizes) and sizes is None:
        return _pass_1_with_sizes(program)
    eager_op = runs_under_autograd(trace.bound_symbols)
    if eager_op is not None:  # Note [Value-shaped ops under grad] in jitcore/jit/value_reads.py
        backward = next((b for b in trace.bound_symbols if "backward" in b.symbol.tags), None)
        if runs_pass_1 and backward is None:
            return GradStage(None)
        raise DataDependentError(
            f"{eager_op.symbol.name} has outputs whose shapes depend on tensor values and that carry "
            "gradients; " + ("with tensor subclasses" if backward is None else "with a backward inside the "
                             "function") + " the grad transform would have to replay it on fake tensors",
            hints=("keep the op or the backward outside the jitted function",),
        )
    sharing = _storage_sharing(program)
    guards = () if sharing is None else (sharing,)
    if sharing is not None and _shares(sharing) and runs_pass_1:
        return GradStage(None, guards)  # Note [Reads in a subclass's backward]
# The grad transform records the backward on fake tensors, where no read of pass 1 answers a read the
# backward makes: NestedTensor's ``unbind`` backward splits the gradient by ``offsets.diff().tolist()``
# (``[t.sum(0) for t in n.unbind()]``, ``n[1]``, with ``n`` requiring grad). Such an entry runs pass 1
# itself under torch's autograd (``pass_1_under_autograd``), as an entry with symbolic sizes does: the
# subclass calls are resolved by their classes on every call, as eagerly, and so is the backward,
# reads included; pass 1's own reads keep their checks. Where pass 1 cannot run so, the refusal stands
# (the call runs eagerly).

# Note [A replay that loses an input's structure]
# The grad transform rebuilds each subclass input from its inner tensors as the call bound them. A
# program whose subclass code stores new inner tensors on its *input* (softmax over a nested jagged
# tensor's ragged dim caches ``_max_seqlen_tensor`` on it) leaves pass 1 holding a proxy of the input
# whose flattening names a tensor made later in the trace: the replay meets a record using a value it
# never produced (``ReplayInconsistent``, before: jitcore's AssertionError reached the caller, where
# eager computes). Such an entry runs pass 1 under torch's autograd where it can, as above: the classes
# resolve their calls on every call, as eagerly.


# Note [Inputs sharing storage under autograd]
    stored = _stored_from_a_resolution(trace)
    if stored is not None:  # Note [A tensor a subclass's code stores under grad]
        if runs_pass_1:
            return GradStage(None)
        raise EagerOnlyValue(
            f"{stored.name}, a tensor a tensor subclass's __torch_dispatch__ or __torch_function__ computes "
            "and stores into Python state or returns beside its result, under autograd: the grad "
            "transform re-runs that code and cannot name the tensor it stored",
            hints=("store the tensor from the function itself, after the subclass call",),
        )
    # autograd records aten ops on values; numbers read with item() stay names where it records nothing,
    # and counters of the program's state are computed beside the forward (Note [Counters under grad])
    pinned = {g.path for g in prologue.guards if g.kind == "value"}
    counting = counting_numbers(program.trace, program.number_inputs, pinned)
    specialized = program.specialized(check_reads=False, unguarded=frozenset(id(p) for _path, p in counting))
    trace = specialized.trace
    guards = (*specialized.guards, *guards)
    counted, dropped = _counted(program, counting, specialized.dropped)
    watched = _watched(program, subclass_inputs)  # Note [Effects of a backward's hooks]
    try:
        grad, watch = _transformed(program, trace, flags, sizes, watched)
    except ViewLeftToTheFunction as left:  # Note [A view left to the Function] (view_outputs.py)
        if runs_pass_1:
            return GradStage(None, reason=str(left))
        if sizes is not None:
            return _pass_1_with_sizes(program)
        stage = _pass_1_or_eager(program.trace, program.subclass_inputs, str(left),
                                 "return the view's base and make the view after the call")
        return replace(stage, reason=str(left))
    except DataDependentError:
        if sizes is not None:
            return _pass_1_with_sizes(program)
        if runs_pass_1 or program.symbolic_numbers() \
                or not pass_1_runs(program.trace, program.subclass_inputs):
            raise
        return GradStage(None, pass_1=True)  # Note [Reads in a subclass's backward]
    except Exception as exc:  # noqa: BLE001 - pass 1 under torch's autograd raises what eager raises
        if sizes is not None:
            return _pass_1_with_sizes(program)  # Note [Symbolic sizes through the grad transform]
        if isinstance(exc, ReplayInconsistent) and not runs_pass_1 and not program.symbolic_numbers() \
                and pass_1_runs(program.trace, program.subclass_inputs):
            return GradStage(None, pass_1=True)  # Note [A replay that loses an input's structure]
        raise
    # with symbolic sizes, the layout the replay's shadows had (symbolic_sizes.py): its own storage offset
    shadows = [a if sizes is not None else p for p, a in zip(trace.args, grad.forward.args)]
    relied = [(arg, replayed, path) for arg, replayed, path in zip(trace.args, shadows, prologue.inputs)
              if isinstance(arg, TensorProxy) and grad.layout is not None and grad.layout.relies_on(arg)]
    if sizes is not None and not all(_layout_of_pass_1(arg, replayed) for arg, replayed, _path in relied
                                     if not _is_static(replayed.shadow)):
        return _pass_1_with_sizes(program)  # Note [A symbolic layout the shape guards check]
    layouts = [(path, *_static_layout(replayed.shadow)) for _arg, replayed, path in relied]
    first = dict(zip(prologue.inputs, program.first_inputs))  # the traced call's tensor inputs
    if sizes is not None and any(
            not _static_layout_of(first[path], stride, offset)
            for path, stride, offset in layouts if path in first):
        # the replay relied on a layout its shadow has and the traced call's input has not (an offset
        # into a larger storage): guarded so, the entry would answer no call like the one it traced
        return _pass_1_with_sizes(program)
    n_inputs = len(prologue.inputs) - len(specialized.dropped)
    forward_traces, backward_traces = [trace, grad.forward], [grad.backward]
    jfn = weakref.ref(owner)  # no cycle through the cache entry that holds this computation

    def on_error(exc: BaseException) -> None:
        if jfn() is not None:
            prepare_error(jfn(), exc)

    def for_fusion(fusible: Any) -> tuple[Trace, Trace] | None:
        return saved_for_fusion(grad.forward, grad.forward_body, grad.backward, grad.backward_body, fusible)

    saved = SavedValues(grad.forward.output[1], record_lowered(forward_traces))
    # each lowered trace is shown beside the one it lowers
    select = executor.compile_together(
        (grad.forward, grad.backward), (saved.lowered, record_lowered(backward_traces)),
        None if any(b.symbol is RAISE for b in grad.backward.bound_symbols) else for_fusion)
    computation = GradComputation(grad, saved.tracking(select), n_inputs, on_error, saved.of, counted)
    if watch.effects is not None and watch.effects.writes and grad.deriver is not None:
        computation.backward_effects = EffectsByState(watch.effects, _deriving(grad.deriver, watched))
    inputs = [(path, proxy.name) for proxy, path, _requires_grad in subclass_inputs]
    differentiated = Differentiated(computation, forward_traces, backward_traces, inputs, layouts)
    return GradStage(differentiated, guards, dropped)


_TEXTS = ("print", "log", "dispatch_log", "warn")  # effects that format values when replayed


# Note [A symbolic layout the shape guards check]
# With symbolic sizes, the replay's shadow of an input has pass 1's symbolic strides (``s0, 1`` for a
# ``(2, s0)`` index tensor, ``8*s0, 8, 1`` for a ``(2, s0, 8)`` activation), and a record of the grad
# transform may rely on them: a wrapper's dispatch that flattens a 3-d activation for ``addmm``
# records ``aten.view(x, [2*s0, 8])``; ``E.q[ids]`` of an int8 embedding's dispatch records index ops
# whose backward views ``ids``'s layout. Such an entry ran pass 1 under torch's autograd instead, and
# every warm call ran the subclass's ``__torch_dispatch__`` (an int8 weight's ``aten.t`` in each
# ``nn.Linear`` of a transformer called on growing prompts with grad on). But a symbolic stride or
# storage offset of an input is checked already: the prologue's shape guards are the ShapeEnv's own
# (``produce_guards`` over every dynamic input's sizes, strides and offset: ``args[0].stride()[0] ==
# args[0].shape[1]``). What is left to pin is the static part, as ``TensorSpec.of`` leaves symbolic
# entries to the shape guards (None). That holds where the replay's shadow has pass 1's layout, the
# same expressions; otherwise the entry runs pass 1 as before.
def _layout(shadow: torch.Tensor) -> tuple[tuple[Any, ...], Any]:
    return tuple(shadow.stride()), shadow.storage_offset()


def _is_static(shadow: torch.Tensor) -> bool:
    strides, offset = _layout(shadow)
    return all(type(v) is int for v in (*strides, offset))


def _layout_of_pass_1(arg: TensorProxy, replayed: Any) -> bool:
    """Whether the replay's shadow of the input ``arg`` has pass 1's strides and storage offset (the
    same numbers, the same symbolic expressions)."""
    (strides, offset), (replayed_strides, replayed_offset) = _layout(arg.shadow), _layout(replayed.shadow)
    return len(strides) == len(replayed_strides) and all(
        type(a) is type(b) and (a == b if type(a) is int else a.node.expr == b.node.expr)
        for a, b in zip((*strides, offset), (*replayed_strides, replayed_offset)))


def _static_layout(shadow: torch.Tensor) -> tuple[tuple[int | None, ...], int | None]:
    """The strides and storage offset of ``shadow``, a symbolic one None (left to the shape guards)."""
    strides = tuple(s if type(s) is int else None for s in shadow.stride())
    offset = shadow.storage_offset()
    return strides, offset if type(offset) is int else None


def _static_layout_of(t: torch.Tensor, strides: tuple[int | None, ...], offset: int | None) -> bool:
    """Whether ``t`` has the static part of a layout (``_static_layout``)."""
    same_strides = all(s is None or s == v for s, v in zip(strides, t.stride()))
    return same_strides and offset in (None, t.storage_offset())


def _transformed(program: Any, trace: Trace, flags: list, sizes: Any,
                 watched: list[Any]) -> tuple[GradTraces, BackwardWatch]:
    """The grad transform of ``trace`` and the watch of its backward's effects: with stand-ins for the
    numbers pass 1 read, and where that fails, again with their values (Note [A read number under
    grad], replayed_numbers.py).

    Raises:
        Exception: what the transform with values raises.
    """
    reads = program.kept_reads()
    if reads:
        try:
            return _replayed(program, trace, flags, sizes, watched, reads, True)
        except Exception:  # noqa: BLE001, S110 - made again with values, which raises what is to be raised
            pass
    return _replayed(program, trace, flags, sizes, watched, reads, False)


def _replayed(program: Any, trace: Trace, flags: list, sizes: Any, watched: list[Any], reads: Any,
              stand_ins: bool) -> tuple[GradTraces, BackwardWatch]:
    """One grad transform, made again where its replay replaced a size (Note [A size the replay
    replaced], symbolic_sizes.py)."""
    watch = BackwardWatch(watched)
    try:
        with _state_as_found(program), watching(watch):
            return grad_transform(trace, flags, program.unproduced_subclasses, reads, sizes, stand_ins), watch
    except SizesReplaced as replaced:
        watch = BackwardWatch(watched)
        with _state_as_found(program), watching(watch):
            return grad_transform(trace, flags, program.unproduced_subclasses, reads, sizes, stand_ins,
                                  replaced.baseline), watch


def _logs_in_dispatch(program: Any) -> bool:
    """Whether a library's subclass dispatch logged records in pass 1."""
    return program.effects is not None and any(e.kind == "dispatch_log" for e in program.effects.effects)


# Note [A tensor a subclass's code stores under grad]
# A subclass's dispatch that keeps its inner results (``SAVED.append(out.a.detach())``) stores a
# tensor computed inside the resolution of a call: pass 1 names it among the resolution's records,
# and its store is an effect whose value the computation returns. Flattening inlines resolutions, so
# without grad it is computed; the grad transform replays each call whole on shadows and re-runs the
# subclass's code, so no record of its forward names that tensor (an AssertionError from inside
# jitcore, where eager computes). Such a call runs eagerly (JC-J002), with its reason. An inner tensor
# of a subclass value a top-level call returns is no such tensor: the replay maps a replayed subclass
# value's inner tensors with it (``_Replay._map``), so ``x.grad.a`` after a ``backward()`` inside the
# function, ``torch.autograd.grad(...)[0].a`` or ``TwoTensor(x, x * 2).sin().a`` are named (before,
# each ran the whole call eagerly).
def _stored_from_a_resolution(trace: Trace) -> Any:
    """A tensor of the output (a value returned or stored) that only a call's resolution makes."""
    top = {id(a) for a in trace.args}
    inner: set[int] = set()
    for bsym in trace.bound_symbols:
        top.update(_with_inner_tensors(optree.tree_leaves(bsym.output, none_is_leaf=True)))
        pending = list(bsym.subsymbols)
        while pending:
            sub = pending.pop()
            pending.extend(sub.subsymbols)
            inner.update(id(v) for v in optree.tree_leaves(sub.output, none_is_leaf=True))
    for leaf in optree.tree_leaves(trace.output, none_is_leaf=True):
        if isinstance(leaf, TensorProxy) and id(leaf) in inner and id(leaf) not in top:
            return leaf
    return None


def _with_inner_tensors(values: list[Any]) -> Iterator[int]:
    """Ids of ``values`` and of the inner tensors (at any depth) of the subclass values among them: the
    replay names those as it names the value (Note [A tensor a subclass's code stores under grad])."""
    pending = list(values)
    while pending:
        value = pending.pop()
        yield id(value)
        if isinstance(value, SubclassTensorProxy):
            pending.extend(value.inner_tensors().values())


# Note [The grad transform's replay writes no state]
# The grad transform replays pass 1 on shadows and records the backward (grad.py): a user subclass's
# ``__torch_dispatch__`` runs again there, on jitcore's interpreter but with no state tracking, so its
# ``cls.calls += 1`` or ``LOG.append(...)`` wrote the caller's objects a second time, and a backward op's
# entry (``COUNTS["aten.cos.default"]``) appeared in state the next pass guards: every call traced again.
# What pass 1 wrote is replayed by the computation (jit/effects.py); the objects pass 1 reached are put
# back as the call found them after the replay, as pass 1's own writes are after the pass.
@contextlib.contextmanager
def _state_as_found(program: Any) -> Iterator[None]:
    try:
        yield
    finally:
        if program.snapshots is not None:
            program.snapshots.restore()


# Note [Effects of a backward's hooks]
# ``out.backward()`` of a cached call runs the backward trace: aten ops on plain tensors. Eagerly the
# same backward runs the ``__torch_dispatch__``/``__torch_function__`` of the subclasses its ops meet, and
# their Python effects (a counter per op, a log) happen on every backward: a cached call's backward lost
# them (``mul`` counted 3 times in 3 calls where eager counts 9, ``cos`` never). The grad transform runs
# that code natively on shadows while it records the backward; a ``BackwardWatch`` over the state pass 1
# reached (and the lists and dicts it holds, and the program's subclasses) records what it writes there,
# numbers read as formulas, and the computation performs those writes after each run of that backward,
# from the values the state then holds (jitcore/transforms/backward_effects.py). A write it cannot
# replay exactly makes the call run eagerly (JC-J002), with its reason. A backward derived later for
# other tangent kinds runs the code once, when it is derived, as before. The watch covers sets, deques
# and plain objects the reached state holds, and refuses a number written after the code measured a
# watched container (``LOG.append(len(LOG))``: the recorded length is not the next call's); its
# ``Counter`` defaults, pins and size reads are per thread (transforms/backward_reads.py).
def _watched(program: Any, subclass_inputs: list) -> list[Any]:
    """The objects whose writes a BackwardWatch records: those pass 1 reached, the program's subclasses."""
    objects = [] if program.snapshots is None else program.snapshots.objects()
    objects = [obj for obj in objects if not isinstance(obj, Proxy)]
    for proxy, _path, _requires_grad in subclass_inputs:
        objects += [cls for cls in proxy.python_type.__mro__ if cls not in _TENSOR_CLASSES]
    return objects


def _deriving(deriver: Any, watched: list[Any]) -> Any:
    """Records the backward's writes again, for a state its recorded ones do not hold for (a counter's
    entry now present: ``EffectsByState``). Where they cannot be replayed, that run's own writes stand:
    it ran the code on this backward as eagerly."""

    def derive() -> Any:
        watch = BackwardWatch(watched)
        try:
            with watching(watch):
                deriver.derive()
        except EagerOnlyValue:
            deriver.derive()
            return None
        return watch.effects

    return derive


_TENSOR_CLASSES = frozenset(torch.Tensor.__mro__) | {torch.nn.Parameter}


# Note [Counters under grad]
# A counter kept in the program's state (``cls.calls += 1`` in a tensor subclass's ``__torch_dispatch__``
# or ``__torch_function__``, ``LOG_COUNT[0] += 1`` in the program) is a dynamic number input that pass 1
# reads and writes back (jit/effects.py). The grad transform records aten ops on values, so before it
# every dynamic number was made a constant guarded by value: such a counter made a new entry on every
# call, and so user subclass code under grad was once taken as it was while tracing (its logs and
# counters advanced on the traced call only). A number whose value flows into arithmetic on numbers only
# is kept out of that: the prologue still passes it, unguarded; the forward does not take it; and the
# values written back are computed from it on every call with the recorded arithmetic
# (jitcore/transforms/state_numbers.py), as the computation without grad computes them.
def _counted(program: Any, counting: list,
             dropped: frozenset[int]) -> tuple[StateNumbers | None, frozenset[int]]:
    """The counters the computation computes beside the forward, and the prologue inputs it no longer
    takes (the numbers made constants, not the counters: Note [Counters under grad])."""
    if not counting:
        return None, dropped
    kept = {id(proxy) for _path, proxy in counting}
    at = [i for i, a in enumerate(program.trace.args) if id(a) in kept]
    still = frozenset(dropped - set(at))
    positions = [i - sum(1 for d in still if d < i) for i in at]
    order = {id(a): k for k, a in enumerate(program.trace.args)}
    ordered = sorted(counting, key=lambda item: order[id(item[1])])
    counted = state_numbers(program.trace, ordered, positions)
    return (counted, still) if counted is not None else (None, dropped)


def _subclass_inputs(program: Any) -> list[tuple[SubclassTensorProxy, Path, bool]]:
    """The subclass inputs bound for the program (with the paths they were bound at) that the replay
    rebuilds from its inputs, each with whether the caller's tensor requires grad (its tensor guard,
    which the prologue checks). A bound input the trace never uses, or whose inner tensors the
    program replaced (``x.a = y``), is not one of them: nothing of its own reaches the trace."""
    if not program.subclass_inputs:
        return []
    used = {id(p) for p in program.unproduced_subclasses}
    specs = {g.path: g.expected for g in program.prologue.guards if g.kind == "tensor"}
    return [(proxy, path, bool(getattr(specs.get(path), "requires_grad", False)))
            for proxy, path in program.subclass_inputs if id(proxy) in used]


# Note [requires_grad_ on an input]
# Eagerly ``x.requires_grad_()`` on a caller's tensor sets the caller's flag from that point on: the
# values computed from ``x`` after it require grad, those computed before do not (``y = x * 2;
# x.requires_grad_(); return y, x * 3``: ``y`` has no grad_fn, and a backward through ``x.sin()``
# before it reaches nothing). ``x.detach_()`` and ``requires_grad_(False)`` clear it, from that point
# on too. The grad transform replays pass 1 with one flag per input for the whole program: a plain
# input's as the call ends (its shadow carries the change; ``GradTraces.input_flags`` sets it on the
# caller's tensor), a subclass input's as it begins (its tensor guard). So the values computed before
# a plain input's change got the later flag (``y`` required grad, and ``x.grad`` took the derivative
# of ``x.sin()`` too: wrong answers), and a subclass input's change was lost (outputs without grad,
# the caller's flag unchanged). Such a call runs pass 1 under torch's autograd instead, where the
# record runs on the caller's tensor in its place: as it is for plain programs, with its subclass
# inputs taken whole (``GradStage.pass_1``) for subclass programs, and eagerly (JC-J002) where pass 1
# cannot run so. A plain input's change before any use of it (an FGSM step's ``x.requires_grad_()``,
# a frozen parameter's ``requires_grad_(False)`` at the top of a step) keeps the grad transform: one
# flag is eager's there. The flag in the tensor guard keeps the entry to calls that find the caller's
# flag as this one did.
_FLAG_SETTERS = (torch.Tensor.requires_grad_, torch.Tensor.detach_, torch.detach_)


def _changes_an_input_flag(program: Any) -> bool:
    """Whether the program changes the ``requires_grad`` flag of one of its tensor inputs where the
    grad transform's one flag per input would not be eager's: any change of a subclass input's, a
    plain input's after a call used it (Note [requires_grad_ on an input])."""
    trace = program.trace
    specs = {g.path: g.expected for g in program.prologue.guards if g.kind == "tensor"}
    plain = [(a, path) for a, path in zip(trace.args, program.prologue.inputs) if isinstance(a, TensorProxy)]
    flags = {id(proxy): bool(getattr(specs.get(path), "requires_grad", False))
             for proxy, path in [*plain, *program.subclass_inputs]}
    subclass = {id(proxy) for proxy, _path in program.subclass_inputs}
    used: set[int] = set()
    for bsym in trace.bound_symbols:
        if bsym.symbol.fn not in _FLAG_SETTERS or not bsym.args or id(bsym.args[0]) not in flags:
            used.update(id(v) for v in optree.tree_leaves((bsym.args, bsym.kwargs), none_is_leaf=True))
            continue
        target = id(bsym.args[0])
        wanted = False
        if bsym.symbol.fn is torch.Tensor.requires_grad_:
            wanted = bool(bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("requires_grad", True))
        if wanted != flags[target] and (target in subclass or target in used):
            return True
        flags[target] = wanted
        used.add(target)  # a second change of it is one after a use, as far as the transform knows
    return False


# Note [Leaves made inside under autograd]
# A leaf the program makes (``nn.Parameter(...)``, ``requires_grad_()`` on a new tensor) and hands out
# (returns it, or stores it: ``m.weight = nn.Parameter(...)``, DTensor's ``distribute_module``), with
# a value computed from it: eagerly, a backward from that value fills the leaf's ``.grad``. The grad
# transform's computation is one autograd node over the caller's tensors; the leaf comes out of it
# as a fresh leaf of its own (``fresh_leaves``), not connected to the values computed from it, whose
# backward then left the stored parameter's ``.grad`` None where eager fills it (a wrong answer). A
# program over plain tensors runs pass 1 under torch's autograd instead (its leaves are real, and so
# is the graph from them); a tensor-subclass program runs eagerly (JC-J002), as the same case without
# inputs requiring grad does (``refuse_values_computed_from_leaves_made_inside``). The same holds for
# an output that requires grad while no input does (``w = nn.Parameter(...)`` inside, a backward inside,
# then ``w * 2`` returned): only the backward made the transform run, and the computation's node over
# the caller's tensors gave that output no grad at all (eager's has a grad_fn reaching ``w``).
def _through_leaves_made_inside(trace: Trace, subclass_inputs: list[tuple[SubclassTensorProxy, Path]],
                                flags: list[tuple[SubclassTensorProxy, bool]]) -> bool:
    """Whether an output (returned or stored) requires grad through a leaf that is another output
    and no input, plain or subclass, or requires grad while no input does (Note [Leaves made inside
    under autograd])."""
    outputs = [v for v in optree.tree_leaves(trace.output, none_is_leaf=True) if isinstance(v, TensorProxy)]
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        shadows = [(v.shadow, v.shadow.requires_grad, *_leaf_and_node(v.shadow)) for v in outputs]
    if not any(isinstance(a, TensorProxy) and a.requires_grad for a in trace.args) \
            and not any(requires_grad for _proxy, requires_grad in flags) \
            and any(requires_grad for _s, requires_grad, _leaf, _node in shadows):
        return True  # a backward inside made the transform run; the graph is from leaves made inside
    inputs = {id(a.shadow) for a in trace.args if isinstance(a, TensorProxy)}
    inputs.update(id(proxy.shadow) for proxy, _path in subclass_inputs)
    handed_out = {id(s) for s, requires_grad, leaf, _node in shadows if leaf and requires_grad} - inputs
    if not handed_out:
        return False
    roots = [node for _s, _r, _leaf, node in shadows if node is not None]
    return any(id(leaf) in handed_out for leaf in graph_leaves(roots))


def _leaf_and_node(shadow: torch.Tensor) -> tuple[bool, Any]:
    """``shadow.is_leaf`` and ``shadow.grad_fn``; for a view whose node autograd refuses to make again
    (a ``split`` output, or a view made under ``no_grad``, whose base the program wrote after it:
    reading ``grad_fn`` raises, eagerly only where the caller reads it), its base's node: its
    gradient would reach what its base's does."""
    try:
        return shadow.is_leaf, shadow.grad_fn
    except RuntimeError:
        if not shadow._is_view():  # noqa: SLF001
            raise
        return False, shadow._base.grad_fn  # noqa: SLF001


# Note [Dynamic numbers under autograd]
# The grad transform records the aten ops autograd runs on shadows, where a number is only a value:
# a dynamic number would be baked into the forward and backward traces. A trace over plain tensors
# that keeps a dynamic number symbolic is therefore not split: its computation (the torch-level
# calls of pass 1) runs under torch's own autograd, which records the graph as eagerly (same ops,
# same nodes, the number as passed). There is no backward trace to print for such an entry. With
# tensor subclasses involved (the flattened trace that runs is not the torch-level one) the numbers
# are specialized instead and the grad transform runs. A Function whose forward makes subclass values
# from plain tensors (torchao's Float8Linear) leaves pass 1 plain at its top level: that record alone
# goes through the grad transform (Note [A Function split alone], function_records.py).


def _pass_1_or_eager(trace: Trace, subclass_inputs: Any, reason: str, hint: str) -> GradStage:
    """Pass 1 under torch's autograd for an entry the grad transform cannot take, where pass 1 can run
    so; otherwise the call runs eagerly (JC-J002) for ``reason``."""
    if not pass_1_runs(trace, subclass_inputs):
        raise EagerOnlyValue(reason, hints=(hint,))
    return GradStage(None, pass_1=True)


def _pass_1_with_sizes(program: Any) -> GradStage:
    """An entry with symbolic sizes runs pass 1 under torch's autograd (the Note below)."""
    if not pass_1_runs(program.trace, program.subclass_inputs):
        raise StaticSizesNeeded("the grad transform of a tensor-subclass program keeps static shapes")
    return GradStage(None, pass_1=True)


# Note [Symbolic sizes of subclass programs under autograd]
# The grad transform replays pass 1 on fresh shadows without a ShapeEnv: a symbolic size would be
# baked into the forward and backward traces it records, and the flattened trace (pass 2) cannot run
# under torch's autograd instead, since subclass code below ``__torch_dispatch__`` may cut the graph
# (NestedTensor's ``values()`` is ``_values.detach()``). So an entry with symbolic sizes (a nested
# jagged tensor's ragged sizes, jitcore/jit/ragged.py) whose inputs require grad runs pass 1 itself,
# its torch-level calls, under torch's autograd (``pass_1_under_autograd``): the subclass arguments
# are the caller's objects, each call resolved by their classes as eagerly, so gradients, graphs and
# errors are eager's; what the entry saves is the trace per ragged structure, not the per-op
# dispatch. Where pass 1 uses a value only a resolution made (``pass_1_runs``), the function traces
# static shapes from then on (``StaticSizesNeeded``). Most such entries now go through the grad
# transform with their sizes symbolic (Note [Symbolic sizes through the grad transform],
# transforms/symbolic_sizes.py); this path remains where that replay cannot keep them so.


# Note [Inputs sharing storage under autograd]
# The grad transform replays the program on fresh shadows, one storage each: autograd's checks that
# depend on two inputs sharing memory (a write through ``y = x.detach()`` bumps the version of ``x``,
# which eager's backward then refuses to use) are not in the traces it records, which would compute
# a gradient where eager raises. So when the program writes in place and has several tensor inputs,
# which of them share a storage is guarded (``storages``), and an entry whose inputs do share one
# runs the torch-level calls of pass 1 under torch's own autograd, which sees the real tensors.
def _storage_sharing(program: Any) -> Guard | None:
    """The guard on which tensor inputs share storage, when it matters (the Note above)."""
    tensors = program.first_inputs
    if len(tensors) < 2 or not _writes_in_place(program.trace):
        return None
    paths = tuple(program.prologue.inputs[: len(tensors)])
    return Guard(paths[0], "storages", (paths, storage_pattern(tuple(tensors))))


def _shares(guard: Guard) -> bool:
    """Whether some of the inputs a ``storages`` guard reads share a storage."""
    pattern = guard.expected[1]
    return pattern != tuple(range(len(pattern)))


# Note [In-place writes to non-leaf inputs]
# ``x.mul_(2)`` on an input that requires grad and is no leaf (an activation the caller computed):
# eagerly the write rebases ``x``'s own history, which the caller's later uses of ``x`` go through.
# The grad transform replays pass 1 on fresh leaves, where the write raised "a leaf Variable that
# requires grad is being used in an in-place operation" where eager computes; and one autograd node
# could not rebase the caller's ``x``. A program over plain tensors that writes into such an input
# runs pass 1 under torch's autograd, on the caller's tensors, as eagerly. (A call with a leaf there
# raises eager's error in either form.) A write into a view of such an input (``x[0].add_(1)``) is one
# too. A subclass input (``TwoTensor(a, b) * 1``) likewise: its entry runs pass 1 under torch's
# autograd with the caller's subclass objects taken whole (``GradStage.pass_1``), its class's dispatch
# running per call as eagerly (Note [A caller's non-leaf subclass value], jitcore/jit/subclass_inputs.py).

# Note [jitcore's reads of a shadow]
# A shadow is a real instance of the subclass (over fake inner tensors), so reading its metadata
# natively (``.requires_grad``, ``.is_leaf``) runs the class's ``__torch_function__``. torchao's
# CodebookQuantizedTensor answers every torch function, property reads included, by dequantizing its
# arguments first, which on a shadow mixed a real ``torch.zeros`` with fake codes: a quantized model
# raised "Please convert all Tensors to FakeTensors first" where eager computes. jitcore's own reads
# never run the class's code (eager never reads them there), as for the caller's tensors (Note
# [Reading the caller's tensors], jit/tensor_binding.py). So too the reads that build the traces
# (``requires_grad``, ``is_leaf``, ``grad_fn``, sizes: flattening, the grad transform, the assembly, a
# backward inside, a proxy adopting a shadow): a class logging its ``__torch_function__`` calls was
# handed ``requires_grad.__get__`` and ``grad_fn.__get__`` calls eager never makes.
def _writes_a_non_leaf_input(trace: Trace, subclass_inputs: Any = ()) -> bool:
    inputs = [a for a in trace.args if isinstance(a, TensorProxy)]
    inputs += [proxy for proxy, _path in subclass_inputs]
    with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [jitcore's reads of a shadow]
        non_leaves = {id(a.shadow) for a in inputs if a.shadow.requires_grad and not a.shadow.is_leaf}

    def into_one(value: Any) -> bool:
        return isinstance(value, TensorProxy) and (
            id(value.shadow) in non_leaves or id(getattr(value.shadow, "_base", None)) in non_leaves)

    return bool(non_leaves) and any(
        (("inplace" in b.symbol.tags or b.kwargs.get("inplace") is True) and b.args and into_one(b.args[0]))
        or into_one(b.kwargs.get("out"))
        for b in trace.bound_symbols
    )


def _writes_in_place(trace: Trace) -> bool:
    return any("inplace" in b.symbol.tags or "out" in b.kwargs for b in trace.bound_symbols)
