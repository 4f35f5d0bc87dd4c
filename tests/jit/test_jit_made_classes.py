"""Classes a program makes and returns or stores (jitcore/jit/made_classes.py): where ``type`` alone makes
one, each cached call makes it again, a new class per call as eagerly; any other runs the call eagerly.

Differential: each program runs several calls eagerly and jitted; after each call the caller sets an
attribute on the class it got, makes instances, calls their methods (``super()``, classmethods,
staticmethods, properties) and checks them against the classes of the earlier calls.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import typing
import warnings
from typing import Any

import pytest
import torch

import jitcore

STORE: list = []


class _Base:
    def who(self) -> str:
        return "base"


def _a_plain_class(x):
    class C:
        k = 1

        def m(self):
            return self.k

    return C, x + 1


def _a_class_with_super_and_descriptors(x):
    class C(_Base):
        def who(self):
            return "c<" + super().who() + ">"

        @classmethod
        def make(cls):
            return cls()

        @staticmethod
        def twice(v):
            return v * 2

        @property
        def loud(self):
            return self.who() + "!"

    return C, x + 1


def _a_class_over_a_class_it_made(x):
    class A:
        def who(self):
            return "a"

    class B(A):
        def who(self):
            return "b" + super().who()

    return B, x + 1


def _a_class_stored_into_a_global(x):
    class C:
        seen: list = []

    C.seen.append(1)
    STORE.append(C)
    return C, x + 1


def _a_class_whose_method_reads_it_by_name(x):
    class C:
        def clone(self):
            return C()

    return C, x + 1


def _a_class_by_type(x):
    return type("T", (_Base,), {"k": 2}), x + 1


def _use(out: tuple, earlier: list) -> list:
    """What the caller sees of a call's class; it then sets an attribute on it."""
    cls = out[0]
    obj = cls.make() if hasattr(cls, "make") else cls()
    seen = [cls.__name__, cls.__qualname__, cls.__module__, getattr(cls, "hits", 0), type(obj) is cls]
    seen += [any(cls is e for e in earlier), any(isinstance(obj, e) for e in earlier), isinstance(obj, _Base)]
    for name in ("m", "who", "clone"):
        if hasattr(obj, name):
            got = getattr(obj, name)()
            seen.append(type(got) is cls if name == "clone" else got)
    if hasattr(cls, "twice"):
        seen += [cls.twice(3), obj.loud]
    if hasattr(cls, "seen"):
        seen += [list(cls.seen), STORE[-1] is cls, len({id(c) for c in STORE})]
        cls.seen.append("caller")
    cls.hits = seen[3] + 1
    return seen


