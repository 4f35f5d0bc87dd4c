"""Python effects of the code autograd's backward runs (a tensor subclass's hooks), replayed per backward.

A cached call's backward runs a trace of aten ops on plain tensors (grad.py): the ``__torch_dispatch__``
and ``__torch_function__`` of the subclasses its ops were resolved through never run there. Their Python
effects (``COUNTS[str(func)] += 1``, ``LOG.append(func.__name__)``, ``cls.calls += 1``) happen eagerly
on every backward. So while the grad transform records the backward on shadows (where that code runs
natively), ``BackwardWatch`` records what it writes into the state the program reached, and
``BackwardEffects.replay`` performs those writes each time the computation's backward runs:
- a number the code reads from state is handed to it as a ``_Number`` (an ``int``/``float`` of the value
  it holds that remembers where it was read); arithmetic on it gives another, so a value written back is
  a formula over the reads, evaluated on the values the state holds when the backward runs (a counter
  advances from its current value, as eagerly);
- a constant written (a string, a tuple of them) is written as it is; items appended to a list are
  appended; a number that is no formula over reads refuses the replay but for a new entry (Note [A
  number the recording cannot explain]).

Invariants:
- a write is replayed only when it is exact: every value written is a constant or a formula over reads,
  and no read that a write depends on was also used otherwise (compared, formatted, hashed, converted):
  such code's effect depends on the value in a way the formula does not hold. A new entry given a
  number the code did not read through a watched default (``d.get(k, 0) + 1`` on a plain dict) is
  replayed while the entry is still absent, and recorded again for a backward that finds it
  (``EffectsByState``). Items added to a set, appended to a deque (past its ``maxlen`` where the items
  it dropped tell how many were appended) are added and appended. Anything else (a tensor stored, a
  list shortened, an entry removed, a plain number written by code that measured a container with
  ``len``: ``LOG.append(len(LOG))``, backward_reads.py) raises ``EagerOnlyValue``: the call runs
  eagerly (JC-J002, with its warning), never loses an effect;
- the watched state: the objects pass 1 reached (a module namespace whose globals its subclass code
  read among them), the program's subclasses' classes, and the lists, dicts, sets, deques and plain
  objects those hold. What is not watched is not replayed: a write the program's code makes elsewhere
  that ``unwatched_writes`` finds (a helper's closure variable, a tensor's attributes) refuses the
  replay (backward_unwatched.py); one it does not find (state reached through an attribute chain) is
  lost;
- the state the watch reaches is put back as it found it after the recording;
- the watch is per thread: the numbers it pins, the ``Counter`` defaults it hands out and the size
  reads it notes are those of the recording on this thread (backward_reads.py).
"""

from __future__ import annotations

import collections
import contextlib
import operator
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from jitcore.errors import EagerOnlyValue
from jitcore.transforms.backward_reads import counter_defaults, size_reads
from jitcore.transforms.backward_unwatched import unwatched_writes

__all__ = ["BackwardEffects", "BackwardWatch", "EffectsByState", "watched", "watching"]

_CONSTANTS = (str, bytes, bool, type(None), complex)
# objects that are the same object on every call (an op, a class, a function, a dtype): stored by reference
_SHARED = frozenset({
    torch._ops.OpOverload, torch._ops.OpOverloadPacket, type, types.FunctionType,  # noqa: SLF001
    types.BuiltinFunctionType, torch.dtype, torch.device, torch.layout, torch.memory_format,
})


class _Root:
    """One read of a number from state: ``where`` is ("item", container, key), ("attr", obj, name) or
    ("cell", cell, None); ``missing`` marks a defaultdict's default made while recording (its key is the
    one it ends up under)."""

    __slots__ = ("missing", "where")

    def __init__(self, where: tuple, missing: bool = False) -> None:
        self.where, self.missing = where, missing

    def read(self) -> Any:
        kind, target, key = self.where
        if kind == "item":
            return target[key]
        if kind == "attr":
            return getattr(target, key)
        return target.cell_contents


