"""The structure of what a traced function returns: mapped completely, so nothing traced escapes.

The computation returns a flat tree that optree understands (tuples, lists, dicts, namedtuples).
Anything else a program returns around its tensors is taken apart here and rebuilt around the
computation's results on every call, a fresh object each time as eagerly:
- classes registered with torch's pytree (``transformers``' ``ModelOutput``, ``torch.Size`` ...),
  through their registered flatten/unflatten functions (a ``torch.Size`` of symbolic sizes too);
- dataclasses and other objects whose attributes hold tensors: a shallow copy of the traced object
  with those attributes replaced.
Invariant: after ``split``, no proxy is reachable from the output except as a leaf of the returned
flat tree; ``escaped`` finds any that is (a proxy left inside an object jitcore cannot take apart),
and the jit refuses such a trace rather than hand a proxy to the caller. A container that holds
itself, or nests past optree's depth, cannot be taken apart: ``taken_apart`` refuses it (JC-T001,
an eager entry) instead of failing the call with optree's RecursionError.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import copy
import dataclasses
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import optree
import torch
import torch.utils._pytree as torch_pytree
from torch._subclasses.fake_tensor import FakeTensor

from jitcore.errors import UnsupportedOperationError
from jitcore.ir import Proxy
from jitcore.jit.call_copies import (
    Owner,
    function_per_call,
    made_anew,
    made_in_call,
    makers_made,
    one_call,
    one_per_call,
    passed_object,
    programs_own,
    readers_made,
)
from jitcore.jit.code_kinds import class_module
from jitcore.jit.held_values import DICT_VIEWS as _DICT_VIEWS
from jitcore.jit.held_values import MAX_DEPTH as _MAX_DEPTH
from jitcore.jit.held_values import children as _children
from jitcore.jit.held_values import escaped, held
from jitcore.jit.held_values import holds_proxy as _holds_proxy
from jitcore.jit.held_values import is_iterator as _is_iterator
from jitcore.jit.made_classes import library_maker
from jitcore.jit.made_functions import EMPTY, function_state, refused_class
from jitcore.jit.object_copies import copied, copier
from jitcore.jit.object_states import MISSING, get_slot, set_slot, slot_members
from jitcore.jit.set_tables import made_as, shape_of
from jitcore.proxies.number import symbolic_number_class
from jitcore.proxies.subclass import SubclassTensorProxy
from jitcore.proxies.text import TextProxy, plain_key
from jitcore.proxies.typed import is_plain_subclass

_AS_SUBCLASS = torch._C.TensorBase.as_subclass  # noqa: SLF001

__all__ = ["OutputStructure", "escaped", "held", "reached_twice", "split", "taken_apart"]

Split = tuple[Any, Callable[[Any], Any] | None]  # (what the computation returns for a value, rebuild or None)

_OPTREE_NODES = (tuple, list, dict, collections.OrderedDict, collections.defaultdict, collections.deque)


# Note [Nodes the trace cannot print]
# The trace prints tuples, lists, dicts and namedtuples as literals; any other object in its output
# is a constant: the object the pass made, returned as it is by every call. An OrderedDict, a
# defaultdict or a deque holding proxies passed the escape check (optree flattens them) but reached the
# caller as the traced object, proxies inside (``collections.OrderedDict(x=t + 1)`` returned
# TensorProxy values). Each is split like a foreign node: the computation returns its values, the
# rebuild makes a fresh one per call around them, in the OrderedDict's own order (optree's spec keeps
# the order of the dict underneath, which ``move_to_end`` does not change), with the defaultdict's
# factory and the deque's maxlen.
def _unprintable_node(value: Any) -> tuple[tuple, Callable[[tuple], Any]] | None:
    """(children, make) of an OrderedDict, defaultdict or deque (exactly those types), else None."""
    kind = type(value)
    if kind is collections.OrderedDict:
        keys = list(collections.OrderedDict.keys(value))
        return tuple(dict.__getitem__(value, k) for k in keys), lambda kids: collections.OrderedDict(
            zip(keys, kids))
    if kind is collections.defaultdict:
        keys, factory = list(dict.keys(value)), value.default_factory
        return tuple(dict.__getitem__(value, k) for k in keys), lambda kids: collections.defaultdict(
            factory, zip(keys, kids))
    if kind is collections.deque:
        maxlen = value.maxlen
        return tuple(value), lambda kids: collections.deque(kids, maxlen)
    return None


@contextlib.contextmanager
def taken_apart(what: str) -> Iterator[None]:
    """Around the flattening of what the program returns or stores (``what``: how it reaches the
    caller): optree's RecursionError, from a container that holds itself (``d[0] = d``, pprint's
    test_knotted) or one nested deeper than optree goes, becomes a refusal (an eager entry), as for
    any value jitcore cannot take apart; eagerly the call returns such a container as it is."""
    try:
        yield
    except RecursionError:
        raise UnsupportedOperationError(
            f"the function {what} a container that holds itself, or is nested too deep, for jitcore to "
            "take apart",
        ) from None


@dataclasses.dataclass(frozen=True, slots=True)
class OutputStructure:
    """Rebuilds the program's output from the computation's flat results."""

    rebuild: Callable[[Any], Any]
    copies: bool = False  # it makes objects anew (Note [One call's copies share their objects])
    reads_call: bool = False  # it reads the objects the call passes (Note [The objects this call passes])

    def wrap(self, computation: Callable[..., Any]) -> Callable[..., Any]:
        """``computation`` followed by the rebuilding of the program's output objects."""
        rebuild = self.rebuild

        def run(*inputs: Any) -> Any:
            return rebuild(computation(*inputs))

        return run


