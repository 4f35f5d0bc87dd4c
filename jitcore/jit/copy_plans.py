"""Copy plans: what ``made_anew`` makes for each cached call, compiled once per entry into steps.

``made_anew`` (jit/call_copies.py) makes an object the program made anew per call as ``copy.deepcopy`` of
the pass's object through the call's memo. ``deepcopy`` finds out again on every call what each object is
(its dispatch, its reduction, the memo subclass's hooks for functions and classes): 20-200 us for a
closure or a class whose eager making costs 3-20 us. A plan walks the pass's object once, when the entry
is made, and keeps, for each object it reaches, a step that makes this call's copy directly: a list a new
list of its items' steps, a function the program made a new function over new cells, a class the program
made ``type`` over its namespace's steps, an instance of a plain class ``cls.__new__(cls)`` and its
``__dict__``'s step, the caller's objects and ``deepcopy``'s atoms the object itself.

Invariants:
- a step makes exactly what ``deepcopy`` of its object through the call's memo made: it looks in the memo
  first, and puts its copy there when ``deepcopy`` does (a list or dict before its items, a tuple or a
  set after, and only where it is a new object), so an object reached twice, by this plan or by another
  copy of the call (jit/call_copies.py ``in_one_call``), is one object, and a cycle ends where
  ``deepcopy``'s ends;
- the pass's objects a plan walks are the entry's own: nothing changes them after the pass (the calls
  get copies), so the steps' view of them, taken once, is what a walk on every call would find;
- a plan is made only where every object reached is of a kind below; else ``plan`` returns None and
  ``made_anew`` copies with ``deepcopy`` as before (weak objects, methods, deques, ``Fraction`` ...).
"""

from __future__ import annotations

import copyreg
import types
from collections.abc import Callable
from typing import Any

from jitcore.jit.made_classes import library_maker, remake_class
from jitcore.jit.made_functions import EMPTY, fill_function, function_state

__all__ = ["Step", "function_maker", "plan"]

Step = Callable[[dict], Any]  # this call's copy of one object, given the call's memo

# what ``deepcopy`` returns as itself (its ``_deepcopy_atomic`` types; ``range`` and ``weakref.ref``
# are made by the call's memo, not planned)
_ATOMIC = (type(None), int, float, bool, complex, bytes, str, types.CodeType, type, types.BuiltinFunctionType,
           type(Ellipsis), type(NotImplemented), types.FunctionType, property)
# what a plain instance's class (and its bases but ``object``) must not define: ``deepcopy`` would call it
_COPY_MADE_BY = ("__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__new__",
                 "__getnewargs__", "__getnewargs_ex__", "__slots__", "__copy__", "__getattr__",
                 "__getattribute__")
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or ``type()``), not C's
_NIL = object()


class _Unplanned(Exception):
    """An object no step makes: ``deepcopy`` makes it."""


def plan(value: Any, kept: dict[int, Any], passed: dict[int, tuple[Any, Any]],
         functions: dict[int, Any]) -> Step | None:
    """The step making this call's copy of ``value`` (``made_anew``'s walk found ``kept``: what every
    call shares, ``passed``: what each call passes, ``functions``: the functions and classes the program
    made), or None where ``value`` reaches an object no step makes."""
    planner = _Planner(kept, passed, functions)
    try:
        root = planner.step(value)
    except _Unplanned:
        return None

    root.held = planner.held  # type: ignore[attr-defined] - the planned objects live as the plan does
    return root


