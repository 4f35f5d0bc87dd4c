"""Writes a backward's code makes into state the backward-effects watch does not hold: found, refused.

``BackwardWatch`` (backward_effects.py) replays the writes of the code a backward runs into the objects
pass 1 reached. That code can also write state it reaches another way, and those writes were lost on
every cached call (a silently wrong state): a closure variable of a helper pass 1 never ran (``nonlocal
k; k += 1`` called from ``__torch_dispatch__`` or from an ``autograd.Function``'s ``backward``), a
tensor's attribute (``W.count += 1`` on a global tensor, ``a.touched = 1`` on the tensor
``__torch_dispatch__`` is handed), a plain object's attribute or a container named by a global the
watch does not hold. While the backward is recorded, ``unwatched_writes`` follows the program's own code
(not torch's, jitcore's, the standard library's or an installed package's) that runs: the functions
the recording's interpreter calls (``noted_call``, from its ``resolve_call`` hook: a subclass's
``__torch_dispatch__`` and what it calls) and, through a profile function on this thread, the frames
that run natively (an ``autograd.Function``'s ``backward`` and what it calls). For each, the first time
it is met, it notes the state its free variables and the globals its code names hold; the recording
mode notes the attributes of the program's subclass tensors each dispatch is handed, compared when
the dispatch returns (``handed``). When the recording ends, a change to any of them raises
``EagerOnlyValue`` (the call runs eagerly, JC-J002, naming what changed), after putting the changed
state back as it was noted (the watch puts its own back too).

Invariants:
- objects the watch holds are skipped (their writes are replayed), and so are the bindings of a
  namespace it holds;
- the comparison is shallow: a binding's identity (its value, for a number or a string), a container's
  items, an object's ``__dict__`` entries, each by identity (by value for numbers and strings). A write
  deeper (into an object reached through an attribute chain or an argument other than a dispatch's
  tensors) is not seen;
- only the recording thread is followed, and nothing is followed while another profile function is
  set (a profiler's own is never replaced).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import os
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from jitcore.diagnostics import JITCORE_DIR
from jitcore.errors import EagerOnlyValue

__all__ = ["handed", "noted_call", "unwatched_writes"]

_LIBRARY_DIRS = tuple(
    {os.path.dirname(torch.__file__) + os.sep, JITCORE_DIR}
    | {sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")})
_SCALARS = (int, float, str, bytes, bool, complex, type(None))
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


_ACTIVE = threading.local()  # .follow: the _Follow of the backward recorded on this thread


@contextlib.contextmanager
def unwatched_writes(watched: frozenset[int]) -> Iterator[None]:
    """Follow the program's code the body runs on this thread; raise ``EagerOnlyValue`` if it changed
    state that the objects of ids ``watched`` do not hold (module docstring)."""
    follow, outer = _Follow(watched), getattr(_ACTIVE, "follow", None)
    profiled = sys.getprofile() is None  # a profiler's own function is never replaced
    _ACTIVE.follow = follow
    if profiled:
        sys.setprofile(follow.event)
    try:
        yield
    finally:
        if profiled:
            sys.setprofile(None)
        _ACTIVE.follow = outer
    follow.check()


def noted_call(fn: Any) -> None:
    """The recording's interpreter is about to call ``fn``: note the state it can reach by name."""
    follow = getattr(_ACTIVE, "follow", None)
    if follow is not None and not follow.paused and type(fn) is types.FunctionType \
            and follow.program(fn.__code__):
        follow.note_function(fn)


@contextlib.contextmanager
def handed(types: Any, args: Any, kwargs: Any, proxy_of: Callable[[Any], Any]) -> Iterator[None]:
    """The body dispatches an op of the subclasses ``types`` on ``args``/``kwargs``: a change to the
    attributes of the program's subclass tensors among them (their proxies, ``proxy_of``, which the
    interpreted ``__torch_dispatch__`` is handed) is a write the watch does not replay. A dispatch of
    library subclasses only (torch's NestedTensor, torchao's) is not followed, the program's functions
    it calls included (a stand-in patched over the library's ``__torch_dispatch__``): a library's
    subclass code is taken as it ran while tracing (docs/user-guide.md)."""
    follow = getattr(_ACTIVE, "follow", None)
    if follow is None:
        yield
        return
    if types and not any(follow.program_type(t) for t in types):
        follow.paused += 1
        try:
            yield
        finally:
            follow.paused -= 1
        return
    tensors = [t for t in _tensors({"args": args, "kwargs": kwargs or {}}) if follow.program_type(type(t))]
    objects = [o for t in tensors for o in (t, proxy_of(t)) if id(o) not in follow.watched]
    noted = [(o, _state(o)) for o in objects]
    yield
    for obj, state in noted:
        if not _same_state(_state(obj), state):
            follow.changed.append(f"an attribute of a {follow.type_name(obj)} its __torch_dispatch__ was "
                                  "handed")
            _put_back(obj, state)