def split(output: Any, owner: Owner | None = None) -> tuple[Any, OutputStructure | None]:
    """The output as a tree optree flattens completely, and how to rebuild the original (None: the
    output already is such a tree). ``owner``: whose an object is (jit/effects.py ``Snapshots.owner``):
    an object the program made is made anew on every call, the caller's are handed on."""
    owner = owner if owner is not None else Owner(lambda _v: None)
    before, readers = makers_made(), readers_made()
    flat, rebuild = _split(output, 0, owner)
    if rebuild is None or rebuild is _as_is:
        return flat, None  # the output itself, or a copy with plain keys (``_plain_keys``)
    if makers_made() == before:
        return flat, OutputStructure(rebuild)
    reads_call = readers_made() != readers
    if makers_made() == before + 1 and not reads_call:  # Note [One copy needs no call's memo]
        return flat, OutputStructure(rebuild, copies=True)
    return flat, OutputStructure(one_call(rebuild), copies=True,  # Note [One call's copies share ...]
                                 reads_call=reads_call)


# Note [One copy needs no call's memo]
# ``one_call`` opens a memo for the call around the output's rebuild (a context variable set and reset, a
# ``_CallMemo``: ~1 us of a cached call that returns a closure, where eager makes it in 0.2 us), so that
# the output's copies share their objects. Where the output makes one object anew by one maker (one
# ``made_anew``, ``one_per_call`` or ``function_per_call``) and reads nothing the call passes, there is
# nothing to share among copies: the maker opens a memo of its own, used by it alone (or the memo
# the call's effects opened: jit/effects.py ``Effects.finish``).


def reached_twice(values: list[Any], owner: Owner) -> frozenset[int]:
    """The ids of the containers and objects the program made (nothing of the caller's), and of the
    proxies of subclass tensors without ``__torch_dispatch__``, that ``values`` reach more than once,
    through containers, instance dicts and slots (Note [One object, one copy], jit/call_copies.py)."""
    seen: set[int] = set()
    twice: set[int] = set()
    todo = list(values)
    while todo:
        value = todo.pop()
        kind = type(value)
        if issubclass(kind, Proxy) and _retyped(value) is not None:  # given its class again per place
            if id(value) in seen:
                twice.add(id(value))
            seen.add(id(value))
            continue
        if kind in _ATOMS or issubclass(kind, (Proxy, FakeTensor, TextProxy, torch.Tensor)):
            continue
        node = kind is tuple or _is_namedtuple(value) or kind in _OPTREE_NODES or programs_own(value) or \
            kind is types.FunctionType and owner.made(value)
        if not node or owner(value) is not None:
            continue  # the caller's (made per call at its path), or shared by every call
        if id(value) in seen:
            twice.add(id(value))  # made once: what it holds is one object wherever it goes
            continue
        seen.add(id(value))
        todo.extend(_children(value))
    return frozenset(twice)


def _split(value: Any, depth: int, owner: Owner) -> Split:
    """(value with foreign nodes replaced by tuples of their children, rebuild or None); an object reached
    twice is made once per call (Note [One object, one copy], jit/call_copies.py)."""
    flat, rebuild = _split_value(value, depth, owner)
    if id(value) in owner.shared:
        return flat, one_per_call(value, None if rebuild is _as_is else rebuild)
    return flat, rebuild


