"""Python side effects of a traced function, replayed on every call as eager has them.

While tracing, the program mutates the caller's objects for real (it must see its own writes). This
module snapshots each object of the caller's or of persistent state when the program first reaches
it (arguments, globals, closure cells, module and object attributes and slots, a class's own
attributes, list/dict/set contents), and when the pass ends it
1. diffs every snapshot against the object's final state into ``Effect`` records (attribute set or
   deleted, item set or deleted, list or set contents, cell contents);
2. restores every snapshot, so the trace leaves the caller's objects as it found them;
3. hands the effects to the entry, which applies them after each run of the computation, the first
   call's included. Tensors written into objects are outputs of the computation; objects made by
   the program and stored (holding tensors) are rebuilt on every call, as eager makes them anew.
The program's ``print`` calls and logging calls join them as effects of kind ``"print"`` and ``"log"``,
after the diffs and in program order (jitcore/jit/printing.py, jitcore/jit/log_records.py).

Invariants: after a call the caller's objects hold real tensors, never proxies; the final state of
every reached object is eager's final state for a call that took the same path (values the program
read are guarded by the prologue; a number read and written back is traced again as a dynamic
number, ``numbers.counters``, so the write is computed from the value each call finds).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal

import optree
import torch
import torch.utils._pytree as pytree

from jitcore.ir import Proxy
from jitcore.jit.call_copies import Owner, holds_made, in_one_call
from jitcore.jit.code_kinds import function_attributes, written_holder, written_namespace
from jitcore.jit.effect_performing import perform
from jitcore.jit.made_functions import MadeHere
from jitcore.jit.object_states import MISSING, attributes, state_of
from jitcore.jit.object_states import restore as restore_state
from jitcore.jit.outputs import split
from jitcore.jit.pending_keys import PendingKey
from jitcore.jit.returned_objects import RETURNED, ReturnedObjects, is_size
from jitcore.jit.set_ops import SetOp, effect_key, explains, noted, replay
from jitcore.jit.set_tables import put_back, table_of
from jitcore.jit.shared_containers import reshare, shared_places
from jitcore.prologue import Path
from jitcore.proxies import TensorProxy
from jitcore.proxies.number import NumberProxy, symbolic_number_class
from jitcore.proxies.tensor import PlainTensorProxy
from jitcore.proxies.text import plain_key

__all__ = ["PRINT_STREAMS", "Effect", "Effects", "StateSnapshots", "emptied_list", "written_keys"]

EffectKind = Literal[
    "setattr", "delattr", "setslot", "delslot", "setitem", "setitem_at", "delitem", "contents", "extend",
    "add", "heappush", "order", "cell", "grad", "print", "log", "dispatch_log", "warn",
]
PRINT_STREAMS = ("stdout", "stderr")  # the streams a recorded print writes to (jit/printing.py)


@dataclasses.dataclass(frozen=True, slots=True)
class Effect:
    """One change of a reached object's state, replayed after the computation.

    Attributes:
        path: how the object is reached from the call (its root may bind the object itself).
        kind: what changes: an attribute, an item, the whole contents (list/set), a dict's
            order (``"order"``: its keys in their new order, after its item effects), a cell; or
            ``"print"``, a line the program prints to the stream at ``path`` (jit/printing.py);
            ``"log"``, a record the program logs to the logger at ``path`` (jit/log_records.py);
            ``"warn"``, a ``warnings.warn`` call blaming the module whose globals are at ``path``
            (jit/warning_calls.py); ``"setitem_at"``, an item stored at a key computed per call (the
            value is ``(key, item)``: Note [A key only stored], jit/pending_keys.py); ``"add"``, elements
            added to a set (Note [An element only added]), or added and discarded in program order, the
            key each one's op (Note [A set's changes in program order]); ``"heappush"``, an item pushed
            onto a heap list or inserted into a sorted one, the key the function (Note [An item only
            pushed]).
        key: the attribute name or item key (None for contents and cells; ``(sep, end, flush)``
            for a print; ``(level, pathname, lineno, func)`` for a log record).
        value: the new value, with proxies and rebuilt objects as slots filled per call.
    """

    path: Path
    kind: EffectKind
    key: Any
    value: Any

    def locations(self) -> tuple[Path, ...]:
        """The paths the written value is read through (none for whole contents)."""
        if self.kind in ("setattr", "setslot", "grad"):
            return (self.path.attr(self.key),)
        if self.kind == "cell":  # ``nonlocal n; n += 1``: read as the cell's contents (jit/state_reads.py)
            return (self.path.attr("cell_contents"),)
        if self.kind == "setitem":
            by_key = self.path.key(self.key)
            found = (self.path.index(self.key), by_key) if type(self.key) is int else (by_key,)
            steps = self.path.steps
            if steps and steps[-1].kind == "attr" and steps[-1].value == "__dict__" and type(self.key) is str:
                found += (Path(self.path.root, steps[:-1]).attr(self.key),)  # obj.__dict__[k] is obj.k
            return found
        return ()

    def describe(self) -> str:
        where = self.path.describe()
        if self.kind in ("setattr", "delattr", "setslot", "delslot", "grad"):
            where = f"{where}.{self.key}"
        elif self.kind in ("setitem", "delitem"):
            where = f"{where}[{self.key!r}]"
        return f"{self.kind} {where}"


@dataclasses.dataclass(frozen=True, slots=True)
class _Snapshot:
    obj: Any
    path: Path
    state: Any
    written: set[Any] = dataclasses.field(default_factory=set)  # Note [Writes of the same object]
    # a set's changes in program order, ``OTHER`` for one whose order is not known (Note [A set's changes in
    # program order], jit/set_ops.py)
    set_ops: list[SetOp] = dataclasses.field(default_factory=list)
    table: Any = None  # an exact set's table when first reached (Note [A set's table put back exactly])


class StateSnapshots:
    """The state of each reached object as the program first reached it (one pass)."""

    def __init__(self) -> None:
        self._snapshots: dict[int, _Snapshot] = {}
        self._emptied: set[int] = set()  # lists a load empties unread: Note [A list the program empties]
        self.made_here = MadeHere()  # the functions and classes the program makes (jit/made_functions.py)

    def take(self, obj: Any, path: Path) -> None:
        """Remember ``obj``'s state now (the first time it is reached); ``path`` reaches it per call
        (for the program's copy of an argument container, the caller's container is at ``path``)."""
        kind = type(obj)  # not isinstance: it reads ``__class__``, which a class may compute (and log)
        if issubclass(kind, types.ModuleType) and (namespace := written_namespace(obj)) is not None:
            obj, path, kind = namespace, path.attr("__dict__"), dict  # Note [A module's attributes written]
        elif kind is types.FunctionType and (attributes := function_attributes(obj)) is not None:
            obj, path, kind = attributes, path.attr("__dict__"), dict  # Note [A function's attributes ...
            # written] (jit/code_kinds.py)
        if id(obj) in self._snapshots or issubclass(kind, (types.ModuleType, types.FunctionType)) or (
                issubclass(kind, type) and obj.__module__ == "builtins"):
            return
        if issubclass(kind, Proxy) and (kind is PlainTensorProxy or not issubclass(kind, TensorProxy)):
            return  # a subclass input's proxy holds its tensor's attributes (Provenance._subclass and
            # _bind_tensor_attributes): what the program sets there is set on the tensor
        state = state_of(obj)
        if state is not None:
            table = table_of(obj) if kind is set else None  # Note [A set's table put back exactly]
            self._snapshots[id(obj)] = _Snapshot(obj, path, state, table=table)

    def note_emptied(self, obj: list) -> None:
        """The program empties the reached list ``obj`` without reading it (jit/appends.py, Note [A list
        the program empties]): its whole contents are replayed, whatever the call's list held."""
        snap = self._snapshots.get(id(obj))
        if snap is not None and snap.obj is obj:
            self._emptied.add(id(obj))

    def reached(self, obj: Any) -> bool:
        """Whether ``obj`` is a reached object of the caller's or of state (its changes are effects)."""
        snap = self._snapshots.get(id(obj))
        return snap is not None and snap.obj is obj

    # Note [A count a Counter gains]
    # ``c[str(x.dtype)] += 1`` at a key the Counter lacks reads 0 through ``__missing__`` and stores a
    # number: no read of a held number, so ``numbers.counters`` (which looks for numbers the prologue
    # pinned) did not find it, and the next pass, which reached the Counter with the key there,
    # guarded that count by value although the pass never read it (a call on another path, one of
    # int inputs beside float ones, then missed on the other path's count: an entry more, 5 for 4).
    # Such a count is a counter from the next pass on: it is bound in its place as one
    # (Note [Counters bound where they are held], jit/held_counters.py), by type. It does not make
    # the jit trace this call again: the key is not there when the call starts.
    def counts_added(self, effects: list[Effect]) -> set[Path]:
        """Paths of the numbers ``effects`` store at keys a reached ``Counter`` lacked when the call
        started (Note [A count a Counter gains])."""
        before = {snap.path: snap.state[1] for snap in self._snapshots.values()
                  if type(snap.obj) is collections.Counter and snap.state[0] == "dict"}
        return {effect.path.key(effect.key) for effect in effects
                if effect.kind == "setitem" and effect.path in before
                and effect.key not in before[effect.path]
                and (type(effect.value) in (int, float) or isinstance(effect.value, NumberProxy))}

    # Note [Writes of the same object]
    # Changes are found by comparing each reached object with its snapshot, by identity. A write
    # that leaves the very object there (``self.wait = 0`` when ``wait`` held the cached small int 0,
    # ReduceLROnPlateau's ``num_bad_epochs = 0``) changed nothing while tracing, so the entry replayed
    # nothing; a later call finding ``wait == 2`` kept 2 where eager resets it. The pass notes every
    # attribute and item the program stores (STORE_ATTR, STORE_SUBSCR, ``setattr``, a dict's
    # ``__setitem__``/``update``/``setdefault``), and a noted key is replayed even when it compares
    # identical. A read of a noted key is the program's own value (``written``) for the same reason:
    # ``st["bad"] = 0; stop = st["bad"] >= 3`` read the call's counter when 0 was already there while
    # tracing, and a later call that reset a counter of 4 computed ``4 >= 3`` (a wrong answer).
    def note_write(self, obj: Any, keys: Any) -> None:
        """The program stored ``obj.key`` or ``obj[key]`` for each of ``keys`` (Note [Writes of the
        same object])."""
        obj = written_holder(obj)
        snap = self._snapshots.get(id(obj))
        if snap is None or snap.obj is not obj:
            return
        for key in keys:
            try:
                snap.written.add(key)
            except TypeError:  # an unhashable key: no dict or attribute holds it
                pass

    def note_set_op(self, obj: set, op: str, args: tuple) -> None:
        """The program calls ``obj.<op>(*args)`` on a set, about to run: noted where the set is a reached
        one (Note [A set's changes in program order], jit/set_ops.py)."""
        snap = self._snapshots.get(id(obj))
        if snap is not None and snap.obj is obj:
            snap.set_ops.extend(noted(obj, op, args))

    def settle_set(self, obj: set, stand_ins: dict[int, PendingKey]) -> bool:
        """Put the reached set ``obj``'s stand-ins in eager's place: its table as first reached, then its
        ops again with each stand-in its number (Note [A set's stand-ins settled in eager's place],
        jit/set_ops.py); whether it could."""
        snap = self._snapshots.get(id(obj))
        if snap is None or snap.obj is not obj or snap.table is None:
            return False
        numbers = {id(k): k.number for k in stand_ins.values()}
        ops = [(op, tuple(numbers.get(id(k), k) for k in each), layout) for op, each, layout in snap.set_ops]
        return replay(obj, snap.table, ops, snap.set_ops)

    def stored(self, obj: Any, key: Any) -> bool:
        """Whether the program stored ``obj.key`` or ``obj[key]`` in this pass (``note_write``)."""
        obj = written_holder(obj)
        snap = self._snapshots.get(id(obj))
        try:
            return snap is not None and snap.obj is obj and key in snap.written
        except TypeError:  # an unhashable key (a slice before 3.12): no write noted it
            return False

    def written(self, obj: Any, key: Any, value: Any) -> bool:
        """Whether ``value``, read as ``obj.key`` or ``obj[key]``, is one the program stored there
        itself in this pass (not the one the object held when the program reached it). Such a read
        is the program's own value: binding it to the call's state would read what the object holds
        before the write (``self.x = 5; y = self.x`` must give 5 on every call). A key the program
        stored is its own even when the very object was there before (Note [Writes of the same
        object]: ``st["bad"] = 0`` over the cached small int 0, then ``st["bad"] >= 3``)."""
        obj = written_holder(obj)
        snap = self._snapshots.get(id(obj))
        if snap is None:
            return False
        if snap.obj is obj and self.stored(obj, key):
            return True
        kind, state = snap.state
        if kind == "tensor":
            attrs, grad = state
            if key == "grad":
                return grad is not value
            kind, state = "attrs", attrs
        if kind in ("attrs", "class"):
            current = attributes(obj)
            in_dict = isinstance(current, (dict, types.MappingProxyType)) and key in current
            stored = current[key] if kind == "class" and in_dict else value  # a staticmethod's read answers
            return in_dict and dict.get(state, key, MISSING) is not stored  # its function: the entry decides
        if kind == "slots":
            return key in state and state[key] is not value
        if kind == "dict":
            return dict.get(state, key, MISSING) is not value
        if kind == "list" and type(key) is int:
            return not -len(state) <= key < len(state) or state[key] is not value
        return False

    def first_state(self, obj: Any) -> Any:
        """A reached list, dict or set as the program first reached it (a copy), when the program has
        changed it since; the object itself otherwise (not reached, unchanged, or another kind)."""
        snap = self._snapshots.get(id(obj))
        if snap is None:
            return obj
        kind, first = snap.state
        if kind in ("list", "deque"):
            current = list(obj) if kind == "deque" else list(list.__iter__(obj))
            changed = len(first) != len(current) or any(a is not b for a, b in zip(first, current))
        elif kind == "dict":
            current = dict(dict.items(obj))
            changed = first.keys() != current.keys() or any(first[k] is not current[k] for k in first)
        elif kind == "set":
            changed = first != set(set.__iter__(obj))
        elif kind == "buffer":
            changed = _raw(first) != _raw(obj)
        else:
            return obj
        return first if changed else obj

    def objects(self) -> list[Any]:
        """The reached objects, in the order they were reached."""
        return [snap.obj for snap in self._snapshots.values()]

    def effects(self) -> list[Effect]:
        """The changes of every reached object since it was reached, as effects."""
        out: list[Effect] = []
        for key, snap in self._snapshots.items():
            if key in self._emptied:
                out.append(Effect(snap.path, "contents", None, list(list.__iter__(snap.obj))))
                continue
            if snap.state[0] == "set":  # Note [A set's changes in program order]
                out += _set_diff(snap.path, snap.state[1], set(set.__iter__(snap.obj)), snap.set_ops)
                continue
            out += _diff(snap.obj, snap.path, snap.state, state_of(snap.obj), snap.written)
        return out

    def restore(self) -> None:
        """Put every reached object back into its snapshot state (a set the pass only added to, its very
        table: Note [A set's table put back exactly], jit/set_tables.py)."""
        for snap in reversed(list(self._snapshots.values())):
            if snap.table is None or not put_back(snap.obj, snap.table):
                restore_state(snap.obj, snap.state)

    @contextlib.contextmanager
    def writing_nothing(self) -> Iterator[None]:
        """The body's writes into reached objects are undone after it (an object first reached in the
        body goes back to its snapshot): work of jitcore's that runs the program's code again."""
        now = [(snap.obj, state_of(snap.obj)) for snap in self._snapshots.values()]
        known = set(self._snapshots)
        try:
            yield
        finally:
            for key in [k for k in self._snapshots if k not in known]:
                restore_state(self._snapshots[key].obj, self._snapshots[key].state)
            for obj, state in reversed(now):
                restore_state(obj, state)

    def returned_objects(self, output: Any, args: tuple, kwargs: dict,
                         copies: frozenset[int]) -> tuple[Any, ReturnedObjects | None]:
        """The output with each of the caller's objects it returns taken out (``RETURNED`` in its
        place), and where each is found per call (Note [Returning the caller's objects]). ``copies``:
        the ids of the containers the program sees for the caller's argument containers."""

        def caller_path(obj: Any) -> Path | None:
            snap = self._snapshots.get(id(obj))
            if snap is None or snap.obj is not obj or isinstance(obj, Proxy):
                return None
            return snap.path if id(obj) in copies or _leads_to(snap.path, obj, args, kwargs) else None

        leaves, spec = pytree.tree_flatten(output, is_leaf=lambda v: is_size(v) or caller_path(v) is not None)
        holes = {i: path for i, leaf in enumerate(leaves) if (path := caller_path(leaf)) is not None}
        if not holes:
            return output, None
        leaves = [RETURNED if i in holes else leaf for i, leaf in enumerate(leaves)]
        return pytree.tree_unflatten(leaves, spec), ReturnedObjects(holes)

    def preexisting(self, args: tuple, kwargs: dict,
                    copies: frozenset[int] = frozenset()) -> Callable[[Any], bool]:
        """Whether an object is one of the caller's: reached, and where its path leads once the
        snapshots are restored (an object the program made, stored and read back is not), or a
        container a reached object held when the call began (Note [A container of the caller's
        stored back]). ``copies``: the ids of the containers the program sees for the caller's argument
        containers (the caller's, at their paths)."""
        held = {id(v) for snap in self._snapshots.values() for v in _held_values(snap.state)
                if isinstance(v, _KEPT_CONTAINERS)}

        def check(obj: Any) -> bool:
            snap = self._snapshots.get(id(obj))
            if snap is None:
                return id(obj) in held
            if id(obj) in copies and snap.obj is obj:
                return True
            # the path reads the caller's tensors' attributes, which their class's __torch_function__
            # must not see (RedispatchTensor logs each read into its ``call_log``)
            with torch._C.DisableTorchFunctionSubclass():  # noqa: SLF001
                return _leads_to(snap.path, obj, args, kwargs) or id(obj) in held

        return check


    def owner(self, args: tuple, kwargs: dict, copies: frozenset[int] = frozenset()) -> Owner:
        """Whose an object is: "fixed", the caller's reached from state outside the arguments (a global,
        a module's attribute: the very object on every call the prologue lets through); "call", the
        caller's reached through this call's arguments (another call's may be another object), with the
        path each call passes it at; None, the program's (Note [Objects the program makes, anew on every
        call], jit/call_copies.py). ``copies``: as for ``preexisting``."""
        preexisting = self.preexisting(args, kwargs, copies)

        def whose(obj: Any) -> str | None:
            if not preexisting(obj):
                return None
            snap = self._snapshots.get(id(obj))
            return "call" if snap is None or snap.path.root.kind in ("args", "kwargs") else "fixed"

        def passed_at(obj: Any) -> Path | None:  # Note [The objects this call passes] (jit/call_copies.py)
            snap = self._snapshots.get(id(obj))
            if snap is None or snap.obj is not obj or snap.path.root.kind not in ("args", "kwargs"):
                return None
            return snap.path if preexisting(obj) else None

        return Owner(whose, passed_at, made=self.made_here.has, class_refusal=self.made_here.class_refusal)


