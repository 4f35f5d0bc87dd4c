"""Objects the program makes that hold nothing traced, made anew for each call as eager makes them.

The trace prints tuples, lists and dicts as literals; any other object a program returns or stores (a
set, an instance of the program's class, a deque, a ``WeakSet``) is made for each cached call as a deep
copy of the pass's (``made_anew``, used by jit/outputs.py for the output and the stored values).

Invariants:
- one memo per call: every copy one call makes, for its output and for each of its effects, shares it, so
  an object reachable from two places is one copy (``one_call``, ``in_one_call``);
- the caller's objects, tensors and torch's other objects a made object reaches are never copied: the
  memo holds them as themselves, and an object the caller passes (an argument, or reached through one)
  as the object this call passes at its path (Note [The objects this call passes]);
- weak references, weak containers and finalizers are made as the program made them, around the call's
  copies (jit/weak_copies.py);
- a function the program made is made again per call over cells of its own, and a class it made (or an
  instance of one) is refused (jit/made_functions.py);
- an object no copy makes faithfully (``copy.deepcopy`` refuses it, its class copies itself with code of
  its own, a weak object jit/weak_copies.py does not know) is refused while tracing: the call is an eager
  entry (JC-T001), never a shared object.
"""

from __future__ import annotations

import array
import collections
import contextvars
import copy
import dataclasses
import decimal
import enum
import fractions
import functools
import gc
import sys
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import Proxy
from jitcore.jit import copy_plans, weak_copies
from jitcore.jit.code_kinds import class_module
from jitcore.jit.made_classes import class_parts, library_maker, remake_class
from jitcore.jit.made_functions import (
    function_parts,
    refused_class,
    remake_function,
)

__all__ = ["Owner", "function_per_call", "holds_made", "in_one_call", "made_anew", "made_in_call",
           "makers_made", "one_call", "one_per_call", "passed_object", "programs_own", "readers_made"]


def _nowhere(_obj: Any) -> Any:
    return None


def _never(_obj: Any) -> bool:
    return False


def _no_class(_cls: type) -> str | None:
    return "jitcore does not know how it was made"


@dataclasses.dataclass(frozen=True, slots=True)
class Owner:
    """Whose an object is (``whose``: "fixed", "call" or None, jit/effects.py ``StateSnapshots.owner``),
    and where each call passes one of the caller's objects that is "call"'s (``passed_at``: the path, a
    ``jitcore.prologue.paths.Path``, from the call's arguments; None where none leads to it)."""

    whose: Callable[[Any], str | None]
    passed_at: Callable[[Any], Any] = _nowhere
    shared: frozenset[int] = frozenset()  # the program's objects reached twice (Note [One object, one copy])
    # the caller's tensors, by the id of their proxies: where each call passes each (the effects' values)
    inputs: dict[int, Any] = dataclasses.field(default_factory=dict)
    # the caller's tensors and their proxies, by id: where each call passes each (Note [A weak reference
    # to the caller's tensor], jit/outputs.py)
    referents: dict[int, Any] = dataclasses.field(default_factory=dict)
    # whether the program made a function or class in this pass (jit/made_functions.py ``MadeHere``)
    made: Callable[[Any], bool] = _never
    # why a class the program made cannot be made again per call (None: it can; jit/made_classes.py)
    class_refusal: Callable[[type], str | None] = _no_class

    def __call__(self, obj: Any) -> str | None:
        return self.whose(obj)