def _split_value(value: Any, depth: int, owner: Owner) -> Split:
    """``_split`` of one value."""
    if isinstance(value, TextProxy):  # text formatted from numbers of the computation: from its numbers
        return tuple(value.numbers()), value.text_of
    if isinstance(value, Proxy):
        path = owner.inputs.get(id(value))
        if path is not None:  # a tensor the caller passed, stored: the call's tensor itself, not a copy
            return (), passed_object(value, path)
        return _split_typed(value, depth, owner)
    if _symbolic_shape(value):  # a shape with symbolic sizes (jit/shapes.py): each call's sizes
        return tuple(value), torch.Size
    if depth > _MAX_DEPTH:
        return value, None
    whose = None if type(value) in _ATOMS else owner(value)
    if whose is not None:  # the caller's, holding this call's tensors or not: the very object
        return _callers(value, whose, owner)
    if owner.made(type(value)):  # Note [A class the program made] (jit/made_functions.py)
        why, maker = owner.class_refusal(type(value)), library_maker(type(value))
        if why is None and _holds_proxy(value, depth) and not _plain_object(value, maker) and \
                not (_is_namedtuple(value) and maker is not None):
            why = "an instance holding traced values is remade only as a plain object"
        if why is not None:
            raise refused_class(type(value), "instance", why)
    if (weak := _weak_input(value, owner)) is not None:
        return weak
    if not (_holds_proxy(value, depth) or _holds_symbolic_shape(value, depth)):
        return _untraced(value, depth, owner)
    value = _plain_keys(value)
    kind = type(value)
    unprintable = _unprintable_node(value)  # Note [Nodes the trace cannot print]
    if unprintable is not None:
        return _node(*unprintable, depth, owner)
    if kind in _OPTREE_NODES or _is_namedtuple(value):
        flat, rebuild = _split_literal(value, depth, owner)
        if not (_is_namedtuple(value) and owner.made(kind)):
            return flat, rebuild
        return flat, _of_this_calls_class(rebuild, made_anew(kind, owner))
    node = torch_pytree.SUPPORTED_NODES.get(kind)
    if node is not None:
        children, context = node.flatten_fn(value)
        ordered = issubclass(type(value), collections.OrderedDict)
        order = list(collections.OrderedDict.keys(value)) if ordered else None
        return _node(tuple(children), lambda kids: _in_order(node.unflatten_fn(list(kids), context), order),
                     depth, owner)
    if isinstance(value, (dict, list)):  # a subclass no registry knows: its items, then its attributes
        return _split_container_subclass(value, depth, owner)
    if type(value) is types.FunctionType and owner.made(value) and \
            not _closes_over_a_calls_objects(value, owner):  # Note [A closure over traced values]
        return _split_function(value, depth, owner)
    if type(value) is types.FunctionType and value.__closure__:  # Note [A closure over traced values]
        raise UnsupportedOperationError(
            f"the function returns or stores the closure {value.__qualname__}, whose cells hold traced "
            "tensors",
            hints=("return the tensors and build the closure outside the jitted function",),
        )
    if _is_iterator(value):  # Note [Sets, views and iterators in outputs]
        raise UnsupportedOperationError(
            f"the function returns or stores a {type(value).__qualname__}, an iterator made while tracing, "
            "which a cached call could not give again in the state eager leaves it",
            hints=("return a list of its items instead",),
        )
    if type(value) in (set, frozenset):  # in the pass's table (Note [A made set's table as the pass made it])
        make = made_as(shape_of(value)) if type(value) is set else frozenset
        return _node(tuple(value), make, depth, owner)
    if type(value) in _DICT_VIEWS:
        flat, rebuild = _split(dict(value.mapping), depth + 1, owner)
        view = _DICT_VIEWS[type(value)]
        return flat, lambda results: view(rebuild(results) if rebuild is not None else results)
    slots = {n: get_slot(m, value) for n, m in slot_members(kind).items()}  # Note [An instance with slots
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # holding traced values]
        names = [f.name for f in dataclasses.fields(value)]
    else:
        names = [n for n, v in getattr(value, "__dict__", {}).items() if _per_call(v, depth + 1, owner)]
        names += [n for n, v in slots.items() if v is not MISSING and _per_call(v, depth + 1, owner)]
    attributes = [id(v) for v in getattr(value, "__dict__", {}).values()]
    attributes += [id(slots[n]) for n in names if n in slots]
    if any(id(c) not in attributes and _holds_proxy(c, depth + 1) for c in _children(value)):
        raise UnsupportedOperationError(  # held outside its __dict__: a copy would share them
            f"the function returns or stores a {type(value).__qualname__} over traced tensors, which "
            "jitcore cannot make again for each call",
            hints=("return a list or tuple of the tensors instead",),
        )
    template = copied(value)  # as it is now: the pass restores the caller's objects afterwards
    copy_again = copier(template)  # Note [A template copied again from one reduction]
    # an instance of a class the program made: of this call's class (Note [A class made again per call])
    retype = made_anew(type(value), owner) if owner.made(type(value)) else None

    def rebuild_object(kids: tuple) -> Any:
        obj = copy_again()
        if retype is not None:
            object.__setattr__(obj, "__class__", retype())
        for name, kid in zip(names, kids):
            if name in slots:
                set_slot(obj, name, kid)
            else:
                object.__setattr__(obj, name, kid)
        return obj

    return _node(tuple(slots[n] if n in slots else getattr(value, n) for n in names), rebuild_object, depth,
                 owner)


