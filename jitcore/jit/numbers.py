"""Dynamic numbers in a tracing pass (``jit(fn, dynamic_numbers=...)``, jitcore/proxies/number.py).

While interpreting, C code that only hands numbers on (``zip``, ``list.append``, ``bisect``'s
comparisons: ``keeps_numbers``) gets the proxies, any other gets their values, and the python language
context's lookasides (``float(n)``, ``math.cos(n)``) are merged into the pass's tables
(``with_number_lookasides``). After interpretation the pass writes every dynamic number the program
specialized as the constant it is for the entry (``fold_specialized``) and drops recorded
arithmetic nobody uses (``drop_unused_arithmetic``); transforms that record below torch's Python
layer ask which numbers are still symbolic (``symbolic``) or make them all constants (``specialize``).

Invariants:
- a number input is guarded by value exactly when something the entry runs depends on its value;
- folding and specializing only ever replace a NumberProxy by the value its guards pin.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import functools
import operator
import types
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch

from jitcore.interpreter import current_run
from jitcore.ir import BoundSymbol, Proxy, Trace, drop_unread, value_leaves
from jitcore.langctx import python as python_langctx
from jitcore.prologue import Guard, Path, PrologueBuilder, inlined_guards
from jitcore.proxies.number import NumberProxy, replace_numbers

__all__ = ["SLOT_TYPES", "as_item_slot", "changed_number_arguments", "changed_state_numbers", "counters",
           "drop_unused_arithmetic", "fold_specialized", "indexed_objects", "keeps_numbers", "roots_used",
           "specialize", "symbolic", "values_in_lists", "values_in_objects", "with_number_lookasides"]


def symbolic(trace: Trace, prologue: PrologueBuilder,
             inputs: list[tuple[Path, NumberProxy]]) -> list[NumberProxy]:
    """The number inputs the trace uses that the program did not specialize (no value guard)."""
    pinned = {g.path for g in prologue.guards if g.kind == "value"}
    used = roots_used(trace)
    return [proxy for path, proxy in inputs if path not in pinned and id(proxy) in used]


def specialize(trace: Trace, prologue: PrologueBuilder, inputs: list[tuple[Path, NumberProxy]],
               unguarded: frozenset[int] = frozenset()) -> tuple[tuple[Guard, ...], frozenset[int]]:
    """What makes every number input a constant of the entry: a value guard for each the trace uses,
    and the positions of the trace's arguments (and the prologue's inputs) it no longer takes. For
    transforms that record below torch's Python layer, where numbers are values (the grad transform:
    autograd runs aten ops on them); their traces read ``NumberProxy.value``. ``unguarded``: ``id`` of
    the inputs that get no guard, computed outside such a trace (jitcore/transforms/state_numbers.py).
    Changes nothing."""
    if not inputs:
        return (), frozenset()
    numbers = {id(proxy) for _path, proxy in inputs}
    used = roots_used(trace)
    pinned = {g.path for g in prologue.guards if g.kind == "value"}
    guards = tuple(Guard(path, "value", proxy.value) for path, proxy in inputs  # an unused one needs none
                   if id(proxy) in used and path not in pinned and id(proxy) not in unguarded)
    return guards, frozenset(i for i, a in enumerate(trace.args) if id(a) in numbers)


def roots_used(trace: Trace) -> set[int]:
    """``id`` of each dynamic-number input the trace's records or output depend on."""
    used: set[int] = set()
    pending = list(trace.bound_symbols)
    leaves = value_leaves(trace.output)
    while pending:
        bsym = pending.pop()
        leaves.extend(value_leaves((bsym.args, bsym.kwargs)))
        pending.extend(bsym.subsymbols)
    for leaf in leaves:
        if isinstance(leaf, NumberProxy):
            used.update(id(root) for root in leaf.roots)
    return used


