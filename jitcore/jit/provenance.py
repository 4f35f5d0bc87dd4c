"""Provenance: where each value the traced program read came from, and the guards that pin it.

Values enter a trace in three ways — as the call's arguments, as globals / closure cells read by
interpreted code, and as attributes or items read from objects that entered earlier. The
Provenance of one tracing pass binds each such value: tensors become input proxies of the
computation (read again on every call through their path), so are numbers the user declared dynamic
(guarded by type, and by value once the program needs it), other literal values are guarded by type
and value, containers by type and length/keys, other objects by identity; objects are remembered by id
so that what is read from them later gets a path too. How a tensor is bound (plain, subclass, NumPy
array) is its base class's, ``TensorBinding`` (jit/tensor_binding.py).

Invariants:
- every value the trace relied on that can change between calls is either a computation input or
  guarded; values created while tracing need no guard (they are recomputed from guarded ones);
- a tensor object gets one proxy per pass, however many paths reach it;
- provenance holds strong references only while the pass runs.
"""

from __future__ import annotations

import array
import collections
import copy
import dataclasses
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from jitcore.jit.appends import bind_defaults
from jitcore.jit.default_factories import bind_default_factory
from jitcore.jit.held_counters import HeldCounters
from jitcore.jit.state_kinds import (
    MAX_ELEMENTS,
    all_literal,
    is_library_class,
    is_module_registry,
    is_plain_instance,
    is_structured,
    items_read_natively,
    tensors_read_natively,
)
from jitcore.jit.state_names import qualified_name
from jitcore.jit.stored_keys import remember_stored_keys
from jitcore.jit.tensor_binding import Reached, TensorBinding
from jitcore.jit.type_lookups import TypeLookups
from jitcore.langctx.shadows import TensorValues
from jitcore.numpy import is_numpy_value
from jitcore.prologue import Guard, Path, PrologueBuilder, Root, TensorSpec
from jitcore.prologue.guards import Predicate, freeze_contents, is_literal_value
from jitcore.proxies import TensorProxy
from jitcore.proxies.generator import GeneratorProxy
from jitcore.proxies.number import NumberProxy, formula, operations

__all__ = ["Provenance"]

_CONTAINERS = (list, dict, set, tuple, collections.deque)
# Predicates are recomputed by every call's prologue: past these a branch specializes its numbers.
_MAX_PREDICATES = 64
_MAX_PREDICATE_OPS = 16