# Note [An instance with slots holding traced values]
# ``@dataclass(slots=True) class Out: t: Tensor; return Out(x * 2)``, or an instance of a class with
# ``__slots__`` holding a tensor (returned, or stored on an argument): its values were held outside its
# ``__dict__``, so it was refused (an eager entry per call). Its slots are its parts as its ``__dict__``'s
# attributes are (a dataclass's fields, else each slot set that holds a per-call value), read and set
# through the slot's member descriptor (jit/object_states.py ``slot_members``: a private slot by its
# mangled name; the walk for traced values reads them so too, jit/held_values.py ``children``), on a
# copy of the pass's instance made from its reduction (a slotted dataclass's ``__getstate__``, else
# copyreg's ``(dict, slots)``).
def _of_this_calls_class(rebuild: Callable[[Any], Any] | None,
                         retype: Callable[[], Any]) -> Callable[[Any], Any]:
    """The rebuild of an instance of a ``namedtuple`` class the program made, holding traced values: the
    items rebuilt, in an instance of this call's class (Note [A class the standard library made],
    jit/made_classes.py)."""

    def rebuild_named(results: Any) -> Any:
        items = results if rebuild is None or rebuild is _as_is else rebuild(results)
        return retype()._make(items)

    return rebuild_named


def _plain_object(value: Any, maker: Any = None) -> bool:
    """An instance of classes of its class's module over ``object`` alone (no container, tensor or pytree
    node among its bases, no dataclass but one ``maker``, jit/made_classes.py ``library_maker``, makes
    again: Note [A dataclass instance holding traced values]): taken apart by its attributes."""
    kind = type(value)
    module = class_module(kind)
    return all(klass is object or class_module(klass) == module for klass in kind.__mro__) and \
        torch_pytree.SUPPORTED_NODES.get(kind) is None and \
        (maker is not None or not dataclasses.is_dataclass(value))


# Note [A dataclass instance holding traced values]
# ``@dataclass class Out: t: Tensor`` made in the function, ``return Out(x * 2)``: the instance was refused
# (an eager entry per call), as only plain objects were rebuilt around traced values. A dataclass that
# jit/made_classes.py makes again per call (``library_maker``) is rebuilt as a plain object is: its fields
# are its parts (``dataclasses.fields``), a copy of the pass's instance gets this call's values with
# ``object.__setattr__`` (a frozen one too) and this call's class (its ``__eq__``, ``__repr__`` and
# methods are this call's class's, as eager's are).


def _split_literal(value: Any, depth: int, owner: Owner) -> Split:
    """A tuple, list, dict or namedtuple, which the trace prints as a literal: its items split."""
    children, spec = optree.tree_flatten(value, is_leaf=lambda v: v is not value, none_is_leaf=True)
    parts = [_split(c, depth + 1, owner) for c in children]
    rebuilds = [r for _, r in parts]
    if all(r is None or r is _as_is for r in rebuilds):  # nothing per call; a child may have plain keys
        same = all(p is c for (p, _), c in zip(parts, children))
        flat = value if same else optree.tree_unflatten(spec, [p for p, _ in parts])
        made = type(value) in (list, dict) or any(r is _as_is for r in rebuilds)
        return flat, (_as_is if made else None)
    flat = optree.tree_unflatten(spec, [p for p, _ in parts])

    def rebuild_node(results: Any) -> Any:
        leaves = optree.tree_flatten(results, is_leaf=lambda v: v is not results, none_is_leaf=True)[0]
        return optree.tree_unflatten(spec, [r(x) if r is not None else x for r, x in zip(rebuilds, leaves)])

    kind, count = type(value), len(children)
    if kind is not tuple and kind is not list:
        return flat, rebuild_node

    def rebuild_sequence(results: Any) -> Any:  # optree's one level of a tuple or list, without optree
        if type(results) is not kind or len(results) != count:
            return rebuild_node(results)
        return kind([r(x) if r is not None else x for r, x in zip(rebuilds, results)])

    return flat, rebuild_sequence


def _as_is(result: Any) -> Any:
    """The rebuild of a list or dict the trace prints: each call's is new already."""
    return result