# Note [A container of the caller's stored back]
# ``real = g["__builtins__"]; g["__builtins__"] = {...}; g["__builtins__"] = real`` (test.support's
# swap_item, CPython's test_dynamic) leaves the very dict there, and the noted write (Note [Writes of the
# same object]) is replayed. A container the program read without a path (library code's reads are not
# bound) is no reached object, so the effect stored it as a value, which ``outputs.split`` rebuilds: a
# copy. The module's ``__builtins__`` was no longer the builtins module's dict, and ``builtins.len = ...``
# was not seen by the functions the module made next (3 != 7). A container a reached object held when
# the call began is the caller's: the effect stores that very object.
_KEPT_CONTAINERS = (list, dict, set, tuple, collections.deque)


def _held_values(state: Any) -> list[Any]:
    """The values a snapshot's object held (``state_of``'s form)."""
    if state is None:
        return []
    kind, data = state
    if kind in ("dict", "attrs", "class", "slots"):
        return list(data.values())
    if kind in ("list", "deque", "set"):
        return list(data)
    if kind == "tensor":
        return list(data[0].values())
    return [data]


def _leads_to(path: Path, obj: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``path`` reaches ``obj`` in this call's arguments and state."""
    try:
        return path.get(args, kwargs) is obj
    except Exception:  # noqa: BLE001 - a path that no longer resolves reaches nothing
        return False


class Effects:
    """The effects of one entry, applied after its computation.

    The computation returns ``(output, slots)``: ``slots`` are the proxies the effects' values hold,
    in order; ``finish`` fills them in, performs the effects on the call's objects and returns the
    output passed through ``post`` (the output's own rebuilding, jitcore/jit/outputs.py).
    """

    def __init__(self, effects: list[Effect], owner: Owner,
                 input_paths: dict[int, Path] | None = None) -> None:
        def preexisting(obj: Any) -> bool:
            return owner(obj) is not None

        self._passed_at = owner.passed_at
        effects = [_keyed_per_call(e, owner) for e in effects]  # Note [A key the program made] (call_copies)

        self.references: list[Any] = []
        self._input_paths = input_paths or {}  # id(input proxy) -> where the call passes its tensor
        self._shared = shared_places([e.value for e in effects], preexisting)  # jit/shared_containers.py
        values = [self._template(e.value, preexisting) for e in effects]
        owner = dataclasses.replace(owner, inputs=self._input_paths)  # the caller's tensor itself, not a copy
        flat, structure = split(tuple(values), owner)  # objects the program made: anew per call
        self._leaves, self._spec = optree.tree_flatten(flat, none_is_leaf=True)
        self._slots = [i for i, leaf in enumerate(self._leaves) if _per_call(leaf)]
        self._rebuild = structure.rebuild if structure is not None else None
        self.copies = structure is not None and structure.copies  # or the output's (jit/api.py)
        self.effects = effects
        self.proxies = tuple(self._leaves[i] for i in self._slots)
        self.post: Callable[[Any], Any] = _identity
        self.returned: ReturnedObjects | None = None  # Note [Returning the caller's objects]
        # the computation runs the classes' dispatch itself, which logs its records as it runs (Note [A
        # library's dispatch logs its ops], jit/log_records.py): its "dispatch_log" effects are not made
        self.dispatch_runs = False
        # the computation calls a Function's ``apply``, whose forward writes as it runs (Note [A Function's
        # forward run natively]): the targets' states are taken before it and put back after it
        self.forwards_run_natively = False

    def constants(self) -> list[Any]:
        """What the effects store that the computation does not compute per call (their keys, and the
        values that are no slot)."""
        slots = set(self._slots)
        return [e.key for e in self.effects] + [v for i, v in enumerate(self._leaves) if i not in slots]

    # Note [A Function's forward run natively]
    # Where the computation calls ``MyFn.apply`` itself (pass 1 runs under torch's autograd: symbolic
    # sizes or numbers with an input that requires grad), the user's forward runs natively and makes
    # its Python effects, which were also recorded while it was interpreted and are performed after the
    # computation: ``log.append(1)`` in the forward appended twice a call. The objects the effects write
    # are then taken before the computation and put back after it, before the effects are performed, so
    # each write happens once, as eagerly (the computation writes no other Python state). A forward's
    # ``print`` still prints twice (a known limit, docs/autograd.md).
    def taken(self, args: tuple, kwargs: dict) -> list[tuple[Any, Any]] | None:
        """The states of the objects the effects write, where the computation may write them too."""
        if not self.forwards_run_natively:
            return None
        found = {}
        try:
            for effect in self.effects:
                if effect.kind not in ("grad", "print", "log", "dispatch_log", "warn"):
                    target = effect.path.get(args, kwargs)
                    found.setdefault(id(target), (target, state_of(target)))
        except Exception:  # noqa: BLE001 - a call the prologue turns away (its objects are not there)
            return None
        return list(found.values())

    @staticmethod
    def put_back(taken: list[tuple[Any, Any]] | None) -> None:
        """Put the objects ``taken`` found back as it found them."""
        for target, state in taken or ():
            restore_state(target, state)

    def finish(self, args: tuple, kwargs: dict, result: tuple,
               taken: list[tuple[Any, Any]] | None = None) -> Any:
        """Perform the effects with this call's values; the program's output. ``taken``: the states
        ``taken`` found before the computation, put back first. The objects made anew for the effects and
        the output share one memo (Note [One call's copies share their objects], jit/call_copies.py)."""
        if self.copies:
            return in_one_call(lambda: self._finish(args, kwargs, result, taken), (args, kwargs))
        return self._finish(args, kwargs, result, taken)

    def _finish(self, args: tuple, kwargs: dict, result: tuple, taken: list[tuple[Any, Any]] | None) -> Any:
        self.put_back(taken)
        output, slots = result
        leaves = list(self._leaves)
        for i, value in zip(self._slots, slots):
            leaves[i] = value
        values = optree.tree_unflatten(self._spec, leaves)
        if self._rebuild is not None:
            values = self._rebuild(values)
        # each object is the one its path reached when the call began: an effect that replaces an
        # object (``self._states = defaultdict(...)``, GradScaler.update) must not redirect the
        # changes diffed on the object it replaced
        targets = [effect.path.get(args, kwargs) for effect in self.effects]
        values = [self._unwrap(value, args, kwargs) for value in values]
        reshare(values, self._shared)  # a list stored in two places is one list, as eagerly
        for effect, target, value in zip(self.effects, targets, values):
            perform(effect, target, value, self.dispatch_runs)
        output = self.post(output)
        return output if self.returned is None else self.returned.fill(output, args, kwargs)

    def around(self, cached_call: Callable[[tuple, dict], Any], miss: Any) -> Callable[[tuple, dict], Any]:
        """``cached_call`` (prologue + computation) followed by ``finish``."""
        if self._performs_nothing():
            post = self.post

            def output_of_the_call(args: tuple, kwargs: dict) -> Any:  # Note [Effects that perform nothing]
                result = cached_call(args, kwargs)
                return result if result is miss else in_one_call(post, (args, kwargs), result[0])

            return output_of_the_call

        def call(args: tuple, kwargs: dict) -> Any:
            taken = self.taken(args, kwargs)
            try:
                result = cached_call(args, kwargs)
            except BaseException:
                self.put_back(taken)  # an undone call (a failed read check, Note [A computation that
                raise  # raises]) leaves what a forward wrote as it found it
            if result is miss:
                return result
            return self.finish(args, kwargs, result, taken)

        return call

    # Note [Effects that perform nothing]
    # ``f = lambda v: log.append(v); return f, x + 1`` (``log`` an argument): the program writes nothing,
    # but its output holds an object each call passes (the closure's cell holds this call's ``log``), so
    # its rebuild runs where the effects run, which have the call's arguments (Note [The objects this call
    # passes], jit/call_copies.py). With no effect to perform, nothing returned of the caller's and no
    # forward writing natively, ``finish`` would only unflatten an empty tree and diff nothing: the cached
    # call goes straight from the computation to the output's rebuild, in one call's memo (~4 us of a
    # ~9 us cached call, /tmp/ana59-probes/bench59.py).
    def _performs_nothing(self) -> bool:
        return (not self.effects and not self._slots and self._rebuild is None and self.returned is None
                and not self.forwards_run_natively and not self._leaves)

    def _template(self, value: Any, preexisting: Callable[[Any], bool]) -> Any:
        """A value to store: objects of the caller's by reference, lists element by element, the
        rest as it is (rebuilt per call when it holds proxies, by ``outputs.split``)."""
        if preexisting(value):
            path = self._passed_at(value)
            if path is not None:  # Note [The objects this call passes] (jit/call_copies.py)
                return _FromCall(path)
            self.references.append(value)
            return _Reference(len(self.references) - 1)
        if type(value) is list:  # the very list where nothing in it changes (Note [One object, one copy])
            items = [self._template(v, preexisting) for v in value]
            return value if all(a is b for a, b in zip(items, value)) else items
        return value

    def _unwrap(self, value: Any, args: tuple, kwargs: dict) -> Any:
        if type(value) is _Reference:
            return self.references[value.index]
        if type(value) is _FromCall:
            return value.path.get(args, kwargs)
        if type(value) is list:  # this call's list itself, made once (Note [One object, one copy])
            for i, item in enumerate(value):
                found = self._unwrap(item, args, kwargs)
                if found is not item:
                    value[i] = found
        return value


# Note [A size stored into state]
# ``self.cumulative_length += key_states.shape[-2]`` (a sliding-window cache) in a pass with symbolic
# sizes stores a SymInt. Like a tensor stored there, it is a slot: the computation returns it, so the
# symbolic-size rewrite (jit/shapes.py) computes it from the call's sizes, and each call stores its own
# value. A SymInt the effects hold otherwise (inside an object the program made that ``outputs.split``
# does not take apart) would store the traced size on every call: such a pass keeps static shapes.
def _per_call(leaf: Any) -> bool:
    return isinstance(leaf, Proxy) or symbolic_number_class(leaf) is int


@dataclasses.dataclass(frozen=True, slots=True)
class _FromCall:
    """An object of the caller's stored somewhere (Note [The objects this call passes]): the object the
    call passes at ``path``. An input tensor itself, and a weak reference to one (LSTM's
    ``_flat_weight_refs``), are found at their paths by the values' rebuild (``Owner.inputs``, ``Owner.
    referents``, jit/outputs.py)."""

    path: Path


@dataclasses.dataclass(frozen=True, slots=True)
class _Reference:
    """An object of the caller's stored somewhere else: stored as the very object."""

    index: int


def _keyed_per_call(effect: Effect, owner: Owner) -> Effect:
    """``effect`` with a key the program made moved into its value, a ``"setitem_at"`` of ``(key, item)``
    (Note [A key the program made], jit/call_copies.py)."""
    if effect.kind == "setitem" and holds_made(effect.key, owner):
        return dataclasses.replace(effect, kind="setitem_at", key=None, value=(effect.key, effect.value))
    return effect


def _identity(value: Any) -> Any:
    return value


def _diff(obj: Any, path: Path, before: Any, after: Any, written: set[Any] = frozenset()) -> list[Effect]:
    kind, old = before
    new = after[1]
    if kind == "tensor":
        (old_attrs, old_grad), (new_attrs, new_grad) = old, new
        effects = [] if new_grad is old_grad else [Effect(path, "grad", "grad", new_grad)]
        return effects + _diff(obj, path, ("attrs", old_attrs), ("attrs", new_attrs), written)
    if kind == "cell":
        return [] if new is old else [Effect(path, "cell", None, new)]
    if kind == "buffer":
        return _buffer_diff(path, old, new)
    if kind == "deque":
        tail = _appended(old, new, obj.maxlen)
        if tail is not None:
            return [Effect(path, "extend", None, tail)] if tail else []
        return [Effect(path, "contents", None, new)]
    if kind == "list" and len(new) == len(old):  # items replaced in place: each its own effect
        return [Effect(path, "setitem", i, b) for i, (a, b) in enumerate(zip(old, new))
                if a is not b or i in written or i - len(new) in written]
    if kind == "list" and len(new) > len(old) and all(a is b for a, b in zip(old, new)):
        return [Effect(path, "extend", None, new[len(old):])]  # appended to: whatever the call's list holds
    if kind == "set":
        return _set_diff(path, old, new)
    if kind == "list":
        return [Effect(path, "contents", None, list(new))]
    setter, deleter = {"dict": ("setitem", "delitem"), "attrs": ("setattr", "delattr"),
                       "class": ("setattr", "delattr"), "slots": ("setslot", "delslot")}[kind]
    if kind == "slots":
        old = {k: v for k, v in old.items() if v is not MISSING}
        new = {k: v for k, v in new.items() if v is not MISSING}
    effects = [Effect(path, deleter, k, None) for k in old if k not in new]
    effects += [_item_set(path, setter, k, v) for k, v in new.items()
                if dict.get(old, k, MISSING) is not v or _noted(k, written)]
    kept_order = [*(k for k in old if k in new), *(k for k in new if k not in old)]
    if kind in ("dict", "attrs") and list(new) != kept_order:
        # reordered (a key popped and set again, ``move_to_end``; ``del o.n; o.n = v``), which item effects do
        # not say: an instance's own ``__dict__`` (its order is what ``vars(o)`` shows) is reordered as a dict
        if kind == "dict":
            effects.append(Effect(path, "order", None, tuple(plain_key(k) for k in new)))
        elif type(getattr(obj, "__dict__", None)) is dict and not isinstance(obj, type):
            effects.append(Effect(path.attr("__dict__"), "order", None, tuple(new)))
    return effects


def _item_set(path: Path, setter: EffectKind, key: Any, value: Any) -> Effect:
    """The effect of storing ``value`` at ``key``: at a key of each call's number where the key is a
    stand-in (Note [A key only stored], jit/pending_keys.py)."""
    if type(key) is PendingKey:
        return Effect(path, "setitem_at", None, (key.number, value))
    return Effect(path, setter, plain_key(key), value)


def _set_diff(path: Path, old: set, new: set, ops: list[SetOp] | None = None) -> list[Effect]:
    """A set's change: its ops in program order (Note [A set's changes in program order], jit/set_ops.py),
    else the elements added (``add``, replayed onto the set each call finds; a stand-in as its call's
    number: Note [An element only added], jit/pending_keys.py), else its whole contents."""
    if ops and explains(old, new, ops):
        elements = [k.number if type(k) is PendingKey else plain_key(k) for _o, each, _l in ops for k in each]
        return [Effect(path, "add", effect_key(ops), elements)]
    pending = [k.number for k in new if type(k) is PendingKey]
    # Note [A key of the computation's numbers]: a number's or text's element is its value
    plain = [plain_key(k) for k in new if type(k) is not PendingKey]
    if not pending and len(plain) == len(old) and all(k in old for k in plain):
        return []
    if all(k in plain for k in old):  # added to only
        return [Effect(path, "add", None, [*(k for k in plain if k not in old), *pending])]
    return [Effect(path, "contents", None, {*plain, *(number.specialize() for number in pending)})]


def _buffer_diff(path: Path, old: Any, new: Any) -> list[Effect]:
    """A ``bytearray``'s or ``array.array``'s change: the items appended (``extend``, replayed onto the
    buffer each call finds), else its whole contents; compared as bytes (an array's NaN is itself)."""
    before, after = _raw(old), _raw(new)
    if after == before:
        return []
    if after.startswith(before):
        return [Effect(path, "extend", None, _frozen(new[len(old):]))]
    return [Effect(path, "contents", None, _frozen(new))]


def _raw(buffer: Any) -> bytes:
    return bytes(memoryview(buffer))


def _frozen(items: Any) -> Any:
    """A bytearray's items as ``bytes``; an array's as the array copy they are."""
    return bytes(items) if issubclass(type(items), bytearray) else items


# Note [A key of the computation's numbers]
# A dict key or set element the program stored may be a proxy: text of the computation's numbers
# (``f"step {n}"``), or a number (``hist[state["step"]] = y``, ``cache[key]`` of an int argument,
# ``Counter()[int(x.argmax())] += 1``). Hashing it specialized it, so the entry is for its value and
# the effect stores that value. Stored as the proxy, the caller's dict kept jitcore's NumberProxy as a
# key, and a later call's read of it (its hash specializes the finished pass's number) gave a Counter
# the traced count: a wrong answer. A dict or set the program made and stored takes the same
# ``plain_key`` in ``outputs.split``, which also finds such keys of it (``_children``).


_ITEM_WRITERS = frozenset({"__setitem__", "setdefault", "update"})


def written_keys(fn: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple] | None:
    """(object, keys) a C call stores into: ``setattr(obj, name, v)``, a dict's ``__setitem__``,
    ``setdefault`` and ``update`` (its keywords and a dict's keys; pairs from an iterator are not read
    ahead of the call), called bound or through ``dict``; None for any other call."""
    if fn is setattr:
        return (args[0], (args[1],)) if len(args) == 3 else None
    if getattr(fn, "__name__", None) not in _ITEM_WRITERS:
        return None
    if isinstance(fn, types.MethodDescriptorType) and issubclass(fn.__objclass__, dict) and args:
        target, args = args[0], args[1:]
    elif isinstance(fn, types.BuiltinMethodType) and isinstance(fn.__self__, dict):
        target = fn.__self__
    else:
        return None
    if fn.__name__ != "update":
        return (target, args[:1]) if args else None
    return target, (*kwargs, *(args[0] if args and isinstance(args[0], dict) else ()))


def emptied_list(fn: Any, args: tuple) -> list | None:
    """The list a C call ``l.clear()`` (or ``list.clear(l)``) empties; None for any other call."""
    if getattr(fn, "__name__", None) != "clear":
        return None
    if isinstance(fn, types.BuiltinMethodType) and type(fn.__self__) is list and not args:
        return fn.__self__
    if fn is list.clear and len(args) == 1 and type(args[0]) is list:
        return args[0]
    return None


def _noted(key: Any, written: set[Any]) -> bool:
    try:
        return key in written
    except TypeError:  # an unhashable key
        return False


def _appended(old: list, new: list, maxlen: int | None) -> list | None:
    """The items a deque was extended by, when appending them to ``old`` gives ``new`` (a deque with
    ``maxlen`` drops as many from its left); None for any other change (``popleft``, ``rotate``)."""
    for dropped in range(len(old) + 1):
        kept = old[dropped:]
        if len(new) >= len(kept) and all(a is b for a, b in zip(kept, new)):
            tail = new[len(kept):]
            if dropped == 0 or (maxlen is not None and len(new) == maxlen
                                and len(old) + len(tail) - maxlen == dropped):
                return tail
    return None
