"""Functions and classes a program makes while it is traced: made again for each cached call, or refused.

Eagerly every call of ``def g(): ...; return g`` (a lambda, ``functools.partial`` over one, a class
statement, ``type(name, bases, ns)``, ``collections.namedtuple(...)``) makes a new object. ``copy.deepcopy``
keeps functions and classes as themselves, so every cached call handed on the pass's object, and what
the caller set on one call's (``g.hits = 1``) showed in the next call's. The interpreter tells the pass
each function and class the program makes (``Hooks.on_made``); ``MadeHere`` remembers them.

Invariants:
- only what this pass made is made again: a function or class that existed before the call is the very
  object on every call, as eagerly;
- a function the program made, reached by the output or the effects, is made again per call over the
  same code and globals, with cells, defaults, keyword defaults, annotations and ``__dict__`` of its own,
  each taken through the call's memo (jit/call_copies.py): functions sharing a cell share the call's copy
  of it, and one function reached twice is one function (Note [A function the program made]);
- a class the program made is never handed to two calls: it is made again per call where ``type`` alone
  makes it (jit/made_classes.py), else a call that returns or stores one, or an instance of one, runs
  eagerly (``refused_class``: Note [A class the program made]).
"""

from __future__ import annotations

import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

from jitcore.errors import UnsupportedOperationError
from jitcore.jit.made_classes import as_made, why_not_made_again

__all__ = ["EMPTY", "MadeHere", "fill_function", "function_parts", "function_state", "is_empty_cell",
           "new_function", "refused_class", "remake_function"]


class MadeHere:
    """The functions and classes one pass made, by id, held weakly: an entry goes with its object, so an id
    is never another object's, and a function or class the program dropped is freed as eagerly (held to the
    pass's end, a class made and dropped outlived ``gc.collect()``: test_ordered_dict's
    test_reference_loop, test_functools' test_lru_cache_weakrefable, 3.13 test_inspect's
    test_cache_does_not_cause_classes_to_persist jitted)."""

    def __init__(self) -> None:
        self._made: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._as_made: dict[int, tuple] = {}  # each class's namespace when made (jit/made_classes.py)

    def note(self, obj: Any) -> None:
        """``obj``, a function or class, was made by the program in this pass."""
        self._made[id(obj)] = obj
        if type(obj) is type:  # only these are made again; a metaclass's ``__dict__`` may be a property
            self._as_made[id(obj)] = as_made(obj)

    def class_refusal(self, cls: type) -> str | None:
        """Why a cached call cannot make ``cls``, a class the program made, again (None: it can;
        jit/made_classes.py)."""
        return why_not_made_again(cls, self._as_made.get(id(cls)) if self.has(cls) else None)

    def has(self, obj: Any) -> bool:
        """Whether the program made ``obj`` in this pass."""
        return obj is not None and self._made.get(id(obj)) is obj

    def classes_of(self, inner: Callable[..., Any], skip: int = 0) -> Callable[..., Any]:
        """``type`` for the program (``inner``), noting the class a three-argument call makes
        (``type("T", (), {})``, ``collections.namedtuple``); with ``skip=1``, ``type.__new__`` (a Python
        metaclass's ``super().__new__(mcls, name, bases, ns)``, ``abc.ABCMeta``), whose first argument is
        the metaclass."""

        def type_(*args: Any, **kwargs: Any) -> Any:
            parts = args[skip:]
            three = len(parts) == 3 and type(parts[1]) is tuple and isinstance(parts[2], dict)
            if three:
                _refuse_native_class_code(*parts)  # Note [Class code C runs natively]
            made = inner(*args, **kwargs)
            if three and isinstance(made, type):
                self.note(made)
            return made

        return type_


