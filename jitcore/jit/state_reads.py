"""The tracing pass's hooks for values read from persistent state: globals, closure cells,
attributes, subscripts and ``in`` tests (the interpreter's ``on_load_*`` and ``on_contains`` hooks).

A value the program reads from state the call did not make (the caller's objects, modules' globals,
persistent functions' cells) is bound by the pass's Provenance: a tensor becomes an input of the
computation, anything else is guarded by what the trace relied on (jit/provenance.py), with the
narrower rules of jit/appends.py for lists only appended to and dicts read at one key. What the pass
itself made or stored earlier, and the standard library's and torch's own bookkeeping, are taken as
they are.

Invariant: a hook returns the value the program sees (the value itself, or its proxy), and only adds
guards and inputs to the pass's prologue; it never changes the state it reads.
"""

from __future__ import annotations

import collections
import sys
import types
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from jitcore.interpreter import current_run
from jitcore.ir import Proxy
from jitcore.jit import appends
from jitcore.jit.appends import only_appended_to, subscripted_by
from jitcore.jit.caller_modes import WRAPPER_FILE
from jitcore.jit.code_kinds import (
    STDLIB_DIR,
    TORCH_DIR,
    is_global_hook_registry,
    is_imported_module,
    is_library_file,
    is_library_module,
    is_programs_class,
    is_stdlib_container_code,
    is_stored_attribute,
    module_name,
)
from jitcore.jit.effects import StateSnapshots
from jitcore.jit.held_tensors import NOT_ANSWERED, HeldTensors
from jitcore.jit.pending_keys import PendingKeys, only_added_to, pushed_onto
from jitcore.jit.provenance import Provenance
from jitcore.jit.state_kinds import is_library_class, is_module_registry, is_structured, items_read_natively
from jitcore.langctx import python as python_langctx
from jitcore.prologue import Path, Root
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy, ObjectProxy
from jitcore.proxies.tensor import protocol_method, torch_owns_name

__all__ = ["StateReads"]


_CONTAINERS = (list, dict, set, collections.defaultdict, collections.OrderedDict)