def _calls_as_eager(program: Any, calls: Any) -> Any:
    """``calls(fn)`` (what a sequence of calls returned and made) equal for ``program`` jitted and
    eagerly, warnings ignored (a class statement's own); returns the jitted function."""
    jitted = jitcore.jit(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert calls(jitted) == calls(program)
    return jitted


@pytest.mark.parametrize("program", [
    _a_plain_class, _a_class_with_super_and_descriptors, _a_class_over_a_class_it_made,
    _a_class_stored_into_a_global, _a_class_whose_method_reads_it_by_name, _a_class_by_type,
])
def test_a_class_type_alone_makes_is_made_again_per_cached_call(program):
    """``class C: ...; return C``: every call ran eagerly (Note [A class the program made]); each cached call
    now makes a new class whose methods' ``__class__`` (``super()``) and ``C`` are this call's class."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            out = fn(torch.ones(2) * i)
            got.append((_use(out, earlier), out[1].tolist()))
            earlier.append(out[0])
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _instances_of_a_class_it_made(x, box):
    class C:
        def __init__(self):
            self.items: list = []

    made = C()
    made.items.append(1)
    box.append(C())
    return made, type(made), x + 1


def test_instances_of_a_class_it_made_are_of_this_calls_class():
    """An instance returned and one stored into the argument are of one class per call, the returned one."""

    def calls(fn: Any) -> list:
        box: list = []
        got, earlier = [], []
        for i in range(3):
            made, cls, y = fn(torch.ones(2) * i, box)
            got.append((made.items, type(made) is cls, type(box[-1]) is cls, any(cls is e for e in earlier),
                        isinstance(box[0], cls), y.tolist()))
            made.items.append("caller")
            earlier.append(cls)
        return got

    jitted = jitcore.jit(_instances_of_a_class_it_made)
    assert calls(jitted) == calls(_instances_of_a_class_it_made)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_class_registering_its_instances(x):
    class Node:
        registry: list = []

        def __init__(self):
            self.kids = []

    root = Node()
    root.kids.append(Node())
    Node.registry.append(root)
    return Node, x + 1


def _an_instance_of_a_class_registering_it(x):
    return _a_class_registering_its_instances(x)[0].registry[0], x * 2


@pytest.mark.parametrize("program", [_a_class_registering_its_instances,
                                     _an_instance_of_a_class_registering_it])
def test_instances_in_the_namespace_of_a_class_it_made_are_of_this_calls_class(program):
    """Note [An instance made while its class is made] (jit/made_classes.py): ``Node.registry.append(Node())``
    was an eager entry on every call (the trial copy failed: "dictionary changed size during iteration");
    made again, the registry's instance would have been of the pass's class. Each cached call's registry now
    holds instances of that call's class."""

    def calls(fn: Any) -> list:
        got, earlier = [], []
        for i in range(3):
            out, y = fn(torch.ones(2) * i)
            cls = out if isinstance(out, type) else type(out)
            root = cls.registry[0]
            got.append((len(cls.registry), type(root) is cls, type(root.kids[0]) is cls, root.kids[0].kids,
                        out is root or out is cls, any(cls is e or isinstance(root, e) for e in earlier),
                        y.tolist()))
            cls.registry.append("caller")
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _an_enum_class(x):
    class Color(enum.Enum):
        RED = 1
        GREEN = "g"

    return Color, Color.RED, x + 1


def _enum_members_stored(x):
    class Color(enum.Enum):
        RED = 1
        GREEN = 2

    STORE.append([Color.GREEN, Color.RED])
    return None, Color.GREEN, x * 2


@pytest.mark.parametrize("program", [_an_enum_class, _enum_members_stored])
def test_an_enum_it_made_is_made_again_per_cached_call(program):
    """Note [An Enum it made] (jit/made_classes.py): ``class Color(enum.Enum): RED = 1`` made in the function
    was an eager entry on every call ("its metaclass EnumType would run again"). Each cached call now makes
    it again by ``EnumType`` over its statement's namespace: a new class per call, its members (returned,
    stored) of that class."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(3):
            cls, member, y = fn(torch.ones(2) * i)
            cls = type(member) if cls is None else cls
            stored = [type(m) is cls for m in STORE[-1]] if STORE else None
            got.append((repr(member), cls.__qualname__, [m.name for m in cls], member is cls(member.value),
                        type(member) is cls, any(cls is e or isinstance(member, e) for e in earlier), stored,
                        y.tolist()))
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1  # 3.13 too


def _auto_members(x):
    class Color(enum.Enum):
        RED = enum.auto()
        GREEN = enum.auto()

    STORE.append([Color.GREEN])
    return Color.RED, x + 1


def _an_int_enum(x):
    class Level(enum.IntEnum):
        LOW = 1
        HIGH = 2

    return Level.HIGH, x + Level.LOW


def _a_flag(x):
    class Perm(enum.Flag):
        R = enum.auto()
        W = enum.auto()

    return Perm.W, x + 1


def _a_str_enum(x):
    class Mode(enum.StrEnum):
        FAST = enum.auto()
        SLOW = "slow"

    return Mode.SLOW, x + 1


def _methods(x):
    class Color(enum.Enum):
        RED = 1

        def twice(self):
            return self.value * 2

        GREEN = 2

        @property
        def lower(self):
            return self.name.lower()

        @classmethod
        def first(cls):
            return cls.RED

    STORE.append([Color.GREEN])
    return Color.RED, x + 1


@pytest.mark.parametrize("program", [_auto_members, _an_int_enum, _a_flag, _a_str_enum, _methods])
def test_enums_of_each_base_and_with_methods_are_made_again_per_cached_call(program):
    """Note [An Enum it made]: ``auto()`` members, an ``IntEnum``, ``Flag`` or ``StrEnum``, methods (a
    property, a classmethod) were eager entries on every call (and any Enum on 3.13). Each cached call makes
    a new class by ``EnumType`` over its statement's namespace: members of this call's class (``is``,
    ``isinstance`` and ``==`` as eager's), the methods this call's functions."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier, methods = [], [], []
        for i in range(3):
            member, y = fn(torch.ones(2) * i)
            cls = type(member)
            stored = [type(m) is cls and m is cls[m.name] for m in STORE[-1]] if STORE else None
            row = [repr(member), str(member), cls.__qualname__, [(m.name, m.value) for m in cls],
                   member is cls(member.value), any(cls is e or isinstance(member, e) for e in earlier),
                   isinstance(member, int), member == 1, member == "slow", stored, y.tolist()]
            if hasattr(cls, "twice"):
                methods.append(cls.twice)
                row += [member.twice(), member.lower, cls.first() is member, len({id(f) for f in methods})]
            got.append(row)
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_dataclass(x):
    @dataclasses.dataclass
    class P:
        a: int = 1

    return P, x + 1


def _a_class_changed_after(x):
    class C:
        pass

    C.extra = 5
    return C, x + 1


def _an_enum_with_an_alias(x):
    class Color(enum.Enum):
        RED = 1
        CRIMSON = 1

    return Color, x + 1


def _a_class_holding_a_computed_tensor(x):
    class C:
        t = x * 2

    return C, x + 1


def _a_class_in_its_own_list(x):
    class C:
        registry: list = []

    C.registry.append(C)
    return C, x + 1


def _a_dataclass_with_own_slots(x):
    @dataclasses.dataclass
    class P:
        __slots__ = ("a",)
        a: int

    return P, x + 1


@pytest.mark.parametrize("program", [
    _a_dataclass_with_own_slots, _a_class_changed_after, _an_enum_with_an_alias,
    _a_class_holding_a_computed_tensor, _a_class_in_its_own_list,
])
def test_a_class_made_by_more_than_type_runs_eagerly(program):
    """A decorator, an attribute set afterwards, a metaclass, a traced attribute, a class holding itself:
    no copy is eager's class, so the call runs eagerly (a traced ``t`` reached the caller as a proxy)."""

    def calls(fn: Any) -> list:
        got, earlier = [], []
        for i in range(3):
            cls, y = fn(torch.ones(2) * i)
            attrs = {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in vars(cls).items()
                     if k in ("extra", "t")}
            got.append((cls.__qualname__, getattr(cls, "hits", 0), any(cls is e for e in earlier), attrs,
                        y.tolist()))
            cls.hits = 1
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is not None


def _an_instance_holding_computed_tensors(x, box):
    class C(_Base):
        def who(self):
            return "c" + super().who()

    made = C()
    made.t, made.items = x * 2, [1]
    box.append(made)
    return made, C, x + 1


def test_an_instance_of_a_class_it_made_holding_computed_tensors_is_of_this_calls_class():
    """``o = C(); o.t = x * 2; return o``: refused (an eager entry); now the computation returns ``o.t``
    and each call's ``o`` is of that call's ``C``, the one it returns and stores."""

    def calls(fn: Any) -> list:
        box: list = []
        got, earlier = [], []
        for i in range(4):
            made, cls, y = fn(torch.ones(2) * i, box)
            got.append((type(made) is cls, box[-1] is made, made.t.tolist(), type(made.t) is torch.Tensor,
                        made.who(), list(made.items), any(cls is e for e in earlier),
                        any(isinstance(made, e) for e in earlier), getattr(cls, "hits", 0), y.tolist()))
            made.items.append("caller")
            cls.hits = 1
            earlier.append(cls)
        return got

    jitted = jitcore.jit(_an_instance_holding_computed_tensors)
    assert calls(jitted) == calls(_an_instance_holding_computed_tensors)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_namedtuple_class(x):
    P = collections.namedtuple("P", "a b", defaults=[0])
    return P, P(1), x + 1


def _a_namedtuple_over_a_tensor(x):
    P = collections.namedtuple("P", ["t", "n"])
    return P, P(x + 1, 2), x + 1


def _a_namedtuple_stored(x):
    P = collections.namedtuple("P", "a b")
    STORE.append(P(1, [2]))
    return P, STORE[-1], x + 1


def _a_typing_namedtuple(x):
    class P(typing.NamedTuple):
        a: int
        b: int = 2

    return P, P(1), x + 1


@pytest.mark.parametrize("program", [
    _a_namedtuple_class, _a_namedtuple_over_a_tensor, _a_namedtuple_stored, _a_typing_namedtuple,
])
def test_a_namedtuple_class_is_made_again_per_cached_call_by_namedtuple(program):
    """``P = collections.namedtuple(...)`` (or a ``typing.NamedTuple`` statement) and an instance of it,
    returned or stored: every call ran eagerly (``namedtuple`` sets ``__module__`` after ``type``); each
    cached call now makes a new class as ``namedtuple`` does, its instance of that class (Note [A class
    the standard library made])."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            cls, made, y = fn(torch.ones(2) * i)
            items = [v.tolist() if isinstance(v, torch.Tensor) else v for v in made]
            got.append((cls.__qualname__, cls.__module__, cls._fields, cls._field_defaults, type(made) is cls,
                        any(cls is e for e in earlier), getattr(cls, "hits", 0), items, made._asdict().keys(),
                        getattr(cls, "__annotations__", None), STORE[-1] is made if STORE else None,
                        len({id(type(s)) for s in STORE}), y.tolist()))
            cls.hits = 1  # the caller's mark on one call's class is not on the next call's
            if STORE:
                made.b.append("caller")
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_namedtuple_changed_after(x):
    P = collections.namedtuple("P", "a b")
    P.area = property(lambda self: self.a * self.b)
    return P, P(2, 3), x + 1


def _a_namedtuple_with_a_list_default(x):
    P = collections.namedtuple("P", "a b", defaults=[[]])
    return P, P(1), x + 1


@pytest.mark.parametrize("program", [_a_namedtuple_changed_after, _a_namedtuple_with_a_list_default])
def test_a_namedtuple_class_the_program_changed_runs_eagerly(program):
    """A namedtuple class given a property after ``namedtuple`` made it, or a default no call of
    ``namedtuple`` with the same arguments shares (a list): no remaking is eager's class, so the call runs
    eagerly."""

    def calls(fn: Any) -> list:
        got = []
        for i in range(3):
            cls, made, y = fn(torch.ones(2) * i)
            got.append((tuple(made), getattr(made, "area", None), cls._field_defaults, y.tolist()))
            cls._field_defaults.setdefault("caller", 1)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is not None


def _a_dataclass_and_its_instance(x):
    @dataclasses.dataclass
    class P(_Base):
        a: int
        items: list = dataclasses.field(default_factory=list)
        tag: str = "t"

        def who(self):
            return "p" + super().who() + str(self.a)

    made = P(3)
    made.items.append(1)
    STORE.append(made)
    return P, made, x + 1


def _a_frozen_ordered_dataclass(x):
    @dataclasses.dataclass(frozen=True, order=True)
    class P:
        a: int = 1
        b: tuple = (1, 2)

    return P, P(2), x + 1


def _a_dataclass_with_slots_and_its_instance(x):
    @dataclasses.dataclass(slots=True)
    class P(_Base):
        a: int
        items: list = dataclasses.field(default_factory=list)
        tag: str = "t"

        def who(self):
            return "p" + _Base.who(self) + str(self.a) + str(hasattr(self, "__dict__"))

    made = P(3)
    made.items.append(1)
    STORE.append(made)
    return P, made, x + 1


def _a_frozen_ordered_dataclass_with_slots(x):
    @dataclasses.dataclass(frozen=True, order=True, slots=True, weakref_slot=True)
    class P:
        a: int = 1
        b: tuple = (1, 2)

    return P, P(2), x + 1


@pytest.mark.parametrize("program", [_a_dataclass_and_its_instance, _a_frozen_ordered_dataclass,
                                     _a_dataclass_with_slots_and_its_instance,
                                     _a_frozen_ordered_dataclass_with_slots])
def test_a_dataclass_is_made_again_per_cached_call_by_dataclass(program):
    """``@dataclasses.dataclass class P: ...`` returned with an instance: every call ran eagerly (the
    decorator changed the class after its statement); each cached call now makes the class again by
    ``dataclass`` over this call's copy of its statement's namespace, with new Fields: a new class per call
    whose ``super()`` is this call's, its instance of that class with its own default list (Note [A
    class the standard library made])."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            cls, made, y = fn(torch.ones(2) * i)
            fields = cls.__dataclass_fields__
            used = made.who() if hasattr(made, "who") else made < cls(3)
            got.append((repr(made), cls.__qualname__, cls.__doc__, type(made) is cls,
                        any(cls is e for e in earlier), getattr(cls, "hits", 0),
                        made == cls(**dataclasses.asdict(made)), list(fields),
                        any(fields is e.__dataclass_fields__ for e in earlier), used,
                        STORE[-1] is made if STORE else None, y.tolist()))
            cls.hits = 1
            if hasattr(made, "items"):
                made.items.append("caller")  # not the next call's default list
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_dataclass_with_class_and_init_variables(x):
    @dataclasses.dataclass
    class P:
        count: typing.ClassVar[int] = 0
        seen: typing.ClassVar[list] = []
        a: int = 1
        scale: dataclasses.InitVar[int] = 3
        b: int = dataclasses.field(default=0, init=False)

        def __post_init__(self, scale):
            self.b = self.a * scale + P.count
            P.seen.append(self.a)  # (a class variable's list changed; ``P.count += 1`` changes the class:
            # refused as any class changed after its statement is)

    made = P(2)
    STORE.append(P)
    return P, made, P(4, 5), x + 1