# Note [A function the program made]
# ``def g(): ...; return g``: eagerly each call returns a new function, on which the caller may set
# attributes (``g.hits += 1``) or which it may keep as a key. A function is an atom to ``deepcopy``: the
# cached calls returned the pass's function, the same object on every call. A function the program
# made in the pass is made again per call: ``types.FunctionType`` over its code and globals, with new
# cells (empty first, so that a function found in its own cell, or two functions sharing a cell, are
# this call's), then its defaults, keyword defaults, annotations and ``__dict__`` copied through the
# call's memo, as eager evaluates them anew (``def g(acc=[])``: a new list per call). Its name, qualified
# name, module, doc and type parameters are the pass's. Its cells' contents are copied through the memo
# too: a list the program made that the closure holds (``count = [0]``) is this call's, one with the output's
# ``count`` where it returns that as well; a closure over the caller's objects is refused (Note [A closure
# over a call's objects], jit/outputs.py).
def remake_function(fn: types.FunctionType, memo: dict, copied: Callable[[Any], Any]) -> types.FunctionType:
    """This call's copy of ``fn``, a function the program made, put in ``memo`` (whose ``copied`` copies
    what it holds) before its parts are copied (Note [A function the program made])."""
    made = new_function(fn, memo)
    fill_function(fn, made, [part if part is EMPTY else copied(part) for part in function_state(fn)])
    return made


EMPTY: Any = object()  # an empty cell's place, or a part the function lacks, in ``function_state``


def function_state(fn: types.FunctionType) -> list[Any]:
    """What is the program's in ``fn``: each cell's contents (``EMPTY`` for an empty cell), then its
    defaults, keyword defaults, annotations and ``__dict__`` (a copy of it), each ``EMPTY`` where none."""
    cells = [EMPTY if is_empty_cell(cell) else cell.cell_contents for cell in fn.__closure__ or ()]
    annotations = fn.__annotations__ or EMPTY
    parts = (fn.__defaults__, fn.__kwdefaults__, annotations, dict(fn.__dict__) if fn.__dict__ else None)
    return cells + [EMPTY if part is None else part for part in parts]


def new_function(fn: types.FunctionType, memo: dict) -> types.FunctionType:
    """A new function over ``fn``'s code and globals, with this call's cells (empty where ``memo`` holds
    none yet), put in ``memo`` under ``fn``: what its parts reach finds it there."""
    cells = fn.__closure__
    closure = None if cells is None else tuple(_cell(cell, memo) for cell in cells)
    made = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None, closure)
    memo[id(fn)] = made
    made.__qualname__ = fn.__qualname__
    made.__module__ = fn.__module__
    made.__doc__ = fn.__doc__
    if getattr(fn, "__type_params__", ()):
        made.__type_params__ = fn.__type_params__
    return made


def fill_function(fn: types.FunctionType, made: types.FunctionType, state: list[Any]) -> None:
    """Gives ``made`` (``new_function``'s for ``fn``) this call's ``state``, laid out as ``function_state``:
    a cell another function of the call filled first keeps what it holds."""
    count = len(fn.__closure__ or ())
    for new, value in zip(made.__closure__ or (), state[:count]):
        if value is not EMPTY and is_empty_cell(new):
            new.cell_contents = value
    defaults, kwdefaults, annotations, attributes = state[count:]
    if defaults is not EMPTY:
        made.__defaults__ = defaults
    if kwdefaults is not EMPTY:
        made.__kwdefaults__ = kwdefaults
    if annotations is not EMPTY:
        made.__annotations__ = annotations
    if attributes is not EMPTY:
        made.__dict__.update(attributes)


def _cell(cell: types.CellType, memo: dict) -> types.CellType:
    """This call's cell for ``cell``: one per call, whichever function reaches it first."""
    found = dict.get(memo, id(cell))
    if found is None:
        found = types.CellType()
        memo[id(cell)] = found
        memo.setdefault(id(memo), []).append(cell)  # kept alive, as ``deepcopy`` keeps what it copies
    return found


def is_empty_cell(cell: types.CellType) -> bool:
    """Whether ``cell`` holds nothing yet (reading it raises ``ValueError``)."""
    try:
        cell.cell_contents  # noqa: B018 - reading an empty cell raises ValueError
    except ValueError:
        return True
    return False