# Note [A container of state the call passes too]
# The program sees its own copy of a list or dict argument (Note [Cyclic arguments], jit/provenance.py),
# and the narrow reads of jit/appends.py (a list only appended to, a dict only stored into or read at a
# constant or computed key) handed it the caller's object when it reached the same container through
# state (``o.log`` with ``o.log is log``): ``o.log.append(1); len(log)`` gave 0 where eager gives 1, and
# ``o.d["n"] += 1; d["n"]`` the old count (torch's ``RedispatchTensor`` appends to the log the caller
# passes beside it). Such a read is now the argument's copy, guarded as the same object
# (``Provenance.bind_state``), before any narrow rule applies; a list argument only appended to is read
# after all (``appended_read``: a pass that binds it whole). The other order, an argument whose
# container the pass reached as state first (an attribute of a subclass input bound before it), is
# Note [An argument reached as state first] in jit/provenance.py.
# Note [A dict measured by len()]
# ``D.setdefault(n % 3, []).append(v); return x * len(D)`` on a global dict: the load that ``len()`` consumes
# bound the dict whole, every list's length guarded, so every call traced again (20 in 20:
# /tmp/eff59-probes/len_dict.py). The length of a dict (or a defaultdict: ``len`` makes no item) is the
# number of its keys, and C reads nothing else: such a load is bound as a read at a computed key is
# (``bind_keyed_dict``: its type and keys as the call started guarded, no item), so the length each call
# sees is the trace's, and the keys the pass adds before the read are its own, replayed onto each call's.
class StateReads:
    """The state-read hooks of a tracing pass (``Pass`` in jit/interpretation.py), which provides
    the attributes below."""

    fn: Any
    context: Any  # the pass's TraceContext
    provenance: Provenance
    snapshots: StateSnapshots
    held: HeldTensors
    measured: Any  # jit/appends.py's lists read by their length
    pending_keys: PendingKeys  # dynamic numbers stored as keys (jit/pending_keys.py)
    # id(a globals dict) -> (the dict, the builtins guarded absent from it): Note [Builtins read again]
    absent_globals: dict[int, tuple[dict, set[str]]]

    def _bind_state(self, frame: Any, value: Any, path: Path, name: str) -> Any:
        """A value read from persistent state (``Provenance.bind_state``, whose guards are about the
        contents the call started with), with two rules that narrow them (jit/appends.py): a read that
        only looks ``append``/``extend`` up on a list guards its type alone, and a read of a dict that
        only subscripts it with a constant (``self.log["losses"].append``, ``d["n"] += 1``) guards its
        type and that key's presence, not every item. A container the call passes as well is the
        program's copy of that argument (Note [A container of state the call passes too])."""
        if type(value) in _CONTAINERS and self.provenance.is_argument_container(value):
            return self.provenance.bind_state(value, path, name)
        if type(value) is set:
            if only_added_to(frame) and not self.provenance.is_argument_container(value):
                self.pending_keys.added_to(value)  # Note [An element only added], jit/pending_keys.py
                return self.provenance.bind_appended_list(value, path)  # its type guarded
            self.pending_keys.read(value)
        if type(value) is list:
            if pushed_onto(frame) and not self.provenance.is_argument_container(value):
                self.pending_keys.pushed_to(value, path)  # Note [An item only pushed], jit/pending_keys.py
                return self.provenance.bind_appended_list(value, path)  # its type guarded
            self.pending_keys.read(value)
        if type(value) in appends.APPENDABLE and only_appended_to(frame):  # Note [A buffer only appended to]
            return self.provenance.bind_appended_list(value, path)
        if type(value) is list and self._emptied_unread(frame, value):  # Note [A list the program empties]
            bound = self.provenance.bind_appended_list(value, path)
            self.snapshots.take(value, path)  # (taken when first reached: a no-op then)
            self.snapshots.note_emptied(value)
            self.measured.emptied.add(id(value))
            return bound
        if type(value) is list and appends.measured_by_len(frame):  # Note [A list's length read per call]
            return self.measured.bind(value, path, name)
        if type(value) is list and appends.reads_appended_item(frame, value,
                                                              self.provenance.first_state(value)):
            return self.provenance.bind_appended_list(value, path)  # ``seen[-1]`` after ``seen.append(v)``
        if type(value) in (dict, collections.defaultdict) or (  # an OrderedDict too, as a whole read guards
                isinstance(value, dict) and not is_structured(value) and items_read_natively(value)
                and not is_module_registry(path)):  # (a Counter's counters are bound in place: provenance)
            key = subscripted_by(frame)
            if key is None and appends.stored_into(frame):  # Note [A dict only stored into], jit/appends.py
                self.provenance.guard(path, "type", type(value))
                self.provenance.reach_container(value, path)
                self.provenance.remember(value, path)
                if not self.provenance.is_argument_container(value):
                    self.pending_keys.stored_into(value)  # Note [A key only stored], jit/pending_keys.py
                return value
            self.pending_keys.read(value)
            if key is not None:
                return self.provenance.bind_subscripted_dict(value, path, key)
            if appends.keyed_later(frame):  # Note [A dict read at a computed key], jit/appends.py
                return self.provenance.bind_keyed_dict(value, path)
            if type(value) in (dict, collections.defaultdict) and appends.measured_by_len(frame):
                return self.provenance.bind_keyed_dict(value, path)  # Note [A dict measured by len()]
        return self.provenance.bind_state(value, path, name)

    def _emptied_unread(self, frame: Any, value: list) -> bool:
        """Whether this load of a list of state empties it at once, or measures one this pass emptied
        (Note [A list the program empties], jit/appends.py); not a list the call passes too."""
        return not self.provenance.is_argument_container(value) and (appends.empties_at_once(frame) or (
            id(value) in self.measured.emptied and appends.measured_by_len(frame)))

    def _untracked_subclass_code(self, frame: Any) -> bool:
        """Subclass code whose Python state is taken as it is while tracing: a library's. A user's
        subclass code is state, as the program's, with or without grad (a counter kept there is
        computed beside the grad transform's forward: Note [Counters under grad], transforms/jit_hook.py)."""
        return bool(self.context.subclass_code) and is_library_file(frame.code.co_filename)

    def _untracked_state(self, frame: Any, obj: Any) -> bool:
        """``obj`` read by a library's subclass code, taken as it is, unless it is a mode the caller
        entered around the call or reached from one (Note [A library's mode around the call])."""
        return self._untracked_subclass_code(frame) and not self._callers_mode_state(obj)

    # Note [A library's mode around the call]
    # A library's subclass code keeps its Python state as it is while tracing (its caches). A mode the
    # caller entered around the call (Note [Modes around the call], jit/caller_modes.py) is the caller's
    # object even where its code is a library's: ``FlopCounterMode``'s dispatch (torch/utils/flop_counter.py)
    # adds to ``self.counter.flop_counts``, which each cached call must add to again, as eagerly. State
    # reached from the wrapper's first two arguments (the modes) is bound and its writes replayed as the
    # program's; before, the first call counted (natively, while tracing) and cached calls counted nothing.
    def _callers_mode_state(self, obj: Any) -> bool:
        if type(self.fn) is not types.FunctionType or self.fn.__code__.co_filename != WRAPPER_FILE:
            return False
        path = self.provenance.path_of(obj)
        return path is not None and path.root.kind == "args" and bool(path.steps) \
            and path.steps[0].kind == "index" and path.steps[0].value in (0, 1)

    def _callers_container(self, frame: Any, obj: Any) -> bool:
        """Whether ``obj``, read by the standard library's ``frame``, is an object of the caller's or of
        state that is read as the program's: there, an instance of any class, in a standard-library
        container's code; in any of its code, an instance of a class of the program's (Note [A caller's
        object in the standard library's code], code_kinds.py)."""
        kind = type(obj)
        if issubclass(kind, (type, types.ModuleType)) or self.provenance.path_of(obj) is None:
            return False
        return is_stdlib_container_code(frame.code.co_filename) or is_programs_class(kind)

    def _load_global(self, frame: Any, name: str, value: Any) -> Any:
        globals_ = frame.globals
        if is_library_file(frame.code.co_filename) and (
                self.context.subclass_code or not is_global_hook_registry(globals_, name)):
            return value  # torch's and the standard library's globals, but torch's hook registries
        if self._namespace_made_while_tracing(frame):
            return value
        absent = self.absent_globals.get(id(globals_))
        if absent is not None and name in absent[1] and name not in globals_:
            return value  # Note [Builtins read again]
        root = Path(Root("bound", f"{globals_.get('__name__', '?')}.__dict__", globals_))
        self.snapshots.take(globals_, root)
        if name in globals_ and self.snapshots.written(globals_, name, value):
            return value  # stored by the program in this pass (Note [A global the program made])
        if name in globals_:
            return self._bind_state(frame, value, root.key(name), name)
        # a builtin, as long as no global shadows it: one guard per name (Note [One absence per name])
        self.provenance.guard(root, "absent", name, per_expected=True)
        self.absent_globals.setdefault(id(globals_), (globals_, set()))[1].add(name)
        return value

    # Note [A global the program made]
    # ``global n; n = 7; return x * n`` where ``n`` did not exist: the load after the store bound the value at
    # the globals' path as the call's state (a number there: an input read at the call's start, where the
    # name is absent), so every call raised KeyError from reading the input (/tmp/eff53-probes/
    # globals_dbg3.py). A global the program stored in this pass is its own value, as an attribute or an
    # item it stored is (``StateSnapshots.written``); a proxy stored there was already.

    # Note [Builtins read again]
    # Every load of a builtin (``len``, ``hash``, ``isinstance``) in the program's code made the globals'
    # path, took their snapshot and added its absence guard again, each a no-op after the first: ~2.7 us a
    # load (a jitted loop of ``hash(i)``: 16.2 us an iteration, 13.4 us with ``hash`` a local,
    # /tmp/cpy45-probes/p3_c_call_costs.py). The names guarded absent are kept per globals dict for the
    # pass (the dict held, so its id stays its own); a name still absent is the builtin, as guarded.

    def _namespace_made_while_tracing(self, frame: Any) -> bool:
        """Whether ``frame`` runs a function made while tracing (``exec`` of a ``def`` into a dict the
        program made: ``g = {}; exec(src, g)``) over such a namespace, no module's and none the caller's:
        each call makes its own, so what it holds is no state to guard, and its writes are no effect (held
        as state, a global it increments was a new counter at each pass: traced again without end)."""
        function, globals_ = frame.function, frame.globals
        if function is None or self.provenance.path_of(function) is not None:
            return False
        jitted = getattr(self.fn, "__func__", self.fn)
        if globals_ is getattr(jitted, "__globals__", None) or self.snapshots.reached(globals_) or \
                self.provenance.path_of(globals_) is not None:
            return False
        module = sys.modules.get(globals_.get("__name__"))
        return getattr(module, "__dict__", None) is not globals_

    def _load_deref(self, frame: Any, name: str, value: Any) -> Any:
        function = frame.function
        if function is None or self.context.subclass_code or function.__closure__ is None:
            return value
        try:
            cell = function.__closure__[function.__code__.co_freevars.index(name)]
        except ValueError:
            return value  # a cell of the frame's own: it holds a value computed while tracing
        if self.provenance.path_of(function) is None and self.provenance.path_of(cell) is None:
            # A function made while tracing (a comprehension, a lambda) whose cell is not one of a
            # persistent function's cells: the cell was made, and filled, while tracing.
            return value
        path = Path(Root("bound", f"{function.__qualname__}.<cell {name}>", cell)).attr("cell_contents")
        return self._bind_state(frame, value, path, name)

    # Note [The class of a caller's object]
    # ``type(self).count += 1`` (or ``self.__class__.count``) in a method of an argument's class: the class
    # came from ``type()`` with no path, so the attribute read was a constant of the trace and the write
    # no effect: a cached call answered the first call's count and never counted (eager 1, 2, 3, 4; jit 1,
    # 1, 1, 1; /tmp/eff52-probes/typecount.py). The class of an object the pass reached through a path is
    # the caller's class, fixed by that object's type guard: it is remembered at a root bound to it, as a
    # class named by a global is, so what the program reads of it is guarded (a counter dynamic) and what
    # it writes is replayed. A library's class (torch's, the standard library's) stays constant, and a
    # class of an object the program made has no path (Note [A class the program made is its own]).
    def class_of(self, obj: Any, klass: Any) -> Any:
        """``type(obj)`` or ``obj.__class__``, the class remembered where ``obj`` is the caller's (Note [The
        class of a caller's object])."""
        if issubclass(type(klass), type) and self.provenance.path_of(klass) is None \
                and not is_library_class(klass) and self.provenance.path_of(obj) is not None \
                and not issubclass(type(obj), Proxy):  # not isinstance: it reads ``__class__``
            self.provenance.remember(klass, Path(Root("bound", klass.__qualname__, klass)))
        return klass

    def type_lookaside(self, inner: Any) -> Any:
        """``type`` for the program: ``inner``'s answer, a caller's object's class remembered."""
        def type_(*args: Any, **kwargs: Any) -> Any:
            klass = inner(*args, **kwargs)
            return self.class_of(args[0], klass) if len(args) == 1 and not kwargs else klass
        return type_

    # Note [The program's globals() dict]
    # ``globals()`` gave the program the module's dict as a plain object of no path: what it read through
    # it (``globals().get("n", 0)``, ``globals()["n"]``) was a constant of the trace that no guard watched,
    # and what it stored there (``globals()["n"] = ...``) no effect the entry replayed: a counter kept in
    # the globals gave eager's 1, 2, 3, ... and jit's 1, 1, 1, and a store then a read by name raised
    # KeyError on every call (/tmp/eff53-probes/globals_dbg2.py). The dict is the namespace a global load
    # reaches (Note [A module's attributes written], jit/code_kinds.py), at the same path, bound as a dict
    # read at computed keys (Note [A dict read at a computed key], jit/appends.py: its names guarded, so a
    # name ``get`` found absent is seen once there), its items read bound as any state dict's (guarded, a
    # counter dynamic) and its stores effects.
    # The globals of library code (torch's, the standard library's) and of a namespace the program made
    # stay as they were.
    def globals_lookaside(self, inner: Any) -> Any:
        """``globals`` for the program: ``inner``'s answer, remembered at its path where the calling frame is
        the program's (Note [The program's globals() dict])."""
        def globals_(*args: Any, **kwargs: Any) -> Any:
            namespace = inner(*args, **kwargs)
            run = current_run()
            frame = run.frames[-1] if run is not None and run.frames else None
            if type(namespace) is dict and frame is not None and frame.globals is namespace \
                    and not is_library_file(frame.code.co_filename) \
                    and not self._namespace_made_while_tracing(frame):
                name = namespace.get("__name__", "?")  # guarded by its names: ``get`` of one absent
                self.provenance.bind_keyed_dict(namespace, Path(Root("bound", f"{name}.__dict__", namespace)))
            return namespace
        return globals_

    # Note [The referent of a weak reference of state]
    # ``o = s.ref(); o.n += 1`` with ``s.ref`` a weak reference the caller holds: the referent, handed back
    # by C, had no path, so it counted as an object the program made: what the program read of it was a
    # constant of the trace and what it wrote no effect (a counter: eager 1, 2, 3, jit 1, 1, 1 with the
    # object's ``n`` stuck at 1: /tmp/eff53-probes/wide3.py "counter through weakref"). The referent of a
    # reference reached as state is state at the reference's path called (``s.ref()``), bound as any value
    # read there (guarded, a dead reference's None by value); one reached already keeps its path.
    def weak_referent(self, reference: Any, referent: Any) -> Any:
        """What calling the weak reference ``reference`` gave (Note [The referent of a weak reference of
        state])."""
        path = self.provenance.path_of(reference)
        if path is None or referent is None or isinstance(referent, (Proxy, torch.Tensor)) \
                or self.provenance.path_of(referent) is not None:
            return referent
        return self.provenance.bind_state(referent, path.call(), "referent")

    def _generic_attr(self, frame: Any, obj: Any, name: str, value: Any) -> Any:
        """``object.__getattribute__(obj, name)`` read for the program (a Python ``__getattribute__``'s
        ``super().__getattribute__(name)``): as any attribute read, bound at the instance dict where
        that is what it reads (Note [A value a Python __getattribute__ read from the instance dict],
        jit/type_lookups.py)."""
        return self._load_attr(frame, obj, name, value, generic=True)

    def _load_attr(self, frame: Any, obj: Any, name: str, value: Any, generic: bool = False) -> Any:
        if name == "__class__":
            self.class_of(obj, value)  # Note [The class of a caller's object]
        if issubclass(type(obj), TensorProxy):
            if (method := protocol_method(obj, name)) is not None:  # Note [A value's protocol methods]
                return method
            return None if name == "name" and torch_owns_name(obj) else value  # eager's Tensor.name
        if isinstance(value, TensorProxy):
            return value
        if (held := self.held.metadata(obj, name)) is not NOT_ANSWERED:
            return held  # Note [A caller's tensor the program holds itself], jit/held_tensors.py
        if self._untracked_state(frame, obj) or (
                frame.code.co_filename.startswith(STDLIB_DIR) and not self._callers_container(frame, obj)):
            return value  # the standard library's own bookkeeping (logging caches, ...) is not program state
        if issubclass(type(obj), types.ModuleType) and is_library_module(obj):
            return value  # torch's own module attributes are taken as constant (docs/user-guide.md)
        path = self.provenance.path_of(obj)
        if name == "grad" and path is not None and isinstance(obj, torch.Tensor):
            return self.grad_value(obj, path)  # an optimizer's p.grad
        if path is not None and self.snapshots.written(obj, name, value):
            return value  # stored by the program earlier in this pass: its own value, not the call's
        if name == "__dict__" and path is not None:
            by_torch = frame.code.co_filename.startswith(TORCH_DIR)
            key = subscripted_by(frame) if _pushed_by_the_frame(frame) else None
            self.provenance.bind_instance_dict(obj, value, path.attr("__dict__"), by_torch=by_torch, key=key)
            return value
        if path is None:
            kind = type(obj)  # not isinstance: it reads ``__class__``, which a class may compute
            user_class = self.context.subclass_code and issubclass(kind, type) and not is_library_module(
                sys.modules.get(obj.__module__, sys))  # ``cls.calls`` in a user's dispatch
            if not user_class and (not issubclass(kind, types.ModuleType) or is_library_module(obj)
                                   or not is_imported_module(obj)):
                return value  # the program's own object (a module it made: not state)
            path = Path(Root("bound", obj.__qualname__ if user_class else module_name(obj), obj))
            self.provenance.remember(obj, path)
        elif not is_stored_attribute(obj, name):
            self.provenance.bind_class_attribute(obj, path, name)  # a method or property: pin it
            self._remember_static_function(value, path.attr(name))
            return value  # computed by a descriptor or __getattr__, whose own reads are hooked
        if generic:
            at = self.provenance.bind_read_through_hooks(frame.code, obj, path, name, value)
            if at is not None:
                return self._bind_state(frame, value, at, name)
        elif self.provenance.read_through_hooks(obj, name, value):
            return value  # what the hooks' generic read returned, bound there
        return self._bind_state(frame, value, path.attr(name), name)

    # Note [The cells of a static method]
    # ``bind_class_attribute`` pins the class's entry, which for a ``staticmethod`` or ``classmethod`` is
    # the wrapper, not the function the program calls: that function had no path, so ``_load_deref``
    # took its cells for cells made while tracing. A Function's ``forward`` is a static method: with its
    # log a cell of the function that defined the class (``log.append(...)`` in ``forward``), the append
    # ran while tracing only and every cached call lost it. The function is remembered at the read's
    # path, its cells with it, so what it reads and writes through them is state as anywhere else.
    def _remember_static_function(self, value: Any, path: Path) -> None:
        fn = value.__func__ if type(value) is types.MethodType else value
        if type(fn) is types.FunctionType and self.provenance.path_of(fn) is None:
            self.provenance.remember_function(fn, path if fn is value else path.attr("__func__"))

    def grad_value(self, tensor: torch.Tensor, path: Path) -> Any:
        """``tensor.grad`` of a tensor of the caller's: read through its path, or the program's own
        value (set by a backward or by the program in this pass)."""
        grad = tensor.grad
        known = self.context.values.known(grad) if isinstance(grad, torch.Tensor) else None
        if known is not None or isinstance(grad, FakeTensor):  # set by a backward of this pass
            return known if known is not None else self.context.values.proxy_for(grad)
        if self.snapshots.written(tensor, "grad", grad):
            return grad  # ``p.grad = None`` earlier in this pass
        return self.provenance.bind_state(grad, path.attr("grad"), "grad")

    def _load_subscr(self, frame: Any, container: Any, key: Any, value: Any) -> Any:
        if self.provenance.is_loose(key):
            self.provenance.pin(key)  # a caller's object as a dict key: its identity decides the item
        if self._untracked_state(frame, container) or (frame.code.co_filename.startswith(STDLIB_DIR)
                                                        and not self._callers_container(frame, container)):
            return value
        path = self.provenance.path_of(container)
        if path is None or isinstance(container, TensorProxy):
            return value
        key = _hashed_number_key(container, key)  # Note [An item at a computed number's key]
        if not _is_plain_key(key) and not (isinstance(key, torch.Tensor) and self.provenance.path_of(key)):
            if id(container) in self.provenance.keyed:  # its items are guarded only by such reads
                self.provenance.bind_state(container, path)
            return value  # a key jitcore cannot name; a reached tensor keys by identity (optimizer state)
        if isinstance(value, Proxy) or self.snapshots.written(container, key, value):
            return value  # stored while tracing (nn.LSTM's _flat_weights, cache[k] = v): not the call's
        # a tensor key (an optimizer's state, by parameter) is not printed: its class's repr may run ops
        return self._bind_state(frame, value, path.key(key), str(key) if _is_plain_key(key) else "state")

    def _contains(self, frame: Any, container: Any, item: Any) -> Any:
        """``item in container``: a dynamic number in constants is a recorded predicate, not a hash of
        its value (``last_epoch in self.milestones``); a caller's object is found by its identity. The
        answer is guarded where the container's guards do not imply it: by the members a number is
        tested against, by the answer for a constant."""
        if self.provenance.is_loose(item):
            self.provenance.pin(item)
        path = self.provenance.path_of(container)
        if path is None or self.context.subclass_code or isinstance(container, TensorProxy):
            return python_langctx.member(item, container) if isinstance(item, NumberProxy) else NotImplemented
        first = self.snapshots.first_state(container)  # the call's container, not the program's changes
        implied = self.provenance.guards_elements(path, first)
        if isinstance(item, NumberProxy):
            frozen = python_langctx.members(first)
            if frozen is None and not implied:
                return NotImplemented  # the number's value decides: Python hashes it (specialized)
            answer = python_langctx.member(item, container)
            if answer is not NotImplemented and not implied:
                self.provenance.guard(path, "members", frozen)
            return answer
        if not implied and _is_plain_key(item) and python_langctx.members(first) is not None \
                and not frame.code.co_filename.startswith(STDLIB_DIR):  # as _load_subscr does
            self.provenance.guard(path, "member", (item, item in first), per_expected=True)
        return NotImplemented


