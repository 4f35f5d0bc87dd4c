"""Copy plans: what ``made_anew`` makes for each cached call, written once per entry as one function.

``made_anew`` (jit/call_copies.py) makes an object the program made anew per call as ``copy.deepcopy`` of
the pass's object through the call's memo. ``deepcopy`` finds out again on every call what each object is
(its dispatch, its reduction, the memo subclass's hooks for functions and classes): 20-200 us for a
closure or a class whose eager making costs 3-20 us. A plan walks the pass's object once, when the entry
is made, and writes, for each object it reaches, the lines that make this call's copy directly: a list a
new list of its items' copies, a function the program made a new function over new cells, a class the
program made ``type`` over its namespace's copies, an instance of a plain class ``cls.__new__(cls)`` and
its ``__dict__``'s copy, the caller's objects and ``deepcopy``'s atoms the object itself (Note [A copy
plan written as one function]).

Invariants:
- each object's lines make exactly what ``deepcopy`` of its object through the call's memo made: they
  look in the memo first, and put its copy there when ``deepcopy`` does (a list or dict before its
  items, a tuple or a set after, and only where it is a new object), so an object reached twice, by
  this plan or by another copy of the call (jit/call_copies.py ``in_one_call``), is one object, and a
  cycle ends where ``deepcopy``'s ends (a cycle back to a tuple or set is not planned);
- the pass's values reach the generated source only as bound constants; its text holds local names,
  memo keys (integers) and fixed attribute names;
- the pass's objects a plan walks are the entry's own: nothing changes them after the pass (the calls
  get copies), so the plan's view of them, taken once, is what a walk on every call would find;
- a plan is made only where every object reached is of a kind below (and its source is not huge); else
  ``plan`` returns None and ``made_anew`` copies with ``deepcopy`` as before (weak objects, methods,
  deques, ``Fraction`` ...).
"""

from __future__ import annotations

import copyreg
import keyword
import types
from collections.abc import Callable
from typing import Any

from jitcore.ir.codegen import compile_source
from jitcore.jit.made_classes import library_maker, remake_class
from jitcore.jit.made_functions import EMPTY, fill_function, function_state
from jitcore.jit.set_tables import made_as, shape_of

__all__ = ["function_maker", "plan"]

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


def plan(value: Any, kept: dict[int, Any], passed: dict[int, tuple[Any, Any]], functions: dict[int, Any],
         memo_get: Callable[[], dict | None], new_memo: Callable[[], dict]) -> Callable[..., Any] | None:
    """The function making this call's copy of ``value`` (``made_anew``'s walk found ``kept``: what every
    call shares, ``passed``: what each call passes, ``functions``: the functions and classes the program
    made), generated once (Note [A copy plan written as one function]); it takes one optional argument (an
    output's results, unread) and copies through the memo ``memo_get()`` gives, else through a new
    ``new_memo()``. None where ``value`` reaches an object no plan makes."""
    planner = _Planner(kept, passed, functions)
    try:
        root = planner.step(value)
    except _Unplanned:
        return None
    if len(planner.lines) > _MOST_LINES:
        return None
    source = "\n".join([
        "def copy_made(_results=None):",
        "    memo = memo_get()",
        "    if memo is None:",
        "        memo = new_memo()",
        *("    " + line for line in planner.lines),
        f"    return {root}",
    ]) + "\n"
    # (no object this call passes: a memo no other copy shares is a plain dict, cheaper to make)
    namespace = {**planner.constants, "memo_get": memo_get, "new_memo": new_memo if passed else dict,
                 "get": dict.get,
                 "NIL": _NIL, "EMPTY": EMPTY, "new_cell": types.CellType, "new_function": types.FunctionType,
                 "fill_function": fill_function, "remake_class": remake_class, "Copies": _Copies,
                 "held": planner.held}
    return compile_source(source, "copy_made", namespace, tag="copy")


_MOST_LINES = 3000  # a larger plan (thousands of objects) is copied by ``deepcopy``: its source would be long