class _Follow:
    def __init__(self, watched: frozenset[int]) -> None:
        self.watched = watched
        self.programs: dict[types.CodeType, bool] = {}
        self.names: dict[types.CodeType, tuple[str, ...]] = {}
        # (kind, holder, key) -> (what, noted state); kind "cell": a frame's free variable (holder:
        # the code, key: its name; the cell is found when it changed), "global": a namespace's binding,
        # "state": an object's shallow state
        self.noted: dict[tuple, tuple[str, Any]] = {}
        self.held: dict[int, Any] = {}  # keeps what was noted alive, so that ids stay its
        self.types: dict[type, bool] = {}
        self.seen: set[types.CodeType] = set()
        self.frees: dict[tuple, types.FrameType] = {}
        self.changed: list[str] = []
        self.paused = 0  # inside a dispatch of library subclasses only (``handed``)

    def program(self, code: types.CodeType) -> bool:
        """Whether ``code`` is the program's own (module docstring)."""
        found = self.programs.get(code)
        if found is None:
            found = self.programs[code] = not code.co_filename.startswith((*_LIBRARY_DIRS, "<"))
        return found

    @staticmethod
    def type_name(obj: Any) -> str:
        return getattr(obj, "python_type", type(obj)).__name__

    def program_type(self, kind: type) -> bool:
        found = self.types.get(kind)
        if found is None:
            module = sys.modules.get(kind.__module__)
            filename = getattr(module, "__file__", None) or "<"
            found = self.types[kind] = not filename.startswith((*_LIBRARY_DIRS, "<"))
        return found

    def event(self, frame: types.FrameType, kind: str, _arg: Any) -> None:
        """The profile function: a native frame of the program's code starts."""
        if kind == "call" and not self.paused and self.program(frame.f_code) \
                and frame.f_code not in self.seen:
            self.seen.add(frame.f_code)
            code, values = frame.f_code, frame.f_locals
            for name in _free_variables(code):
                if name in values:
                    self.frees.setdefault((code, name), frame)  # a finished frame reads its cells' contents
                    self._note(("free", id(code), name), code, f"the closure variable {name} of "
                               f"{code.co_qualname}", values[name], binding=True)
            self._globals(code, frame.f_globals)

    def note_function(self, fn: types.FunctionType) -> None:
        """An interpreted call of ``fn`` starts."""
        code = fn.__code__
        if code in self.seen and fn.__closure__ is None:
            return
        self.seen.add(code)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            if id(cell) in self.watched or name not in _free_variables(code):
                continue
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            self._note(("cell", id(cell), None), cell, f"the closure variable {name} of {code.co_qualname}",
                       value, binding=True)
        self._globals(code, fn.__globals__)

    def _globals(self, code: types.CodeType, namespace: dict) -> None:
        for name in self._names(code):
            if name in namespace:
                self._note(("global", id(namespace), name), namespace,
                           f"the global {name} of {namespace.get('__name__')}", namespace[name],
                           binding=id(namespace) not in self.watched)

    def _note(self, key: tuple, holder: Any, what: str, value: Any, binding: bool) -> None:
        if binding and key not in self.noted:
            self.held[id(holder)] = holder
            self.noted[key] = (what, _binding(value))
        if id(value) not in self.watched and not isinstance(value, _OPAQUE) \
                and ("state", id(value), None) not in self.noted:
            self.held[id(value)] = value
            self.noted[("state", id(value), None)] = (what, _state(value))

    def _names(self, code: types.CodeType) -> tuple[str, ...]:
        names = self.names.get(code)
        if names is None:
            found = set(code.co_names)
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    found.update(self._names(const))
            names = self.names[code] = tuple(found)
        return names

    def check(self) -> None:
        """Raise ``EagerOnlyValue`` for the first state found changed, after putting all of it back."""
        for (kind, holder, key), (what, noted) in self.noted.items():
            if kind == "state":
                value = self.held[holder]
                if not _same_state(_state(value), noted):
                    self.changed.append(f"the contents of {what}")
                    _put_back(value, noted)
            elif kind == "global":
                namespace = self.held[holder]
                if not _same_binding(_binding(namespace.get(key, _ABSENT)), noted):
                    self.changed.append(what)
                    namespace[key] = noted[2]
            elif kind == "cell":
                cell = self.held[holder]
                if not _same_binding(_binding(cell.cell_contents), noted):
                    self.changed.append(what)
                    cell.cell_contents = noted[2]
            elif not _same_binding(_binding(self.frees[(self.held[holder], key)].f_locals.get(key, _ABSENT)),
                                   noted) and _put_cells_back(self.held[holder], key, noted, self.watched):
                self.changed.append(what)
        if self.changed:
            raise EagerOnlyValue(
                f"the code a backward runs changed {self.changed[0]}, state the grad transform does not "
                "replay on later calls (jitcore/transforms/backward_unwatched.py)",
                hints=("keep the state the backward's code writes where the jitted function reads it "
                       "(a global or an attribute of the subclass's class), or compute it in the function",),
            )