# Note [Objects the program makes, anew on every call]
# The trace prints tuples, lists and dicts as literals, so each call's are new; any other object in what
# the program returns or stores was a constant: the very object the pass made, handed to every call. A
# set, an instance of the program's class or a deque (``return x + 1, Info(steps=[])``, ``self.seen =
# set()``) was one object across calls: what the caller did to one call's showed in the next call's. Such
# an object is made anew for each call as a deep copy of the pass's, whose memo holds, as themselves, the
# objects it reaches that are the caller's (``owner``), tensors and torch's other objects (``deepcopy``
# itself keeps classes, functions and modules). An object ``deepcopy`` cannot copy (a lock), or copies by
# running the program's own code (a ``__deepcopy__``, ``__reduce__`` or ``__reduce_ex__`` of a class
# outside the standard library: eager never runs it), is refused while tracing: the call runs eagerly.
# The C types made anew include ``array.array`` (``arr.append`` by the caller showed in the next call's)
# and ``memoryview`` (no copy is faithful: refused), which have no ``__dict__``, and ``frozenset``: eager's
# is a new object per call (a weak reference to one call's dies with it). ``Fraction``, ``Decimal``,
# ``range`` and a ``MappingProxyType`` over the program's dict are made anew too (Note [Immutable objects
# the program makes, anew on every call]); numbers and text are shared, as eagerly a number or a string
# the program computes may be.
_MUTABLE_BUILTINS = (set, bytearray, collections.deque, collections.OrderedDict, collections.defaultdict,
                     collections.Counter, list, dict, array.array, memoryview, frozenset)
_ATOMS = (int, float, bool, str, bytes, complex, type(None))
# Note [Immutable objects the program makes, anew on every call]
# ``return Fraction(1, 3)``, ``Decimal("1.5")``, ``range(3)``: eagerly each call makes a new object;
# ``deepcopy`` returns these as themselves, so every cached call handed on the pass's (``seen.append(r)``
# held one object three times, where eager holds three). Each is made again per call from its reduction
# (``Fraction(1, 3)``), by the call's memo. A ``MappingProxyType`` over a dict the program made is made
# again over the call's copy of the dict: it was the pass's proxy over the pass's dict, so a list inside
# grew across calls, and a change the caller made to the dict returned beside it did not show through it.
# (A proxy over a class's namespace, ``vars(C)``, is the class's: shared, as the class is.)
_REMADE_ATOMS = (fractions.Fraction, decimal.Decimal, range)
_COPY_HOOKS = ("__deepcopy__", "__reduce__", "__reduce_ex__")
# what ``deepcopy``'s reconstruction calls on a copy (Note [A copy runs no code of the program's])
_REBUILT_BY = ("__new__", "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__",
               "__setitem__", "append", "extend")
_REBUILT_BY_CALLING = (set, frozenset, collections.deque)  # their reduction calls the class itself


def programs_own(value: Any) -> bool:
    """Whether ``value`` is a mutable container or an instance of a class of Python code's (a weak
    reference to one too)."""
    kind = type(value)
    if kind in _MUTABLE_BUILTINS or kind in _REMADE_ATOMS:
        return True
    if kind is types.MappingProxyType:  # Note [Immutable objects the program makes, anew on every call]
        return _proxied_dict(value) is not None
    if kind is weakref.ref:
        target = value()
        return target is not None and programs_own(target)
    if _bound_to_made(value):  # Note [A method of an object the program made]
        return True
    module = class_module(kind)  # (Note [A class's __module__ that is no name])
    if module == "builtins" or module.split(".")[0] in ("torch", "jitcore"):
        return False  # functions, frozensets, ...; torch's objects (symbolic numbers, placements); jitcore's
    if issubclass(kind, (type, types.ModuleType, torch.Tensor, enum.Enum)):
        return False
    return hasattr(value, "__dict__") or any(getattr(k, "__slots__", ()) for k in kind.__mro__[:-1])


_NOTHING: Mapping[int, Any] = types.MappingProxyType({})  # (``_CallMemo``'s until filled)