def fold_specialized(trace: Trace, specialized: set[int]) -> None:
    """Write a dynamic number, and what was computed from it, as a constant wherever the program
    specialized it (its value is guarded for the whole entry): the trace reads as it runs."""
    if not specialized:
        return

    def fold(value: Any) -> Any:
        if isinstance(value, NumberProxy) and all(id(r) in specialized for r in value.roots):
            return value.value
        if type(value) is slice:
            return slice(fold(value.start), fold(value.stop), fold(value.step))
        return value

    def rewrite(bsym: BoundSymbol) -> BoundSymbol:
        args, kwargs = optree.tree_map(fold, (bsym.args, bsym.kwargs), none_is_leaf=True)
        subsymbols = tuple(rewrite(b) for b in bsym.subsymbols)
        return dataclasses.replace(bsym, args=args, kwargs=kwargs, subsymbols=subsymbols)

    trace.bound_symbols[:] = [rewrite(b) for b in trace.bound_symbols]
    trace.output = optree.tree_map(fold, trace.output, none_is_leaf=True)


def drop_unused_arithmetic(trace: Trace) -> None:
    """Remove recorded arithmetic on dynamic numbers whose result nothing uses (library code computes
    numbers it then discards, or that it specialized): it is pure, so the trace need not run it."""
    drop_unread(trace, _is_arithmetic)


def _is_arithmetic(bsym: BoundSymbol) -> bool:
    return bsym.symbol.langctx == "python"


# ``int.__sub__(1, n)`` (the interpreter trying an operator's slots): a number's slot returns
# NotImplemented for a proxy, others read the value through the proxy's own methods.
SLOT_TYPES = (types.WrapperDescriptorType, types.MethodWrapperType)


_STORING_METHODS = frozenset({"append", "extend", "insert", "__setitem__", "setdefault", "update", "add",
                              "appendleft", "extendleft"})


# Builtins that hand their arguments' elements on without reading them (``zip(param_groups, lrs)`` in
# an LR scheduler): dynamic numbers stay names through them.
# ``bisect`` compares its argument with the list's elements: each comparison of a dynamic number is a
# predicate (``bisect_right(self._milestones, self.last_epoch)`` in SequentialLR).
# ``sum`` adds its items with ``+``, which a dynamic number records.
# ``dict`` stores its values as ``d[k] = v`` does (``dict(zip(names, args))`` in torch.fx's
# ``normalize_function``, which a subclass's ``return_and_correct_aliasing`` runs); a number used as a
# key is hashed, which specializes it; ``tuple.__new__`` makes a named tuple of them (fx's
# ``ArgsKwargsPair``).
# ``id``: the identity of the object handed, never of a copy with values (copy.deepcopy keys its memo by
# ids: the id of a dict copied for the call was reused, and the memo broke)
# ``types.SimpleNamespace(step=n)`` stores its keyword values as attributes (Note [Numbers stored into new
# objects]).
_PASSES_NUMBERS = frozenset({zip, enumerate, reversed, iter, list, tuple, tuple.__new__, dict, len, id,
                             isinstance, issubclass, type, bisect.bisect_left, bisect.bisect_right, sum,
                             types.SimpleNamespace})


