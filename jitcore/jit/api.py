"""jitcore.jit: the entry point, its cache, and the functions that inspect it.

A JittedFunction keeps a list of cache entries, each a compiled prologue fused with its compiled
computation (``cached_call``). A call tries the entries newest first; the first whose prologue
accepts the call runs its computation. When none accepts, the function is traced again (a miss)
and the new entry is added. Invariants:
- a cached call runs only generated straight-line checks and the computation: no per-call work
  that could be done once;
- traces are recorded before they run (``last_traces`` shows them after a failure too);
- every miss is explained (which check of which entry failed, expected vs got);
- state lives in the JittedFunction and its entries; concurrent misses are serialised by a lock.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import types
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch._dispatch.python import enable_python_dispatcher

from jitcore.diagnostics.boundary import kept_without_frames
from jitcore.diagnostics.logs import entry_added, static_shapes, symbolic_sizes
from jitcore.dispatch.flatten import (
    flatten_program,
    involves_subclasses,
    pass_1_under_autograd,
    without_grad_mode_changes,
)
from jitcore.executors import executors_from_options, record_lowered
from jitcore.interpreter.run import ACTIVE as _ACTIVE
from jitcore.ir import Trace
from jitcore.jit import eager_entries, lru_caches, lru_reruns, numbers, shapes
from jitcore.jit.cache_entry import (
    CacheEntry,
    entry_computation,
    identity,
    not_compiled,
    prologue_of,
    with_output_rebuilt,
)
from jitcore.jit.caller_modes import CallerModes, callers_modes, under_the_callers_modes
from jitcore.jit.ctx_numbers import changed_ctx_numbers
from jitcore.jit.eager_entries import Eager, eager_call
from jitcore.jit.effects import Effects
from jitcore.jit.interpretation import Pass, TracedProgram, parameter_names
from jitcore.jit.options import dynamic_numbers_of, is_module_forward, label_of
from jitcore.jit.raising_calls import ComputationRaised
from jitcore.jit.raising_entries import past_the_limit, raising_entry
from jitcore.jit.read_resume import Resumable, Resumption, resumption, run_resumed
from jitcore.jit.read_rollback import nondeterministic_read
from jitcore.jit.run_modes import runs_torch_function, runs_without_grad, without_grad, without_torch_function
from jitcore.jit.shapes import ShapePolicy
from jitcore.jit.state_names import note_state_inputs
from jitcore.jit.subclass_views import subclass_views
from jitcore.jit.value_driven import DrivenReads
from jitcore.langctx.reads import ValueCheckFailed
from jitcore.prologue import MISS, MissReason, Prologue, PrologueBuilder
from jitcore.prologue.cache import EntryCache
from jitcore.transforms import StaticSizesNeeded, differentiate
from jitcore.transforms.autograd_function import applies_functions, forwards_inlined, numbers_before_functions

__all__ = [
    "jit",
    "JittedFunction",
    "CacheEntry",
    "frozen_function",
]

DEFAULT_CACHE_LIMIT = 64


class JittedFunction:
    """A function (or nn.Module) compiled by jitcore; call it like the original."""

    def __init__(self, fn: Callable[..., Any], *, executor: str | None = None, executors: Any = None,
                 fuse_after: int | None = None, fallback: str | None = None,
                 cache_limit: int = DEFAULT_CACHE_LIMIT, show_internal_frames: bool | None = None,
                 dynamic_numbers: Any = (), fullgraph: bool = False, dynamic: bool | None = None) -> None:
        if fallback not in (None, "eager"):
            raise ValueError(f"fallback must be None or 'eager', not {fallback!r}")
        self.fn = fn
        self.fullgraph = fullgraph
        self._options = {"executor": executor, "executors": executors, "fuse_after": fuse_after,
                         "fallback": fallback, "cache_limit": cache_limit, "fullgraph": fullgraph,
                         "show_internal_frames": show_internal_frames, "dynamic": dynamic,
                         "dynamic_numbers": dynamic_numbers}  # Note [Modes around the call]
        self._under_modes: JittedFunction | None = None  # Note [Modes around the call]
        # state numbers read and written back, or seen to change between calls: dynamic numbers
        self._counters: frozenset = frozenset()
        self._read_lists: frozenset = frozenset()  # list arguments appended to and read another way
        self.dynamic_numbers, typed_positions = dynamic_numbers_of(fn, dynamic_numbers)
        self._changed_numbers: frozenset[str] = frozenset()  # Note [Numbers that change between calls ...]
        self._shapes = ShapePolicy(dynamic)  # which sizes are symbolic (jit/shapes.py)
        self._driven = DrivenReads()  # read sites whose values are new call after call (jit/value_driven.py)
        self.executor = executors_from_options(executor, executors, fuse_after)
        self.fallback = fallback
        self.cache_limit = cache_limit
        self.show_internal_frames = show_internal_frames
        self._cache = EntryCache(typed_positions)  # newest first, with a dispatch table past a few entries
        self.hits = 0
        self.misses = 0
        self.last_traces: list[Trace] = []
        self.last_backward_traces: list[Trace] = []
        self.last_rederived_traces: list[Trace] = []  # backwards derived for other gradient kinds
        self.last_prologue: Prologue | PrologueBuilder | None = None  # a builder while its pass runs
        self.miss_log: list[list[MissReason]] = []
        self.eager_reason: BaseException | None = None
        self.fallback_reason: BaseException | None = None  # the last call run eagerly (EagerOnlyValue)
        self._lock = threading.RLock()
        self._warned_transform = False  # Note [Called under a function transform]
        self._label = label_of(fn)
        functools.update_wrapper(
            self, fn if not isinstance(fn, torch.nn.Module) else type(fn).forward, updated=()
        )

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        if _ACTIVE.stack:  # Note [A jitted function inside a traced program]
            return _ACTIVE.stack[-1].call(_CALL_JITTED_FN, self, *args, **kwargs)
        try:
            if (_transform_level() is not None or _function_modes() or _dispatch_modes()) \
                    and (around := _around_the_call(self)) is not None:
                if isinstance(around, CallerModes):
                    return self._under_callers_modes(around, args, kwargs)
                return self._eagerly_under(around, args, kwargs)
            read_misses: list[MissReason] = []
            failed_at: list[tuple[CacheEntry, ValueCheckFailed]] = []
            if lru_caches.RECORDED[0]:  # Note [Calls an entry tried before made] (jit/lru_caches.py)
                lru_caches.new_call()
            try:
                out = self._run_entries(self._cache.candidates(args), args, kwargs, read_misses, failed_at)
            except ComputationRaised as raised:  # Note [Effects of a raising call]
                self.hits += 1
                return self._eagerly_after(raised, args, kwargs)
            if out is not MISS:
                self.hits += 1
                return out
            if self.eager_reason is not None:
                return self.fn(*args, **kwargs)
            with contextlib.ExitStack() as rerun:
                return self._miss(args, kwargs, read_misses, failed_at, rerun)
        except Exception as exc:
            from jitcore.diagnostics.boundary import on_error

            on_error(self, exc)  # the user's frames and lines, plus a note (docs/debugging.md)
            raise  # a bare raise adds no entry for this frame

    # Note [Called under a function transform]
    # ``torch.func.grad(jitted)``, ``vmap(jitted)``, ``jacrev(jitted)``: the transform calls the jitted
    # function with its own tensors (GradTrackingTensor, BatchedTensor), one functorch level each. jitcore
    # traces plain tensors; those levels are the transform's (a cached entry holds no functorch level, and
    # its autograd wrapper is an autograd.Function without functorch's staticmethods), so tracing them raised
    # inside jitcore (an AssertionError binding a wrapped tensor). While a transform is active (outside a
    # tracing pass: a transform inside a traced program is traced, jit/function_transforms.py), the call
    # runs the function eagerly, on the transform's tensors, as eager does, and the cache is left alone;
    # a warning says so once. The check is one C call (``peek_interpreter_stack``, about 0.04 us).
    # Note [Modes around the call] (jitcore/jit/caller_modes.py): a TorchFunctionMode or TorchDispatchMode
    # the caller entered around the call is traced with a wrapper that enters it (its own cache); a mode
    # it cannot take (an infra mode) runs the call eagerly, as a transform does.
    def _eagerly_under(self, what: str, args: tuple, kwargs: dict) -> Any:
        if not self._warned_transform:
            self._warned_transform = True
            warnings.warn(f"jitcore: {self._label} runs eagerly under {what}: jitcore traces plain tensors "
                          "outside any transform or mode", stacklevel=3)
        return self.fn(*args, **kwargs)

    def _under_callers_modes(self, modes: CallerModes, args: tuple, kwargs: dict) -> Any:
        """The call traced or answered under the caller's modes (Note [Modes around the call]); its hits,
        misses and traces counted as this function's."""
        inner = self._under_modes
        if inner is None:
            inner = self._under_modes = JittedFunction(under_the_callers_modes(self.fn), **self._options)
            inner._label = f"{self._label} (under {modes.label()} entered around the call)"
        hits, misses = inner.hits, inner.misses
        try:
            with modes.lifted():
                return inner(modes.function, modes.dispatch, *args, **kwargs)
        finally:
            self.hits += inner.hits - hits
            if inner.misses != misses:
                self.misses += inner.misses - misses
                self.miss_log += inner.miss_log[len(inner.miss_log) - (inner.misses - misses):]
                self.last_traces, self.last_prologue = inner.last_traces, inner.last_prologue
                self.last_backward_traces = inner.last_backward_traces
                self.last_rederived_traces = inner.last_rederived_traces
            self.fallback_reason = inner.fallback_reason

    def _run_entries(self, entries: Sequence[CacheEntry], args: tuple, kwargs: dict,
                     read_misses: list[MissReason], failed_at: list[tuple[CacheEntry, ValueCheckFailed]],
                     ) -> Any:
        """The answer of the first of ``entries`` that accepts the call, or MISS; a call that a value
        check sent away goes on in an entry that computed the same up to that check (Note [Resuming at
        a failed check], jit/read_resume.py), else in the next entry from the start.

        Raises:
            ComputationRaised: the computation raised the program's error (Note [Effects of a raising call]).
        """
        untried = list(entries)
        resume: tuple[CacheEntry, Resumption] | None = None
        while resume is not None or untried:
            if resume is not None:
                entry, how = resume
                untried.remove(entry)
            else:
                entry, how = untried.pop(0), None
            resume = None
            try:
                out = entry.cached_call(args, kwargs) if how is None else \
                    run_resumed(entry.resume_call(), how, args, kwargs)
            except ValueCheckFailed as failed:  # a value read while tracing differs: another entry
                read_misses.append(MissReason(entry.number, "value read", str(failed)))
                self._read_failed(entry, failed, failed_at)
                resume = resumption(failed, untried)
                continue
            if out is not MISS:
                return out
        return MISS

    def _read_failed(self, entry: CacheEntry, failed: ValueCheckFailed,
                     failed_at: list[tuple[CacheEntry, ValueCheckFailed]]) -> None:
        """A cached call's value check sent it away from ``entry``: what the value teaches."""
        self._shapes.note_read(failed)  # Note [Sizes that values decide] (jit/shapes.py)
        self._driven.note(failed)  # Note [Programs that tensor values drive] (jit/value_driven.py)
        failed_at.append((entry, failed))

    def _miss(self, args: tuple, kwargs: dict, read_misses: list[MissReason],
              failed_at: list[tuple[CacheEntry, ValueCheckFailed]], rerun: contextlib.ExitStack) -> Any:
        with self._lock:
            tried = {m.entry for m in read_misses}  # another thread may have traced this call meanwhile
            try:
                out = self._run_entries([e for e in self._cache.candidates(args) if e.number not in tried],
                                        args, kwargs, read_misses, failed_at)
            except ComputationRaised as raised:
                self.hits += 1
                return self._eagerly_after(raised, args, kwargs)
            if out is not MISS:
                self.hits += 1
                return out
            reasons = [
                MissReason(e.number, *why) for e in self.entries if (why := e.prologue.explain(args, kwargs))
            ]
            reasons += read_misses
            self._note_changed_numbers(args, kwargs)
            self.misses += 1
            self.miss_log.append(reasons)
            layout_changed = any(".shape" in r.where or ".stride()" in r.where for r in reasons)
            driven = next(((e, f) for e, f in failed_at if self._driven.drives(f.site)), None)
            if driven is not None:  # Note [Programs that tensor values drive] (jit/value_driven.py)
                outcome = Eager(self._driven.reason(driven[1].site, self._label))
                traced = driven[0].prologue
            else:
                with lru_caches.one_call() as made:  # Note [One native call per call of the program]
                    outcome, traced = self._trace(args, kwargs, layout_changed), None
                if isinstance(outcome, Eager):  # Note [A pass's cached calls, run again eagerly]
                    rerun.enter_context(lru_reruns.made_again(made))
            if isinstance(outcome, Eager) and outcome.program_raised:  # Note [A program that raises]
                return self._raised(outcome, args, kwargs, reasons)
            if isinstance(outcome, Eager) and outcome.maybe_programs:  # Note [Raising entries]
                return self._eagerly_or_raising(outcome, args, kwargs, reasons)
            if isinstance(outcome, Eager) and outcome.this_call_only:  # a lazy module's first call
                return self.fn(*args, **kwargs)
            if isinstance(outcome, Eager) and outcome.from_now_on:
                self.eager_reason = kept_without_frames(outcome.reason)  # Note [A kept reason ...
                warnings.warn(
                    f"jitcore: {self._label} runs eagerly from now on: {outcome.reason.summary}", stacklevel=3
                )
                return self.fn(*args, **kwargs)
            entry = self._eager_entry(outcome.reason, traced) if isinstance(outcome, Eager) else outcome
            if entry.this_call_only is not None:  # Note [A cached function that raised, caught]
                traced = Prologue(guards=lru_caches.without_entries(entry.prologue.guards),
                                  state=entry.prologue.state)
                self._add(self._eager_entry(entry.this_call_only, traced), args, reasons)
            elif entry.filed:  # else the next call traces again: Note [What a cached function writes]
                self._add(entry, args, reasons)
        if entry.eager_reason is not None:  # FSDP2's units run jitted (Note [FSDP2: hooks eager, ...])
            return eager_call(entry.eager_reason, self.fn, self._options)(*args, **kwargs)
        # the jit's own reads (a size input's ``x.shape[0]``) run no subclass code, as in the prologue
        with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
            inputs = [path.get(args, kwargs) for path in entry.prologue.inputs]
        computation = without_torch_function(entry.computation) if entry.plain_data else entry.computation
        taken = None if entry.effects is None else entry.effects.taken(args, kwargs)
        try:
            result = computation(*inputs)
        except ValueCheckFailed as failed:  # the probe and the computation disagree: not reproducible
            Effects.put_back(taken)
            if not failed.site.varies:
                raise nondeterministic_read(failed) from None
            result = MISS  # the clock moved on since tracing (jit/nondeterministic.py): eager's answer
        except ComputationRaised as raised:
            Effects.put_back(taken)
            return self._eagerly_after(raised, args, kwargs)
        if result is MISS:  # for this call (its writes and draws were undone), run after the handler
            return self.fn(*args, **kwargs)  # Note [No pass inside an except block]
        return result if entry.effects is None else entry.effects.finish(args, kwargs, result, taken)

    def _add(self, entry: CacheEntry, args: tuple, reasons: list[MissReason]) -> None:
        """File the new ``entry`` (evicting the oldest past the cache limit, with a warning) and log it."""
        if len(self._cache) >= self.cache_limit:
            warnings.warn(
                f"jitcore: {self._label} reached its cache limit of {self.cache_limit} entries; "
                "the oldest entry is evicted (raise cache_limit= to keep more)",
                stacklevel=4,
            )
        self._cache.add(entry, args, limit=self.cache_limit, any_shape=shapes.is_symbolic(entry.prologue))
        entry_added(self, entry, reasons)

    def _raised(self, outcome: Eager, args: tuple, kwargs: dict, reasons: list[MissReason]) -> Any:
        """The call whose pass stopped on the program's own exception (Note [A program that raises],
        jit/eager_entries.py): a raising entry kept for calls like it (Note [Raising entries],
        jit/raising_entries.py), then the pass's exception raised, or the call run eagerly."""
        entry = None
        if outcome.kept:
            entry = self._raising_entry(outcome, outcome.reason)
            self._add_raising(entry, args, reasons)
        if outcome.reraise:
            raise outcome.reason  # outside the pass's except block: Note [No pass inside an except block]
        after = eager_entries.after_raise(self.fn, outcome.reason, self._label, self.misses,
                                          result_expected=outcome.result_expected)
        result = after(*args, **kwargs)
        if entry is not None:
            self._drop(entry)
        return result

    def _eagerly_or_raising(self, outcome: Eager, args: tuple, kwargs: dict,
                            reasons: list[MissReason]) -> Any:
        """The call run eagerly, its pass having stopped on an error that may be the program's own: where
        eager raises one of that error's type, a raising entry is kept for calls like it (no warning: the
        program raises), else an eager entry (Note [Raising entries], jit/raising_entries.py)."""
        try:
            result = eager_call(outcome.reason, self.fn, self._options)(*args, **kwargs)
        except Exception as exc:
            stopped = outcome.reason.__cause__
            if type(exc) is type(stopped):
                self._add_raising(self._raising_entry(outcome, exc), args, reasons)
            else:
                self._add(self._eager_entry(outcome.reason), args, reasons)
            raise
        self._add(self._eager_entry(outcome.reason), args, reasons)
        return result

    def _raising_entry(self, outcome: Eager, error: BaseException) -> CacheEntry:
        """A raising entry for the pass ``outcome`` tells of, which stopped on ``error`` (Note [Raising
        entries], jit/raising_entries.py)."""
        traced = self.last_prologue if self.last_prologue is not None else Prologue()
        return raising_entry(self.misses, traced, outcome, self.fn, error, self._label,
                             raised=self._count_hit, returned=self._drop)

    def _add_raising(self, entry: CacheEntry, args: tuple, reasons: list[MissReason]) -> None:
        """File a raising entry, first taking out the oldest past the limit (Note [Raising entries])."""
        for old in past_the_limit(self._cache.newest_first):
            self._cache.remove(old)
        self._add(entry, args, reasons)

    def _count_hit(self) -> None:
        self.hits += 1

    def _drop(self, entry: CacheEntry) -> None:
        """Take a raising entry out of the cache (Note [Raising entries], jit/raising_entries.py)."""
        with self._lock:
            self._cache.remove(entry)

    def _eagerly_after(self, raised: ComputationRaised, args: tuple, kwargs: dict) -> Any:
        """The call, run eagerly after its computation raised and undid its changes (Note [Effects of a
        raising call], jit/raising_calls.py): eager's effects and eager's exception."""
        eager = eager_entries.after_raise(self.fn, raised.error, self._label, self.misses, computation=True,
                                          result_expected=raised.handled)
        return eager(*args, **kwargs)

    def _note_changed_numbers(self, args: tuple, kwargs: dict) -> None:
        """Number arguments some entry pinned to another value are dynamic from the next trace on
        (Note [Numbers that change between calls become dynamic], jit/numbers.py)."""
        if self.dynamic_numbers is True or self._shapes.dynamic is False or not self._cache.newest_first:
            return
        names = parameter_names(self.fn, len(args))
        prologues = [e.prologue for e in self._cache.newest_first]
        changed = numbers.changed_number_arguments(prologues, args, kwargs, names) \
            - self.dynamic_numbers - self._changed_numbers
        if changed:
            self._changed_numbers |= changed
            self._cache.type_by_type(frozenset(i for i, name in enumerate(names) if name in changed))
        self._counters |= numbers.changed_state_numbers(prologues, args, kwargs)  # state numbers alike
        self._counters |= changed_ctx_numbers(prologues, args, kwargs)  # and a subclass input's ctx floats

    def _trace(self, args: tuple, kwargs: dict, shape_changed: bool = False) -> CacheEntry | Eager:
        """The pipeline of a miss; an error that stops it is decided on with the values of the pass
        it stopped (``eager_entries.decide``): an Eager outcome, or raised."""
        number = self.misses
        tracing_pass, program = self._interpret(number, args, kwargs, shape_changed)
        if isinstance(program, Eager):
            return program
        self._counters |= tracing_pass.counts_added  # Note [A count a Counter gains] (jit/effects.py)
        if tracing_pass.found_counters - self._counters:  # traced again with them dynamic (jit/effects.py)
            self._counters |= tracing_pass.found_counters
            return self._trace(args, kwargs, shape_changed)
        if tracing_pass.provenance.appended_read - self._read_lists:  # Note [Containers reached twice]
            self._read_lists |= tracing_pass.provenance.appended_read
            return self._trace(args, kwargs, shape_changed)
        try:
            return self._compile(number, program)
        except StaticSizesNeeded as exc:  # from now on, this function traces static shapes only
            if tracing_pass.provenance.symbolic_subclass_inputs:  # or only its subclass inputs
                self._shapes.refuse_subclasses(str(exc))
            elif program.read_sizes and not program.size_inputs:  # only value-shaped outputs' sizes static
                self._shapes.refuse_reads(str(exc))
            else:
                self._shapes.refuse(str(exc))
            static_shapes(self, number, str(exc))
        except Exception as exc:  # Note [Eager entries]
            outcome = self._decide(exc, tracing_pass)
            if outcome is None or outcome.reraise:  # a raising entry is kept where the pass raised only
                raise
            return replace(outcome, kept=False)
        return self._trace(args, kwargs, shape_changed)  # Note [No pass inside an except block]

    def _decide(self, error: Exception, tracing_pass: Pass) -> Eager | None:
        """Whether the pass that ``error`` stopped runs eagerly (jit/eager_entries.py), or None: raised."""
        outcome = eager_entries.decide(error, tracing_pass.context.values, fullgraph=self.fullgraph,
                                    fallback=self.fallback, effects_made=tracing_pass.raised_after_effects,
                                    handlers_skipped=tracing_pass.reruns_on_raise,
                                    seen=(self._shapes.seen, tracing_pass.provenance.inputs))
        if outcome is not None and (outcome.program_raised or outcome.maybe_programs):  # Note [Raising
            outcome = replace(outcome, tensor_guards=tuple(tracing_pass.provenance.bound_tensor_guards()),
                              written=tracing_pass.raised_writes)
        return outcome  # entries], jit/raising_entries.py

    def _compile(self, number: int, program: TracedProgram) -> CacheEntry:
        """The stages after interpretation: grad, flatten, executors, prologue; the new cache entry."""
        # the pipeline of a miss (docs/architecture.md): interpret -> grad -> flatten -> executors -> prologue
        grad = differentiate(program, self.executor, self)  # inputs that require grad: docs/autograd.md
        resumable, no_graph, viewing = None, False, None
        if grad.differentiated is not None:  # flat already, compiled with its backward
            computation = grad.differentiated.computation
            traces = grad.differentiated.traces  # one list: a lowered forward is appended once
            backward_traces, inputs = grad.differentiated.backward_traces, grad.differentiated.inputs
            self.last_traces, self.last_backward_traces = traces, backward_traces
            self.last_rederived_traces = computation.rederived_traces  # filled as gradients come
        elif grad.pass_1:
            flat = pass_1_under_autograd(program.trace, program.subclass_inputs)
            flat = replace(flat, trace=numbers_before_functions(flat.trace))  # Note [Numbers a Function's
            traces = [program.trace, flat.trace]
            backward_traces, inputs = [], flat.inputs
            self.last_traces = traces
            self.last_rederived_traces = []
            computation = self.executor.compile(flat.trace, record_lowered(traces))
        else:
            # Note [A Function without grad runs its recorded forward] (transforms/autograd_function.py):
            # inlined before flattening, since a forward's records may compute with subclass values
            inlined = forwards_inlined(program.trace)
            # Note [Subclass views without grad] (jit/subclass_views.py): the bases returned as well
            viewing = subclass_views(inlined, program.subclass_inputs) \
                if grad.functions is None and program.effects is None else None
            if viewing is not None:
                inlined, views = viewing
            flat = flatten_program(inlined, program.subclass_inputs, program.outer_layouts)
            no_graph = grad.without_graph and flat.trace is not inlined  # Note [A graph no output
            if no_graph:  # reaches]
                flat = replace(flat, trace=without_grad_mode_changes(flat.trace))
            if grad.functions is not None:  # Note [A Function split alone] (transforms/function_records.py)
                flat = replace(flat, trace=grad.functions.applied(flat.trace))
                self.last_backward_traces = grad.functions.backwards  # each split's, recorded as it lowers
            traces = [program.trace] if flat.trace is program.trace else [program.trace, flat.trace]
            backward_traces, inputs = [], flat.inputs
            self.last_traces = traces  # recorded before they run; a lowered trace is appended once
            self.last_rederived_traces = []
            resumable = Resumable.of(flat.trace)  # Note [Resuming at a failed check]
            on_lowered = record_lowered(traces)
            computation = self.executor.compile(
                flat.trace, on_lowered if resumable is None else resumable.watching(on_lowered),
                grad_off=runs_without_grad(flat.trace))
            if resumable is not None:
                resumable.full, computation = computation, resumable.computation
            if no_graph:
                computation = without_grad(computation)
            if viewing is not None:
                computation = views.wrap(computation)
        prologue = self._finish_prologue(prologue_of(program.prologue, grad, inputs))
        self.last_prologue = prologue
        plain_data = runs_torch_function(program)  # recorded on the data: jitcore/proxies/typed.py
        effects = program.effects
        post = with_output_rebuilt(program, identity)  # effects are performed before the output's rebuild
        computation = entry_computation(program, traces[0], computation)
        if effects is not None:  # Python side effects, replayed on every call (jitcore/jit/effects.py)
            effects.post = post
            effects.copies = effects.copies or program.structure is not None and program.structure.copies
            effects.dispatch_runs = grad.pass_1  # the classes' dispatch logs as it runs
            effects.forwards_run_natively = grad.differentiated is None and applies_functions(traces[-1])
        note_state_inputs(
            prologue.inputs, prologue.input_names, [*traces, *backward_traces]
        )  # linear1_weight: linear1.weight
        entry = CacheEntry(number, prologue, traces, computation, not_compiled, effects=effects,
                           plain_data=plain_data, this_call_only=program.this_call_only, filed=program.filed,
                           autograd_reason=grad.reason)
        entry.cached_call = entry.compile_fast_path()
        if resumable is not None:
            entry.resumable = resumable
            resumed = without_grad(resumable.resumed) if no_graph else resumable.resumed
            resumed = views.wrap(resumed) if viewing is not None else resumed
            entry.resumed = entry_computation(program, traces[0], resumed)
        return entry

    def _finish_prologue(self, prologue: Prologue) -> Prologue:
        """The entry's prologue as it is compiled (a jitted module groups its state's checks)."""
        return prologue

    # Note [Eager entries]
    # A call jitcore cannot trace (a value it runs eagerly, JC-J002: nested jagged tensors, FSDP2, a
    # sparse or quantized tensor; an op whose output shapes depend on values under a backward inside
    # the function, JC-T002; a call it cannot record, JC-T001: ``register_hook``, ``Generator.get_state``)
    # still runs: eagerly, with one warning. The error that stopped the pass is never caught by
    # the program's own ``except`` (``JitcoreError.reaches_program``): eager raised nothing there. It also
    # becomes a cache entry, so that calls like it do not interpret the function again each time only
    # to fail at the same place: the entry's prologue is
    # what the pass guarded before it stopped (always with the type of the value it stopped at), and
    # a call it accepts runs the function eagerly. Any set of guards is sound here: eager is what the
    # call would compute. Under ``fullgraph=True`` a value-dependent program or an unrecordable call
    # raises (or, with ``fallback="eager"``, runs eagerly from then on) instead. Which errors make an
    # eager entry is one table, ``RULES`` in jit/eager_entries.py, read with the values of the pass the
    # error stopped (a DTensor program's rule looks at them): ``_interpret`` and ``_trace``, which run
    # the pass and the stages after it, ask it (``_decide``) and return its ``Eager`` outcome.
    def _eager_entry(self, reason: BaseException, traced: Prologue | None = None) -> CacheEntry:
        """An entry whose calls run eagerly; its guards ``traced``'s, by default the last pass's."""
        reason = kept_without_frames(reason)  # Note [A kept reason holds no frames]
        if traced is None:
            traced = self.last_prologue if self.last_prologue is not None else Prologue()
        guards = eager_entries.eager_guards(reason, traced.guards)  # Note [Eager whatever the contents]
        prologue = Prologue(guards=guards, state=list(traced.state), header=[
            f"Constructed by jitcore.jit for {self._label}: prologue of cache entry {self.misses}, "
            "an eager entry (the calls it accepts run eagerly)"])
        check = prologue.compile(_accept)
        fn = eager_call(reason, self.fn, self._options)

        def cached_call(args: tuple, kwargs: dict) -> Any:
            return MISS if check(args, kwargs) is MISS else fn(*args, **kwargs)

        if self.fallback_reason is None:
            summary = getattr(reason, "summary", str(reason))
            warnings.warn(
                f"jitcore: {self._label} runs eagerly for this call and calls like it: {summary}",
                stacklevel=4,
            )
        self.fallback_reason = reason
        self.last_traces, self.last_backward_traces, self.last_rederived_traces = [], [], []
        return CacheEntry(self.misses, prologue, [], not_compiled, cached_call, eager_reason=reason)

    # Note [Symbolic passes and torch's Python kernels]
    # A pass with symbolic sizes runs under torch's Python dispatcher, as make_fx and torch.compile
    # trace: some composite ops have C++ kernels that take only concrete sizes and a Python kernel for
    # symbolic ones (``F.interpolate(x, size=(h, w), mode="bicubic")`` with ``h`` a SymInt: "SymIntArrayRef
    # expected to contain only concrete integers" from the C++ kernel). Without it such a pass raised and
    # the function traced static shapes, an entry per size (a ViT with ``interpolate_pos_encoding`` over
    # image sizes). A static pass needs none of them and keeps the C++ kernels.
    def _interpret(self, number: int, args: tuple, kwargs: dict, shape_changed: bool,
                   symbolic: bool | None = None,
                   learning: bool = False) -> tuple[Pass, TracedProgram | Eager]:
        """One pass over the call, with symbolic sizes where the shape policy asks for them; again
        with static shapes, logged, where the symbolic path cannot handle the program (jit/shapes.py).
        A static pass that raises returns what ``_decide`` makes of the error, or raises it; a symbolic
        pass that made read sites symbols runs once more (``learning``: Note [A symbolic pass that learnt
        its counts])."""
        if symbolic is None:  # dynamic numbers are sizes there too (Note [Dynamic numbers as sizes])
            numbers = bool(self.dynamic_numbers or self._changed_numbers or self._counters)
            symbolic = self._shapes.symbolic_pass(args, kwargs, shape_changed, numbers)
        tracing_pass = Pass(
            self.fn,
            label=self._label,
            entry_number=number,
            dynamic_numbers=self.dynamic_numbers if self.dynamic_numbers is True else
            self.dynamic_numbers | self._changed_numbers,
            fullgraph=self.fullgraph,
            counters=self._counters,
            shapes=self._shapes if symbolic else None,
            read_lists=self._read_lists,
            read_dims=self._shapes.read_dims,
            read_numbers=self._shapes.read_number if symbolic else None,
        )
        self.last_traces, self.last_backward_traces, self.last_rederived_traces = [tracing_pass.trace], [], []
        self.last_prologue = tracing_pass.prologue
        again: tuple[bool | None] | None = None  # another pass (its ``symbolic``; None: the policy's)
        stopped: Eager | None = None
        try:
            with enable_python_dispatcher() if symbolic else contextlib.nullcontext():  # Note [Symbolic
                program = self._run_pass(tracing_pass, args, kwargs)  # passes and torch's Python kernels]
            sizes = (
                shapes.finish(program, tracing_pass.provenance, tracing_pass.context.values,
                              tracing_pass.reads.sizes, tracing_pass.reads.number_symbols,
                              tracing_pass.number_sizes.symbols if tracing_pass.number_sizes else None)
                if symbolic
                else []
            )
        except shapes.StaticShapes as exc:  # from now on, this function traces static shapes only
            again = (self._static_from_now_on(number, tracing_pass, str(exc), refuse=True),)
        except Exception as exc:  # noqa: BLE001 - a static pass raises what the program raises
            if not symbolic or eager_entries.whatever_the_sizes(exc):  # Note [Eager whatever the sizes]
                outcome = self._decide(exc, tracing_pass)
                if outcome is None:
                    raise
                if not symbolic:
                    return tracing_pass, outcome
                stopped = outcome  # unless a static pass traces the call: then the sizes were the cause
            else:
                reason = f"tracing with symbolic sizes raised {type(exc).__name__}: {exc}"
                again = (self._static_from_now_on(number, tracing_pass, reason, refuse=False),)
        if stopped is not None:  # Note [No pass inside an except block]
            static_pass, program = self._interpret(number, args, kwargs, shape_changed, symbolic=False)
            if not isinstance(program, Eager):
                return static_pass, program
            self.last_traces, self.last_prologue = [tracing_pass.trace], tracing_pass.prologue
            return tracing_pass, stopped
        if again is not None:
            return self._interpret(number, args, kwargs, shape_changed, symbolic=again[0])
        learnt = self._shapes.numbers_traced(tracing_pass.reads.pinned())  # Note [Counts that values decide]
        if symbolic and learnt and not learning:  # Note [A symbolic pass that learnt its counts]
            return self._interpret(number, args, kwargs, shape_changed, symbolic=True, learning=True)
        if symbolic and not sizes and involves_subclasses(program.trace):  # Note [A symbolic pass that
            return self._interpret(number, args, kwargs, shape_changed, symbolic=False)  # kept no symbol]
        if sizes:
            symbolic_sizes(self, number, sizes)
        self._shapes.seen(program.prologue.inputs, program.first_inputs)  # tensor inputs come first
        return tracing_pass, program

    def _static_from_now_on(self, number: int, tracing_pass: Pass, reason: str, refuse: bool) -> bool | None:
        """Static shapes from now on where a symbolic pass cannot handle the program, logged: for its
        subclass inputs or its value-decided sizes only where it had those, else for every input
        (``refuse``: the shape policy refuses symbolic passes too). The next pass's ``symbolic``."""
        if tracing_pass.provenance.symbolic_subclass_inputs:  # Note [Subclass inputs that follow an
            self._shapes.refuse_subclasses(reason)  # inner tensor]
            static_shapes(self, number, f"subclass inputs: {reason}")
            return None
        if tracing_pass.reads.sizes or tracing_pass.reads.number_symbols:  # Notes [Sizes that values
            self._shapes.refuse_reads(reason)  # decide], [Counts that values decide]
            static_shapes(self, number, f"sizes that values decide: {reason}")
            return None
        if refuse:
            self._shapes.refuse(reason)
        static_shapes(self, number, reason)
        return False

    # Note [No pass inside an except block]
    # A pass run again while the last one's exception is being handled would raise the program's own
    # exceptions with that one as their ``__context__`` (CPython chains any exception raised inside an
    # ``except`` block): eager's ``e.__context__`` is None, a user's ``except`` would see jitcore's
    # exception, and a traceback would print "During handling of the above exception" over an error
    # the program raised once. So handlers only decide; the next pass runs after the ``try``.

    # Note [A symbolic pass that learnt its counts]
    # A pass with symbolic sizes that pinned other counts at a read site than the pass before
    # (``numbers_traced``: an NJT attention's lengths, read from the offsets, given to a split) makes
    # that site an unbacked symbol from the next pass on. That next pass is run at once, for the same
    # call, instead of keeping an entry specialized to these counts (or a static one: Note [A symbolic
    # pass that kept no symbol]) and learning on the next miss: the NJT multi-head attention under grad
    # kept one symbolic entry from its second call on (3 misses before), without grad from its third
    # (4 before). The entry is the one the next miss would have traced, checked per call the same way;
    # ``learning`` bounds it to one more pass per miss.
    # Note [A symbolic pass that kept no symbol]
    # A pass with symbolic sizes in which the program pinned every size (an NJT attention's split by
    # lengths it read: ``Eq(s0, 14)``) is a static entry whose shadows still hold the pass's SymInts.
    # Of a tensor-subclass program, the grad transform replays the calls on new shadows and compared
    # those with the pass's (a nested int's view: 'vr must not be None for symbol s1', raised to the
    # caller). Such a pass is traced again with static shapes, as the entry is static anyway.
    def _run_pass(self, tracing_pass: Pass, args: tuple, kwargs: dict) -> Any:
        """Interpret one call (jitcore/jit/module.py interprets a module's forward instead)."""
        if isinstance(self.fn, torch.nn.Module):
            return tracing_pass.run(args, kwargs, target=self.fn, bound_self=self.fn)
        if isinstance(self.fn, types.MethodType):  # ``jit(obj.method)``: obj's state is read and written
            return tracing_pass.run(args, kwargs, target=self.fn, bound_self=self.fn.__self__)
        if not isinstance(self.fn, types.FunctionType):  # a callable object, a functools.partial
            return tracing_pass.run(args, kwargs, target=self.fn, bound_self=self.fn)
        return tracing_pass.run(args, kwargs, target=self.fn)

    @property
    def entries(self) -> list[CacheEntry]:
        """The cache entries, oldest first (a snapshot)."""
        return list(reversed(self._cache.newest_first))

    def __repr__(self) -> str:
        return f"<jitcore.jit of {self._label}: {len(self.entries)} cache entries>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self, obj)