# Note [Objects the program makes, anew on every call] (jit/call_copies.py)
# Nothing traced is in ``value``, but the call still returns it anew where eager's does: a literal's
# items are split (a caller's list inside is handed as itself, never printed: a copy), an object the
# program made is a deep copy of the pass's per call, and the caller's objects are the very objects.
_ATOMS = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), slice)


def _untraced(value: Any, depth: int, owner: Owner) -> Split:
    """``_split`` of a value that holds nothing traced."""
    kind = type(value)
    literal = kind in (tuple, list, dict) or _is_namedtuple(value)
    if kind is types.FunctionType and value.__closure__ and _closes_over_a_calls_objects(value, owner):
        refused = UnsupportedOperationError(  # Note [A closure over a call's objects]
            f"the function returns or stores the closure {value.__qualname__}, made while tracing, whose "
            "cells hold objects of this call's",
            hints=("pass the objects to the function when you call it instead of closing over them",),
        )
        refused.whatever_the_contents = True  # its eager entry: Note [Eager whatever the contents]
        raise refused  # (jit/eager_entries.py)
    if (weak := _weak_input(value, owner)) is not None:
        return weak
    if owner.made(value) or owner.made(kind):  # jit/made_functions.py
        cls = value if isinstance(value, type) else kind
        why = None if kind is types.FunctionType else owner.class_refusal(cls)
        if why is not None:  # Note [A class the program made]; else jit/made_classes.py
            raise refused_class(cls, "class" if cls is value else "instance", why)
        make = made_anew(value, owner)  # Note [A function the program made]
        return ((), make)
    if kind in _ATOMS or not (literal or programs_own(value)):
        return value, None  # shared by every call, as eagerly (a class, a function, a module, ...)
    whose = owner(value)
    if whose is not None:
        return _callers(value, whose, owner)
    if literal and (kind not in (list, dict) or _holds_symbolic_number(value, depth)):
        return _split_literal(value, depth, owner)  # a tuple, or per-call numbers: printed, item by item
    make = made_anew(value, owner)  # a list or dict too: one a made object also holds is that one
    return ((), make)


# Note [A weak reference to the caller's tensor]
# ``made = [weakref.ref(x)]; store.append(made); return made`` with ``x`` the tensor the caller passes (a
# module's ``_flat_weight_refs``): the reference refers to the caller's tensor itself (jit/tensor_keys.py),
# so it held nothing traced and was a constant: every cached call handed on the pass's reference, to the
# first call's tensor (``ref() is x`` False from the second call); the effects' stand-in for it made the
# stored list another list than the returned one. A plain ``weakref.ref`` to an input tensor (or to its
# proxy) is made per call to the tensor this call passes at its path; CPython hands out one reference per
# referent where no callback is given, so the returned and the stored one are one object, as eagerly.
def _weak_input(value: Any, owner: Owner) -> Split | None:
    """A weak reference to a tensor the caller passes, made per call (Note [A weak reference to the
    caller's tensor]); None for anything else."""
    if type(value) is not weakref.ref or value.__callback__ is not None or not owner.referents:
        return None
    target = value()
    path = None if target is None else owner.referents.get(id(target))
    if path is None:
        return None
    passed = passed_object(target, path)
    return (), lambda results: weakref.ref(passed(results))


def _callers(value: Any, whose: str, owner: Owner) -> Split:
    """An object of the caller's: the very object of fixed state on every call (printed, a list would be
    a copy), the object this call passes where a path from the arguments leads to it (Note [The objects
    this call passes], jit/call_copies.py), else as the pass found it."""
    literal = type(value) in (tuple, list, dict) or _is_namedtuple(value)
    if whose == "fixed":
        return ((), lambda _results: value) if literal else (value, None)
    path = owner.passed_at(value)
    return (value, None) if path is None else ((), passed_object(value, path))


def _per_call(value: Any, depth: int, owner: Owner) -> bool:
    """Whether an attribute of an object the calls make again is each call's own: something traced, or
    something the program made anew (Note [Objects the program makes, anew on every call])."""
    if _holds_proxy(value, depth) or _holds_symbolic_shape(value, depth):
        return True
    return depth <= _MAX_DEPTH and _untraced(value, depth, owner)[1] is not None