class _Number:
    """Mixin of ``_Int``/``_Float``: the value, and how it was computed from reads (``formula``: a
    ``_Root``, or ``(operator, operands)``)."""

    __slots__ = ()

    def _pin(self) -> None:
        pinned = getattr(_RECORDING, "pinned", None)
        if pinned is not None:
            pinned.append(self)


def _numbered(value: Any, formula: Any) -> Any:
    cls = _Int if type(value) is int else _Float if type(value) is float else None
    if cls is None:  # a complex power, a bool: no formula holds it
        for operand in formula[1] if type(formula) is tuple else ():
            if isinstance(operand, _Number):
                operand._pin()
        return value
    out = cls(value)
    out.formula = formula
    return out


def _binary(op: Any, reflected: bool = False) -> Any:
    def method(self: Any, other: Any) -> Any:
        if not isinstance(other, (int, float)):
            return NotImplemented
        operands = (other, self) if reflected else (self, other)
        return _numbered(op(*(_plain(v) for v in operands)), (op, operands))

    return method


def _unary(op: Any) -> Any:
    def method(self: Any) -> Any:
        return _numbered(op(_plain(self)), (op, (self,)))

    return method


def _pinning(name: str, base: type) -> Any:
    original = getattr(base, name)

    def method(self: Any, *args: Any) -> Any:
        self._pin()
        return original(self, *args)

    return method


_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
          "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow}
_OTHER = ("__bool__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__int__",
          "__float__", "__index__", "__format__", "__str__", "__repr__", "__round__", "__trunc__",
          "__floor__", "__ceil__", "__divmod__", "__rdivmod__", "__and__", "__or__", "__xor__", "__lshift__",
          "__rshift__", "__invert__", "__rand__", "__ror__", "__rxor__", "__rlshift__", "__rrshift__",
          "bit_length", "to_bytes", "is_integer", "as_integer_ratio", "hex", "conjugate")


def _number_class(base: type) -> type:
    namespace: dict[str, Any] = {}  # no __slots__: an int subclass cannot have them
    for name, op in _ARITH.items():
        namespace[f"__{name}__"] = _binary(op)
        namespace[f"__r{name}__"] = _binary(op, reflected=True)
    for name, op in (("neg", operator.neg), ("pos", operator.pos), ("abs", abs)):
        namespace[f"__{name}__"] = _unary(op)
    for name in _OTHER:
        if hasattr(base, name):
            namespace[name] = _pinning(name, base)
    return type(f"_{base.__name__.title()}", (_Number, base), namespace)


_Int = _number_class(int)
_Float = _number_class(float)
_RECORDING = threading.local()  # .pinned: the numbers used otherwise than in arithmetic while this
# thread's watch records (None outside a recording)


def _plain(value: Any) -> Any:
    if isinstance(value, _Number):
        return int(int.__int__(value)) if isinstance(value, int) else float.__float__(value)
    return value


def _roots(value: Any, found: list[_Root]) -> None:
    formula = getattr(value, "formula", None) if isinstance(value, _Number) else None
    if isinstance(formula, _Root):
        found.append(formula)
    elif formula is not None:
        for operand in formula[1]:
            _roots(operand, found)


def _evaluate(value: Any, reads: dict[int, Any]) -> Any:
    if not isinstance(value, _Number):
        return value
    formula = value.formula
    if isinstance(formula, _Root):
        return reads[id(formula)]
    op, operands = formula
    return op(*(_evaluate(v, reads) for v in operands))


@dataclass(frozen=True, slots=True)
class _Write:
    """``kind``: "item" (``target[key] = value``), "attr" (``setattr``), "cell", "append" (``target.append``
    of each of ``value``: a list or deque) or "add" (``target.add`` of each: a set)."""

    kind: str
    target: Any
    key: Any
    value: Any