class _CallMemo(dict):
    """A ``copy.deepcopy`` memo for one call: the objects every call shares as themselves, and the weak
    objects made as the program made them when a copy first reaches them (``deepcopy`` asks ``get``)."""

    __slots__ = ("call", "functions", "trial", "weak")

    def __init__(self, trial: bool = False) -> None:  # (no ``dict.__init__``: the dict is empty already)
        # the weak objects and, Note [A function the program made] (jit/made_classes.py), the functions and
        # classes the program made: read-only and shared until ``note`` fills them (most calls' memos
        # never do: a cached call opens one per call, Note [Effects that perform nothing], jit/effects.py)
        self.weak: Mapping[int, Any] = _NOTHING
        self.functions: Mapping[int, Any] = _NOTHING
        self.trial = trial  # the pass's trial copy: a finalizer is made detached
        self.call: tuple[tuple, dict] | None = None  # this call's (args, kwargs), where the effects run

    def note(self, weak: dict[int, Any], functions: dict[int, Any]) -> None:
        """Put ``weak`` objects and ``functions`` the program made where ``get`` finds them."""
        if weak:
            self.weak = {**self.weak, **weak}
        if functions:
            self.functions = {**self.functions, **functions}

    def passed(self, found: Any, path: Any) -> Any:
        """The object this call passes at ``path``, where the pass found ``found`` (Note [The objects
        this call passes]); ``found`` itself in the pass's trial copy."""
        return found if self.call is None else path.get(*self.call)

    def get(self, key: int, default: Any = None) -> Any:
        found = dict.get(self, key, _NIL)
        if found is not _NIL:
            return found
        original = self.weak.get(key)
        if original is None:
            made = self.functions.get(key)
            if made is None:
                return default
            if isinstance(made, type):
                return remake_class(made, self, self.copied)
            if isinstance(made, enum.Enum):  # a member of an Enum it made (Note [An Enum it made])
                member = self.copied(type(made))[made._name_]
                self[key] = member
                return member
            if type(made) is types.FunctionType:
                return remake_function(made, self, self.copied)
            return self._remade(key, made)
        if type(original) is types.BuiltinMethodType:  # Note [A method of an object the program made]
            made = getattr(self.copied(original.__self__), original.__name__)
            self[key] = made
            return made
        return weak_copies.remake(original, self, self.copied, register=not self.trial)

    def copied(self, value: Any) -> Any:
        return copy.deepcopy(value, self)

    def _remade(self, key: int, atom: Any) -> Any:
        """This call's copy of an immutable object (Note [Immutable objects the program makes, anew on every
        call])."""
        if type(atom) is types.MappingProxyType:
            made = types.MappingProxyType(self.copied(_proxied_dict(atom)))
        else:
            maker, args = atom.__reduce__()
            made = maker(*args)
        self[key] = made
        self.setdefault(id(self), []).append(atom)  # kept alive, as ``deepcopy`` keeps what it copies
        return made


def _proxied_dict(proxy: types.MappingProxyType) -> dict | None:
    """The dict a ``MappingProxyType`` shows, where that is no class's namespace (None where it is, or
    where the proxy shows another mapping)."""
    found = gc.get_referents(proxy)
    if len(found) != 1 or type(found[0]) is not dict:
        return None
    return None if any(isinstance(r, type) for r in gc.get_referrers(found[0])) else found[0]


_NIL = object()

# Note [One call's copies share their objects]
# Two objects the program made may hold one object (``self.obj = Obj(); self.fs = WeakSet([self.obj])``,
# test_weakset's setUp; ``self.info = Info(); return self.info``). Copied each with a memo of its own, a
# call's ``self.fs`` held a copy of ``self.obj`` that nothing else held (gone at once), and the returned
# object was not the stored one. All the copies one call makes, for its output and for its effects, share
# one memo, as one ``deepcopy`` of them all would: ``in_one_call`` opens it around the call's rebuilding
# (jit/effects.py ``Effects.finish``, which also rebuilds the output), ``one_call`` around the output's
# rebuild where the program has no effects; an inner one uses the memo already open.
_MEMO: contextvars.ContextVar[_CallMemo | None] = contextvars.ContextVar("jitcore_call_memo", default=None)


def in_one_call(run: Callable[..., Any], call: tuple[tuple, dict] | None = None, *args: Any) -> Any:
    """``run(*args)`` with the copies it makes sharing one memo (Note [One call's copies share their
    objects]); ``call``: the call's (args, kwargs), where the objects it passes are found. (``args``: a
    cached call passes its output here instead of making a closure, Note [Effects that perform nothing],
    jit/effects.py.)"""
    memo = _MEMO.get()
    if memo is not None:
        if call is not None and memo.call is None:
            memo.call = call
        return run(*args)
    memo = _CallMemo()
    memo.call = call
    token = _MEMO.set(memo)
    try:
        return run(*args)
    finally:
        _MEMO.reset(token)