# Note [A closure over a call's objects]
# A function the program makes is kept as itself, as ``deepcopy`` keeps functions: every cached call
# hands on the pass's function. Its cells hold what the pass's frame held: a list argument the program
# appends to through it (``f = lambda g: log.append(g); HOLD.cb = f``) is the pass's, so what the caller
# appended through the stored function after the call went nowhere eager sends it. A function the
# program made over objects it made (``count = [0]; def g(): count[0] += 1``, a decorator's ``calls``
# list, ``o.size = lambda: len(o.items)``) is made again per call over new cells whose contents go through
# the call's memo (Note [A function the program made], jit/made_functions.py): the list it shares with the
# output or a stored object is one list, as eagerly. A closure over an object of the caller's that a path
# from the arguments reaches (``log`` above: ``Owner.passed_at``) is made again per call too, that cell
# holding the object this call passes at that path (Note [The objects this call passes], jit/call_copies.py);
# a list argument it only appends to is bound by its type (Note [A closure over a list argument handed out],
# jit/closure_appends.py), any other use binds it whole, guarded by its contents. A closure over an
# object of this call's that no path reaches, or a function jitcore did not see made over the program's
# objects, is refused (JC-T001): the call runs eagerly and stores eager's closure.
def _closes_over_a_calls_objects(function: types.FunctionType, owner: Owner,
                                 _seen: set[int] | None = None) -> bool:
    """Whether ``function``, made while tracing, closes over an object of this call's that no copy makes
    per call: an argument's, or one the program made where jitcore did not see ``function`` made (Note [A
    closure over a call's objects]). Each function is looked at once
    (inner functions calling each other hold each other)."""
    seen = _seen if _seen is not None else set()
    if id(function) in seen or owner(function) is not None:
        return False  # looked at already; or the caller's function, reached from state or passed in
    seen.add(id(function))
    for cell in function.__closure__ or ():
        try:
            held = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if type(held) in _ATOMS or isinstance(held, (type, types.ModuleType, types.BuiltinFunctionType)):
            continue
        if type(held) is types.FunctionType:
            if held.__closure__ and _closes_over_a_calls_objects(held, owner, seen):
                return True
            continue
        whose = owner(held)
        if whose == "call" and owner.passed_at(held) is None or whose is None and not owner.made(function):
            return True  # an argument's object no path reaches; or the program's, in a function not made here
    return False


# Note [A closure over traced values]
# A function the program made, over a tensor or number it computed (``c = x * 2; return lambda: c``, a
# dynamic number ``n``, a list holding either) or with one in a default or an attribute (``def g(t=x * 2)``,
# ``g.t = x * 2``), was refused, or (a default, an attribute) handed on holding the pass's TensorProxy. It is
# taken apart as an object is: its cells' contents, defaults, keyword defaults, annotations and attributes
# (jit/made_functions.py ``function_state``) are split, the computation returns what is traced in them,
# and each call makes the function again over new cells (jit/call_copies.py ``function_per_call``). The
# function is in the call's memo before its parts are rebuilt, so a function in its own cell, or two that
# hold each other, find this call's (``made_in_call``), and functions sharing a cell share this call's cell
# (the first to fill it fills it). A function that reaches itself again through an object (``o.cb =
# lambda: o.t``) is refused: the object would be rebuilt inside its own rebuild, a second copy; so is a
# closure over an argument's object (Note [A closure over a call's objects]).
_SPLITTING: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("jitcore_functions_split",
                                                                            default=frozenset())


def _split_function(fn: types.FunctionType, depth: int, owner: Owner) -> Split:
    """``_split`` of a function the program made that holds something traced (Note [A closure over traced
    values])."""
    splitting = _SPLITTING.get()
    if id(fn) in splitting:
        return (), made_in_call(fn)
    state = function_state(fn)
    if _reaches_through_an_object(fn, state):
        raise UnsupportedOperationError(
            f"the function returns or stores the function {fn.__qualname__}, made while tracing, which "
            "reaches itself through an object holding traced tensors",
            hints=("return the tensors and build the function outside the jitted function",),
        )
    token = _SPLITTING.set(splitting | {id(fn)})
    try:
        parts = [((), None) if part is EMPTY else _split(part, depth + 1, owner) for part in state]
    finally:
        _SPLITTING.reset(token)
    rebuilds = [r for _, r in parts]
    empty = [part is EMPTY for part in state]

    def rebuilt_state(results: tuple) -> list[Any]:
        return [EMPTY if none else r(x) if r is not None else x
                for none, r, x in zip(empty, rebuilds, results)]

    return tuple(p for p, _ in parts), function_per_call(fn, rebuilt_state)


def _reaches_through_an_object(fn: types.FunctionType, state: list[Any]) -> bool:
    """Whether ``fn``'s parts lead back to ``fn`` through something other than functions (Note [A closure
    over traced values])."""
    seen: set[tuple[int, bool]] = set()
    todo = [(part, type(part) is not types.FunctionType) for part in state if part is not EMPTY]
    while todo:
        value, through_object = todo.pop()
        if value is fn:
            if through_object:
                return True
            continue
        if type(value) in _ATOMS or issubclass(type(value), (Proxy, FakeTensor, TextProxy)):
            continue
        if (id(value), through_object) in seen:
            continue
        seen.add((id(value), through_object))
        function = type(value) is types.FunctionType
        todo.extend((child, through_object or not function) for child in _children(value))
    return False