def function_parts(fn: types.FunctionType) -> list[Any]:
    """What a copy of ``fn`` copies: its cells' contents, defaults, keyword defaults, annotations and
    attributes."""
    found = [cell.cell_contents for cell in fn.__closure__ or () if not is_empty_cell(cell)]
    found += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
    return found + list(fn.__annotations__.values()) + list(fn.__dict__.values())


# Note [A class the program made]
# ``class C: ...; return C``, ``return collections.namedtuple("P", "a b")``, an instance of either: eagerly
# each call makes a new class, running its body, its metaclass's ``__new__``/``__init__``, its bases'
# ``__init_subclass__``, ``__set_name__`` of what it holds and its decorators (``dataclass``) again. A
# copy of the pass's class would run none of them, so no copy is faithful unless none of them is the
# program's code: a class that ``type`` alone makes, unchanged since, is made again per call
# (jit/made_classes.py, Note [A class made again per call]), and one ``collections.namedtuple`` made is
# made again by it (Note [A class the standard library made]); a call that returns or stores another class
# the program made, or an instance of one, is refused (JC-T001) and runs eagerly, whatever the contents of
# what it reaches (Note [Eager whatever the contents], jit/eager_entries.py).
def refused_class(cls: type, what: str = "class", why: str | None = None) -> UnsupportedOperationError:
    """The refusal of a call that returns or stores ``cls``, a class the program made (``what``: "class",
    or "instance" of it; ``why``: why it is not made again, jit/made_classes.py) (Note [A class the
    program made])."""
    held = "the class" if what == "class" else "an instance of the class"
    refused = UnsupportedOperationError(
        f"the function returns or stores {held} {cls.__qualname__}, which it made, and eager makes a new "
        f"class on every call{'' if why is None else ' (not made again by jitcore: ' + why + ')'}",
        hints=("define the class outside the jitted function",),
    )
    refused.whatever_the_contents = True
    return refused


# Note [Class code C runs natively]
# ``type(name, bases, ns)`` (a class statement's, through ``__build_class__``) calls the bases'
# ``__init_subclass__`` and the ``__set_name__`` of what the namespace holds from C, natively: what they
# write (``Registry.subclasses.append(cls)``) is no effect the pass sees, so cached calls never wrote it
# (eager appends 3 times in 3 calls, jit once), and a call refused after it (Note [A class the program
# made]) wrote it twice on its first call. Where either is Python code outside the standard library, the
# class is refused before ``type`` runs: the call runs eagerly, and writes once per call. A Python
# metaclass's ``super().__new__(mcls, name, bases, ns)`` (``abc.ABCMeta``) is ``type.__new__``, checked the
# same way (``classes_of(..., skip=1)``); a C metaclass other than ``type`` is not.
def _refuse_native_class_code(name: Any, bases: tuple, namespace: dict) -> None:
    """Refuses the making of class ``name`` when C would run the program's Python code natively for it
    (Note [Class code C runs natively])."""
    for base in bases:
        for klass in getattr(base, "__mro__", ()):
            hook = vars(klass).get("__init_subclass__")
            if hook is None:
                continue
            if _programs_code(getattr(hook, "__func__", hook)):
                raise _refused_native(name, f"{klass.__qualname__}.__init_subclass__")
            break
    for value in list(namespace.values()):
        hook = getattr(type(value), "__set_name__", None)
        if hook is not None and _programs_code(hook):
            raise _refused_native(name, f"{type(value).__qualname__}.__set_name__")


def _programs_code(function: Any) -> bool:
    """A Python function outside the standard library."""
    if type(function) is not types.FunctionType:
        return False
    package = (function.__module__ or "builtins").split(".")[0]
    return package not in sys.stdlib_module_names


def _refused_native(name: Any, hook: str) -> UnsupportedOperationError:
    refused = UnsupportedOperationError(
        f"the function makes the class {name}, for which Python runs {hook} natively, outside jitcore",
        hints=("define the class outside the jitted function",),
    )
    refused.whatever_the_contents = True
    return refused