class BackwardEffects:
    """The writes of one recorded backward, performed after each run of it (module docstring).
    ``absent``: ``(target, key)`` of each new entry given a number the code did not read from state
    (``d[k] = d.get(k, 0) + 1``, ``d`` a dict without ``k``): replayed only while ``k`` is still absent."""

    def __init__(self, writes: list[_Write], roots: list[_Root], absent: list[tuple[Any, Any]]) -> None:
        self.writes, self.roots, self.absent = writes, roots, absent

    def holds(self) -> bool:
        """Whether the state is as the recording found it where its writes depend on that."""
        return not any(_has(target, key) for target, key in self.absent)

    def replay(self) -> None:
        reads = {id(root): _plain(root.read()) for root in self.roots}  # as the backward begins
        for write in self.writes:
            value = _resolved(write.value, reads)
            if write.kind == "item":
                write.target[write.key] = value
            elif write.kind == "attr":
                setattr(write.target, write.key, value)
            elif write.kind == "cell":
                write.target.cell_contents = value
            elif write.kind == "add":
                for item in value:
                    write.target.add(item)
            else:
                for item in value:
                    write.target.append(item)


def _has(target: Any, key: Any) -> bool:
    if isinstance(target, dict):
        return key in target
    return key in (vars(target) if isinstance(target, type) else target.__dict__)


class EffectsByState:
    """The backward's writes for each state they depend on (``BackwardEffects.absent``): a backward that
    finds the state otherwise records them again, once (``derive``: the grad transform's backward run on
    its kept graph with a ``BackwardWatch``; that run's native writes stand when it cannot be replayed)."""

    def __init__(self, first: BackwardEffects, derive: Any) -> None:
        self.known, self._derive = [first], derive

    def replay(self) -> None:
        for effects in self.known:
            if effects.holds():
                effects.replay()
                return
        effects = self._derive()  # Note [Effects of a backward's hooks], jit_hook.py
        if effects is not None:
            self.known.append(effects)
            effects.replay()


def _resolved(value: Any, reads: dict[int, Any]) -> Any:
    if type(value) is tuple:
        return tuple(_resolved(v, reads) for v in value)
    if type(value) is list:
        return [_resolved(v, reads) for v in value]
    return _evaluate(value, reads)


class BackwardWatch:
    """Records the writes of the code a backward runs into the objects the program reached (module
    docstring). ``effects`` holds them once ``recording`` ends."""

    def __init__(self, objects: list[Any]) -> None:
        seen: dict[int, Any] = {}
        for obj in objects:
            seen.setdefault(id(obj), obj)
            for held in _held(obj):  # a list or dict a reached object holds (a module's LOG, COUNTS)
                seen.setdefault(id(held), held)
        self._objects = list(seen.values())
        self.effects: BackwardEffects | None = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """The body is the backward's run: the state it writes is put back after, its writes kept."""
        before = [(obj, state) for obj in self._objects if (state := _contents(obj)) is not None]
        counters = frozenset(id(obj) for obj, _state in before if isinstance(obj, collections.Counter))
        defaults: list[tuple[Any, Any]] = []
        outer, _RECORDING.pinned = getattr(_RECORDING, "pinned", None), []
        try:
            for obj, state in before:
                _substitute(obj, state)
                if type(obj) is collections.defaultdict and obj.default_factory in (int, float):
                    defaults.append((obj, obj.default_factory))
                    obj.default_factory = _missing_default(obj, obj.default_factory)
            placed = [(obj, _contents(obj)) for obj, _state in before]  # the reads handed to the code
            with counter_defaults(counters, _counter_default), \
                    size_reads(frozenset(id(obj) for obj, _state in before)) as sizes, \
                    unwatched_writes(frozenset(map(id, self._objects))):  # backward_unwatched.py
                yield
            for obj, factory in defaults:
                obj.default_factory = factory
            self.effects = _writes(placed, _RECORDING.pinned, sizes.found)
        finally:
            for obj, factory in defaults:
                obj.default_factory = factory
            for obj, state in before:
                _restore(obj, state)
            _RECORDING.pinned = outer