def _in_order(rebuilt: Any, order: list | None) -> Any:
    """A registered OrderedDict subclass made again with its keys in the program's ``order``:
    transformers' ModelOutput unflattens through its constructor, which sets fields in declaration
    order (``out = Out(logits=t); out.loss = l`` has keys logits, loss: ``out[0]`` is the logits)."""
    ordered = issubclass(type(rebuilt), collections.OrderedDict)
    if order is not None and ordered and list(rebuilt.keys()) != order:
        for key in order:
            collections.OrderedDict.move_to_end(rebuilt, key)
    return rebuilt


# Note [Sets, views and iterators in outputs]
# A set, a dict view, an iterator (``iter(l)``, ``zip``, ``map``, ``enumerate``, ``reversed``) or a
# generator the program returns holds its items where ``__dict__`` does not show them: it was copied
# as an object without traced attributes, or (seen by no walk) returned as a constant, and the caller
# got TensorProxy items (consuming a returned ``map`` or generator ran the traced lambda: a
# RecursionError), or every call the one iterator, consumed by the first caller. Sets and frozensets
# are made again around the call's tensors, a dict view around its dict made again; an iterator
# (``escaped`` reports it: none may leave a pass), or an object holding a proxy outside its
# ``__dict__``, is refused (JC-T001: the call runs eagerly).


def _split_typed(proxy: Proxy, depth: int, owner: Owner) -> Split:
    """A proxy of a subclass without ``__torch_dispatch__``: the computation returns its data (and
    the tensors its attributes hold); the result gets the class and the attributes back."""
    retype = _retyped(proxy)
    if retype is None:
        return proxy, None
    attributes = dict(object.__getattribute__(proxy, "__dict__"))
    if not attributes:
        return proxy, retype
    traced = [n for n, v in attributes.items() if _per_call(v, depth + 1, owner)]
    constants = {n: v for n, v in attributes.items() if n not in traced}
    copied_per_call = {n for n, v in constants.items() if type(v) in (dict, list, set) and owner(v) == "call"}
    parts = [_split(attributes[n], depth + 1, owner) for n in traced]

    def rebuild(results: Any) -> Any:
        data, kids = (results[0], results[1:]) if traced else (results, ())
        if type(data) is proxy.python_type:  # the caller's own tensor, returned as it came
            return data
        out = retype(data)
        for name, value in constants.items():  # Note [Attributes of a subclass output]
            _set_attribute(out, name, copy.deepcopy(value) if name in copied_per_call else value)
        for name, (_, kid_rebuild), kid in zip(traced, parts, kids):
            _set_attribute(out, name, kid_rebuild(kid) if kid_rebuild is not None else kid)
        return out

    return ((proxy, *(p for p, _ in parts)) if traced else proxy), rebuild


# Note [Attributes of a subclass output]
# A subclass without ``__torch_dispatch__`` carries Python attributes (``t.tag``, a
# ``__torch_function__`` that stores ``extra_state`` on what it returns): while tracing they are in
# its proxy's ``__dict__``. The computation returns plain data, so each call sets them on the result
# as the trace left them: tensors among them are outputs of the computation, containers and objects
# made by the program are made anew per call (``_per_call``), the caller's objects are shared, except
# a list, dict or set reached through the arguments (RedispatchTensor's ``call_log``, its input's): a
# copy of it as the pass found it, as another call's input holds another one, not looked up per call.


def _set_attribute(obj: torch.Tensor, name: str, value: Any) -> None:
    """An attribute the proxy held in its ``__dict__``, set where the class keeps it: a field of its
    ``__slots__`` (torch's RedispatchTensor's ``call_log``) through the member descriptor, which
    wins over the instance dict, the rest in the instance dict."""
    for klass in type(obj).__mro__:
        found = vars(klass).get(name)
        if found is not None:
            if isinstance(found, types.MemberDescriptorType):
                found.__set__(obj, value)
                return
            break
    obj.__dict__[name] = value