def one_call(rebuild: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``rebuild`` run ``in_one_call``."""

    def rebuild_one_call(results: Any) -> Any:
        if _MEMO.get() is not None:
            return rebuild(results)
        token = _MEMO.set(_CallMemo())  # (``in_one_call``'s, without its closure: on every cached call)
        try:
            return rebuild(results)
        finally:
            _MEMO.reset(token)

    return rebuild_one_call


_MAKERS = [0]  # how many ``made_anew`` has made: whether a split makes objects anew (``makers_made``)
_READERS = [0]  # how many of those read the objects the call passes (``readers_made``)


def makers_made() -> int:
    """How many functions ``made_anew`` and ``passed_object`` have made so far."""
    return _MAKERS[0]


def readers_made() -> int:
    """How many of them read the objects a call passes: the output's rebuild needs the call's arguments
    (the call's effects run it: jit/interpretation.py)."""
    return _READERS[0]


# Note [The objects this call passes]
# ``o = Holder(acc); o.items.append(x + 1); return o``: eagerly ``o.items is acc``, the list this call
# passes. The program saw a copy of the caller's list (Note [Returning the caller's objects],
# jit/effects.py), and the object it made held that copy: every cached call's ``o.items`` was the pass's
# copy, not the caller's list (which got the append), and an argument object (``Holder(cfg)``) was the
# first call's ``cfg``. An object of the caller's that a path from the arguments reaches (``Owner.
# passed_at``) is, in each call's copies and in what the program returns or stores, the object this call
# passes at that path (its arguments as the call began, where the effects find their targets); an object
# of fixed state (a global's list) is the very object, as before.
def passed_object(found: Any, path: Any) -> Callable[[Any], Any]:
    """A rebuild giving the object each call passes at ``path`` (the pass found ``found`` there)."""
    _MAKERS[0] += 1
    _READERS[0] += 1

    def passed(_results: Any) -> Any:
        memo = _MEMO.get()
        return found if memo is None else memo.passed(found, path)

    return passed


# Note [One object, one copy]
# ``o = Info(x + 1); store.append(o); return o``: eagerly ``ret is store[-1]``. An object holding tensors
# is made again per call from a template (jit/outputs.py), once for each place the rebuild meets it: the
# output's, each effect's (``store.append(o)``, ``G.append(o)``, ``arg.last = o``), each item of
# ``(o, o)``; a list or dict the trace prints was one list for the output and another for the stored
# value. An object the program made that the output and the effects reach more than once (``Owner.
# shared``, found before the rebuilds are made: outputs.reached_twice) is rebuilt once per call: the
# first rebuild puts it in the call's memo under the pass's object, the others take it from there, as
# the deep copies do (Note [One call's copies share their objects]).
def one_per_call(found: Any, rebuild: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    """``rebuild`` (None: the results as they are) made once per call for the pass's object ``found``
    (Note [One object, one copy])."""
    _MAKERS[0] += 1

    def once(results: Any) -> Any:
        memo = _MEMO.get()
        made = _NIL if memo is None else dict.get(memo, id(found), _NIL)
        if made is _NIL:
            made = results if rebuild is None else rebuild(results)
            if memo is not None:
                memo[id(found)] = made
        return made

    return once


def function_per_call(fn: types.FunctionType, state: Callable[[Any], list[Any]]) -> Callable[[Any], Any]:
    """A rebuild making ``fn``, a function the program made over traced values, again once per call: a new
    function in the call's memo first, then ``state(results)`` (its parts, laid out as
    jit/made_functions.py ``function_state``) given to it (Note [A closure over traced values],
    jit/outputs.py), by a maker compiled once (Note [A copy planned once per entry])."""
    _MAKERS[0] += 1
    make = copy_plans.function_maker(fn)

    def remade(results: Any) -> Any:
        memo = _MEMO.get()
        return make(_CallMemo() if memo is None else memo, lambda: state(results))

    return remade


def made_in_call(fn: types.FunctionType) -> Callable[[Any], Any]:
    """A rebuild giving this call's ``fn``, which ``function_per_call`` put in the call's memo before
    rebuilding what holds this (a function in its own cell, two functions holding each other)."""

    def found(_results: Any) -> Any:
        return dict.get(_MEMO.get() or {}, id(fn))

    return found


# Note [A key the program made]
# ``k = Obj(); GD[k] = x + 1; return k``: eagerly each call stores at its own new key, the one it
# returns. The effect's key was a constant of the entry, the pass's ``k``: every cached call stored at
# that one key (``GD`` held one item after three calls, and no returned key was in it). An item stored at
# a key that holds an object the program made (itself, or inside a tuple) is stored at a key made per
# call, like a value: the effect becomes a ``"setitem_at"`` whose value is ``(key, item)`` (jit/effects.py
# ``_keyed_per_call``), so the key is made anew with the call's other copies and is the object the call
# returns (Note [One object, one copy]).
def holds_made(key: Any, owner: Owner) -> bool:
    """Whether ``key`` is, or holds in a tuple, an object the program made (Note [A key the program
    made])."""
    if type(key) is tuple:
        return any(holds_made(item, owner) for item in key)
    return (programs_own(key) or owner.made(key)) and owner(key) is None


# Note [A copy planned once per entry]
# A deep copy through the call's memo finds out again on every call what each object is (``deepcopy``'s
# dispatch, reductions, the memo's hooks for the functions and classes the program made): a closure
# over a list cost 20 us per cached call, a class 150 us, where eager makes them in 2-20 us. Where every
# object the pass's object reaches is a list, dict, tuple, set, plain instance, function or class the
# program made, an atom or the caller's, ``made_anew`` writes once the function that makes this call's
# copy (jit/copy_plans.py), each object's lines doing what ``deepcopy`` did for it, in the same order and
# with the same memo entries; the rest (weak objects, methods, deques, ``Fraction`` ...) is copied as before.
def made_anew(value: Any, owner: Owner) -> Callable[..., Any]:
    """A function making ``value``, an object the program made (``programs_own``), anew for a call (its one
    optional argument, the computation's results where it is an output's rebuild, is not read)."""
    _MAKERS[0] += 1
    kept, weak, passed, functions = _walk(value, owner)
    if passed:
        _READERS[0] += 1
    trial = _CallMemo(trial=True)
    trial.update(kept)
    trial.update({key: found for key, (found, _path) in passed.items()})
    trial.note(weak, functions)
    try:
        copy.deepcopy(value, trial)
    except Exception as error:  # noqa: BLE001 - any failure of the object's own copying
        raise _refused(value, f"{type(error).__name__}: {error}") from None
    finalizers = [item for item in weak.values() if isinstance(item, weakref.finalize)]
    for item in finalizers:
        weak_copies.take_finalizer(item)  # Note [A finalizer of an object the program made]
    planned = None if weak else copy_plans.plan(value, kept, passed, functions, _MEMO.get, _CallMemo)
    if planned is not None:  # Note [A copy planned once per entry]
        return planned  # (also an output's rebuild: its one argument, the results, unread)

    def make(_results: Any = None) -> Any:
        memo = _MEMO.get()
        if memo is None:
            memo = _CallMemo()
        memo.update(kept)
        for key, (found, path) in passed.items():  # Note [The objects this call passes]
            memo[key] = memo.passed(found, path)
        memo.note(weak, functions)
        made = copy.deepcopy(value, memo)
        for item in finalizers:  # registered on the call's copies, held by no copy
            memo.copied(item)
        return made

    return make


def _refused(value: Any, why: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        f"the function returns or stores a {type(value).__qualname__} it made, which jitcore cannot make "
        f"anew for each call ({why})",
    )


def _walk(value: Any, owner: Owner) -> tuple[dict[int, Any], dict[int, Any], dict[int, tuple[Any, Any]],
                                              dict[int, Any]]:
    """What ``value`` reaches that every call shares (the caller's objects, tensors and torch's other
    objects: kept as themselves), the weak objects in it (made by jit/weak_copies.py), the objects
    each call passes (with their paths: Note [The objects this call passes]) and the functions the
    program made (Note [A function the program made], jit/made_functions.py); refuses an object no copy
    makes faithfully, and a class the program made or an instance of one."""
    kept: dict[int, Any] = {}
    weak: dict[int, Any] = {}
    passed: dict[int, tuple[Any, Any]] = {}
    functions: dict[int, Any] = {}
    made = owner.made if isinstance(owner, Owner) else _never
    class_refusal = owner.class_refusal if isinstance(owner, Owner) else _no_class
    passed_at = getattr(owner, "passed_at", _nowhere)
    seen: set[int] = set()
    todo = [value]
    finalizers = weak_copies.finalizers_by_object()
    while todo:
        item = todo.pop()
        if id(item) in seen or type(item) in _ATOMS:
            continue
        seen.add(id(item))
        if isinstance(item, (Proxy, FakeTensor)) and id(item) not in getattr(owner, "referents", {}):
            # reached past what ``escaped`` looks into (a class's namespace: ``class C: t = x * 2``)
            raise _refused(value, "it holds a value the computation computes")
        if item is not value and (_torchs_own(item) or owner(item) is not None):
            # a tensor the caller passes (a weak reference's): Note [A weak reference to the caller's tensor]
            path = getattr(owner, "referents", {}).get(id(item)) if _torchs_own(item) else passed_at(item)
            if path is None:
                kept[id(item)] = item
            else:
                passed[id(item)] = (item, path)
            continue
        if _bound_to_made(item):  # Note [A method of an object the program made]
            if type(item) is types.BuiltinMethodType:
                weak[id(item)] = item  # made again by the memo, around the copy of its object
            todo.append(item.__self__)
            continue
        if weak_copies.is_weak(item):
            if not weak_copies.knows(item):
                raise _refused(value, f"it holds a {type(item).__qualname__}")
            weak[id(item)] = item
            todo.extend(weak_copies.held(item))
            continue
        if made(item):  # Note [A function the program made], Note [A class the program made]
            if isinstance(item, type):
                why = class_refusal(item)  # Note [A class made again per call] (jit/made_classes.py)
                if why is not None:
                    raise refused_class(item, why=why)
                functions[id(item)] = item
                todo.extend(class_parts(item))
                continue
            functions[id(item)] = item
            todo.extend(function_parts(item))
            continue
        if type(item) in _REMADE_ATOMS or type(item) is types.MappingProxyType:
            functions[id(item)] = item  # Note [Immutable objects the program makes, anew on every call]
            if type(item) is types.MappingProxyType:
                todo.append(_proxied_dict(item))
            continue
        if made(type(item)):
            why = class_refusal(type(item))
            if why is not None:
                raise refused_class(type(item), "instance", why)
            todo.append(type(item))
        if isinstance(item, enum.Enum) and made(type(item)):  # Note [An Enum it made] (jit/made_classes.py)
            functions[id(item)] = item
            continue
        if isinstance(item, _KEPT_AS_THEMSELVES):
            continue  # Note [Finalizers on what a copy keeps]
        for found in finalizers.get(id(item), ()):  # a finalizer on it: no object holds the finalizer
            todo.append(found)
        hook = _own_copy_hook(type(item))
        if hook is not None:
            raise _refused(value, f"a copy of a {type(item).__qualname__} would run its own {hook}")
        todo.extend(_held(item))
    return kept, weak, passed, functions


# Note [Finalizers on what a copy keeps]
# ``deepcopy`` keeps classes, functions, builtins and modules as themselves, so nothing of theirs is made
# anew, and a finalizer watching one is not the program's: torch.compile registers finalizers on the
# classes its guards check (``int``, ``torch.Tensor``). A list of classes the program returned took
# dynamo's finalizer on ``int`` as its own: detached it, and copied it on every call, which reached
# dynamo's guard managers and raised "cannot pickle 'RootGuardManager'" (after any torch.compile in the
# process, tests/jit/test_pytree_calls.py after test_jit_control_flow.py).
_KEPT_AS_THEMSELVES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


# Note [A method of an object the program made]
# ``c = Counter(); return c.bump`` and ``functools.partial(l.append)`` over a list it made: the bound
# method was no object the program made, so every cached call handed on the pass's method, bound to the
# pass's object: the caller's ``m()`` counted on from the last call's count (eager 1, 2 on every call;
# jit 1, 2 then 3, 4), and appends through it went into the pass's list, which the next calls' copies
# were made from. A method bound to an object the program made is made per call, bound to the call's
# copy of the object (``deepcopy`` does so for a Python method; a C method, ``l.append``, is taken again
# from the copy by the call's memo).
def _bound_to_made(value: Any) -> bool:
    """A method bound to an object the program made (not a module's function)."""
    if type(value) not in (types.MethodType, types.BuiltinMethodType):
        return False
    bound = getattr(value, "__self__", None)
    return bound is not None and not isinstance(bound, types.ModuleType) and programs_own(bound)


def _torchs_own(value: Any) -> bool:
    """A tensor, or another object of torch's or jitcore's (a symbolic number, a placement, a record)."""
    package = class_module(type(value)).split(".")[0]
    return isinstance(value, torch.Tensor) or package in ("torch", "jitcore")


# Note [A copy runs no code of the program's]
# ``deepcopy`` copies an instance of a class by its reduction: it calls ``cls.__new__``, asks
# ``__getstate__``/``__getnewargs__``, hands the state to ``__setstate__``, and fills a dict subclass
# item by item (``y[k] = v``), a list subclass by ``append``/``extend``; a set or deque subclass's
# reduction calls the class (``__init__``). Where the program's class defines one of these, each call's
# copy ran the program's code where eager never does (a ``__setitem__`` logging its keys logged them
# again on every call: a wrong answer). Such an object is refused like one with its own copy hook:
# the call runs eagerly. Methods the standard library wrote into the class (a dataclass's
# ``__getstate__`` with ``slots=True``) are the library's, not the program's.
def _own_copy_hook(kind: type) -> str | None:
    """The method of the program's a copy of a ``kind`` would run: a copy hook, or one that
    ``deepcopy``'s reconstruction calls (Note [A copy runs no code of the program's])."""
    names = (*_COPY_HOOKS, *_REBUILT_BY, *(("__init__",) if issubclass(kind, _REBUILT_BY_CALLING) else ()))
    for klass in kind.__mro__:
        if _librarys(klass.__module__) or issubclass(klass, tuple) and library_maker(klass) is not None:
            continue  # the library's; a namedtuple's (Note [A class the standard library made])
        for name in names:
            method = vars(klass).get(name)
            if method is not None and not _librarys(getattr(method, "__module__", None) or klass.__module__):
                return name
    return None


def _librarys(module: object) -> bool:
    """Whether ``module`` is the standard library's (or a builtin's); a ``__module__`` that is no name is
    the program's (Note [A class's __module__ that is no name], code_kinds.py)."""
    if not issubclass(type(module), (str, type(None))):
        return False
    package = (module or "builtins").split(".")[0]
    return package in sys.stdlib_module_names or package in ("builtins", "_weakrefset")


def _held(value: Any) -> list[Any]:
    """What ``deepcopy`` copies of ``value``: items, keys, attributes and slots (nothing of a class, a
    function or a module, which it keeps)."""
    kind = type(value)
    if issubclass(kind, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
        return []
    if kind is types.MethodType:
        return [value.__self__]
    found: list[Any] = []
    if issubclass(kind, (tuple, list, set, frozenset, collections.deque)):
        found.extend(value)
    elif issubclass(kind, dict):
        found.extend(k for pair in dict.items(value) for k in pair)
        factory = getattr(value, "default_factory", None)
        if factory is not None:
            found.append(factory)
    elif issubclass(kind, functools.partial):  # held outside its __dict__
        found.extend([value.func, *value.args, *value.keywords.values()])
    found.extend(getattr(value, "__dict__", {}).values())
    for klass in kind.__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if isinstance(slot, str) and slot not in ("__dict__", "__weakref__") and hasattr(value, slot):
                found.append(getattr(value, slot))
    return found