# Note [A copy plan written as one function]
# A plan's steps were a closure per object, calling each other: for a closure over a list, ~10 Python
# calls per cached call (the list's step, the function's, its parts' list, the memo's wrapper) where eager
# makes it in ~0.2 us. The plan is now written, once per entry, as the source of one function (compiled as
# the prologue is, jitcore/ir/codegen.py), each object's making a few lines of it. Every value of the pass
# reaches that source only as a bound constant (``k3``), never as text: the generated text holds names,
# memo keys (``id``s, integers) and the fixed attribute names below. Each object's lines keep its step's
# order: look in the memo, make the object, put it there (a list, dict, instance or function before its
# parts, a tuple or set after), then its parts, then fill it. The lines are not nested: an object's parts'
# lines run even where the memo held the object already (another copy of this call made it, and with it
# its parts, which are then found in the memo: the result is the same), so each object's local is bound
# on every path and a second reach of it, or a cycle back to it, reads the local. A cycle back to a tuple,
# set or namedtuple instance while its parts are being made (``deepcopy`` would make it twice) is not
# planned.
class _Copies(dict):
    """``remake_class``'s ``copied``: this call's copy of each part of a class, by the part's ``id``."""

    __slots__ = ()

    def __call__(self, part: Any) -> Any:
        return self[id(part)]


