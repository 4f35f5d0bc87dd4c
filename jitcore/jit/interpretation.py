"""One tracing pass: interpret the user's function with hooks that turn torch calls into symbols.

The hooks given to the interpreter:
- lookasides / resolve_call: a torch callable (function, method, operator, property, aten op) runs
  its symbol instead, which records a bound symbol; jitcore's own code runs natively;
- on_load_global / on_load_deref / on_load_attr / on_load_subscr / on_contains: values read from
  persistent state are bound by the pass's Provenance (tensors become inputs, the rest is guarded;
  ``StateReads``, jit/state_reads.py);
- on_opaque_call / native_call: C calls (``NativeCalls``, jit/native_calls.py): Python side effects of
  builtins (``print``) are recorded, since they happen only while tracing; dynamic numbers
  (jitcore/jit/numbers.py) handed to C code are specialized first.
Invariant: the pass records into its own Trace and Prologue only; nothing is cached until the pass
has finished without error.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import os
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

import optree
import torch
from torch._subclasses.fake_tensor import FakeTensor

import jitcore
from jitcore.diagnostics import JITCORE_DIR
from jitcore.diagnostics.boundary import eager_stand_in, exception_template
from jitcore.dispatch import resolve_call
from jitcore.dispatch.dtensor import dispatch_state_lookasides, is_natively_dispatched
from jitcore.dispatch.dtensor_masks import refuse_masks_left
from jitcore.dispatch.flatten import bind_subclass_input
from jitcore.dispatch.lookasides import DISPATCH_LOOKASIDES, python_type
from jitcore.dispatch.modes import offered_lookasides
from jitcore.dispatch.raw_kernels import raw_kernel_lookasides
from jitcore.dispatch.resolver import (
    numbers_reach_dispatch,
    python_code,
    resolve_operator_or_own,
)
from jitcore.errors import DataDependentError, EagerOnlySubclass, UnsupportedOperationError
from jitcore.interpreter import Hooks, current_run
from jitcore.interpreter.calls import call_function
from jitcore.interpreter.hashes import hash_
from jitcore.interpreter.lookasides import builtin_lookasides
from jitcore.ir import BoundSymbol, Inlined, Proxy, SourceFrame, Symbol, Trace, tracing, tree_any, tree_has
from jitcore.jit import appends, numbers, outputs
from jitcore.jit.appends import appended_parameters, item_appended_parameters
from jitcore.jit.autograd_calls import AutogradCalls
from jitcore.jit.caught_errors import refuse_caught_read_error, refuse_caught_value_errors
from jitcore.jit.checkpoint import checkpoint_lookasides
from jitcore.jit.closure_appends import closure_appended_parameters
from jitcore.jit.code_kinds import (
    TORCH_MODULES_DIR,
    compiled_original,
    is_library_file,
    is_library_module,
    is_symbolic_shapes_code,
)
from jitcore.jit.context_variables import ContextVariables
from jitcore.jit.control_flow import control_flow_lookasides, higher_order_operator
from jitcore.jit.dataclass_arguments import bind_field_lists, field_appended_parameters, narrows_fields
from jitcore.jit.dict_reads import dict_read_lookasides
from jitcore.jit.dying_objects import refuse_dying
from jitcore.jit.effects import Effect, Effects, StateSnapshots
from jitcore.jit.environment import environ_lookasides
from jitcore.jit.filesystem import FileSystem
from jitcore.jit.fsdp_units import fsdp_lookasides
from jitcore.jit.function_transforms import holds_functorch_tensor, run_natively
from jitcore.jit.held_tensors import HeldTensors, is_held_tensor
from jitcore.jit.helper_appends import helper_appended_parameters
from jitcore.jit.item_lists import bind_item_lists, is_list_table
from jitcore.jit.log_records import LogRecords
from jitcore.jit.lru_caches import LruCalls
from jitcore.jit.measured_lists import MeasuredLists
from jitcore.jit.namespace_arguments import attribute_parameters, bind_namespace_argument, is_namespace
from jitcore.jit.native_calls import NativeCalls
from jitcore.jit.native_python import pickler_lookasides
from jitcore.jit.nondeterministic import PerCallReads, iterator_lookasides, needed_value
from jitcore.jit.number_sizes import NumberSizes
from jitcore.jit.pending_keys import PendingKeys
from jitcore.jit.printing import Prints
from jitcore.jit.probe import Probe
from jitcore.jit.program import TracedProgram
from jitcore.jit.provenance import Provenance
from jitcore.jit.pytree_calls import pytree_lookasides
from jitcore.jit.recursion import ProgramLimit, program_recursion
from jitcore.jit.settings_reads import SettingsReads
from jitcore.jit.state_reads import StateReads
from jitcore.jit.tensor_keys import CallerKeys, pin_tensor_ids
from jitcore.jit.texts import format_field, format_lookasides, format_percent
from jitcore.jit.value_reads import ValueReads
from jitcore.jit.warning_calls import Warnings
from jitcore.langctx import new_context
from jitcore.langctx.generators import state_lookasides as generator_state_lookasides
from jitcore.langctx.index_bounds import check_int_list_index
from jitcore.langctx.scalars import bind_numbers, fixes_a_float
from jitcore.langctx.tensor_text import text_lookasides
from jitcore.langctx.thread_state import (
    ENTER_INFERENCE_MODE,
    EXIT_INFERENCE_MODE,
    STATE_FUNCTION_SYMBOLS,
    enter_inference_mode,
    exit_inference_mode,
    restored_on_refusal,
    rng_state,
    set_rng_state,
)
from jitcore.langctx.torch import TORCH_TABLE
from jitcore.numpy import new_bridge as new_numpy_bridge
from jitcore.prologue import Path, PrologueBuilder, Root
from jitcore.prologue.guards import DEFAULT_DEVICE, DTENSOR_SETTINGS, implicit_state
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy, specialize_all
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.text import TextProxy
from jitcore.transforms.autograd_function import AUTOGRAD_FUNCTION_LOOKASIDES

__all__ = ["Pass", "TracedProgram"]



# torch's files: the machinery the hooks drive (dispatch modes, ``_dynamo.disable`` wrappers) is among them
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

# Records whose effect eager keeps although the program raises later (Note [A program that raises]).
_KEPT_BY_EAGER = frozenset({"inplace", "random", "global_state", "backward"})
_NOT_WRITES = frozenset({"print", "log", "warn"})  # effects that change no reached object's state


class Pass(NativeCalls, StateReads):
    """Interprets ``fn`` on proxies of one call's arguments, recording a trace and a prologue."""

    def __init__(self, fn: Callable[..., Any], *, label: str, entry_number: int,
                 dynamic_numbers: frozenset[str] | bool = frozenset(), fullgraph: bool = False,
                 counters: frozenset[Path] = frozenset(), shapes: Any = None,
                 read_lists: frozenset[Path] = frozenset(), read_dims: Any = None,
                 read_numbers: Any = None) -> None:
        self.fn = fn
        self.read_lists = read_lists  # list arguments only appended to but also read: bound whole
        self.fullgraph = fullgraph  # refuse value reads (DataDependentError) instead of checking them
        self.dynamic_numbers = dynamic_numbers  # parameter names, or True for every number argument
        header = [
            f"Constructed by jitcore.jit for {label}: cache entry {entry_number}, pass 1 (interpretation)"
        ]
        self.trace = Trace(name="computation", header=header, imports={"torch": torch})
        self.context = new_context(self.trace, source_provider=self._source, call_handler=self._call_symbol,
                                   symbolic=shapes is not None)  # shapes: a ShapePolicy (jit/shapes.py)
        self.prologue = PrologueBuilder(
            header=[f"Constructed by jitcore.jit for {label}: prologue of cache entry {entry_number}"]
        )
        self.provenance = Provenance(self.context.values, self.prologue)
        self.held = HeldTensors(self.provenance)  # jit/held_tensors.py
        self.measured = MeasuredLists(self.provenance)
        # a caller's tensor as a key of the caller's dicts (jit/tensor_keys.py)
        self.limit: ProgramLimit | None = None  # the program's recursion limit, once the pass starts
        self.keys = CallerKeys(self.provenance, lambda obj: self.snapshots.reached(obj)
                               or self.provenance.path_of(obj) is not None)
        # dynamic numbers given as sizes, in a pass with symbolic sizes (jit/number_sizes.py)
        self.number_sizes = NumberSizes(self.provenance, self.context.values) if shapes is not None else None
        self.context.as_size = self.number_sizes.as_size if self.number_sizes is not None else None
        self.numpy = new_numpy_bridge(self.provenance)  # None when NumPy is not imported
        self.reads = ValueReads(self.context, Probe(self.trace, self.provenance.real_values),
                                read_dims=read_dims,  # ShapePolicy.read_dims, in every pass
                                read_numbers=read_numbers)  # ShapePolicy.read_number, in symbolic ones
        self.per_call = PerCallReads(self.context, self.reads.check_predicate)  # jit/nondeterministic.py
        self.raised_after_effects = False  # the program raised after making effects eager keeps
        self.raised_writes: frozenset = frozenset()  # then, the paths of the objects it wrote
        self.reruns_on_raise = False  # Note [Handlers a raising computation skips] (jit/caught_errors.py)
        self.absent_globals: dict[int, tuple[dict, set[str]]] = {}  # Note [Builtins read again]
        self.snapshots = StateSnapshots()
        self.provenance.on_remember = self.snapshots.take  # side effects: jitcore/jit/effects.py
        self.pending_keys = PendingKeys(  # Note [A key only stored] (jit/pending_keys.py)
            lambda container: self.provenance.bind_state(container, self.provenance.path_of(container)),
            self.provenance.appended_read.add)  # Note [A list argument only pushed onto]
        self.pending_keys.settle_set = self.snapshots.settle_set
        self.measured.pending = self.pending_keys.pending
        self.provenance.first_state = self.pending_keys.reading(self.snapshots.first_state)
        self.provenance.snapshot_taken = self.snapshots.reached
        self.provenance.stored_by_program = self.snapshots.stored
        self.provenance.counters = counters
        self.provenance.dynamic_dims = shapes.dims_for if shapes is not None else None
        self.provenance.dynamic_strides = shapes.stride_dims_for if shapes is not None else None
        self.provenance.symbolic_subclasses = shapes is not None and shapes.subclasses_refused is None
        self.found_counters: set[Path] = set()
        self.counts_added: set[Path] = set()  # counters from the next pass on (jit/effects.py)
        self.prints = Prints(path_of=self.provenance.path_of)  # jit/printing.py
        self.files = FileSystem(self.provenance.guard, self.provenance.path_of,  # jit/filesystem.py
                                written=self.prints.wrote_to)
        self.logs = LogRecords(self.prints.effects, self.provenance.guard, self._untracked_subclass_code)
        self.settings = SettingsReads(self.provenance.guard)
        self.warnings = Warnings(self.prints.effects, self.provenance.guard,  # jit/warning_calls.py
                                 self._untracked_subclass_code,
                                 builtin_lookasides()[warnings.warn])
        self.autograd = AutogradCalls(self)  # loss.backward(), p.grad: jitcore/jit/autograd_calls.py
        self.provenance.natively = lambda tensor: (  # Note [Tensors a native composite makes]
            self.reads.natively > 0 or self.autograd.transforms.made_here(tensor))
        self.context.autograd = self.autograd
        self.context_variables = ContextVariables(self.provenance)  # jit/context_variables.py
        self.lru_calls = LruCalls(self.provenance, self.context, self._source, self.snapshots)

    # --- driving -----------------------------------------------------------------------------------
    def run(self, args: tuple, kwargs: dict, *, target: Any, bound_self: Any = None) -> TracedProgram:
        """Trace one call and return the program; raises what the traced program raises."""
        from jitcore.interpreter import interpret

        rng_at_call = rng_state()  # Note [The random state while tracing] (langctx/generators.py)
        try:
            if type(bound_self) is functools.partial:  # its arguments and keywords are state
                self.provenance.bind_state(bound_self, Path(Root("bound", "self", bound_self)))
            elif bound_self is not None:
                self.provenance.remember(bound_self, Path(Root("bound", "self", bound_self)))
            pargs, pkwargs = self._bind_arguments(args, kwargs)
            for copy_, path in self.provenance.argument_copies:
                self.snapshots.take(copy_, path)
            for proxy, _path in self.provenance.subclass_inputs:
                bind_subclass_input(self.trace, proxy)
            if self.provenance.subclass_inputs:
                self.trace.imports["jitcore"] = jitcore
            self._remember_function(target)
            state_at_call = implicit_state(creates_tensors=True)  # as the call found it, not as it left it
            with tracing(self.context), program_recursion() as limit, restored_on_refusal():
                output = interpret(target, hooks=self.hooks(limit))(*pargs, **pkwargs)
            if (changed := self.context_variables.put_back()) is not None:  # Note [Context variables]
                raise changed
            once = self.lru_calls.caught_refusal()  # Note [A cached function that raised, caught]
            output = pin_tensor_ids(output)  # a returned id is a value (Note [The id of a caller's tensor])
            copies = frozenset(id(c) for c, _path in self.provenance.argument_copies)
            with outputs.taken_apart("returns"):
                output, returned = self.snapshots.returned_objects(output, args, kwargs, copies)
                epilogue = None
                if self.numpy is not None:
                    output, epilogue = self.numpy.split_output(output)  # the trace returns tensors only
            self.provenance.put_back_counters()  # Note [Counters bound where they are held]
            changes = [_grad_as_proxy(e, self.context.values) for e in self.snapshots.effects()]
            changes = [_plain_ids(e) for e in changes]
            changes += [Effect(path, "heappush", fn, item) for path, fn, item in self.pending_keys.pushes()]
            self.measured.check_made()  # Note [A list argument passed to a class's __init__]
            changes += self.prints.effects
            with outputs.taken_apart("returns"):
                owner = self.snapshots.owner(args, kwargs, copies)  # the caller's objects, handed on
                # Note [One object, one copy] (jit/call_copies.py)
                stored = [part for e in changes for part in (e.key, e.value)]
                shared = outputs.reached_twice([output, *stored], owner)
                referents = {id(v): path for path, *values in self.provenance.inputs for v in values}
                owner = dataclasses.replace(owner, shared=shared, referents=referents)
                output, structure = outputs.split(output, owner)  # ModelOutput, objects, ...: made per call
        except Exception:
            self.raised_after_effects = self._made_effects()  # Note [A program that raises]
            raise
        finally:
            self.context_variables.put_back()  # Note [Context variables]
            self.snapshots.restore()  # the caller's objects as the call found them
            self.per_call.restore()  # the generators it drew from, too
            set_rng_state(rng_at_call)  # Note [The random state while tracing]
        self._refuse_escapes(output, (args, kwargs, bound_self))
        refuse_masks_left(self.context.values.proxies())  # Note [A mask left in a MaskBuffer]
        self.found_counters = numbers.counters(changes, self.provenance.pins_value)  # read-modify-write
        self.counts_added = self.snapshots.counts_added(changes)  # Note [A count a Counter gains]
        input_paths = {id(proxy): path for path, proxy, _tensor in self.provenance.inputs}
        effects = None
        # an output that reads the objects the call passes is rebuilt where the effects run, which have
        # the call's arguments (Note [The objects this call passes], jit/call_copies.py)
        if changes or returned is not None or structure is not None and structure.reads_call:
            with outputs.taken_apart("stores into the caller's objects"):
                owner = dataclasses.replace(self.snapshots.owner(args, kwargs, copies), shared=shared,
                                            referents=referents)
                effects = Effects(changes, owner, input_paths)
            effects.returned = returned  # Note [Returning the caller's objects] (jit/effects.py)
        self.trace.output = output if effects is None else (output, effects.proxies)
        # Note [Hooks registered inside the program] (jit/inner_hooks.py)
        self.autograd.hooks.refuse_escapes(optree.tree_leaves(self.trace.output, none_is_leaf=True))
        self.held.point_records_at_inputs(self.trace)  # jit/held_tensors.py
        if self.provenance.number_inputs:
            numbers.fold_specialized(self.trace, self.provenance.specialized_numbers())
            numbers.drop_unused_arithmetic(self.trace)
        self.trace.args = [proxy for _path, proxy, _t in self.provenance.inputs]
        self.trace.args += [proxy for _path, proxy in self.provenance.number_inputs]
        self.trace.args += [proxy for _path, proxy in self.provenance.generator_inputs]
        first_inputs = [t for _path, _proxy, t in self.provenance.inputs]
        self._state_guards(state_at_call)
        written = frozenset(e.path for e in changes if e.kind in _ITEM_WRITES)
        self.provenance.finish(with_strides=self.context.values.strides_queried, written=written)
        program = TracedProgram(self.trace, self.prologue, first_inputs, self.provenance.number_inputs)
        program.read_numbers = list(self.reads.numbers)
        if once is None and self.lru_calls.only_counts(self.per_call.needed):  # cache_info() counts:
            once = needed_value(self.per_call.needed[0])  # Note [A cached function that raised, caught]
        program.per_call_numbers = self.per_call.finish() if once is None else list(self.per_call.numbers)
        program.this_call_only = once  # JC-T001 for the calls after this one (jit/api.py)
        program.filed = not self.lru_calls.wrote  # Note [What a cached function writes] (jit/lru_caches.py)
        program.subclass_inputs = list(self.provenance.subclass_inputs)
        program.epilogue = epilogue
        program.structure = structure
        program.effects = effects
        program.reruns_on_raise = self.reruns_on_raise
        program.snapshots = self.snapshots  # the reached state as the call found it (transforms/jit_hook.py)
        # Note [A dispatch mode under autograd] (jitcore/dispatch/modes.py)
        program.modes_under_autograd = self.context.modes is not None and self.context.modes.under_autograd
        return program

    def _made_effects(self) -> bool:
        """Whether the program, stopped by an exception, made what eager keeps when it raises: writes to
        the objects it reached, prints, in-place tensor writes, draws from a generator, changes of
        torch's state (Note [A program that raises], jit/eager_entries.py). Said True when unsure. The
        paths of the objects it wrote are kept (``raised_writes``: Note [Raising entries])."""
        try:
            effects = self.snapshots.effects()
        except Exception:  # noqa: BLE001 - the diff itself failed: assume the worst
            return True
        self.raised_writes = frozenset(e.path for e in effects if e.kind not in _NOT_WRITES)
        if self.prints.effects or self.per_call.drew or self.pending_keys.has_pushes() \
                or self.lru_calls.made_natively():  # the eager run takes them (jit/lru_reruns.py)
            return True
        return bool(effects) or any(b.symbol.tags & _KEPT_BY_EAGER for b in self.trace.bound_symbols)

    def _refuse_escapes(self, output: Any, caller_values: tuple) -> None:
        """Note [Nothing traced escapes]: a proxy or a shadow must never reach the caller. Outputs are
        mapped completely (``outputs.split``); a proxy still inside an output object, or stored into
        an object of the caller's or of persistent state, is refused with the place it was found."""
        for leaf in optree.tree_leaves(output, none_is_leaf=True):
            if not isinstance(leaf, Proxy) and outputs.escaped(leaf) is not None:
                raise UnsupportedOperationError(
                    f"the function returns a {type(leaf).__qualname__} holding traced tensors that jitcore "
                    "cannot take apart",
                    hints=("register its class with torch.utils._pytree.register_pytree_node",),
                )
        # Every object of the caller's the program could write into was reached through a path, so
        # it is remembered: what each holds directly is checked (the snapshotted ones were restored).
        # An object the program made and stored, then read back, is remembered too: once its store
        # is undone it is out of the caller's reach (a replayed effect makes it anew per call).
        args, kwargs = caller_values[0], caller_values[1]
        for value, path in [
            (v, self.provenance.path_of(v)) for v in (*caller_values, *self.provenance.remembered())
        ]:
            if path is not None and not _reaches(path, args, kwargs, value):
                continue
            found = outputs.held(value)
            if found is not None:
                where = path.describe() if path is not None else f"a {type(value).__qualname__} argument"
                raise UnsupportedOperationError(
                    f"a tensor computed inside the function ({found.name}) was stored into {where}, "
                    "which outlives the call, in a way jitcore cannot replay (an object without an "
                    "instance dict, or one the program reached without a path from the call)",
                    hints=("return the tensor instead, and store it after the call",),
                )

    def _bind_arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        args_root, kwargs_root = Path(Root("args", "args")), Path(Root("kwargs", "kwargs"))
        self.provenance.guard(args_root, "len", len(args))
        self.provenance.guard(kwargs_root, "keys", tuple(kwargs))
        names = parameter_names(self.fn, len(args))
        pargs = tuple(self._bind_argument(a, args_root.index(i), names[i]) for i, a in enumerate(args))
        pkwargs = {k: self._bind_argument(v, kwargs_root.key(k), k) for k, v in kwargs.items()}
        pkwargs.update(self._bind_defaults(len(args), kwargs))
        return pargs, pkwargs

    def _bind_argument(self, value: Any, path: Path, name: str) -> Any:
        dynamic = self.dynamic_numbers
        if type(value) in (int, float) and (dynamic is True or (dynamic and name in dynamic)):
            return self.provenance.bind_dynamic_number(value, path, name)
        if type(value) in appends.APPENDABLE and path.root.kind in ("args", "kwargs") \
                and len(path.steps) == 1 and path not in self.read_lists \
                and (name in appended_parameters(self.fn, emptying=True)
                     or name in closure_appended_parameters(self.fn)
                     or name in helper_appended_parameters(self.fn)):
            own = self.measured.bind_argument(value, path)  # jit/appends.py
            if own is not value and self.measured.is_copy(own):  # Note [A list argument only pushed onto]
                self.pending_keys.pushed_argument(own, path)
            return own
        if type(value) is dict and path.root.kind in ("args", "kwargs") and len(path.steps) == 1 \
                and path not in self.read_lists and name in appends.stored_parameters(self.fn) \
                and not self.provenance.reached_as_state(value):  # Note [A dict argument only stored into]
            own = self.provenance.bind_appended_argument(value, path)
            self.pending_keys.stored_into(own)  # a number key: Note [A key only stored] (jit/pending_keys.py)
            return own
        if is_list_table(value) and path.root.kind in ("args", "kwargs") and len(path.steps) == 1 \
                and (keys := item_appended_parameters(self.fn).get(name)) is not None \
                and not self.provenance.reached_as_state(value) \
                and not self.provenance.is_argument_container(value):  # passed twice: its first binding
            return bind_item_lists(self.provenance, self.measured, value, path, name, keys, self.read_lists)
        if path.root.kind in ("args", "kwargs") and len(path.steps) == 1 \
                and narrows_fields(value, uses := field_appended_parameters(self.fn).get(name)) \
                and not self.provenance.is_argument_container(value):  # passed twice: its first binding
            return bind_field_lists(self.provenance, self.measured, value, path, name, uses.appended)
        if is_namespace(value) and path.root.kind in ("args", "kwargs") and len(path.steps) == 1 \
                and name in attribute_parameters(self.fn):  # jit/namespace_arguments.py
            return bind_namespace_argument(self.provenance, value, path, name)
        return self.provenance.bind_argument(value, path, name)

    def _bind_defaults(self, nargs: int, kwargs: dict) -> dict[str, Any]:
        """The defaults this call uses, bound as state of the function (they can be replaced or mutated)."""
        fn = getattr(self.fn, "__func__", self.fn)
        if not isinstance(fn, types.FunctionType):
            return {}
        nargs += isinstance(self.fn, types.MethodType)  # a bound method's self is its first positional
        code = fn.__code__
        root = Path(Root("bound", fn.__qualname__, fn))
        used: dict[str, Any] = {}
        positional = code.co_varnames[: code.co_argcount]
        defaults = fn.__defaults__ or ()
        first_default = len(positional) - len(defaults)
        for i, name in enumerate(positional):
            if i >= nargs and name not in kwargs and i >= first_default:
                path = root.attr("__defaults__").index(i - first_default)
                used[name] = self._bind_default(defaults[i - first_default], path, name)
        for name, value in (fn.__kwdefaults__ or {}).items():
            if name not in kwargs:
                used[name] = self._bind_default(value, root.attr("__kwdefaults__").key(name), name)
        return used

    def _bind_default(self, value: Any, path: Path, name: str) -> Any:
        """A default the call uses: a list only appended to (``log=[]`` gathering across calls) is guarded
        by its type, as an argument so used is (jit/appends.py); others by their contents."""
        if type(value) is list and name in appended_parameters(self.fn) and path not in self.read_lists:
            return self.measured.bind(value, path, name)
        return self.provenance.bind_state(value, path, name)

    def _remember_function(self, target: Any) -> None:
        fn = getattr(target, "__func__", target)
        if isinstance(fn, types.FunctionType):
            self.provenance.remember_function(fn, Path(Root("bound", fn.__qualname__, fn)))
            if not is_library_file(fn.__code__.co_filename):  # ``global N; N = 1`` writes it unread
                label = f"{fn.__globals__.get('__name__', '?')}.__dict__"
                self.snapshots.take(fn.__globals__, Path(Root("bound", label, fn.__globals__)))

    def _state_guards(self, state_at_call: list) -> None:
        creates_tensors = _creates_tensors(self.trace)
        dtensor = any(is_natively_dispatched(p.python_type) for p in self.context.values.proxies())
        self.prologue.add_state(g for g in state_at_call if (g.name != DEFAULT_DEVICE or creates_tensors)
                                and (g.name != DTENSOR_SETTINGS or dtensor))

    # --- hooks -------------------------------------------------------------------------------------
    def hooks(self, limit: ProgramLimit) -> Hooks:
        self.limit = limit  # Note [The program's recursion limit] (jit/recursion.py)
        lookasides = numbers.with_number_lookasides({
            **dict(TORCH_TABLE.callables()),
            **DISPATCH_LOOKASIDES,
            **fsdp_lookasides(), **raw_kernel_lookasides(),
            **self.autograd.lookasides(), **text_lookasides(), print: self.prints.print,
            **control_flow_lookasides(), **pytree_lookasides(self._made_here),
            **format_lookasides(self._opaque_call),
            **AUTOGRAD_FUNCTION_LOOKASIDES, **checkpoint_lookasides(), **offered_lookasides(),
            **(self.numpy.lookasides() if self.numpy is not None else {}),
            **self._attribute_lookasides(),
            **iterator_lookasides(self.provenance.path_of, builtin_lookasides()[next]),
            **dict_read_lookasides(self._load_subscr, self._native_arguments, self.provenance),
            **environ_lookasides(self.provenance.guard),  # os.environ reads guarded: jit/environment.py
            **self.files.lookasides(), **self.logs.lookasides(), **self.warnings.lookasides(),
            **self.per_call.lookasides(),
            **{fn: self._state_change(fn, symbol) for fn, symbol in STATE_FUNCTION_SYMBOLS.items()},
            **generator_state_lookasides(),  # Note [The state of torch's default generator]
            **dispatch_state_lookasides(self._state_change),  # dispatch/dtensor.py
            **self._inference_mode_lookasides(), **limit.lookasides(),
            **pickler_lookasides(),  # Note [A C pickler's dump of the program's objects]
        })
        lookasides[len] = self.measured.len_lookaside(lookasides.get(len, len))
        lookasides[globals] = self.globals_lookaside(builtin_lookasides()[globals])  # Note [The program's ...
        lookasides[type] = self.snapshots.made_here.classes_of(  # classes it makes: jit/made_functions.py
            self.type_lookaside(lookasides.get(type, type)))  # Note [The class of a caller's object]
        made = self.snapshots.made_here  # a Python metaclass's super().__new__ too (jit/made_functions.py)
        lookasides[type.__new__] = made.classes_of(lookasides.get(type.__new__, type.__new__), skip=1)
        # ``id(t)``/``hash(t)`` of a caller's tensor: its own id (Note [The id of a caller's tensor])
        lookasides[id] = lambda *args: self.keys.identity(id, args, self._opaque_call)
        run = contextvars.Context.run  # Note [Context variables] (jit/context_variables.py)
        lookasides[run] = ContextVariables.run_lookaside(lookasides.get(run, builtin_lookasides()[run]))
        # ... and a Python ``__hash__`` interpreted (Note [A Python __hash__'s result], interpreter/hashes.py)
        lookasides[hash] = lambda *args: self.keys.identity(hash, args, lambda _fn, a, _k: hash_(*a))
        return Hooks(
            lookasides=lookasides,
            resolve_call=self._resolve_call,
            on_opaque_call=self._opaque_call,
            on_load_global=self._load_global,
            on_load_deref=self._load_deref,
            on_load_attr=self._load_attr,
            on_generic_attr=self._generic_attr,
            on_generic_missing=lambda _frame, obj, name: self._generic_missing(obj, name),
            on_missing_attr=lambda _frame, obj, name: self._note_attribute(obj, name, present=False),
            on_load_subscr=self._load_subscr,
            on_contains=self._contains,
            item_key=self.pending_keys.keying(self.keys.item_key),
            on_store=lambda _frame, obj, key, _kind: self.snapshots.note_write(obj, (key,)),
            store_attr=lambda _frame, obj, name, value: self.held.store_attr(obj, name, value),
            format_field=format_field,
            format_percent=format_percent,
            native_call=self._interpreters_native_call,
            on_type_lookup=lambda obj, t, name: refuse_dying(obj, t, name) or  # jit/dying_objects.py
            self.provenance.bind_type_lookup(obj, t, name),
            on_made=self.snapshots.made_here.note,  # jit/made_functions.py
            type_of=python_type,
            max_depth=limit.max_depth,
            host_files=(JITCORE_DIR,),  # Note [An error the hooks translated] (interpreter/loop.py)
            host_callees=(_TORCH_DIR,),  # Note [The hooks' traceback entries] (interpreter/tracebacks.py)
            host_stand_in=eager_stand_in,
        )

    def _made_here(self, container: Any) -> bool:
        """Whether the call made ``container`` (not the caller's, not state, not an argument's)."""
        provenance = self.provenance
        return provenance.path_of(container) is None and not provenance.is_argument_container(container)

    def _attribute_lookasides(self) -> dict[Any, Callable[..., Any]]:
        """getattr() with a default, hasattr() and vars() see what the attribute hook does not (an
        attribute's absence, a whole instance dict): the interpreter's versions, guarded too."""
        base = builtin_lookasides()
        base_getattr, base_hasattr, base_vars = base[getattr], base[hasattr], base[vars]

        def getattr_(obj: Any, name: Any, *default: Any) -> Any:
            if not default:
                return base_getattr(obj, name)
            try:
                return base_getattr(obj, name)
            except AttributeError:
                self._note_attribute(obj, name, present=False)
                return default[0]

        def hasattr_(obj: Any, name: Any) -> bool:
            present = base_hasattr(obj, name)
            self._note_attribute(obj, name, present=present)
            return present

        def vars_(*args: Any) -> Any:
            value = base_vars(*args)
            path = self.provenance.path_of(args[0]) if len(args) == 1 else None
            if path is not None and not isinstance(args[0], TensorProxy):
                self.provenance.bind_instance_dict(args[0], value, path.attr("__dict__"))
            return value

        return {getattr: getattr_, hasattr: hasattr_, vars: vars_}

    def _state_change(self, fn: Callable[..., Any], symbol: Symbol) -> Callable[..., Any]:
        """``fn`` run now and recorded for the computation to run at the same point (Note [State
        changes inside the traced function])."""

        def run_and_record(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            if symbol.path.startswith("jitcore."):  # the generated code names it from there
                self.trace.imports.setdefault("jitcore", jitcore)
            self.context.scopes[-1].append(BoundSymbol(symbol, args, kwargs, None, (), self._source()))
            return out

        return run_and_record

    def _inference_mode_lookasides(self) -> dict[Any, Callable[..., Any]]:
        """``with torch.inference_mode(mode):`` (and the decorator, which enters a clone): entered
        and left now and at the same points of the computation (langctx/thread_state.py)."""
        enter = self._state_change(enter_inference_mode, ENTER_INFERENCE_MODE)
        leave = self._state_change(exit_inference_mode, EXIT_INFERENCE_MODE)
        return {torch.inference_mode.__enter__: lambda cm: enter(cm.mode),
                torch.inference_mode.__exit__: lambda cm, *exc_info: leave()}

    def _note_attribute(self, obj: Any, name: Any, *, present: bool) -> None:
        if not present and self.numpy is not None:  # an array's attribute torch._numpy lacks: JC-N001
            self.numpy.missing_attribute(obj, name)
        path = self.provenance.path_of(obj)
        if (
            path is None
            or type(name) is not str
            or isinstance(obj, TensorProxy)
            or self.context.subclass_code
        ):
            return
        if not present and self.provenance.missing_through_hooks(obj, name):
            return  # Note [A class value or an absence a Python __getattribute__ read], jit/type_lookups.py
        owner = obj if isinstance(obj, types.ModuleType) else sys.modules.get(obj.__module__, sys) \
            if isinstance(obj, types.FunctionType) else None
        if owner is not None and is_library_module(owner):
            return  # a library module's, or its functions' (torch's lazily cached wrappers): constant
        self.provenance.guard(path, "hasattr", (name, present))

    def _generic_missing(self, obj: Any, name: str) -> None:
        """A hook's generic read of ``obj.name`` raised AttributeError: its absence, guarded where that
        is what raised (Note [A class value or an absence a Python __getattribute__ read],
        jit/type_lookups.py)."""
        path = self.provenance.path_of(obj)
        if path is None or isinstance(obj, TensorProxy) or self.context.subclass_code:
            return
        self.provenance.bind_absence_through_hooks(obj, path, name)

    def _call_symbol(self, symbol: Any, args: tuple, kwargs: dict) -> Any:
        """Every symbol call of the pass: real tensors that reached it are bound as inputs first."""
        # Note [Function transforms run on the traced tensors]: vmap batches random factories' draws too
        if self.context.function_transforms and "random" in symbol.tags and symbol.langctx == "torch":
            return run_natively(symbol, args, kwargs)
        if tree_any(args, is_held_tensor) or tree_any(kwargs, is_held_tensor):
            if holds_functorch_tensor(args, kwargs):
                return run_natively(symbol, args, kwargs)
            args, kwargs = optree.tree_map(self.held.bind, (args, kwargs), none_is_leaf=True)
        if self._has_numbers():  # Note [Index objects handed to torch] (jit/numbers.py)
            indexed = numbers.indexed_objects((args, kwargs))
            if indexed[0] is not args or indexed[1] is not kwargs:
                return Inlined(symbol(*indexed[0], **indexed[1]), splice=True)
        if self._has_numbers() and tree_has((args, kwargs), NumberProxy):
            # a dynamic number stays a name only where torch takes it as a value; with a tensor subclass,
            # only where it reaches the subclass's dispatch unchanged (text: its characters)
            args, kwargs = specialize_all(args, TextProxy), specialize_all(kwargs, TextProxy)
            subclass = _subclass_in(args, kwargs)
            if subclass and not numbers_reach_dispatch(symbol, args, kwargs):
                args, kwargs = specialize_all(args), specialize_all(kwargs)
            elif not subclass and type(symbol.fn) is types.FunctionType \
                    and fixes_a_float(symbol, args, kwargs):  # Note [A float a torch function would fix]
                return Inlined(call_function(current_run(), symbol.fn, args, kwargs), splice=True)
            else:
                sized = None if subclass or self.number_sizes is None else self.number_sizes.as_size
                args, kwargs = bind_numbers(symbol, args, kwargs, subclass=subclass, as_size=sized)
        check_int_list_index(symbol, args)  # Note [Int lists are bounds-checked while tracing]
        if refuse_caught_value_errors(symbol, args):  # Note [Errors the values decide, inside a try block]
            self.reruns_on_raise = True
        try:
            try:
                if (masked := self.reads.masks_under_grad(symbol, args, kwargs)) is not None:
                    return masked  # ``y[mask] = v`` with ``v`` requiring grad (langctx/reads.py)
                out = resolve_call(symbol, args, kwargs)
                self.reads.value_sizes(symbol, args, kwargs, out)  # Note [Counts that values decide]
                return out
            except DataDependentError as exc:
                if self.fullgraph and not self.context.subclass_code:
                    raise
                try:
                    return self.reads.read(symbol, args, kwargs, exc, self._source())  # checked reads
                except EagerOnlySubclass:
                    if self.fullgraph:  # Note [Reads inside a subclass's code under fullgraph]
                        raise exc from None
                    raise
                except Exception as error:  # raised by the values: Note [Errors the values decide, ...]
                    refuse_caught_read_error(symbol, error)
                    raise
        except Exception as exc:
            from jitcore.diagnostics.context import note_failed_call

            note_failed_call(exc, symbol, args, kwargs, self._source())  # for the error's note
            raise

    def _has_numbers(self) -> bool:
        """Whether the program has seen a number that is a name of the computation."""
        return bool(self.provenance.number_inputs or self.reads.numbers or self.per_call.numbers)

    def _resolve_call(self, fn: Any) -> Callable[..., Any] | None:
        resolved = resolve_operator_or_own(fn)  # an aten op's symbol, or jitcore's own code natively
        if resolved is not None:
            return resolved
        hop = higher_order_operator(fn)
        if hop is not None:
            return hop
        original = compiled_original(fn)
        if original is not None:  # torch.compile(f) called by the program: f is what jitcore traces
            return lambda *args, **kwargs: current_run().call(original, *args, **kwargs)
        code = python_code(fn)
        if code is not None and is_symbolic_shapes_code(fn, code):
            return fn  # arithmetic on symbolic sizes: torch's ShapeEnv records its guards (jit/shapes.py)
        return None

    def _source(self) -> tuple[SourceFrame, ...] | None:
        run = current_run()
        if run is None:
            return None
        frames, module_frames = [], []
        for frame in run.frames:
            pos = frame.position()
            kept = frames if not is_library_file(pos.filename) else \
                module_frames if pos.filename.startswith(TORCH_MODULES_DIR) else None
            if kept is not None:
                kept.append(
                    SourceFrame(
                        pos.filename, pos.lineno or 0, pos.function_name, pos.end_lineno, pos.col, pos.end_col
                    )
                )
        # torch's own modules (nn.Linear, nn.TransformerEncoderLayer) jitted directly: their lines
        kept = frames or module_frames
        handled = run.frames[-1].handled_exception() if run.frames and kept else None
        if handled is not None:  # Note [An error the computation raises while the program handled one]
            kept[-1] = dataclasses.replace(kept[-1], handling=exception_template(handled))
        return tuple(kept) or None


def _reaches(path: Path, args: tuple, kwargs: dict, value: Any) -> bool:
    """Whether ``path`` leads to ``value`` in the caller's state as it is now."""
    try:
        return path.get(args, kwargs) is value
    except Exception:  # noqa: BLE001 - a path that no longer resolves reaches nothing
        return False


_ITEM_WRITES = frozenset({"setitem", "setitem_at", "delitem", "contents", "extend", "add"})  # item writes


def _grad_as_proxy(effect: Effect, values: Any) -> Effect:
    """A ``.grad`` a backward of the pass set holds the gradient's shadow (a FakeTensor, or a subclass
    instance over fake inner tensors): the effect stores the computed gradient, its proxy."""
    if effect.kind != "grad" or not isinstance(effect.value, torch.Tensor) or isinstance(effect.value, Proxy):
        return effect
    known = values.known(effect.value)
    if known is not None:
        return dataclasses.replace(effect, value=known)
    if isinstance(effect.value, FakeTensor):
        return dataclasses.replace(effect, value=values.proxy_for(effect.value))
    return effect


def _plain_ids(effect: Effect) -> Effect:
    """An id stored into the caller's objects is a value: pinned, stored as an ``int``."""
    key, value = pin_tensor_ids(effect.key), pin_tensor_ids(effect.value)
    if key is effect.key and value is effect.value:
        return effect
    return dataclasses.replace(effect, key=key, value=value)


def _subclass_in(*trees: Any) -> bool:
    return tree_has(trees, SubclassTensorProxy)


def parameter_names(fn: Any, count: int) -> list[str]:
    """The names of ``fn``'s first ``count`` positional parameters (``args_0``... past them)."""
    try:
        params = list(
            inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters.values()
        )
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")
    return [names[i] if i < len(names) else f"{var}_{i - len(names)}" for i in range(count)]


def _creates_tensors(trace: Trace) -> bool:
    return any(not tree_has((b.args, b.kwargs), Proxy) for b in trace.bound_symbols)