# Note [A read inside a call the frame makes]
# ``subscripted_by`` narrows an instance dict's guards to one key's presence where the instruction after
# the frame's current one subscripts what it pushed by a constant. A read of ``__dict__`` the interpreter
# makes inside a call is not what the call pushes: in ``obj.__reduce_ex__(2)[2]`` the ``[2]`` subscripts
# the reduction's tuple (jitcore/interpreter/reductions.py read the dict), yet the dict was guarded only
# as holding no key 2, and a cached call returned the first call's state after the caller set an
# attribute (a wrong answer). Where the frame's current instruction is a call, the dict is bound whole
# (``getattr(obj, "__dict__")["k"]`` too: a few guards more than needed). The other narrowing rules
# (jit/appends.py) stay: the lists and dicts they narrow are mostly what the call returns
# (``d.setdefault(k, []).append(v)``); a slot holding a list, read by ``obj.__reduce_ex__(2)`` called
# directly and followed by such a pattern, is left.
_CALL_OPS = frozenset({"PRECALL", "CALL", "CALL_FUNCTION_EX", "CALL_KW"})


def _pushed_by_the_frame(frame: Any) -> bool:
    """Whether the value read is what the frame's current instruction pushes (Note above)."""
    i = frame.index - 1
    instructions = frame.info.instructions
    return not (0 <= i < len(instructions) and instructions[i].opname in _CALL_OPS)