class _Planner:
    """Writes the lines making one object, each object's once; ``step`` gives the name of its copy."""

    def __init__(self, kept: dict[int, Any], passed: dict[int, tuple[Any, Any]],
                 functions: dict[int, Any]) -> None:
        self.kept, self.passed, self.functions = kept, passed, functions
        self.names: dict[int, str] = {}  # id -> the local (or constant) naming this call's copy
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.held: list[Any] = []  # the objects planned, alive while the plan is: their ids stay theirs
        self.count = 0
        self.open: set[int] = set()  # tuples, sets and namedtuple instances whose parts are being made

    def constant(self, value: Any) -> str:
        name = f"k{len(self.constants)}"
        self.constants[name] = value
        return name

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def local(self, value: Any) -> str:
        name = self.names[id(value)] = self.fresh("v")
        return name

    def step(self, value: Any) -> str:
        found = self.names.get(id(value))
        if found is not None:
            return found
        if id(value) in self.open:
            raise _Unplanned  # Note [A copy plan written as one function]
        self.held.append(value)
        key = id(value)
        if key in self.kept:
            return self._constant(value)
        if key in self.passed:
            return self._passed(value, *self.passed[key])
        if key in self.functions:
            if type(value) is types.FunctionType:
                return self._function(value)
            if type(value) is type:
                return self._class(value)
            raise _Unplanned  # an immutable made again by the memo (jit/call_copies.py ``_remade``)
        kind = type(value)
        if kind in _ATOMIC or isinstance(value, type):  # (a class of another metaclass: ``deepcopy``'s atom)
            return self._constant(value)
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

    def _constant(self, value: Any) -> str:
        name = self.constant(value)
        self.names[id(value)] = name
        return name

    def _made_first(self, value: Any, making: str) -> str:
        """The lines looking ``value`` up in the memo, else making it by ``making`` and putting it there
        before its parts; the local ``n<name>`` says whether it was made here."""
        name = self.local(value)
        self.lines += [f"{name} = get(memo, {id(value)}, NIL)",
                       f"if {name} is NIL:",
                       f"    {name} = {making}",
                       f"    memo[{id(value)}] = {name}",
                       f"    n{name} = True",
                       "else:",
                       f"    n{name} = False"]
        return name

    def _made_after(self, value: Any, making: str) -> None:
        """The lines making ``value`` (named already) by ``making`` after its parts, where the memo holds
        none (a cycle through it may have put one there), and putting it there."""
        name = self.names[id(value)]
        self.lines += [f"{name} = get(memo, {id(value)}, NIL)",
                       f"if {name} is NIL:",
                       f"    {name} = {making}",
                       f"    memo[{id(value)}] = {name}"]

    def _passed(self, value: Any, found: Any, path: Any) -> str:
        """The object this call passes at ``path`` (Note [The objects this call passes],
        jit/call_copies.py)."""
        name = self.local(value)
        read = self._read(path)
        making = (f"memo.passed({self.constant(found)}, {self.constant(path)})" if read is None
                  else f"{self.constant(found)} if memo.call is None else {read}")
        self.lines += [f"{name} = get(memo, {id(value)}, NIL)",
                       f"if {name} is NIL:",
                       f"    {name} = {making}",
                       f"    memo[{id(value)}] = {name}"]
        return name

    # Note [A passed object read where the plan runs]
    # ``memo.passed(found, path)`` reads this call's object through ``Path.get`` (a loop over step objects,
    # ~0.5 us of a cached call that returns a closure over its list argument, where eager makes the closure
    # in ~0.2 us). A path from the arguments through items and attributes is written out as an expression
    # over the call's ``(args, kwargs)``, ``memo.call[0][1]``: the same reads in the same order (a key as a
    # bound constant, an attribute name only where it is an identifier); ``memo.passed`` otherwise.
    def _read(self, path: Any) -> str | None:
        """``path`` read from the call's ``(args, kwargs)`` in ``memo.call``, or None."""
        if path.root.kind not in ("args", "kwargs"):
            return None
        read = "memo.call[0]" if path.root.kind == "args" else "memo.call[1]"
        for step in path.steps:
            if step.kind == "attr" and step.value.isidentifier() and not keyword.iskeyword(step.value):
                read += f".{step.value}"
            elif step.kind in ("index", "key"):
                read += f"[{step.value!r}]" if type(step.value) is int else f"[{self.constant(step.value)}]"
            else:
                return None
        return read

    def _container(self, value: list | dict) -> str:
        """``deepcopy``'s list or dict: the new one in the memo before its items (a key before its value)."""
        is_list = type(value) is list
        name = self._made_first(value, "[]" if is_list else "{}")
        kids = [self.step(item) for item in (value if is_list else _pairs(value))]
        if is_list:
            if kids:
                self.lines += [f"if n{name}:", f"    {name}.extend(({', '.join(kids)},))"]
        elif kids:
            self.lines.append(f"if n{name}:")
            self.lines += [f"    {name}[{k}] = {v}" for k, v in zip(kids[::2], kids[1::2])]
        return name

    def _parts_then(self, value: Any, parts: list[Any]) -> list[str]:
        """The names of ``parts``' copies, made while ``value`` is open (a cycle back to it is refused)."""
        self.open.add(id(value))
        kids = [self.step(part) for part in parts]
        self.open.discard(id(value))
        return kids

    def _tuple(self, value: tuple) -> str:
        """``deepcopy``'s tuple: its items first; itself where each item's copy is the item (not put in the
        memo), else a new tuple put there (a cycle through it may have put one there already)."""
        kids = self._parts_then(value, list(value))
        changing = [(kid, item) for kid, item in zip(kids, value)
                    if kid not in self.constants or self.constants[kid] is not item]
        if not changing:
            return self._constant(value)
        name, own = self.local(value), self.constant(value)
        same = " and ".join(f"{kid} is {self.constant(item)}" for kid, item in changing)
        self.lines += [f"{name} = get(memo, {id(value)}, NIL)",
                       f"if {name} is NIL:",
                       f"    if {same}:",
                       f"        {name} = {own}",
                       "    else:",
                       f"        {name} = ({', '.join(kids)},)",
                       f"        memo[{id(value)}] = {name}"]
        return name

    def _set(self, value: set | frozenset) -> str:
        """``deepcopy``'s set or frozenset (by its reduction): the class over its items' copies, then in the
        memo."""
        kids = self._parts_then(value, list(value))
        self.local(value)
        # a set in the pass's table (Note [A made set's table as the pass made it], jit/set_tables.py)
        make = made_as(shape_of(value)) if type(value) is set else type(value)
        self._made_after(value, f"{self.constant(make)}(({', '.join(kids)}{',' if kids else ''}))")
        return self.names[id(value)]

    def _named_tuple(self, value: tuple) -> str:
        """``deepcopy``'s instance of a ``namedtuple`` class (its reduction: ``copyreg.__newobj__`` over the
        class and its items): the call's class and the items' copies, then ``cls.__new__``, in the memo."""
        cls, *items = self._parts_then(value, [type(value), *value])
        self.local(value)
        self._made_after(value, f"{cls}.__new__({', '.join([cls, *items])})")
        return self.names[id(value)]

    def _instance(self, value: Any) -> str:
        """``deepcopy``'s instance of a plain class (its reduction ``copyreg.__newobj__``, its ``__dict__``
        the state): the call's class (a class the program made: this call's), ``__new__``, in the memo,
        then its ``__dict__``'s copy."""
        state = value.__reduce_ex__(4)[2]
        cls = self.step(type(value))
        name = self._made_first(value, f"{cls}.__new__({cls})")
        if state is not None:
            copied = self.step(state)
            self.lines += [f"if n{name} and {copied}:", f"    {name}.__dict__.update({copied})"]
        return name

    def _function(self, fn: types.FunctionType) -> str:
        """A function the program made, as ``function_maker`` makes it: this call's cells (one per cell of
        the pass, whichever function reaches it first), the function in the memo, then its parts, the
        cells still empty filled with theirs and the other parts set."""
        cells = [self.fresh("c") for _ in fn.__closure__ or ()]
        closure = f"({', '.join(cells)},)" if cells else "None"
        name = self.local(fn)
        self.lines += [f"{name} = get(memo, {id(fn)}, NIL)", f"if {name} is NIL:"]
        for cell, original in zip(cells, fn.__closure__ or ()):
            self.lines += [f"    {cell} = get(memo, {id(original)})",
                           f"    if {cell} is None:",
                           f"        {cell} = new_cell()",
                           f"        memo[{id(original)}] = {cell}",
                           f"        memo.setdefault(id(memo), []).append({self.constant(original)})"]
        made = ", ".join(self.constant(part) for part in (fn.__code__, fn.__globals__, fn.__name__))
        self.lines += [f"    {name} = new_function({made}, None, {closure})",
                       f"    memo[{id(fn)}] = {name}"]
        self.lines += [f"    {name}.{attribute} = {self.constant(value)}" for attribute, value in _told(fn)]
        self.lines += [f"    n{name} = True", "else:", f"    n{name} = False"]
        state = function_state(fn)
        kids = [None if part is EMPTY else self.step(part) for part in state]
        count = len(cells)
        fills = []
        for cell, kid in zip(cells, kids):
            if kid is not None:
                fills += ["    try:", f"        {cell}.cell_contents", "    except ValueError:",
                          f"        {cell}.cell_contents = {kid}"]
        rest = kids[count:]
        if any(kid is not None for kid in rest):
            listed = ", ".join(["EMPTY"] * count + ["EMPTY" if kid is None else kid for kid in rest])
            fills.append(f"    fill_function({self.constant(fn)}, {name}, [{listed}])")
        if fills:
            self.lines += [f"if n{name}:", *fills]
        return name

    def _class(self, cls: type) -> str:
        """A class the program made that ``type`` makes again (jit/made_classes.py ``remake_class``), its
        namespace's objects copied first (the pass's class standing for it meanwhile, as in the memo)."""
        original = self.constant(cls)
        name = self._made_first(cls, original)
        parts = {id(part): self.step(part) for part in _class_copies(cls)}
        copies = ", ".join(f"{key}: {kid}" for key, kid in parts.items())
        self.lines += [f"if n{name}:", f"    {name} = remake_class({original}, memo, Copies({{{copies}}}))"]
        return name


def _told(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """What ``FunctionType`` does not give ``fn``'s copy without being told: only these are set on it."""
    probe = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, None,
                               tuple(types.CellType() for _ in fn.__closure__ or ()) or None)
    names = {"__qualname__": fn.__qualname__, "__module__": fn.__module__, "__doc__": fn.__doc__}
    if getattr(fn, "__type_params__", ()):
        names["__type_params__"] = fn.__type_params__
    return [(n, v) for n, v in names.items() if getattr(probe, n, None) is not v]


def function_maker(fn: types.FunctionType) -> Callable[[dict, Callable[[], list[Any]]], Any]:
    """Makes this call's copy of ``fn``, a function the program made, as jit/made_functions.py
    ``remake_function`` does, from what it found once: this call's cells (one per cell of the pass,
    whichever function reaches it first), the function in the memo, then its parts (``parts()``, laid out
    as ``function_state``), the cells still empty filled with theirs and the other parts set."""
    key = id(fn)
    code, globals_, name = fn.__code__, fn.__globals__, fn.__name__
    cells = [(id(cell), cell) for cell in fn.__closure__ or ()]
    count = len(cells)
    told = _told(fn)
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