def test_a_dataclass_with_classvar_and_initvar_fields_is_made_again_per_cached_call():
    """``n: ClassVar[int] = 0`` / ``s: InitVar[int] = 3`` in a dataclass the function made: every call ran
    eagerly ("changed after its class statement": the maker refused fields of those kinds); each cached
    call now makes it again, its class variables this call's (Note [A ClassVar or InitVar field])."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            cls, made, other, y = fn(torch.ones(2) * i)
            got.append((repr(made), repr(other), made.b, other.b, cls.count, cls.seen, type(other) is cls,
                        any(cls is e for e in earlier), any(cls.seen is e.seen for e in earlier),
                        sorted(cls.__dataclass_fields__), [f.name for f in dataclasses.fields(made)],
                        STORE[-1] is cls, y.tolist()))
            cls.seen.append("caller")  # not the next call's list
            earlier.append(cls)
        return got

    jitted = jitcore.jit(_a_dataclass_with_class_and_init_variables)
    assert calls(jitted) == calls(_a_dataclass_with_class_and_init_variables)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_dataclass_instance_holding_tensors(x):
    @dataclasses.dataclass
    class Out:
        loss: torch.Tensor
        logits: torch.Tensor
        n: int = 2
        extra: list = dataclasses.field(default_factory=list)

        def scaled(self):
            return self.logits * self.n

    out = Out(x.sum(), x * 2)
    out.extra.append(x + 1)
    STORE.append(out)
    return out, x + 1


def _a_frozen_dataclass_instance_holding_a_tensor(x):
    @dataclasses.dataclass(frozen=True)
    class Out:
        value: torch.Tensor
        kind: typing.ClassVar[str] = "out"

    return Out(x * 3), x + 1


@pytest.mark.parametrize("program", [_a_dataclass_instance_holding_tensors,
                                     _a_frozen_dataclass_instance_holding_a_tensor])
def test_a_dataclass_instance_holding_computed_tensors_is_rebuilt_per_cached_call(program):
    """``return Out(x.sum(), x * 2)`` with ``Out`` a dataclass the function made: every call ran eagerly
    (only plain objects were rebuilt around traced values); now its fields are this call's values in an
    instance of this call's class (Note [A dataclass instance holding traced values], jit/outputs.py)."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            out, y = fn(torch.ones(2) * i)
            fields = {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}
            values = {k: v.tolist() if isinstance(v, torch.Tensor) else
                      [t.tolist() for t in v] if isinstance(v, list) else v for k, v in fields.items()}
            try:
                object.__getattribute__(out, "__setattr__")("n", 5)
                frozen = False
            except dataclasses.FrozenInstanceError:
                frozen = True
            got.append((values, type(out).__qualname__, any(type(out) is e for e in earlier), frozen,
                        repr(out).split("(")[0], out.scaled().tolist() if hasattr(out, "scaled") else None,
                        type(dataclasses.replace(out)) is type(out), STORE[-1] is out if STORE else None,
                        type(fields[next(iter(fields))]).__name__, y.tolist()))
            earlier.append(type(out))
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_named_tuple_with_methods(x):
    class P(typing.NamedTuple):
        a: int
        b: float = 0.5
        SCALE = 3

        def twice(self):
            return 2 * self.a * P.SCALE  # the class in a cell: this call's

        @property
        def total(self):
            return self.a + self.b

        @classmethod
        def make(cls, a):
            return cls(a)

    made = P(1)
    STORE.append(made)
    return made, P.make(4), x + 1