_ABSENT = object()
# A generator expression or comprehension cannot rebind the variables it closes over (no ``nonlocal``),
# and each run of its enclosing code makes it anew with that run's cells: a dispatch's
# ``next(a.names for a in args ...)`` made another per op, whose cells differed from the first one's.
_COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>"})


def _free_variables(code: types.CodeType) -> tuple[str, ...]:
    """The free variables of ``code`` whose bindings its runs may change."""
    return () if code.co_name in _COMPREHENSIONS else code.co_freevars


def _binding(value: Any) -> tuple:
    """What a name is bound to: its value for a number or a string, the object otherwise."""
    if type(value) in _SCALARS:
        return ("value", type(value), value)
    return ("object", id(value), value)


def _item(value: Any) -> Any:
    return ("value", type(value), value) if type(value) in _SCALARS else ("object", id(value))


def _state(value: Any) -> Any:
    """The shallow state of ``value`` (module docstring), with what puts it back."""
    kind = type(value)
    if kind in (list, collections.deque):
        return (kind, [_item(v) for v in value], list(value))
    if isinstance(value, dict):
        return (dict, [(k, _item(v)) for k, v in dict.items(value)], dict(dict.items(value)))
    if kind is set:
        return (set, sorted(map(repr, map(_item, value))), set(value))
    attrs = getattr(value, "__dict__", None)
    if type(attrs) is dict:
        return (object, [(k, _item(v)) for k, v in attrs.items()], dict(attrs))
    return None


def _put_back(value: Any, state: Any) -> None:
    kind, _items, contents = state
    if kind is object:
        vars(value).clear()
        vars(value).update(contents)
    elif kind is dict:
        dict.clear(value)
        dict.update(value, contents)
    else:
        value.clear()
        value.extend(contents) if kind is not set else value.update(contents)


def _put_cells_back(code: types.CodeType, name: str, noted: tuple, watched: frozenset[int]) -> bool:
    """Put the free variable ``name`` of the functions of ``code`` back where it changed, but in a cell
    the watch holds; whether one changed. The cells are found through the functions of the code (only
    when a binding changed: ``gc`` is asked once per such variable)."""
    changed = False
    index = code.co_freevars.index(name)
    for function in gc.get_referrers(code):
        if not isinstance(function, types.FunctionType) or function.__code__ is not code:
            continue
        cell = function.__closure__[index]
        try:
            now = cell.cell_contents
        except ValueError:
            continue
        if id(cell) not in watched and not _same_binding(_binding(now), noted):
            cell.cell_contents = noted[2]
            changed = True
    return changed


def _same_binding(a: tuple, b: tuple) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "object":
        return a[1] == b[1]
    return a[1] is b[1] and (a[2] is b[2] or a[2] == b[2])


def _same_state(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return a[0] is b[0] and a[1] == b[1]


def _tensors(values: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among a protocol frame's arguments (``args``, ``kwargs``, one level of nesting)."""
    found: list[torch.Tensor] = []
    for name in ("args", "kwargs"):
        value = values.get(name)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) \
            else ()
        for item in items:
            if isinstance(item, torch.Tensor):
                found.append(item)
            elif isinstance(item, (list, tuple)):
                found += [t for t in item if isinstance(t, torch.Tensor)]
    return found