# Note [An item at a computed number's key]
# ``groups.setdefault(n % 3, []).append(v)``, ``D[n % 3].add(v)``, ``hist[step // 10].append(y)`` with a
# dynamic number: the item's path could not be named by the number, so the read bound the whole dict
# (every item's contents guarded), and the lists and sets at its keys, which grow on every call, traced
# again on every call (20 in 20: /tmp/eff56-probes/wide_sets.py ``dict_of_sets``). The dict found the
# item by hashing the number, and hashing a dynamic number guards its value for the entry (the
# predicate ``number == value`` of Note [Hashing a computed number], jitcore/proxies/number.py, or the
# value of the inputs it was computed from), so every call the entry accepts reads the item at that
# value's key: the item is bound at the path of the value, as at a constant key (a list there only
# appended to guarded by its type, a set only added to likewise). Only for a dict (C hashes the key
# it is subscripted by) and a number that is no NaN (whose hash specializes nothing the same way).
def _hashed_number_key(container: Any, key: Any) -> Any:
    """The value of a dynamic number ``key`` a dict was subscripted by (Note above); else ``key``."""
    if isinstance(key, NumberProxy) and not isinstance(key, ObjectProxy) and isinstance(container, dict) \
            and type(key.value) in (int, bool, float) and key.value == key.value:
        return key.value
    return key


def _is_plain_key(key: Any) -> bool:
    return type(key) in (int, str, bool, float, bytes, type(None)) or (
        type(key) is tuple and all(type(k) in (int, str) for k in key)
    )