def _a_named_tuple_holding_a_tensor(x):
    class Out(typing.NamedTuple):  # no defaults: ``__new__.__defaults__`` is ``()``
        loss: torch.Tensor

        def doubled(self):
            return self.loss * 2

    return Out(x.sum()), x + 1


@pytest.mark.parametrize("program", [_a_named_tuple_with_methods, _a_named_tuple_holding_a_tensor])
def test_a_typing_named_tuple_with_methods_is_made_again_per_cached_call(program):
    """``class P(typing.NamedTuple)`` with methods, a property, a classmethod and a class attribute, or with
    no default: every call ran eagerly (the maker knew only the fields; passed ``defaults=None`` where
    typing passes ``[]``); each cached call now makes it again with this call's methods (Note [A
    NamedTuple's own methods])."""

    def calls(fn: Any) -> list:
        STORE.clear()
        got, earlier = [], []
        for i in range(4):
            made, other, y = _three(fn(torch.ones(2) * i))
            cls = type(made)
            if hasattr(made, "twice"):
                used = (made.twice(), made.total, other.twice(), type(other) is cls, cls.SCALE,
                        STORE[-1] is made, repr(made))
            else:
                used = (made.loss.item(), made.doubled().item(), type(made.loss).__name__, repr(made)[:8])
            got.append((used, cls.__qualname__, cls._fields, any(cls is e for e in earlier), y.tolist()))
            earlier.append(cls)
        return got

    jitted = _calls_as_eager(program, calls)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _three(result: tuple) -> tuple:
    return result if len(result) == 3 else (result[0], None, result[1])