class _Planner:
    """Compiles the steps of one object, each object's once (a cycle's step is found while it is made)."""

    def __init__(self, kept: dict[int, Any], passed: dict[int, tuple[Any, Any]],
                 functions: dict[int, Any]) -> None:
        self.kept, self.passed, self.functions = kept, passed, functions
        self.steps: dict[int, Step] = {}
        self.held: list[Any] = []  # the objects planned, alive while the plan is: their ids stay theirs

    def step(self, value: Any) -> Step:
        found = self.steps.get(id(value))
        if found is not None:
            return found
        self.held.append(value)
        key = id(value)
        if key in self.kept:
            return self._put(key, _constant(value))
        if key in self.passed:
            return self._put(key, _passed(key, *self.passed[key]))
        if key in self.functions:
            if type(value) is types.FunctionType:
                return self._function(value)
            if type(value) is type:
                return self._class(value)
            raise _Unplanned  # an immutable made again by the memo (jit/call_copies.py ``_remade``)
        kind = type(value)
        if kind in _ATOMIC or isinstance(value, type):  # (a class of another metaclass: ``deepcopy``'s atom)
            return self._put(key, _constant(value))
        if kind is list or kind is dict:
            return self._container(value)
        if kind is tuple:
            return self._tuple(value)
        if kind is set or kind is frozenset:
            return self._set(value)
        if _plain_instance(value):
            return self._instance(value)
        if isinstance(value, tuple) and library_maker(kind) is not None:
            return self._named_tuple(value)
        raise _Unplanned

    def _put(self, key: int, step: Step) -> Step:
        self.steps[key] = step
        return step

    def _container(self, value: list | dict) -> Step:
        """``deepcopy``'s list or dict: the new one in the memo before its items (a key before its value)."""
        key, kids = id(value), []
        is_list = type(value) is list

        def container(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            if is_list:
                made = []
                memo[key] = made
                made.extend([kid(memo) for kid in kids])  # (item by item: a later item may read the memo)
                return made
            made = {}
            memo[key] = made
            for k, v in zip(kids[::2], kids[1::2]):
                made[k(memo)] = v(memo)
            return made

        self._put(key, container)
        kids.extend(self.step(item) for item in (value if is_list else _pairs(value)))
        return container

    def _tuple(self, value: tuple) -> Step:
        """``deepcopy``'s tuple: its items first; itself where each item's copy is the item, else a new
        tuple put in the memo (a cycle through it may have put one there already)."""
        key, kids = id(value), []

        def copied_tuple(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            items = [kid(memo) for kid in kids]
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            if all(a is b for a, b in zip(items, value)):
                return value
            made = tuple(items)
            memo[key] = made
            return made

        self._put(key, copied_tuple)
        kids.extend(self.step(item) for item in value)
        return copied_tuple

    def _set(self, value: set | frozenset) -> Step:
        """``deepcopy``'s set or frozenset (by its reduction): the class over its items' copies, then in the
        memo."""
        key, kind, kids = id(value), type(value), []

        def copied_set(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            made = kind([kid(memo) for kid in kids])
            memo[key] = made
            return made

        self._put(key, copied_set)
        kids.extend(self.step(item) for item in value)
        return copied_set

    def _instance(self, value: Any) -> Step:
        """``deepcopy``'s instance of a plain class (its reduction ``copyreg.__newobj__``, its ``__dict__``
        the state): the call's class (a class the program made: this call's), ``__new__``, in the memo,
        then its ``__dict__``'s copy."""
        key, parts = id(value), []
        state = value.__reduce_ex__(4)[2]

        def instance(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            cls = parts[0](memo)
            made = cls.__new__(cls)
            memo[key] = made
            if len(parts) > 1:
                copied_state = parts[1](memo)
                if copied_state:
                    made.__dict__.update(copied_state)
            return made

        self._put(key, instance)
        parts.append(self.step(type(value)))
        if state is not None:
            parts.append(self.step(state))
        return instance

    def _named_tuple(self, value: tuple) -> Step:
        """``deepcopy``'s instance of a ``namedtuple`` class (its reduction: ``copyreg.__newobj__`` over the
        class and its items): the call's class and the items' copies, then ``cls.__new__``, in the memo."""
        key, kids = id(value), []

        def named_tuple(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            cls, *items = [kid(memo) for kid in kids]
            made = cls.__new__(cls, *items)
            memo[key] = made
            return made

        self._put(key, named_tuple)
        kids.extend(self.step(item) for item in (type(value), *value))
        return named_tuple

    def _function(self, fn: types.FunctionType) -> Step:
        """A function the program made (``function_maker``), its parts made by their steps."""
        kids: list[Step | None] = []
        make = function_maker(fn)

        def function(memo: dict) -> Any:
            return make(memo, lambda: [EMPTY if kid is None else kid(memo) for kid in kids])

        self._put(id(fn), function)
        kids.extend(None if part is EMPTY else self.step(part) for part in function_state(fn))
        return function

    def _class(self, cls: type) -> Step:
        """A class the program made that ``type`` makes again (jit/made_classes.py ``remake_class``), its
        namespace's objects copied by their steps."""
        key, steps = id(cls), self.steps

        def made_class(memo: dict) -> Any:
            made = dict.get(memo, key, _NIL)
            if made is not _NIL:
                return made
            return remake_class(cls, memo, lambda part: steps[id(part)](memo))

        self._put(key, made_class)
        for part in _class_copies(cls):
            self.step(part)
        return made_class


def function_maker(fn: types.FunctionType) -> Callable[[dict, Callable[[], list[Any]]], Any]:
    """Makes this call's copy of ``fn``, a function the program made, as jit/made_functions.py
    ``remake_function`` does, from what it found once: this call's cells (one per cell of the pass,
    whichever function reaches it first), the function in the memo, then its parts (``parts()``, laid out
    as ``function_state``), the cells still empty filled with theirs and the other parts set."""
    key = id(fn)
    code, globals_, name = fn.__code__, fn.__globals__, fn.__name__
    cells = [(id(cell), cell) for cell in fn.__closure__ or ()]
    count = len(cells)
    # what ``FunctionType`` gives without being told: only the rest is set on each call's function
    probe = types.FunctionType(code, globals_, name, None, tuple(types.CellType() for _ in cells) or None)
    names = {"__qualname__": fn.__qualname__, "__module__": fn.__module__, "__doc__": fn.__doc__}
    if getattr(fn, "__type_params__", ()):
        names["__type_params__"] = fn.__type_params__
    told = [(n, v) for n, v in names.items() if getattr(probe, n, None) is not v]
    new_cell, new_function = types.CellType, types.FunctionType

    def make(memo: dict, parts: Callable[[], list[Any]]) -> Any:
        made = dict.get(memo, key, _NIL)
        if made is not _NIL:
            return made
        closure = []
        for cell_key, cell in cells:
            new = dict.get(memo, cell_key)
            if new is None:
                new = new_cell()
                memo[cell_key] = new
                memo.setdefault(id(memo), []).append(cell)  # kept alive, as ``deepcopy`` keeps it
            closure.append(new)
        made = new_function(code, globals_, name, None, tuple(closure) if cells else None)
        memo[key] = made
        for attribute, value in told:
            setattr(made, attribute, value)
        state = parts()
        for new, value in zip(closure, state):
            if value is not EMPTY:
                try:
                    new.cell_contents  # noqa: B018 - filled by another function of the call: kept
                except ValueError:
                    new.cell_contents = value
        for value in state[count:]:  # (a loop, not ``any``: on every call)
            if value is not EMPTY:
                fill_function(fn, made, [EMPTY] * count + state[count:])
                break
        return made

    return make


def _constant(value: Any) -> Step:
    def as_itself(_memo: dict) -> Any:
        return value

    return as_itself


def _passed(key: int, found: Any, path: Any) -> Step:
    """The object this call passes at ``path`` (Note [The objects this call passes], jit/call_copies.py)."""

    def passed(memo: Any) -> Any:
        made = dict.get(memo, key, _NIL)
        if made is _NIL:
            made = memo.passed(found, path)
            memo[key] = made
        return made

    return passed


def _pairs(value: dict) -> list[Any]:
    return [item for pair in value.items() for item in pair]


def _class_copies(cls: type) -> list[Any]:
    """What ``remake_class`` copies of ``cls``: its bases, and its namespace's values (a classmethod's,
    staticmethod's or property's functions in its place)."""
    maker = library_maker(cls)
    if maker is not None:  # (``None``: a property's missing function)
        return [*maker.parts(cls), None]
    found: list[Any] = list(cls.__bases__)
    for name, value in vars(cls).items():
        if name in ("__dict__", "__weakref__", "__slotnames__"):
            continue
        kind = type(value)
        if kind is classmethod or kind is staticmethod:
            found.append(value.__func__)
        elif kind is property:
            found.extend([value.fget, value.fset, value.fdel])
        else:
            found.append(value)
    return found


def _plain_instance(value: Any) -> bool:
    """An instance whose copy is ``cls.__new__(cls)`` and its ``__dict__``: of classes a class statement
    made over ``object`` alone, none defining how it is copied or made."""
    kind = type(value)
    if type(kind) is not type or not hasattr(value, "__dict__"):
        return False
    for klass in kind.__mro__[:-1]:
        if not klass.__flags__ & _HEAPTYPE or any(name in vars(klass) for name in _COPY_MADE_BY):
            return False
    reduced = value.__reduce_ex__(4)
    return len(reduced) == 5 and reduced[0] is copyreg.__newobj__ and reduced[1] == (kind,) and \
        (reduced[2] is None or reduced[2] is value.__dict__) and reduced[3] is None and reduced[4] is None