_WATCH = threading.local()  # the BackwardWatch of the grad transform running on this thread, until used


@contextlib.contextmanager
def watching(watch: BackwardWatch) -> Iterator[None]:
    """``watch`` records the first backward the body derives (``watched``, in grad.py)."""
    outer = getattr(_WATCH, "watch", None)
    _WATCH.watch = watch
    try:
        yield
    finally:
        _WATCH.watch = outer


def watched() -> contextlib.AbstractContextManager[None]:
    """The recording of the watch ``watching`` set, once; nothing otherwise."""
    watch = getattr(_WATCH, "watch", None)
    if watch is None:
        return contextlib.nullcontext()
    _WATCH.watch = None
    return watch.recording()


def _held(obj: Any) -> list[Any]:
    state = _contents(obj)
    if state is None or state[0] in ("list", "set", "deque"):
        return []
    return [v for v in state[1].values() if type(v) in _CONTAINERS or _plain_object(v)]


_CONTAINERS = (list, dict, collections.Counter, collections.defaultdict, set, collections.deque)


def _plain_object(value: Any) -> bool:
    """An instance of a Python class (a ``SimpleNamespace``, a dataclass) whose state is its
    ``__dict__``: not a class, module, function, tensor, torch module or library object."""
    kind = type(value)
    return type(getattr(value, "__dict__", None)) is dict and (
        kind is types.SimpleNamespace or kind.__module__ not in _LIBRARY_MODULES
        and not kind.__module__.startswith(("torch.", "jitcore."))
        and not isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType,
                                   torch.Tensor, torch.nn.Module)))


_LIBRARY_MODULES = frozenset({"builtins", "types", "functools", "torch", "jitcore", "typing", "logging",
                              "threading", "weakref", "abc", "enum", "collections"})


def _contents(obj: Any) -> tuple[str, Any] | None:
    """``(kind, contents)``: a list's items, a dict's, a class's or an object's attributes, a cell's value."""
    kind = type(obj)
    if kind is list:
        return ("list", list(obj))
    if kind is set:
        return ("set", set(obj))
    if kind is collections.deque:
        return ("deque", list(obj))
    if issubclass(kind, dict) and not issubclass(kind, collections.OrderedDict):
        return ("dict", dict(dict.items(obj)))
    if issubclass(kind, type):
        return ("class", dict(vars(obj)))
    if kind is types.CellType:
        try:
            return ("cell", {None: obj.cell_contents})
        except ValueError:
            return None
    attrs = getattr(obj, "__dict__", None)
    if type(attrs) is dict and not isinstance(obj, torch.Tensor):  # a tensor's attributes: not here
        return ("attrs", dict(attrs))
    return None


def _where(obj: Any, kind: str, key: Any) -> tuple:
    if kind in ("list", "dict", "deque"):
        return ("item", obj, key)
    return ("cell", obj, None) if kind == "cell" else ("attr", obj, key)


def _substitute(obj: Any, state: tuple[str, Any]) -> None:
    kind, contents = state
    if kind == "set" or kind == "deque" and obj.maxlen is not None:  # a deque's items move: no reads
        return
    items = enumerate(contents) if kind in ("list", "deque") else contents.items()
    for key, value in list(items):
        if type(value) in (int, float):
            _put(obj, kind, key, _numbered(value, _Root(_where(obj, kind, key))))


def _put(obj: Any, kind: str, key: Any, value: Any) -> None:
    if kind == "list":
        list.__setitem__(obj, key, value)
    elif kind == "deque":
        obj[key] = value
    elif kind == "dict":
        dict.__setitem__(obj, key, value)
    elif kind == "class":
        type.__setattr__(obj, key, value)
    elif kind == "cell":
        obj.cell_contents = value
    else:
        obj.__dict__[key] = value