class Provenance(TensorBinding, HeldCounters, TypeLookups):
    """Binds entering values to proxies or guards, for one tracing pass."""

    def __init__(self, values: TensorValues, prologue: PrologueBuilder) -> None:
        self.values = values
        self.prologue = prologue
        self.inputs: list[tuple[Path, TensorProxy, torch.Tensor]] = []
        self.on_remember: Callable[[Any, Path], None] | None = None  # the pass's state snapshots
        # a reached container as the call started with it, before the program's own changes
        # (StateSnapshots.first_state): what its guards are about
        self.first_state: Callable[[Any], Any] = lambda obj: obj
        self.counters: frozenset[Path] = frozenset()  # numbers of state bound as dynamic numbers
        # counters a container walk left unguarded, with their value (Note [Counters read natively])
        self._walked_counters: dict[Path, Any] = {}
        # counters a walk bound and put in place: (container, key, proxy, value) (Note [Counters bound
        # where they are held]); ``snapshot_taken`` says whether the pass snapshotted a container
        self._in_place: list[tuple[Any, Any, NumberProxy, Any]] = []
        self.snapshot_taken: Callable[[Any], bool] = lambda obj: False
        self.stored_by_program: Callable[[Any, Any], bool] = lambda obj, key: False
        self.native_reads: set[Path] = set()  # counters the program also read past bind_state
        self.keyed: set[int] = set()  # dicts bound by their keys only (``bind_keyed_dict``)

        self.argument_copies: list[tuple[Any, Path]] = []  # containers the program sees for the caller's
        self.real_values: dict[
            int, torch.Tensor
        ] = {}  # id(proxy) -> the tensor it stands for (the probe's inputs)
        # every object the pass reached or bound by identity: remembered objects, tensors, generators,
        # NumPy arrays (Note [One map of reached objects])
        self._reached: dict[int, Reached] = {}
        # objects guarded by their class only (Note [Objects the caller passes])
        self._loose: dict[int, Path] = {}
        self._loose_types: dict[Path, type] = {}
        # argument containers being bound, and the lists, dicts and dataclasses bound (Note [Cyclic
        # arguments]): id -> (path, what the program sees)
        self._binding: dict[int, tuple[Path, Any]] = {}
        # every list, dict, set and deque reached: id -> (type, first path) (Note [Containers reached twice])
        self._mutable: dict[int, tuple[type, Path]] = {}
        self._reached_again: list[tuple[type, Path, Path]] = []  # (type, path, the first path)
        self._appended: dict[int, Path] = {}  # list arguments bound as only appended to: id -> path
        self.appended_read: set[Path] = set()  # those of them the program reached another way as well
        self._container_paths: dict[int, Path] = {}  # state containers guarded element by element
        self._guarded: set[tuple] = set()
        self._type_lookups: dict[type, set[str] | None] = {}  # Note [A special method is looked up ...]
        # (id(obj), name) -> the value a hook's generic read returned (Note [A value a Python __getattribute__
        # read from the instance dict], jit/type_lookups.py)
        self._read_through_hooks: dict[tuple[int, str], Any] = {}
        # (id(obj), name) of the hooks' generic reads guarded absent (Note [A class value or an absence a
        # Python __getattribute__ read], jit/type_lookups.py)
        self._missing_through_hooks: set[tuple[int, str]] = set()
        # tensor-subclass inputs with the path each was bound at, inner ones before the ones holding them
        self.subclass_inputs: list[tuple[TensorProxy, Path]] = []
        self.number_inputs: list[tuple[Path, NumberProxy]] = []  # dynamic numbers, in binding order
        # torch.Generator objects the call passes (Note [Generators the caller passes]), in binding order
        self.generator_inputs: list[tuple[Path, GeneratorProxy]] = []
        # which dimensions of a tensor input are symbolic (jitcore/jit/shapes.py); None: all static
        self.dynamic_dims: Callable[[Path, torch.Tensor], frozenset[int]] | None = None
        # and which of its strides (Note [Strides seen to change] in jitcore/jit/shapes.py)
        self.dynamic_strides: Callable[[Path, torch.Tensor], frozenset[int]] | None = None
        self.symbolic_subclasses = False  # Note [Subclass inputs that follow an inner tensor]
        self.symbolic_subclass_inputs = 0  # how many were bound with symbolic sizes
        self._static_only = 0  # > 0 while a subclass's inner tensors are bound: they keep static shapes
        # whether a composite runs natively now (set by the pass: Note [Tensors a native composite makes])
        self.natively: Callable[[torch.Tensor], bool] = lambda _tensor: False
        self._ragged: dict[Path, frozenset[int]] = {}  # but an NJT's ragged sizes (jit/ragged.py)
        self.bound_layouts: dict[int, tuple] = {}  # id(input proxy) -> its shadow's sizes, strides, offset
        # when bound, in a pass with symbolic sizes (an in-place op may change the shadow later)
        self._layouts_of: set[int] = set()  # inner tensors whose strides are their wrapper's (of_subclass)
        self._finished = False
        self._predicates = 0  # predicate guards made (Note [Predicate guards])

    def input_of(self, proxy: TensorProxy) -> tuple[Path, torch.Tensor] | None:
        """The path and the real tensor of an input proxy (None: the program made it)."""
        tensor = self.real_values.get(id(proxy))
        if tensor is None:
            return None
        return self._reached[id(tensor)].bound_at, tensor

    def enter_argument(self, value: Any, path: Path, rebuilt: Any) -> None:
        """Note that the container argument ``value`` at ``path`` is the program's ``rebuilt`` (bound by
        jit/appends.py's narrow rules): the same object passed again is alias-guarded and is that copy."""
        self._binding[id(value)] = (path, rebuilt)

    def is_argument_container(self, value: Any) -> bool:
        """Whether ``value`` is a container the call passes (bound, or only appended to)."""
        return id(value) in self._binding or id(value) in self._appended

    def path_of(self, obj: Any) -> Path | None:
        """The path an object was reached through, when it entered the trace."""
        reached = self._reached.get(id(obj))
        return None if reached is None else reached.path

    def pins_value(self, path: Path) -> bool:
        """Whether the value at ``path`` is guarded (on its own, or by its container's contents)."""
        if (path, "value") in self._guarded:
            return True
        return bool(path.steps) and (Path(path.root, path.steps[:-1]), "contents") in self._guarded

    def guards_elements(self, path: Path, first: Any) -> bool:
        """Whether the guards of the container at ``path`` fix its elements (``first``: as the call
        started with them): its keys, its contents, or its length when it was empty."""
        guarded = self._guarded
        return (path, "keys") in guarded or (path, "contents") in guarded or (
            (path, "len") in guarded and len(first) == 0
        )

    def remembered(self) -> list[Any]:
        """The objects of the caller's and of persistent state the program reached (while it runs)."""
        return [r.obj for r in self._reached.values() if not issubclass(type(r.obj), torch.Tensor)]

    def remember(self, obj: Any, path: Path) -> None:
        reached = self._reached.get(id(obj))
        if reached is None:
            reached = self._reached[id(obj)] = Reached(obj)
        if reached.path is None:
            reached.path = path
            if self.on_remember is not None:
                self.on_remember(obj, path)

    # Note [One absence per name]
    # An ``absent`` guard tests one name of a namespace (a module's globals, a class's or an instance's
    # ``__dict__``), so it is kept per name, as ``member`` is: kept per path, only the first builtin a
    # function read was guarded (``len`` of ``x * len(l) + abs(-3)``), and a global ``abs`` the caller
    # defined after the first call was not seen: the cached call gave the builtin's answer, eager the
    # global's.
    # Note [One hasattr guard per name]
    # A ``hasattr`` guard tests one name of an object, and was kept per path: only the first name the
    # program tested on an object was guarded. ``hasattr(o, "a")`` then ``hasattr(o, "b")``, both False:
    # after the caller set ``o.b`` the cached call still took the branch of its absence (eager 6, jit 2:
    # /tmp/spd59-probes/two_hasattr.py; transformers' ``getattr(config, "sliding_window", None)`` and
    # eight other absences of a Llama config were unguarded). It is kept per name, with the answer of
    # the pass's first test of that name (a later one may see the program's own ``setattr``).
    def guard(self, path: Path, kind: str, expected: Any, *, per_expected: bool = False) -> None:
        # The first read of a path is what the call started with; a later read of the same path in
        # the same pass may see the program's own mutation (side effects happen while tracing only).
        # A kind that tests one thing about the value (``member``, ``absent``) keeps one guard per thing
        # tested (``per_expected``). An ``identity`` guard's value is kept by its id: the object may not
        # hash (a set an lru-cached function returned: jit/lru_caches.py), and the guard keeps it alive.
        if kind == "alias" and expected == path:
            return  # reached twice by one path (``config.x`` read through ``__dict__``): always itself
        if kind == "hasattr":  # one per name, the first read's answer (Note [One hasattr guard per name])
            key = (path, kind, expected[0])
        elif per_expected:
            key = (path, kind, id(expected) if kind == "identity" else expected)
        else:
            key = (path, kind)
        if key not in self._guarded:
            self._guarded.add(key)
            self.prologue.add_guard(Guard(path, kind, expected))

    # --- arguments ---------------------------------------------------------------------------------
    def bind_argument(self, value: Any, path: Path, name: str) -> Any:
        """Bind an argument (any pytree of tensors, numbers, strings, ...); returns it with proxies.

        A container reached again while it is being bound (``l.append(l)``) is guarded as the same
        object as where it was first reached (Note [Cyclic arguments])."""
        if issubclass(type(value), torch.Tensor):
            return self._tensor(value, path, name)
        t = type(value)
        structured = t in (tuple, list, dict, collections.OrderedDict) or (
            issubclass(t, tuple) and hasattr(t, "_fields")) or (
            dataclasses.is_dataclass(t) and not issubclass(t, type))
        if not structured:
            return self.bind_state(value, path, name)
        if t in (list, dict, collections.OrderedDict) and self.reached_as_state(value):
            # Note [An argument reached as state first]
            self.guard(path, "alias", self._mutable[id(value)][1])
            return value
        entered = self._binding.get(id(value))
        if entered is not None:
            first_path, rebuilt = entered
            self.guard(path, "alias", first_path)
            if rebuilt is None:  # a tuple: the caller's, its items read as state through the first path
                self.remember(value, first_path)
                return value
            return rebuilt
        self._binding[id(value)] = (path, None)
        try:
            return self._bind_structure(value, path, name)
        finally:
            if self._binding[id(value)][1] is None:  # a tuple (or namedtuple): immutable, bound per path
                del self._binding[id(value)]

    def reached_as_state(self, value: Any) -> bool:
        """Whether the container ``value``, bound now as an argument, was reached as state earlier in
        the pass, the program seeing the object itself there (Note [An argument reached as state first])."""
        key = id(value)
        return key in self._mutable and key not in self._binding and key not in self._appended

    # Note [An argument reached as state first]
    # Binding an argument can reach state: a subclass input's own list (``RedispatchTensor``'s
    # ``call_log``, Note [A subclass input's own containers], jit/subclass_inputs.py) is bound as the
    # caller's object at ``args[0].call_log``. The same list passed as a later argument was bound as a
    # copy of the program's, so what the class's code appended to one was not in the other: ``(x * 3).sum();
    # len(log)`` gave 0 where eager gives 2 (a wrong answer). Such an argument is the object the program
    # already sees, guarded as the same object as at its first path (``alias``); its writes are effects of
    # that state (jit/effects.py), its contents guarded there. The other order is Note [A container of
    # state the call passes too], jit/state_reads.py.

    # Note [Cyclic arguments]
    # A list or dict that contains itself (directly or through other containers) would be bound
    # forever. While a container is being bound, ``_binding`` maps its id to its path and to the
    # container the program will see (lists, dicts and dataclass copies are made first and filled
    # after, so a cycle closes on the rebuilt object itself). Reaching it again adds an ``alias``
    # guard: on later calls the value at that path must be the very object at the first path, whose
    # contents are guarded there. A tuple cannot be made before its elements: a cycle through one
    # leaves the program the caller's tuple at the inner path (read through it, its items are state).
    # A list, dict or dataclass stays in ``_binding`` once bound: passed twice (``f(l, l)``) or also
    # read from state (a global the call passes), the program sees one copy, as eagerly one object.
    def _bind_structure(self, value: Any, path: Path, name: str) -> Any:
        t = type(value)
        if t is tuple or t is list:
            self.guard(path, "type", t)
            self.guard(path, "len", len(value))
            if t is list:
                self.reach_container(value, path)
            if t is tuple:
                return tuple(self.bind_argument(v, path.index(i), f"{name}_{i}") for i, v in enumerate(value))
            out: list = []
            self._binding[id(value)] = (path, out)
            out.extend(self.bind_argument(v, path.index(i), f"{name}_{i}") for i, v in enumerate(value))
            self.argument_copies.append((out, path))
            return out
        if t is dict or t is collections.OrderedDict:  # as a dict (by class, ``items()`` in C was captured)
            self.guard(path, "type", t)
            self.guard(path, "keys", tuple(value))
            self.reach_container(value, path)
            bound: dict = t()
            self._binding[id(value)] = (path, bound)
            for k, v in value.items():
                bound[k] = self.bind_argument(v, path.key(k), f"{name}_{k}")
            self.argument_copies.append((bound, path))
            return bound
        self.guard(path, "type", t)
        if isinstance(value, tuple):  # namedtuple
            return t(*(self.bind_argument(getattr(value, f), path.attr(f), f"{name}_{f}") for f in t._fields))
        clone = copy.copy(value)  # a dataclass instance
        self._binding[id(value)] = (path, clone)
        fields = {}
        for f in dataclasses.fields(value):
            fields[f.name] = self.bind_argument(getattr(value, f.name), path.attr(f.name), f"{name}_{f.name}")
            object.__setattr__(clone, f.name, fields[f.name])
        if isinstance(value, dict):  # Note [A dataclass that is a dict]
            self.guard(path, "keys", tuple(value))
            for k, v in dict.items(value):
                same = type(k) is str and k in fields and getattr(value, k) is v
                bound_item = fields[k] if same else self.bind_argument(v, path.key(k), f"{name}_{k}")
                dict.__setitem__(clone, k, bound_item)
        self.argument_copies.append((clone, path))
        return clone

    # Note [A dataclass that is a dict]: ``transformers``' ModelOutput is a dataclass and an OrderedDict
    # of its fields that are not None, read as ``out[0]``, ``out["logits"]``: its items are bound too.

    def bind_dynamic_number(self, value: int | float, path: Path, name: str) -> NumberProxy:
        """A number argument declared dynamic: an input of the computation, guarded by type only
        until the program needs its value (then by value too: ``NumberProxy.specialize``). A path
        read again holding the same number (a counter read twice, ``group['lr']`` per parameter) is
        the same input."""
        for bound_path, bound in self.number_inputs:
            if bound_path == path and type(bound.value) is type(value) and bound.value is value:
                return bound
        self.guard(path, "type", type(value))

        def pin() -> None:
            if not self._finished:  # a proxy that escaped into user state is its traced value
                self.guard(path, "value", value)

        proxy = NumberProxy(self.values.names.claim(name), value, on_specialize=pin)
        proxy.on_predicate = self._guard_predicate
        self.number_inputs.append((path, proxy))
        return proxy

    def _guard_predicate(self, number: NumberProxy, outcome: bool) -> bool:
        """Guard the truth of ``number`` as a predicate over the dynamic-number inputs it is computed
        from (Note [Predicate guards] in jitcore/proxies/number.py); False where it cannot be (an
        input of another kind, or the pass is over)."""
        paths = {id(proxy): path for path, proxy in self.number_inputs}
        if self._finished or any(id(root) not in paths for root in number.roots):
            return False
        if self._predicates >= _MAX_PREDICATES or operations(number, _MAX_PREDICATE_OPS) > _MAX_PREDICATE_OPS:
            return False  # cheaper as one value guard (Note [Predicate guards])
        compute, text = formula(number)
        root_paths = tuple(paths[id(root)] for root in number.roots)
        predicate = Predicate(compute, root_paths, outcome, text([p.describe() for p in root_paths]))
        key = (root_paths[0], "predicate", id(number), outcome)  # the number is held by its record
        if key not in self._guarded:
            self._guarded.add(key)
            self._predicates += 1
            self.prologue.add_guard(Guard(root_paths[0], "predicate", predicate))
        return True

    def specialized_numbers(self) -> set[int]:
        """``id`` of each dynamic-number input the program specialized (guarded by value)."""
        return {id(proxy) for path, proxy in self.number_inputs if (path, "value") in self._guarded}

    # --- state: globals, cells, attributes, items ----------------------------------------------------
    def bind_state(self, value: Any, path: Path, name: str = "s") -> Any:
        """Bind a value read from persistent state; returns what the program should see."""
        if issubclass(type(value), (TensorProxy, NumberProxy)):
            return value  # the program's own value, stored there earlier in this pass
        if issubclass(type(value), torch.Tensor):
            return self._tensor(value, path, name)
        if issubclass(type(value), torch.Generator):
            return self._generator(value, path, name)
        if type(value) is collections.deque:  # how many items it keeps decides what appending does
            self.guard(path.attr("maxlen"), "value", value.maxlen)
        if issubclass(type(value), (list, dict, set, collections.deque)):
            bound = self._binding.get(id(value))
            if bound is not None and bound[1] is not None:  # the caller passed it: the program's copy
                self.guard(path, "alias", bound[0])
                return bound[1]
            self.reach_container(value, path)
        if is_numpy_value(value):
            return self._numpy_value(value, path, name)
        if type(value) in (int, float) and path in self.counters:  # read and written back: jit/effects.py
            return self.bind_dynamic_number(value, path, name)
        if self._tuple_of_counters(value, path):
            return tuple(self.bind_state(item, path.index(i), name) for i, item in enumerate(value))
        if is_literal_value(value):
            self.guard(path, "value", value)
            return value
        t = type(value)
        first = self.first_state(value) if t in _CONTAINERS or issubclass(t, (list, dict, set)) else value
        if t in _CONTAINERS and all_literal(first) and not (self.counters and self._holds_counter(path)):
            self.guard(path, "type", t)
            self.guard(path, "contents", freeze_contents(first))
            if self.on_remember is not None:
                self.on_remember(value, path)  # the program may still write into it
            return value
        if (
            issubclass(type(value), (types.MethodType, types.BuiltinMethodType))
            and self.path_of(value.__self__) is not None
        ):
            return value  # a bound method is made anew on every read; its function is the class's
        if is_structured(value):
            self._container(value, path)
            return value
        if path.root.kind in ("args", "kwargs") and is_plain_instance(value):
            self._bind_loose(value, path)
            return value
        self.pin(value)
        self.guard(path, "identity", value)
        if issubclass(type(value), (list, dict, set, collections.deque)):
            self.guard(path, "len", len(first))
        self._remember_object(value, path)
        return value

    # Note [Functions a dict of state holds]
    # A module's hook dicts (``m._forward_hooks``, torch's ``_global_forward_hooks``) are OrderedDicts,
    # guarded by identity and length; ``Module._call_impl`` takes the hooks out of them past the hooks
    # of the pass (``(*d.items(),)`` unpacks in C). A hook so reached had no path: its closure's cells
    # counted as made while tracing (jit/state_reads.py ``_load_deref``), so ``seen.append(...)`` in a
    # ``register_forward_hook(lambda m, i, o: seen.append(...))`` ran while tracing only, and every
    # cached call lost it (and a tensor stored there was the pass's proxy); a hook replaced by another
    # with the dict's length unchanged was never noticed. The functions (and other callables) such a
    # dict holds are now guarded by identity, under the dict's keys, and remembered at their item's
    # path, so what they read and write through their cells or ``__self__`` is state as anywhere else.
    def _functions_held(self, first: dict, path: Path) -> None:
        held = [(key, item) for key, item in first.items()
                if callable(item) and not isinstance(item, type) and type(key) in (int, str)]
        if not held or len(first) > MAX_ELEMENTS:
            return
        self.guard(path, "keys", tuple(first))
        for key, item in held:
            self.pin(item)
            self.guard(path.key(key), "identity", item)
            self._remember_object(item, path.key(key))

    # Note [Generators the caller passes]
    # Eagerly a draw with ``generator=g`` uses and advances g's state. The generator is an input of
    # the computation (after the numbers), guarded by type and device, not identity: a generator made
    # anew per call (``f(x, torch.Generator().manual_seed(i))``) hits the cache, and each call's draws
    # come from the generator it passes. The same generator reached twice is one input (alias guard).
    def _generator(self, generator: torch.Generator, path: Path, name: str) -> GeneratorProxy:
        found = self._reached.get(id(generator))
        if found is not None and found.bound is not None:
            if found.bound_at != path:
                self.guard(path, "alias", found.bound_at)
            return found.bound
        self.guard(path, "type", torch.Generator)
        self.guard(path.attr("device"), "value", generator.device)
        proxy = GeneratorProxy(self.values.names.claim(qualified_name(path) or name), generator.device)
        self._bound(generator, proxy, path)
        self.generator_inputs.append((path, proxy))
        self.real_values[id(proxy)] = generator  # the probe draws from a copy of it (jit/probe.py)
        return proxy

    def bind_subscripted_dict(self, value: dict, path: Path, key: Any) -> dict:
        """A dict of state this read only subscripts with the constant ``key`` (jit/appends.py,
        ``subscripted_by``): guarded by its type and whether it holds ``key`` as the call started,
        not item by item; the item is bound on its own when it is read."""
        self.guard(path, "type", type(value))
        self.reach_container(value, path)
        self.guard(path, "member", (key, key in self.first_state(value)), per_expected=True)
        if type(value) is collections.defaultdict:  # what a missing key reads
            bind_default_factory(self, value.default_factory, path.attr("default_factory"))
        self.remember(value, path)
        return value

    def bind_keyed_dict(self, value: dict, path: Path) -> dict:
        """A dict of state this read only subscripts, or asks ``get``, at a key the program computes
        (Note [A dict read at a computed key], jit/appends.py): guarded by its type and keys as the
        call started, not item by item; the item is bound on its own when it is read."""
        self.guard(path, "type", type(value))
        self.reach_container(value, path)
        self.guard(path, "keys", tuple(self.first_state(value)))
        if type(value) is collections.defaultdict:  # what a missing key reads
            bind_default_factory(self, value.default_factory, path.attr("default_factory"))
        self.remember(value, path)
        self.keyed.add(id(value))
        return value

    # Note [Objects the caller passes]
    # An instance of a Python class that the call passes (``model(ids, past_key_values=cache)``, or
    # reached from an argument: ``cache.layers[0]``) is guarded by its class, not by its identity:
    # every attribute the program reads from it is bound through its path as it is read (values,
    # tensors' metadata, absent attributes), so another object of the class with the same reads
    # is just as good, and a cache made anew per call does not make every call a new entry. What
    # depends on the identity itself pins it (an identity guard): the object reached again through
    # another path (``a is b``, an argument that is also held by state), ``id(obj)``, ``hash(obj)``,
    # the object as a dict key or in a dict/set method call (``pin``, from jit/interpretation.py).
    def _bind_loose(self, value: Any, path: Path) -> None:
        first = self.path_of(value)
        if first is None:
            self.guard(path, "type", type(value))
            self.remember(value, path)
            self._remember_items(value, path, loose=True)
            self._loose[id(value)] = path
            self._loose_types[path] = type(value)
        elif first != path and not first.same_place(path, self._loose_types.get):
            # reached again elsewhere (not just ``layers[0]`` by iteration and by subscript, or
            # ``obj.a`` as ``obj.__dict__['a']``: Path.as_attributes): the same object on every call
            self.pin(value)
            self.guard(path, "identity", value)

    def _distinct_loose_objects(self) -> None:
        """Each object guarded by its class only is guarded to be none of the other reached objects
        of its class, as when traced (``box is DEFAULT`` was False: it stays False on a hit)."""
        if not self._loose:
            return
        by_type: dict[type, list[Path]] = {}
        for reached in self._reached.values():
            if reached.path is not None and not issubclass(type(reached.obj), torch.Tensor):
                by_type.setdefault(type(reached.obj), []).append(reached.path)
        for path in self._loose.values():
            group = by_type.get(self._loose_types[path], ())
            if len(group) > 1:
                self.guard(group[0], "distinct", tuple(group))
                by_type.pop(self._loose_types[path])

    def pin(self, obj: Any) -> None:
        """Guard an object the call passes by its identity from now on (Note [Objects the caller passes])."""
        path = self._loose.pop(id(obj), None)
        if path is not None:
            self.guard(path, "identity", obj)

    def is_loose(self, obj: Any) -> bool:
        return bool(self._loose) and id(obj) in self._loose

    def has_loose(self) -> bool:
        return bool(self._loose)

    def bind_appended_list(self, value: list, path: Path) -> list:
        """A list this read only looks ``append``/``extend`` up on (``losses.append(loss.item())``):
        its type is guarded, not its contents, so appending does not make every call a new entry;
        the appends are replayed onto the list each call finds (jit/effects.py's ``extend``). A
        ``bytearray`` or ``array.array`` so read likewise, an array's typecode guarded too (what it
        accepts; Note [A buffer only appended to], jit/appends.py)."""
        self.guard(path, "type", type(value))
        if type(value) is array.array:
            self.guard(path.attr("typecode"), "value", value.typecode)
        self.reach_container(value, path)
        self.remember(value, path)
        return value

    def bind_appended_argument(self, value: list | dict, path: Path) -> list | dict:
        """A list argument the function only appends to (``log.append(float(loss))``, proved by
        jitcore/jit/appends.py): its type is guarded, not its contents; the program appends to a
        list of its own, and the appends are replayed onto the caller's list on every call. The same
        list reached another way (passed twice, or a global) is read after all: ``appended_read``
        asks for a pass that binds it whole (Note [Containers reached twice])."""
        bound = self._binding.get(id(value))
        if bound is not None:
            self.guard(path, "alias", bound[0])
            return bound[1]
        self.guard(path, "type", type(value))  # a dict only stored into too (Note [A dict argument only
        self.reach_container(value, path)  # stored into], jit/appends.py)
        if type(value) is array.array:  # Note [A buffer argument only appended to], jit/measured_lists.py
            self.guard(path.attr("typecode"), "value", value.typecode)
        own = array.array(value.typecode) if type(value) is array.array else type(value)()
        self._appended[id(value)] = path
        self.argument_copies.append((own, path))
        return own

    def _remember_object(self, value: Any, path: Path) -> None:
        """Remember an object guarded by identity; a function's code and defaults (read by every
        call of it without hooks) and a partial's contents are pinned as well."""
        first = self.path_of(value) is None
        self.remember(value, path)
        if not first:
            self._bind_items_read_natively(value, path)  # reached first by a narrowed read (``od["k"]``,
            return  # ``buf.extend(...)``: Note [A buffer only appended to])
        self._remember_items(value, path)
        if issubclass(type(value), types.FunctionType):
            self._remember_cells(value)
            self.guard(path.attr("__code__"), "identity", value.__code__)
            bind_defaults(self, value, path)  # Note [A default list of a function of state], appends.py
        elif issubclass(type(value), types.MethodType):  # its object's state is read through it
            self.remember(value.__self__, path.attr("__self__"))
        elif type(value) is functools.partial:
            self.bind_state(value.func, path.attr("func"), "func")
            self.bind_state(value.args, path.attr("args"), "args")
            self.bind_state(value.keywords, path.attr("keywords"), "keywords")

    def _remember_items(self, value: Any, path: Path, *, loose: bool = False) -> None:
        """Note [Items C reads natively] and Note [Tensors in dicts read natively] (jit/state_kinds.py); a
        ``loose`` container's keys or length
        are guarded in any case (a module argument's hook dicts, tested for emptiness in C)."""
        if self._bind_items_read_natively(value, path):
            return
        kind = type(value)  # not isinstance: it reads ``__class__``, which a class may compute
        container = issubclass(kind, (list, dict, set, collections.deque))
        first = self.first_state(value) if container else value
        items = tensors_read_natively(value, first)
        if items or loose and container:
            self.guard(path, *(("keys", tuple(first)) if issubclass(kind, dict) else ("len", len(first))))
            for key, tensor in items:
                self.remember(tensor, path.key(key))
        if issubclass(kind, dict):
            self._functions_held(first, path)

    def _bind_items_read_natively(self, value: Any, path: Path) -> bool:
        """Guard the items of a container C reads past the hooks (Note [Items C reads natively], once);
        False for other values."""
        natively = items_read_natively(value)
        if natively is None or is_module_registry(path):
            return False
        items, attribute = natively
        if id(items) not in self._container_paths:
            self._container(items, path if attribute is None else path.attr(attribute))
        return True

    def remember_function(self, fn: types.FunctionType, path: Path) -> None:
        """The jitted function itself: its code is pinned (its defaults are bound per call)."""
        self.remember(fn, path)
        self._remember_cells(fn)
        self.guard(path.attr("__code__"), "identity", fn.__code__)

    def _remember_cells(self, fn: types.FunctionType) -> None:
        """A persistent function's closure cells: functions made while tracing (comprehensions,
        lambdas, inner functions) share them, and what they read from them must be guarded too."""
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            self.remember(cell, Path(Root("bound", f"{fn.__qualname__}.<cell {name}>", cell)))

    def bind_instance_dict(self, obj: Any, value: Any, path: Path, *, by_torch: bool = False,
                           key: Any = None) -> None:
        """``obj.__dict__`` (or ``vars(obj)``) read by the program. A user class's: guarded item by item
        (``.get``, ``in``, iteration read it unhooked), or only by the constant ``key`` a lookup reads
        (jit/appends.py); torch's: remembered, so items read get paths; an ``nn.Module``'s read by torch
        (``by_torch``: items by subscript): its keys (a later attribute would shadow ``__getattr__``'s)."""
        if type(value) is not dict or is_library_class(type(obj)) or isinstance(obj, types.ModuleType):
            self.remember(value, path)
        elif by_torch and isinstance(obj, torch.nn.Module):
            self.guard(path, "type", dict)
            self.guard(path, "keys", tuple(value))
            self.remember(value, path)
        elif key is not None:
            self.bind_subscripted_dict(value, path, key)
        else:
            self.bind_state(value, path)

    def bind_class_attribute(self, obj: Any, path: Path, name: str) -> None:
        """``obj.name`` comes from a class (a method, property, classmethod): pin the class's entry
        and, for an instance with a ``__dict__``, that no instance attribute shadows it. Classes of
        torch, jitcore and builtins are taken as constant."""
        if isinstance(obj, types.ModuleType):
            return
        mro = obj.__mro__ if isinstance(obj, type) else type(obj).__mro__
        klass = next((k for k in mro if name in vars(k)), None)
        if klass is None or is_library_class(klass):
            return
        entry = Path(Root("bound", klass.__qualname__, klass)).attr("__dict__").key(name)
        self.bind_state(vars(klass)[name], entry, name)
        for earlier in mro[: mro.index(klass)]:  # a subclass that later defines it would win
            if not is_library_class(earlier):
                namespace = Path(Root("bound", earlier.__qualname__, earlier)).attr("__dict__")
                self.guard(namespace, "absent", name, per_expected=True)  # Note [One absence per name]
        if not isinstance(obj, type) and type(getattr(obj, "__dict__", None)) is dict:
            self.guard(path.attr("__dict__"), "absent", name, per_expected=True)

    def _container(self, value: Any, path: Path) -> None:
        """A list/tuple/dict of state (``Module._modules``, ``_parameters``): guard its shape and
        elements, and give each element a path, since iteration reads them without hooks."""
        self._container_paths[id(value)] = path
        self.reach_container(value, path)
        self.guard(path, "type", type(value))
        first = self.first_state(value)  # the guards are about the call's container, not the program's
        if isinstance(value, (dict, types.MappingProxyType)):  # (a read-only view of a dict: keyed too)
            self.guard(path, "keys", tuple(first))
            items = [(k, path.key(k), v) for k, v in first.items()]
            if type(value) is collections.defaultdict:  # what a missing key reads
                bind_default_factory(self, value.default_factory, path.attr("default_factory"))
        else:
            self.guard(path, "len", len(first))
            items = [(i, path.index(i), v) for i, v in enumerate(first)]
        self.remember(value, path)
        for key, item_path, item in items:
            if isinstance(item, (NumberProxy, TensorProxy)):
                continue  # the program's own value, stored there earlier in this pass (nn.LSTM's weights)
            if isinstance(item, torch.Tensor):
                self.remember(item, item_path)  # becomes an input only if the program uses it
            elif is_literal_value(item):
                if not self._bind_counter_in_place(value, key, item, item_path):
                    self._walked_literal(item, item_path)
            elif id(item) in self._container_paths:  # reached again (a cycle, or shared): the same object
                self.guard(item_path, "alias", self._container_paths[id(item)])
            elif is_structured(item):
                self._container(item, item_path)
            elif item_path.root.kind in ("args", "kwargs") and is_plain_instance(item):
                self._bind_loose(item, item_path)
            elif item_path.root.kind in ("args", "kwargs") and type(item) is weakref.ref and \
                    self.is_loose(item()):  # a ``_parent`` weakref: guarded by what it refers to
                self._bind_loose(item, item_path)
                self.guard(item_path.call(), "alias", self.path_of(item()))
            else:
                self.pin(item)
                self.guard(item_path, "identity", item)
                self._remember_object(item, item_path)

    # Note [Containers reached twice]
    # Guards read a container's contents as the call starts; the program's writes into a list, dict,
    # set or deque are replayed after the computation (jitcore/jit/effects.py). Both are per path, so what one
    # path's write does to what another path reads depends on whether the two are the same object:
    # ``a.append(1); len(b)`` is 1 when ``a is b`` and 0 otherwise. So when the program wrote into a
    # container, the reached containers of its type are related as when traced: one reached again
    # through another path is guarded as the same object as at its first path (``alias``), the others
    # as different objects (``distinct``). Containers of a type the program did not write into are not
    # related: reading alone gives the same answers aliased or not. Argument containers are always
    # related (Note [Cyclic arguments]): the program sees one copy of a container passed twice. An
    # object's own ``__dict__`` and torch's registries in a module (``_modules``, ``_parameters``) are
    # not such containers: they alias another only after ``obj.__dict__ = d`` or ``m._modules = d``,
    # and relating them would make every module program that writes a dict check dozens of paths.
    # A list argument only appended to that is reached another way as well is read after all:
    # ``appended_read`` asks for a pass that binds it whole.
    def reach_container(self, value: list | dict | set, path: Path) -> None:
        """Record a list, dict, set or deque reached at ``path`` (Note [Containers reached twice])."""
        if is_module_registry(path):
            return
        remember_stored_keys(self, value, path)  # Note [The stored keys of a container of state]
        appended = self._appended.get(id(value)) if self._appended else None
        if appended is not None and appended != path:
            self.appended_read.add(appended)
        first = self._mutable.setdefault(id(value), (type(value), path))[1]
        if first != path and not (first.root == path.root and first.describe() == path.describe()):
            self._reached_again.append((type(value), path, first))

    def _keep_apart(self, written: frozenset[Path]) -> None:
        """Relate the containers of each type the program wrote into as when traced: a container
        reached again is the same object as at its first path, the others are different objects."""
        by_type: dict[type, list[Path]] = {}
        for t, path in self._mutable.values():
            by_type.setdefault(t, []).append(path)
        related = {t for t, paths in by_type.items() if not written.isdisjoint(paths)}
        for t, path, first in self._reached_again:
            if t in related:
                self.guard(path, "alias", first)
        for t in related:
            if len(by_type[t]) > 1:
                self.guard(by_type[t][0], "distinct", tuple(by_type[t]))

    def bound_tensor_guards(self) -> list[Guard]:
        """The guards ``finish`` would add for the tensor inputs bound so far, without their layouts: a
        stopped pass's, for its raising entry (Note [Raising entries], jit/raising_entries.py). The
        builder is left as it is."""
        guards = []
        for path, proxy, tensor in self.inputs:
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [Reading the caller's tensors]
                spec = TensorSpec.of(tensor, with_strides=False, with_offset=False,
                                     traced=self.bound_layouts.get(id(proxy)))
            guards.append(Guard(path, "tensor", spec))
        return guards

    def finish(self, *, with_strides: bool, written: frozenset[Path] = frozenset()) -> None:
        """Add the tensor guards (now that it is known whether strides were relied on: asked for by
        the program, ``with_strides``, or relied on by a recorded aten op, jitcore/langctx/layout.py),
        and keep the containers the program wrote into (``written``, their paths) apart from the others
        (Note [Containers reached twice])."""
        layout = self.values.layout
        for path, _proxy, tensor in self.inputs:
            whole = with_strides or id(_proxy) in self._layouts_of
            strides = whole or layout.relies_on(_proxy)
            offset = whole or layout.relies_on_offset(_proxy)  # Note [Strides apart from the storage offset]
            traced = self.bound_layouts.get(id(_proxy))
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001 - Note [Reading the caller's tensors]
                spec = TensorSpec.of(tensor, with_strides=strides, with_offset=offset, traced=traced)
                self.guard(path, "tensor", spec)
            self.prologue.add_input(path, _proxy.name)
        if len(self.inputs) > 1:  # traced as different tensors: an aliased call must not reuse it
            self.guard(self.inputs[0][0], "distinct", tuple(path for path, _p, _t in self.inputs))
        self._distinct_loose_objects()
        self._keep_apart(written)
        self._guard_counters_read_natively()
        for path, number in self.number_inputs:  # after the tensors, as in the computation's signature
            self.prologue.add_input(path, number.name)
        for path, generator in self.generator_inputs:  # then the generators
            self.prologue.add_input(path, generator.name)
        self._finished = True
        self.real_values.clear()
        self._reached.clear()
        self._container_paths.clear()
        self._mutable.clear()
        self.keyed.clear()
        self._reached_again.clear()
        self._binding.clear()