def with_number_lookasides(table: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``table`` with the python language context's lookasides: ``float(n)``, ``int(n)``, ``abs(n)``,
    ``math.cos(n)`` of numbers that are names (dynamic numbers, ``t.item()`` reads) stay names, and
    ``float(t)`` of a one-element tensor is read as ``t.item()``. Where the table has its own (NumPy's
    ``abs`` of an array), that one serves every call without a number proxy."""
    merged = dict(table)
    for fn, for_numbers in python_langctx.LOOKASIDES.items():
        other = table.get(fn)
        chosen = for_numbers if other is None else functools.partial(_by_argument, for_numbers, other)
        merged[fn] = functools.partial(_handing_values, fn, chosen)  # Note [Objects handed to C hold values]
    return merged


def _handing_values(fn: Any, lookaside: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with values_in_objects(fn, args, kwargs):
        return lookaside(*args, **kwargs)


def _by_argument(for_numbers: Callable[..., Any], other: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:
    if any(issubclass(type(a), NumberProxy) for a in args):
        return for_numbers(*args, **kwargs)
    return other(*args, **kwargs)


def keeps_numbers(fn: Any) -> bool:
    """Whether the C callable ``fn`` is handed dynamic numbers as they are (a slot wrapper, a method
    that stores them, a builtin that passes or only compares them), not their values."""
    if isinstance(fn, SLOT_TYPES) or _stores(fn):
        return True
    try:
        return fn in _PASSES_NUMBERS
    except (TypeError, ValueError):  # an unhashable callable
        return False


def stores_items(fn: Any) -> bool:
    """Whether the C callable ``fn`` only stores its arguments as items of a list or deque
    (``log.append(text)``): values, never keys, so text made from numbers can stay deferred there."""
    owner = _storing_owner(fn)
    return owner is not None and issubclass(owner, (list, collections.deque))


# Note [An item set by operator.setitem]
# ``operator.setitem(s, "k", v)`` on a dict argument wrote nothing the caller saw: once ``s["k"]`` was a
# dynamic number (a counter), C was handed the values of the numbers (``specialize_all``), which made a
# copy of the dict, and the write went into that copy: ``s["k"]`` read back the old value, the entry
# replayed no store, and every call after it returned the first call's answer (eager 2, 3, 4, ...; jit 1,
# 1, 1: /tmp/eff53-probes/setitem_dbg2.py; ``operator.ior(s, {"n": ...})`` alike: wide2.py). For an exact
# dict, list or set, ``operator.setitem``/``delitem`` and the in-place operators call the type's own slot,
# so the call is made as ``dict.__setitem__(s, k, v)`` is: the container handed on as the program's own, a
# number stored a name.
_ITEM_SLOTS = (  # the operator function, its slot, the exact types it is the slot of here
    (operator.setitem, "__setitem__", (dict, list)), (operator.delitem, "__delitem__", (dict, list)),
    (operator.ior, "__ior__", (dict, set)), (operator.iand, "__iand__", (set,)),
    (operator.isub, "__isub__", (set,)), (operator.ixor, "__ixor__", (set,)),
    (operator.iadd, "__iadd__", (list,)), (operator.imul, "__imul__", (list,)),
)


def as_item_slot(fn: Any, args: tuple, kwargs: dict) -> Any:
    """``type(c).__setitem__`` (``__delitem__``, ``__ior__``, ...) for ``operator.setitem(c, ...)`` (and its
    other functions that change ``c`` in place) of an exact dict, list or set ``c`` (Note [An item set by
    operator.setitem]); ``fn`` for any other call (compared by identity: a callable may hash what it refers
    to)."""
    if kwargs or not args:
        return fn
    for function, slot, types_ in _ITEM_SLOTS:
        if fn is function:
            return getattr(type(args[0]), slot) if type(args[0]) in types_ else fn
    return fn


# Note [A list C is handed is the program's]
# C code is handed the values of dynamic numbers (``specialize_all``), which copies a container that holds
# one. A list is the exception: C may change it in place (``heapq.heappush(heap, n)``, ``heappop``,
# ``heapify``, ``bisect.insort``), and the copy took the change while the program's list kept its items:
# ``[heappop(heap) for _ in range(k)]`` gave the smallest item k times (test_heapq's test_heapsort, jitted,
# once the items were dynamic numbers). The items of a list handed to C are made their values in the list
# itself (tuples of numbers in it are copied with values, as ``specialize_all`` would), so C is handed the
# program's own list. The values are specialized, so the list holding them is the list the program would
# see on every call this entry serves.
def values_in_lists(handed: tuple, kinds: type | tuple[type, ...]) -> None:
    """Make the dynamic numbers (instances of ``kinds``) held by each ``list`` in ``handed`` their values,
    in place (Note [A list C is handed is the program's])."""
    if not kinds:
        return
    for value in handed:
        if type(value) is list:
            for i, item in enumerate(value):
                made = replace_numbers(item, _specialized, kinds)
                if made is not item:
                    list.__setitem__(value, i, made)


def _specialized(number: Any) -> Any:
    return number.specialize()


# Note [Objects handed to C hold values]
# A program's object that holds a dynamic number (``o.ind = n``) and is handed to C code that asks it for
# a number (``range(o)``, ``bool(o)``, ``hash(o)``, ``[0] * o``) has its ``__index__``/``__bool__``/... run
# natively by C, past the interpreter: it returned the proxy, which C refused ("__index__ returned non-int
# (type NumberProxy)"). For the duration of such a call the object's numbers are their values, specialized
# (C may read any of them), and the proxies are put back after it where the call left the item or
# attribute as it was. The numbers are those the method can reach without a call: the object's own, and
# those of the plain objects, lists and dicts it holds, two levels down (``self.inner.n``,
# ``self.sizes[0]``). Only objects whose class defines one of those methods in Python are so treated, passed
# directly, as a slice's bound, or as an item of a list, tuple, set, deque or dict (``bytes([o, o])``,
# ``struct.pack("2b", *objs)``, ``array.array("b", objs)``); others are handed on as they are, their numbers
# kept. At most ``_WALK_LIMIT`` objects are looked at per call. Where the interpreter runs the protocol
# itself (a sequence's index, truth) it calls the method interpreted instead (Note [A stand-in's number is
# given to C as its value], interpreter/protocols.py).
_NUMBER_METHODS = ("__index__", "__int__", "__float__", "__complex__", "__bool__", "__hash__",
                   "__length_hint__")
_CONTAINERS = (list, tuple, set, frozenset, collections.deque, dict)
_WALK_LIMIT = 10_000


@contextlib.contextmanager
def values_in_objects(fn: Any, args: tuple, kwargs: dict) -> Any:
    """Note [Objects handed to C hold values]: while the C callable ``fn`` runs, the dynamic numbers that
    the objects it is handed can reach, where it may ask them for a number, are their values."""
    swapped: list[tuple[Any, Any, NumberProxy, Any]] = []
    if not _stores(fn):
        walk = _Walk(swapped)
        for obj in _handed(args, kwargs):
            if type(obj) in _CONTAINERS:
                for item in obj.values() if type(obj) is dict else obj:
                    if walk.left <= 0:
                        break
                    walk.left -= 1
                    if _asks_for_numbers(type(item)):
                        walk.held_by(item, 2)
            elif _asks_for_numbers(type(obj)):
                walk.held_by(obj, 2)
    try:
        yield
    finally:
        for holder, key, proxy, value in reversed(swapped):
            if type(holder) is list:
                if key < len(holder) and holder[key] is value:
                    holder[key] = proxy
            elif holder.get(key, holder) is value:
                holder[key] = proxy


class _Walk:
    """The numbers reachable from objects handed to C, swapped for their values (Note [Objects handed to C
    hold values])."""

    def __init__(self, swapped: list) -> None:
        self.swapped, self.seen, self.left = swapped, set(), _WALK_LIMIT

    def held_by(self, obj: Any, depth: int) -> None:
        if id(obj) in self.seen or self.left <= 0:
            return
        self.seen.add(id(obj))
        self.left -= 1
        kind = type(obj)
        if kind is list:
            self._swap(obj, enumerate(obj), depth)
        elif kind is dict:
            self._swap(obj, list(obj.items()), depth)
        elif kind in _CONTAINERS:
            if depth:
                for item in obj.values() if kind is dict else list(obj):
                    self.held_by(item, depth - 1)
        elif not issubclass(kind, (NumberProxy, Proxy, type, types.ModuleType, types.FunctionType)):
            try:
                held = object.__getattribute__(obj, "__dict__")
            except Exception:  # noqa: BLE001 - no instance dict (slots, a C object): nothing held there
                return
            if type(held) is dict:
                self._swap(held, list(held.items()), depth)

    def _swap(self, holder: Any, items: Any, depth: int) -> None:
        for key, value in items:
            if isinstance(value, NumberProxy):
                holder[key] = value.specialize()
                self.swapped.append((holder, key, value, holder[key]))
            elif depth and type(value) not in _NUMBERS:
                self.held_by(value, depth - 1)


_NUMBERS = (int, float, bool, complex, str, bytes, type(None))


def _handed(args: tuple, kwargs: dict) -> list[Any]:
    handed = [*args, *kwargs.values()]
    handed += [bound for s in handed if type(s) is slice for bound in (s.start, s.stop, s.step)]
    return handed


def _asks_for_numbers(cls: type) -> bool:
    return not issubclass(cls, (NumberProxy, type)) and \
        any(type(getattr(cls, name, None)) is types.FunctionType for name in _NUMBER_METHODS)


# Note [Index objects handed to torch]
# torch takes an object whose class defines ``__index__`` where it takes an int (``x[:o]``, ``x[o]``,
# ``x.view(o, -1)``, ``torch.zeros(o)``, ``x.narrow(0, 0, o)``) and calls its ``__index__`` natively from
# C. Where that method returns a dynamic number (``return self.n``), torch refused the proxy ("__index__
# returned non-int (type NumberProxy)"), and the recorded call held the object itself. Each such object in a
# torch call's arguments (in slices, tuples and lists too) is replaced by ``operator.index(o)`` run
# interpreted, as CPython's ``PyNumber_Index`` would run the method: the number it returns (a name where it
# is a dynamic number) is what the call records (the pass records the call again with the indices, its
# first record spliced away). Only classes that define ``__index__`` in Python, and are not tensors or
# torch's symbolic numbers (the sizes the pass gives as SymInts), are so treated.
_TORCH_NUMBERS = (torch.SymInt, torch.SymFloat, torch.SymBool)  # torch's own, which it takes as they are


def indexed_objects(value: Any) -> Any:
    """``value`` with each object of a Python ``__index__`` replaced by its index, computed interpreted
    (Note [Index objects handed to torch])."""
    kind = type(value)
    if kind in _NUMBERS or kind is torch.dtype or isinstance(value, (Proxy, torch.Tensor)):
        return value
    if kind is slice:
        bounds = (value.start, value.stop, value.step)
        given = tuple(indexed_objects(b) for b in bounds)
        return value if all(a is b for a, b in zip(given, bounds)) else slice(*given)
    if kind is tuple or kind is list:
        given = [indexed_objects(v) for v in value]
        return value if all(a is b for a, b in zip(given, value)) else kind(given)
    if kind is dict:
        given = {k: indexed_objects(v) for k, v in value.items()}
        return value if all(given[k] is v for k, v in value.items()) else given
    if type(getattr(kind, "__index__", None)) is types.FunctionType and not issubclass(kind, _TORCH_NUMBERS):
        return current_run().call(operator.index, value)
    return value


# Note [Numbers stored into new objects]
# ``dataclasses.replace(cfg, step=cfg.step + 1)`` of a frozen dataclass, returned or stored, was an entry
# per step although ``cfg.step`` becomes a dynamic number after one change (Note [Numbers that change
# between calls become dynamic]): the frozen class's ``__init__`` sets each field with
# ``object.__setattr__(self, name, value)``, and the class defines ``__hash__`` in Python, so the call
# that set the second field was handed an object that "asks for numbers" (Note [Objects handed to C hold
# values]) holding the first field's dynamic number, which was specialized and guarded by value.
# ``object.__setattr__`` stores into the instance's ``__dict__`` and asks no object for a number, as
# ``setattr`` does; ``types.SimpleNamespace(step=n)`` likewise only stores its keyword values. Both now
# keep dynamic numbers as names: the new object holds the number computed per call, and a branch on it
# still guards its predicate.
_STORING_SLOTS = (object.__setattr__,)


def _stores(fn: Any) -> bool:
    """A C method that only stores its arguments in a container (``log.append(loss.item())``) or an
    object (Note [Numbers stored into new objects]): a number stays a name there (the effect stores
    its value per call, jitcore/jit/effects.py)."""
    if fn is setattr or any(fn is slot for slot in _STORING_SLOTS):
        return True
    owner = _storing_owner(fn)
    return owner is not None and issubclass(owner, (list, dict, set, collections.deque))


def _storing_owner(fn: Any) -> type | None:
    """The class of a storing method's receiver (``list.append(log, n)`` is called with its receiver,
    ``log.append(n)`` is bound to it); None for a callable that is not one of ``_STORING_METHODS``."""
    if getattr(fn, "__name__", "") not in _STORING_METHODS:
        return None
    if isinstance(fn, types.MethodDescriptorType):
        return fn.__objclass__
    return type(getattr(fn, "__self__", None))


# Note [Numbers that change between calls become dynamic]
# A number argument is specialized by default (one entry per value), as torch.compile does on its
# first trace. When a miss finds an entry that pins a top-level int or float argument by value and
# the call passes another value of the same type (``step(x, 3)`` after ``step(x, 2)``), the next
# trace takes that argument as a dynamic number, as if it were named in ``dynamic_numbers``
# (torch.compile's automatic dynamic does the same for ints). The argument then stays dynamic for
# every later trace of the function. Where the program needs its value (a size, an index), the number
# specializes again and is guarded by value (never wrong, only a trace per value, as before);
# ``jit(fn, dynamic=False)`` keeps every number specialized.
# A number the program reads from state is treated alike (``changed_state_numbers``): a learning rate
# that a scheduler stepped outside the jitted training step (``group["lr"]``), a temperature annealed
# between calls. Pinned by value, each step was one more trace (torch.compile recompiles the same way
# until its cache limit, and documents wrapping the rate in a tensor). The next trace binds that path
# as a dynamic number, as it binds a number the program reads and writes back (``counters``,
# jit/effects.py): the prologue reads it each call and checks only its type.
def changed_number_arguments(prologues: list[Any], args: tuple, kwargs: dict,
                             names: list[str]) -> frozenset[str]:
    """The parameter names (``names[i]`` for ``args[i]``, the key for keyword arguments) of top-level
    int and float arguments that some prologue pins by value to another value of the same type
    (Note [Numbers that change between calls become dynamic])."""
    found: set[str] = set()
    for prologue in prologues:
        for guard in prologue.guards:
            path = guard.path
            if guard.kind != "value" or len(path.steps) != 1 or path.root.kind not in ("args", "kwargs"):
                continue
            expected, step = guard.expected, path.steps[0]
            if type(expected) not in (int, float):
                continue
            container = args if path.root.kind == "args" else kwargs
            try:
                value = container[step.value]
            except (IndexError, KeyError, TypeError):
                continue
            if type(value) is type(expected) and value != expected:
                found.add(names[step.value] if path.root.kind == "args" else step.value)
    return frozenset(found)


def changed_state_numbers(prologues: list[Any], args: tuple, kwargs: dict) -> frozenset[Any]:
    """The paths of int and float state (anything but a top-level argument: ``args[1].param_groups[0]
    ['lr']``, a global's attribute, a number item of a tuple there) that some prologue pins by value to
    another value of the same type (Note [Numbers that change between calls become dynamic]). A path
    that calls a method is never read here."""
    found: set[Any] = set()
    for prologue in prologues:
        for guard in _with_grouped(prologue.guards):
            path, expected = guard.path, guard.expected
            if guard.kind == "contents":  # Note [A list of numbers that changed between calls]
                found.update(_changed_items(path, expected, args, kwargs))
                continue
            if guard.kind != "value" or type(expected) not in (int, float, tuple) \
                    or path.root.kind in ("args", "kwargs") and len(path.steps) == 1 \
                    or any(s.kind == "call" for s in path.steps):
                continue
            try:
                value = path.get(args, kwargs)
            except Exception:  # noqa: BLE001 - the state no longer has that shape: the guard says so
                continue
            if type(expected) is not tuple:
                found.update(_changed(path, expected, value))
            elif type(value) is tuple and len(value) == len(expected):  # Note [A tuple of counters]
                for i, (was, now) in enumerate(zip(expected, value)):  # (jit/effects.py): Adam's betas
                    found.update(_changed(path.index(i), was, now))
    return frozenset(found)


# Note [A list of numbers that changed between calls]
# A list or deque of state holding only numbers that the program reads whole (``sum(ring)`` over a
# deque of the recent losses, ``heapq.heappush(top, v)`` on a heap of the best ones) was guarded by its
# contents: every call that found other numbers there traced again, for ever (a deque with ``maxlen``
# keeps its length once full, yet each step shifts new numbers in). Where a prologue pinned such a
# container's contents and the call finds the same length, each int or float item that holds another
# number of its type is a counter from the next trace on, as a number written back is: the container is
# then walked item by item (its type and length guarded), each such item bound as a dynamic number in
# its place for the pass (Note [Counters bound where they are held], jit/held_counters.py), so C code
# summing or comparing the items sees the traced numbers; a branch on one guards its predicate. What
# the program leaves in the container is diffed into effects as before, the numbers it moved (a
# deque's append that drops its oldest item) replayed with the values each call finds.
def _changed_items(path: Any, expected: Any, args: tuple, kwargs: dict) -> tuple[Any, ...]:
    """The item paths of a list or deque pinned to the numbers ``expected`` that now holds as many
    items, some of them other numbers of the same type (Note [A list of numbers that changed between
    calls])."""
    if any(s.kind == "call" for s in path.steps) or type(expected) is not tuple or not expected \
            or not all(type(v) in (int, float) for v in expected):
        return ()
    try:
        value = path.get(args, kwargs)
    except Exception:  # noqa: BLE001 - the state no longer has that shape: the guard says so
        return ()
    if type(value) not in (list, collections.deque) or len(value) != len(expected):
        return ()
    return tuple(p for i, (was, now) in enumerate(zip(expected, value))
                 for p in _changed(path.index(i), was, now))


def _with_grouped(guards: tuple[Any, ...]) -> Iterator[Any]:
    """``guards``, with a grouped check replaced by the guards it stands for (Note [Module state as one
    check], jit/module_guards.py): a jitted module's ``self.temperature``."""
    for guard in guards:
        yield from inlined_guards(guard) or (guard,)


def _changed(path: Any, expected: Any, value: Any) -> tuple[Any, ...]:
    """``(path,)`` where an int or float pinned to ``expected`` now holds another number of its type."""
    if type(expected) in (int, float) and type(value) is type(expected) and value != expected \
            and value == value:  # a NaN is never equal to itself: that is no change
        return (path,)
    return ()


def counters(effects: list[Any], value_guarded: Callable[[Path], bool]) -> set[Path]:
    """Paths of numbers the program read and wrote back (``counter[0] += 1``, ``self.steps += 1``).

    Pinned by value, such a number would retrace every call; the jit traces again with them as
    dynamic numbers (jitcore/jit/numbers.py), so the write is replayed as arithmetic on the value
    each call finds, and the value is guarded only where the program branches on it.
    """
    found: set[Path] = set()
    for effect in effects:
        if _is_number(effect.value):  # best = loss.item()
            found.update(p for p in effect.locations() if value_guarded(p))
        elif type(effect.value) is tuple and any(_is_number(v) for v in effect.value):
            # Note [A tuple of counters]: Adam's ``group["betas"] = (momentum, beta2)`` (OneCycleLR)
            found.update(p.index(i) for p in effect.locations() if value_guarded(p)
                         for i, v in enumerate(effect.value) if _is_number(v))
    return found


# Note [A tuple of counters]
# A scheduler that cycles momentum writes a tuple back where the optimizer reads it
# (``group["betas"] = (m, beta2)``: OneCycleLR and CyclicLR with Adam). Guarded by value, the tuple
# made an entry per step. Its number items are counters like a number written back: the next pass binds
# the tuple item by item (Provenance.bind_state), each counter a dynamic number, each other item guarded
# by value, the tuple by its type and length.
def _is_number(value: Any) -> bool:
    return type(value) in (int, float) or isinstance(value, NumberProxy)