def _restore(obj: Any, state: tuple[str, Any]) -> None:
    """Put ``obj`` back into ``state``, entry by entry: a namespace (the builtins' included) is never
    emptied, even for a moment."""
    kind, contents = state
    if kind == "list":
        list.__init__(obj, contents)
        return
    if kind in ("set", "deque"):
        obj.clear()
        obj.extend(contents) if kind == "deque" else obj.update(contents)
        return
    if kind == "cell":
        obj.cell_contents = contents[None]
        return
    now = dict.copy(obj) if kind == "dict" else dict(vars(obj))
    for key in [k for k in now if k not in contents]:
        _remove(obj, kind, key)
    for key, value in contents.items():
        if now.get(key, _ABSENT) is not value:
            _put(obj, kind, key, value)


def _remove(obj: Any, kind: str, key: Any) -> None:
    if kind == "dict":
        dict.__delitem__(obj, key)
    elif kind == "class":
        type.__delattr__(obj, key)
    else:
        del obj.__dict__[key]


_ABSENT = object()


def _missing_default(obj: Any, factory: Any) -> Any:
    def default() -> Any:
        return _numbered(factory(), _Root(("item", obj, None), missing=True))

    return default


def _counter_default(counter: Any, key: Any) -> Any:
    """A watched Counter's 0 for a key it lacks, handed out as a read of that key (``COUNTS[k] += 1``)."""
    return _numbered(0, _Root(("item", counter, key)))


def _refuse(why: str) -> EagerOnlyValue:
    return EagerOnlyValue(
        f"the backward runs a tensor subclass's code that {why}: the grad transform cannot replay that "
        "effect on later calls (Note [Effects of a backward's hooks], transforms/backward_effects.py)",
        hints=("keep only counters and logs of constants in the subclass's code that backward ops run",),
    )


def _writes(placed: list[tuple[Any, Any]], pins: list[Any], sized: str | None) -> BackwardEffects:
    """The writes since ``placed`` (the contents with their numbers handed out as reads), or a refusal
    where one is not exact. ``pins``: the numbers the code used otherwise than in arithmetic; ``sized``:
    the call by which it measured a container, if it did (backward_reads.py)."""
    writes: list[_Write] = []
    absent: list[tuple[Any, Any]] = []
    for obj, (kind, old) in placed:
        new = _contents(obj)
        if new is None or new[0] != kind:
            raise _refuse(f"replaces the contents of a {type(obj).__qualname__}")
        new = new[1]
        if kind == "set":
            if old - new:
                raise _refuse("removes items from a set")
            if new - old:
                added = [_checked(v, obj, None, existed=True) for v in obj if v not in old]
                writes.append(_Write("add", obj, None, added))
            continue
        if kind == "deque" and obj.maxlen is not None:
            if new != old or any(a is not b for a, b in zip(new, old)):
                tail = [_checked(v, obj, None, existed=True) for v in _appended(old, new, obj.maxlen)]
                writes.append(_Write("append", obj, None, tail))
            continue
        if kind in ("list", "deque"):
            if len(new) < len(old) or kind == "deque" and any(a is not b for a, b in zip(old, new)):
                raise _refuse(f"removes items from a {kind}")
            for i, (was, value) in enumerate(zip(old, new)):
                if value is not was:
                    writes.append(_Write("item", obj, i, _checked(value, obj, i, existed=True)))
            if len(new) > len(old):
                tail = [_checked(v, obj, None, existed=True) for v in new[len(old):]]
                writes.append(_Write("append", obj, None, tail))
            continue
        if any(key not in new for key in old):
            raise _refuse("deletes an entry or attribute")
        for key, value in new.items():
            if key in old and value is old[key]:
                continue
            value = _checked(value, obj, key, existed=key in old)
            if key not in old and type(value) in (int, float):
                absent.append((obj, key))
            writes.append(_Write(_WRITE_KINDS[kind], obj, key, value))
    roots: list[_Root] = []
    for write in writes:
        _roots_deep(write.value, roots)
    written = {(id(w.target), _key(w.key)) for w in writes if w.kind not in ("append", "add")}
    for pinned in pins:
        used: list[_Root] = []
        _roots(pinned, used)
        if any((id(root.where[1]), _key(root.where[2])) in written for root in used):
            raise _refuse("compares, formats or converts a number it also writes")
    if sized is not None and any(_plain_number(w.value) for w in writes):
        raise _refuse(f"writes a number after measuring a container with {sized} (the number may be "
                      "its size, which differs on later calls)")
    new = {(id(target), _key(key)) for target, key in absent}
    if any(_plain_number(w.value) and (id(w.target), _key(w.key)) not in new for w in writes):
        # Note [A number the recording cannot explain]
        raise _refuse("writes a number that is neither a constant of the code nor computed from a number "
                      "it read (counted by iterating a container, say), which differs on later calls")
    return BackwardEffects(writes, list({id(root): root for root in roots}.values()), absent)