def jit(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Compile ``fn`` (a function or an ``nn.Module``) with jitcore; usable as a decorator.

    Args:
        fn: the function or module.
        executors: executors (names or objects) in priority order, e.g. ``("inductor", "torch")``:
            traces are lowered with them from the first call. Default: ``("inductor", "torch")``
            once a cache entry has run ``fuse_after`` times (docs/executors.md).
        fuse_after: cached calls of an entry before it is lowered (default 100, or
            ``$JITCORE_FUSE_AFTER``; ``0`` with ``executors=``).
        executor: the older single-executor option; ``"torch"`` never lowers.
        fallback: ``"eager"`` runs the function eagerly (with a warning) when it cannot be traced
            because it depends on tensor values; None (default) raises instead.
        cache_limit: the most specializations kept (default 64); past it the oldest is evicted,
            with a warning.
        show_internal_frames: keep jitcore's own frames in the tracebacks of errors (default: only
            the user's frames, unless the environment sets ``JITCORE_SHOW_INTERNAL_FRAMES=1``).
        dynamic_numbers: parameter names whose int or float arguments are inputs of the computation
            instead of specialized constants (``True``: every int or float argument); a use that
            needs the value (``if n > 0``, a shape) specializes it again. See docs/user-guide.md.
        dynamic: which sizes are symbolic, as for torch.compile: None (default) makes a dimension
            symbolic once it has been seen with two sizes, True makes every dimension of every
            argument symbolic from the first call, False keeps every size static (one entry per
            shape); ``jitcore.mark_dynamic(t, dim)`` marks a dimension in every mode. Guards come
            from torch's ShapeEnv; sizes 0 and 1 are specialized. See docs/user-guide.md.
        fullgraph: refuse programs that read tensor values while traced (``if t.any():``,
            ``t.item()``, ``x[mask]``) with DataDependentError (JC-T002) instead of reading the value
            and checking it on every call (docs/user-guide.md, "Value reads"; reads inside a tensor
            subclass's own code are read and checked all the same), and programs that call
            what jitcore cannot record (``register_hook``, ...) with UnsupportedOperationError (JC-T001)
            instead of running such calls eagerly.

    Returns:
        A JittedFunction; ``jit(**options)`` without ``fn`` returns a decorator.
    """
    if fn is None:
        return lambda f: jit(f, **options)
    if isinstance(fn, torch.nn.Module) or is_module_forward(fn):
        from jitcore.jit.module import jit_module

        return jit_module(fn, **options)
    return JittedFunction(fn, **options)


def _accept(*_inputs: Any) -> bool:
    return True


_transform_level = torch._C._functorch.peek_interpreter_stack  # noqa: SLF001 - the innermost active transform
_function_modes = torch._C._len_torch_function_stack  # noqa: SLF001 - Note [Modes around the call]
_dispatch_modes = torch._C._len_torch_dispatch_stack  # noqa: SLF001


def _around_the_call(jitted: Any) -> CallerModes | str | None:
    """The caller's modes to trace under, or what makes this call run eagerly: a torch.func transform,
    or modes the caller entered that cannot be traced (Note [Called under a function transform], Note
    [Modes around the call]); None for torch's DeviceContext alone."""
    if _transform_level() is not None:
        return "torch.func transforms (grad, vmap, ...)"
    return callers_modes(jitted)


# Note [A jitted function inside a traced program]: a jitted function that a program jitcore is
# tracing calls (a jitted helper called by a jitted training step, ``@jitcore.jit`` on both) is its
# original function there: the call is interpreted as part of the outer trace, as torch.compile
# inlines a compiled function called by another, instead of looking up the inner function's cache
# with the outer trace's proxies (whose storages cannot be read: that call ran eagerly). The inner
# function's options do not apply inside; its own cache serves the calls made outside a trace. The
# call goes through ``jitted.fn`` read by interpreted code, so the outer trace has a path to the
# function (``jitted.fn`` is guarded as state). The code is compiled with a "<frozen ...>" file name,
# so the interpreter treats it as library code, as Note [A jitted module inside a traced program]
# (jitcore/jit/module.py) does for modules.
def frozen_function(source: str, module: str) -> Callable[..., Any]:
    """The one function ``source`` defines, compiled with a "<frozen ``module``>" file name: the
    interpreter treats it as library code (no source line of its own in a trace or an error)."""
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<frozen {module}>", "exec"), namespace)  # noqa: S102
    (fn,) = (v for k, v in namespace.items() if k != "__builtins__")
    return fn


_CALL_JITTED_FN = frozen_function(
    "def call_jitted(jitted, /, *args, **kwargs):\n"
    "    return jitted.fn(*args, **kwargs)\n",
    "jitcore.jit.api",
)