# Note [A leaf made inside keeps its graph]
# A leaf of a plain subclass the program makes (``nn.Parameter(t)``, ``copy.deepcopy(param)``) comes
# out of the computation as a plain leaf, and the values computed from it hang off that very tensor.
# Made a new leaf of the class (``_make_subclass``), it was another tensor: a backward from those values
# filled the plain one's ``.grad`` and left the returned or stored parameter's None, where eager fills
# it. The leaf, fresh per call, takes the class itself; a class whose instance layout differs from
# torch.Tensor's (``__slots__``) cannot, and gets a leaf of its own as before.
def _retyped(proxy: Proxy) -> Callable[[Any], Any] | None:
    """How a result gets the class of a proxy of a subclass without ``__torch_dispatch__``
    (jitcore/proxies/typed.py): the computation runs on plain tensors."""
    cls = proxy.python_type
    if not is_plain_subclass(cls) or isinstance(proxy, SubclassTensorProxy):
        return None

    def retype(result: Any) -> Any:
        if type(result) is cls:
            return result
        if result.is_leaf and result.requires_grad:  # Note [A leaf made inside keeps its graph]
            try:
                result.__class__ = cls
            except TypeError:  # a class whose layout differs (``__slots__``): a leaf of its own
                return torch.Tensor._make_subclass(cls, result, True)  # noqa: SLF001
            return result
        return _AS_SUBCLASS(result, cls)

    return retype


def _split_container_subclass(value: dict | list, depth: int,
                              owner: Owner) -> tuple[Any, Callable[[Any], Any]]:
    keys = list(dict.keys(value)) if isinstance(value, dict) else list(range(list.__len__(value)))
    getitem = dict.__getitem__ if isinstance(value, dict) else list.__getitem__
    names = [n for n, v in getattr(value, "__dict__", {}).items() if _per_call(v, depth + 1, owner)]
    copy_again = copier(copied(value))  # Note [A template copied again from one reduction]
    count = len(keys)

    def rebuild(kids: tuple) -> Any:
        obj = copy_again()
        for key, kid in zip(keys, kids[:count]):
            (dict.__setitem__ if isinstance(obj, dict) else list.__setitem__)(obj, key, kid)
        for name, kid in zip(names, kids[count:]):
            object.__setattr__(obj, name, kid)
        return obj

    children = tuple(getitem(value, k) for k in keys) + tuple(getattr(value, n) for n in names)
    return _node(children, rebuild, depth, owner)


def _node(children: tuple, make: Callable[[tuple], Any], depth: int,
          owner: Owner) -> tuple[Any, Callable[[Any], Any]]:
    parts = [_split(c, depth + 1, owner) for c in children]
    flat = tuple(p for p, _ in parts)
    rebuilds = [r for _, r in parts]

    def rebuild(results: tuple) -> Any:
        return make(tuple(r(x) if r is not None else x for r, x in zip(rebuilds, results)))

    return flat, rebuild


def _plain_keys(value: Any) -> Any:
    """A dict or set the program made with text of the computation's numbers or its numbers as keys or
    elements (``log[f"step{n}"] = ...``, ``{step: y}``): a copy with each such key as its str or value
    (jitcore/proxies/text.py, Note [A key of the computation's numbers] in jit/effects.py)."""
    if isinstance(value, dict) and any(plain_key(k) is not k for k in value):
        items = [(plain_key(k), v) for k, v in dict.items(value)]
        if type(value) is collections.defaultdict:
            return collections.defaultdict(value.default_factory, items)
        return type(value)(items) if type(value) in _OPTREE_NODES else dict(items)
    if type(value) in (set, frozenset) and any(plain_key(k) is not k for k in value):  # in the pass's table
        return (made_as(shape_of(value)) if type(value) is set else frozenset)(tuple(map(plain_key, value)))
    return value


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _symbolic_shape(value: Any) -> bool:
    return type(value) is torch.Size and any(type(s) is torch.SymInt for s in value)


def _holds_symbolic_number(value: Any, depth: int) -> bool:
    """Whether a symbolic number (each call's, a slot of the computation) is in ``value`` through tuples,
    lists and dicts."""
    return _found_in_nodes(value, depth, lambda v: symbolic_number_class(v) is not None, set())


def _holds_symbolic_shape(value: Any, depth: int) -> bool:
    """Whether a torch.Size of symbolic sizes is in ``value`` through tuples, lists and dicts."""
    return _found_in_nodes(value, depth, _symbolic_shape, set())


def _found_in_nodes(value: Any, depth: int, test: Callable[[Any], bool], seen: set[int]) -> bool:
    """Whether ``test`` holds for ``value`` or a value inside it through tuples, lists and dicts. Each
    container is visited once: a dict holding itself three times (``d[0] = d[1] = d[2] = d``) took
    3 ** _MAX_DEPTH steps (pprint's test_knotted never returned)."""
    if test(value):
        return True
    if depth > _MAX_DEPTH or type(value) not in _OPTREE_NODES or id(value) in seen:
        return False
    seen.add(id(value))
    items = value.values() if isinstance(value, dict) else value
    return any(_found_in_nodes(v, depth + 1, test, seen) for v in items)