# Note [A number the recording cannot explain]
# A number the hooks write that is no formula over reads (a plain int or float) was taken as recorded:
# right for a literal, wrong for one the code counted (``LOG.append(sum(1 for _ in LOG))``, a length
# measured past ``len``: [0, 1, 2, 3, 3, 4, ...] where eager counts on). The recording cannot tell the
# two apart, so such a write refuses the replay (the call runs eagerly, JC-J002), but for a new entry
# (``d.get(k, 0) + 1``), which ``EffectsByState`` records again for a backward that finds it present.
def _plain_number(value: Any) -> bool:
    """A number written as recorded (not a formula over reads), at any depth of a tuple or list."""
    if type(value) in (list, tuple):
        return any(_plain_number(v) for v in value)
    return type(value) in (int, float)


def _appended(old: list[Any], new: list[Any], maxlen: int) -> list[Any]:
    """The items appended to a deque of ``maxlen`` that held ``old`` and holds ``new``; refused where it
    removed items otherwise or the items it kept allow more than one count of appended items."""
    # k == len(new) == maxlen stands for every count from maxlen on: they leave the same items
    fits = [k for k in range(len(new) + 1) if _kept(old, new, k, maxlen)]
    if len(fits) != 1:
        raise _refuse("changes a deque in a way whose appended items its contents do not tell"
                      if fits else "removes items from a deque")
    return new[len(new) - fits[0]:] if fits[0] else []


def _kept(old: list[Any], new: list[Any], k: int, maxlen: int) -> bool:
    """Whether ``new`` is ``old`` with ``k`` items appended, the oldest dropped past ``maxlen``."""
    if min(len(old) + k, maxlen) != len(new):
        return False
    kept = len(new) - k
    return all(a is b for a, b in zip(old[len(old) - kept:], new[:kept])) if kept else True


_WRITE_KINDS = {"dict": "item", "cell": "cell", "class": "attr", "attrs": "attr"}


def _key(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return id(key)
    return key


def _checked(value: Any, obj: Any, key: Any, *, existed: bool) -> Any:
    """``value`` as a write replays it; refused where its value on a later call is not known."""
    if type(value) is tuple:
        return tuple(_checked(v, obj, key, existed=True) for v in value)
    if isinstance(value, _Number):
        found: list[_Root] = []
        _roots(value, found)
        for root in found:
            if root.missing:
                if root.where[1] is not obj or key is None:
                    raise _refuse("computes a value from a default another entry got")
                root.where = ("item", obj, key)
        return value
    if type(value) in (int, float) or isinstance(value, _CONSTANTS) or type(value) in _SHARED:
        return value
    raise _refuse(f"stores a {type(value).__qualname__} into the program's state ({_name(obj)}[{key!r}])")


def _name(obj: Any) -> str:
    return obj.__qualname__ if isinstance(obj, type) else f"a {type(obj).__qualname__}"


def _roots_deep(value: Any, found: list[_Root]) -> None:
    if type(value) in (list, tuple):
        for v in value:
            _roots_deep(v, found)
    else:
        _roots(value, found)
