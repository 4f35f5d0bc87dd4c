"""Classes a program makes whose making is ``type`` alone (or ``collections.namedtuple``, ``dataclass``, a
plain ``enum.Enum``): made again for each cached call.

``class C: ...; return C`` (or an instance of it, stored or returned): eagerly each call makes a new class.
Where making it runs no code of the program's but its body (Note [A class made again per call]), each
cached call makes it again with ``type(name, bases, namespace)`` over the pass's namespace copied through
the call's memo (jit/call_copies.py): its methods are made again over new cells, and every cell of the
call that held the pass's class holds the call's (``__class__``, read by ``super()``; ``C`` read by a
method); a class ``collections.namedtuple`` made is made again by it (Note [A class the standard library
made]). Any other class the program made stays refused (Note [A class the program made],
jit/made_functions.py).

Invariants:
- made again only where ``why_not_made_again`` finds nothing: metaclass ``type``; no ``__init_subclass__``
  in its bases' MRO but object's; nothing in its namespace with a Python ``__set_name__``; no
  ``__slots__``; its namespace as its statement (or ``type()``) made it: no decorator, no attribute set
  or deleted since (``as_made``); no descriptor but functions, ``classmethod``, ``staticmethod`` and
  ``property``; nothing traced in it (jit/call_copies.py refuses a proxy its walk reaches); no object of
  its namespace holding the class but a function's cell; its bases are made again too or not the program's
  (the walk of jit/call_copies.py checks each);
- one class per call, whatever reaches it (the class, an instance, a method's cell): the call's memo holds it;
  an instance the call copied while its class was being made gets it too (Note [An instance made while
  its class is made]);
  an instance holding traced values (jit/outputs.py takes it apart by its attributes) gets it as its
  ``__class__``, where its classes are over ``object`` alone.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["as_made", "class_parts", "library_maker", "remake_class", "why_not_made_again"]

# the descriptors ``type`` adds itself, and the cache ``copyreg`` adds when a copy of an instance is made
# (the pass's trial copy: eager's class has none until copied or pickled)
_TYPE_MADE = ("__dict__", "__weakref__", "__slotnames__")
_MEMBERS = (types.FunctionType, classmethod, staticmethod, property)


def _type_made(name: Any) -> bool:
    """Whether ``name``, a key of a class's namespace, is one of ``_TYPE_MADE`` (a key that is not text is
    never compared: its ``__eq__`` is the program's, ``type('X', (), {Key(): 5})``)."""
    return type(name) is str and name in _TYPE_MADE


def as_made(cls: type) -> tuple:
    """What ``cls``'s namespace holds, by name, id and type: taken when the class statement (or ``type()``)
    made it, compared when it is returned or stored (ids only: nothing of the class is held)."""
    return tuple((name if type(name) is str else id(name), id(value), id(type(value)))
                 for name, value in vars(cls).items() if not _type_made(name))


# Note [A class made again per call]
# Eagerly a class statement runs its body, then ``type(name, bases, namespace)``, which calls the bases'
# ``__init_subclass__`` and the ``__set_name__`` of what the namespace holds, then its decorators. A copy is
# exact when ``type`` runs none of the program's code and nothing changed the class after: then the
# pass's namespace, copied through the call's memo (a list attribute a new list, a method a new function
# over new cells), is what the body would make again, and ``type`` over it is eager's class. While the
# namespace is copied the memo holds the pass's class for itself; once the new class exists, the cells the
# call made that hold the pass's class get the new one (the methods' ``__class__`` cell, a cell of the
# program's frame that a method reads ``C`` from). An object of the namespace that holds the class some
# other way (``C.registry.append(C)``) would keep the pass's: such a class is refused.
def why_not_made_again(cls: type, made: tuple | None) -> str | None:
    """Why ``cls``, a class the program made (``made``: its ``as_made`` then), cannot be made again by
    ``type`` (Note [A class made again per call]); None where it can."""
    if type(cls) is type or type(cls) is enum.EnumType:  # (another metaclass's hash is not looked up)
        if library_maker(cls) is not None:  # Note [A class the standard library made], Note [An Enum it made]
            return None
    if type(cls) is not type:
        return f"its metaclass {type(cls).__qualname__} would run again"
    if any(type(name) is not str for name in vars(cls)):
        return "its namespace has a key that is not text"
    if made is None or made != as_made(cls):
        return "it changed after its class statement (a decorator, or an attribute set on it)"
    if "__slots__" in vars(cls):
        return "it has __slots__"
    for klass in cls.__mro__[1:-1]:
        if "__init_subclass__" in vars(klass):
            return f"its base {klass.__qualname__} has __init_subclass__"
    for name, value in vars(cls).items():
        if _type_made(name):
            continue
        if type(getattr(type(value), "__set_name__", None)) is types.FunctionType:
            return f"its {name} has a Python __set_name__"  # (``property``'s is C's, run again by ``type``)
        if hasattr(type(value), "__get__") and type(value) not in _MEMBERS:
            return f"its {name} is a {type(value).__qualname__}"
    if _holds_itself(cls):
        return "an object of its namespace holds the class"
    return None


def class_parts(cls: type) -> list[Any]:
    """What a copy of ``cls`` copies: its bases, and its namespace with the functions its methods wrap
    (nothing of a class the standard library makes again)."""
    maker = library_maker(cls)
    if maker is not None:
        return maker.parts(cls)
    found: list[Any] = list(cls.__bases__)
    for name, value in vars(cls).items():
        if not _type_made(name):
            found.extend(_wrapped(value) or [value])
    return found


def remake_class(cls: type, memo: dict, copied: Callable[[Any], Any]) -> type:
    """This call's copy of ``cls`` (``why_not_made_again`` found nothing), put in ``memo`` (whose ``copied``
    copies what it holds) (Note [A class made again per call])."""
    memo[id(cls)] = cls  # the pass's class while its namespace is copied: the cells get the new one below
    maker = library_maker(cls)
    if maker is not None:  # Note [A class the standard library made]
        made = maker.make(cls, copied)
    else:
        bases = tuple(copied(base) for base in cls.__bases__)
        namespace = {name: _member(value, copied) for name, value in list(vars(cls).items())
                     if not _type_made(name)}  # (a copy of an instance adds ``__slotnames__`` meanwhile)
        namespace["__qualname__"] = cls.__qualname__  # kept by ``type`` outside the namespace
        made = type(cls.__name__, bases, namespace)
    memo[id(cls)] = made
    for old in dict.get(memo, id(memo), ()):  # what the memo keeps alive, the call's cells among it
        if type(old) is types.CellType:
            new = dict.get(memo, id(old))
            if new is not None and _contents(new) is cls:
                new.cell_contents = made
    for key, new in list(dict.items(memo)):  # Note [An instance made while its class is made]
        if type(new) is cls and key != id(new):
            object.__setattr__(new, "__class__", made)
    return made


# Note [An instance made while its class is made]
# ``class Node: registry = []``, ``Node.registry.append(Node())``, ``return Node``: the namespace's copy is
# made while the memo holds the pass's class for the class (Note [A class made again per call]), so the
# registry's copy held an instance of the pass's class (``type(Node.registry[0]) is Node`` False on every
# cached call). Once the call's class exists, each copy the call's memo holds that is of the pass's class
# gets the call's class, as the cells holding it do; the layouts are one (the same bases, slots and
# ``__dict__``). A memo entry that is its object itself (the caller's objects, kept) is never changed.


def _member(value: Any, copied: Callable[[Any], Any]) -> Any:
    """This call's copy of a value of a class's namespace: a ``classmethod``, ``staticmethod`` or ``property``
    made again over copies of its functions (``deepcopy`` refuses the first two, keeps the third)."""
    kind = type(value)
    if kind is classmethod or kind is staticmethod:
        return kind(copied(value.__func__))
    if kind is property:
        return property(*(copied(f) for f in (value.fget, value.fset, value.fdel)), value.__doc__)
    return copied(value)


def _contents(cell: types.CellType) -> Any:
    """What ``cell`` holds; None for an empty cell."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _wrapped(value: Any) -> list[Any]:
    kind = type(value)
    if kind is classmethod or kind is staticmethod:
        return [value.__func__]
    if kind is property:
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    return []


def _holds_itself(cls: type) -> bool:
    """Whether an object of ``cls``'s namespace reaches ``cls`` other than as a function's cell's contents
    (Note [A class made again per call])."""
    seen: set[int] = set()
    todo = [v for name, v in vars(cls).items() if not _type_made(name)]
    while todo:
        value = todo.pop()
        if value is cls:
            return True
        if id(value) in seen or isinstance(value, (type, types.ModuleType)) or value is None:
            continue
        seen.add(id(value))
        kind = type(value)
        if kind is types.FunctionType:
            todo.extend(_contents(c) for c in value.__closure__ or () if _contents(c) is not cls)
            todo.extend([*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values(),
                         *value.__dict__.values()])
        elif kind in (classmethod, staticmethod, property):
            todo.extend(_wrapped(value))
        elif issubclass(kind, (tuple, list, set, frozenset, collections.deque)):
            todo.extend(value)
        elif issubclass(kind, dict):
            todo.extend([*value.keys(), *value.values()])
        else:
            todo.extend(getattr(value, "__dict__", {}).values())
    return False


# Note [A class the standard library made]
# ``P = collections.namedtuple("P", "a b"); return P(1, 2)``: eagerly each call makes a new class by
# ``namedtuple``, which sets ``__module__`` on it after ``type`` made it (and its ``__slots__`` is ``()``):
# "changed after its class statement", every such call was an eager entry. A class ``namedtuple`` made,
# unchanged since, is made again per call by ``namedtuple`` itself, called natively with the same name,
# fields, defaults and module, as eager's call makes it: its methods are the library's. A
# ``typing.NamedTuple`` class statement is ``namedtuple`` and then its annotations (on the class and its
# ``__new__``), ``__orig_bases__`` (3.13: ``__firstlineno__``, ``__static_attributes__``) and qualified
# name set: made again the same way (one with methods of
# its own, or ``Generic``, is not). A class ``@dataclasses.dataclass`` (``slots`` too: Note [A dataclass
# with slots]; fields, ``ClassVar``/``InitVar`` too) decorated is made again as its statement and
# decorator make it: ``type``
# over this call's copy of the statement's namespace (what ``dataclass`` wrote left out, a new ``Field``
# per field, its default and factory this call's), then ``dataclass`` with the decorator's options read
# from ``__dataclass_params__`` (3.11 records no ``match_args``/``kw_only``: ``__match_args__`` tells the
# first, each field's ``kw_only`` the second). Either is accepted only where such a remaking over the
# pass's own objects gives the pass's namespace value by value (the class itself in a generated
# method's cell, a frozen one's ``__setattr__``, counted as the new class). The makers hold nothing of the
# class: the class is freed as before. Unchanged: at
# trace time a class made by that call has the same namespace, compared value by value (functions by
# code, defaults, cells and attributes; ``_tuplegetter`` by its reduction); a method or attribute the
# program added or replaced, a default that is not a number or text (a list: eager's is new per call),
# another base: refused as before.
@dataclasses.dataclass(frozen=True, slots=True)
class LibraryMaker:
    """How a class the standard library made is made again: ``make(cls, copied)`` (``copied``: this call's
    copy of an object of the pass's class ``cls``), and ``parts(cls)``, the pass's objects it copies.
    Neither holds the class (nor its functions): the cache of makers is keyed weakly by the class."""

    make: Callable[[type, Callable[[Any], Any]], type]
    parts: Callable[[type], list[Any]]


_LIBRARY_MAKERS: weakref.WeakKeyDictionary[type, LibraryMaker | None] = weakref.WeakKeyDictionary()
_ATOMS = (int, float, bool, str, bytes, complex, type(None))
_STATEMENTS_OWN = ("__firstlineno__", "__static_attributes__", "__orig_bases__")


def library_maker(cls: type) -> LibraryMaker | None:
    """What makes ``cls`` again as the standard library made it (``collections.namedtuple``,
    ``dataclasses.dataclass``), None where nothing does (Note [A class the standard library made]); found
    once per class."""
    try:
        return _LIBRARY_MAKERS[cls]
    except KeyError:
        pass
    except TypeError:  # not weakly referable: no class statement's
        return None
    maker = _namedtuple_maker(cls) or _dataclass_maker(cls) or _enum_maker(cls)
    _LIBRARY_MAKERS[cls] = maker
    return maker


def _namedtuple_maker(cls: type) -> LibraryMaker | None:
    namespace = vars(cls)
    fields = namespace.get("_fields")
    field_defaults = namespace.get("_field_defaults")
    if type(cls) is not type or cls.__bases__ != (tuple,) or type(fields) is not tuple or \
            type(field_defaults) is not dict or not all(type(f) is str for f in fields):
        return None
    defaults = tuple(field_defaults.values())
    if list(field_defaults) != list(fields[len(fields) - len(defaults):]) or \
            not all(type(d) in _ATOMS for d in defaults):
        return None
    name, module, qualname = cls.__name__, namespace.get("__module__"), cls.__qualname__
    if type(name) is not str or type(module) is not str:
        return None
    annotations = namespace.get("__annotations__")  # typing.NamedTuple's: on the class and its __new__
    # what typing.NamedTuple copies from its class statement's namespace, in its order: its own names, and
    # the methods and attributes the statement defines (Note [A NamedTuple's own methods])
    # (typing.NamedTuple passes ``defaults=[]`` where none: ``__new__.__defaults__`` is ``()``, not None)
    new = namespace.get("__new__")
    if getattr(getattr(new, "__func__", None), "__defaults__", None) == ():
        defaults = ()
    else:
        defaults = defaults or None
    try:
        plain = vars(collections.namedtuple(name, fields, rename=True, defaults=defaults, module=module))
    except Exception:  # noqa: BLE001 - arguments namedtuple refuses: no call of it made ``cls``
        return None
    statement = "__orig_bases__" in namespace  # typing.NamedTuple's class statement (else namedtuple's call)
    own = [k for k in namespace if k in _STATEMENTS_OWN or statement and k not in plain]

    def make(cls: type, copied: Callable[[Any], Any]) -> type:  # holds nothing of ``cls``
        made = collections.namedtuple(name, fields, rename=True, defaults=defaults, module=module)
        if annotations is not None:
            made.__annotations__ = made.__new__.__annotations__ = dict(annotations)
        namespace = vars(cls)
        for key in own:
            value = namespace[key]
            setattr(made, key, value if key in _STATEMENTS_OWN else _member(value, copied))
        if made.__qualname__ != qualname:
            made.__qualname__ = qualname
        return made

    def parts(cls: type) -> list[Any]:
        namespace = vars(cls)
        return [p for k in own if k not in _STATEMENTS_OWN for p in _wrapped(namespace[k]) or [namespace[k]]]

    return _checked(cls, LibraryMaker(make, parts))


# Note [A NamedTuple's own methods]
# ``class P(typing.NamedTuple): a: int; def twice(self): ...``: typing makes the class by ``namedtuple``
# and then sets on it each name of the statement that is no field (a method, a class attribute), in
# the statement's order. Such a class ran eagerly on every call (the maker knew only the fields); its
# maker now sets those names too, each this call's copy (a method's cell holding the class gets this
# call's class: ``remake_class``), read from the class when it is made (the maker holds nothing of it).
# A class ``collections.namedtuple`` made and the program changed after (``P.area = property(...)``) is
# still refused: no statement says those names are the class's own.


# what ``dataclasses.dataclass`` writes into a class (``__doc__`` aside: kept, it is what it wrote)
_DATACLASS_MADE = frozenset({"__dataclass_params__", "__dataclass_fields__", "__init__", "__repr__", "__eq__",
                             "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__match_args__",
                             "__setattr__", "__delattr__", "__dict__", "__weakref__", "__slotnames__",
                             "__replace__"})


# Note [A ClassVar or InitVar field]
# ``n: ClassVar[int] = 0`` and ``i: InitVar[int] = 3`` are in ``__dataclass_fields__`` too, of their own
# kinds; their defaults stay in the class as its attributes (as a field's default does). The remaking
# writes a Field for each, which ``dataclass`` reads the same way (it finds the kind from the annotation,
# this call's copy of ``ClassVar[int]``), and ``_checked`` compares the result with the pass's class.
_FIELD_KINDS = (dataclasses._FIELD, dataclasses._FIELD_CLASSVAR, dataclasses._FIELD_INITVAR)  # noqa: SLF001


def _dataclass_maker(cls: type) -> LibraryMaker | None:
    namespace = vars(cls)
    params, fields = namespace.get("__dataclass_params__"), namespace.get("__dataclass_fields__")
    if type(cls) is not type or type(fields) is not dict or type(params) is not dataclasses._DataclassParams \
            or any(type(k) is not str for k in namespace):  # noqa: SLF001
        return None
    if any(f._field_type not in _FIELD_KINDS for f in fields.values()):  # Note [A ClassVar or InitVar field]
        return None
    options = {n: getattr(params, n) for n in type(params).__slots__}
    if "__slots__" in namespace and not _slotted(cls, options):  # Note [A dataclass with slots]
        return None
    options.setdefault("slots", "__slots__" in namespace)  # (3.11 records none of these)
    options.setdefault("weakref_slot", "__weakref__" in namespace.get("__slots__", ()))
    options.setdefault("match_args", "__match_args__" in namespace)
    options.setdefault("kw_only", False)  # each field says its own
    maker = LibraryMaker(functools.partial(_remade_dataclass, options=options), _dataclass_parts)
    return _checked(cls, maker)


# Note [A dataclass with slots]
# ``@dataclass(slots=True)`` makes a second class: ``type`` over the first class's namespace less the
# fields' defaults, with ``__slots__`` (the fields, ``__weakref__`` with ``weakref_slot``); ``type`` adds a
# member descriptor per slot, and a frozen one gets dataclasses' ``__getstate__``/``__setstate__``. Such a
# class ran eagerly on every call ("it has __slots__"). Its statement is the slotted class's namespace
# without what ``dataclass`` wrote, the slots and their descriptors (``_statement``): made again as the
# other dataclasses are, ``dataclass(slots=True)`` over ``type`` of it, and ``_checked`` as they are (a
# member descriptor the same where its name is and its class is the class compared; a frozen one's
# ``__setattr__`` holds the first class, unslotted: ``_first_classes``). A ``__slots__`` the
# statement wrote itself (no ``slots=True``), or one that is not the fields', is still refused. Its
# instances hold no ``__dict__``: they are copied by ``deepcopy`` (its slots as state), of this call's class.
def _slotted(cls: type, options: dict[str, Any]) -> bool:
    """Whether ``cls``'s ``__slots__`` is the one ``dataclass(slots=True)`` wrote (Note [A dataclass with
    slots])."""
    if options.get("slots") is False:
        return False
    names = tuple(f.name for f in cls.__dataclass_fields__.values()
                  if f._field_type is dataclasses._FIELD)  # noqa: SLF001
    slots = vars(cls)["__slots__"]
    return slots in (names, (*names, "__weakref__")) and all(
        type(vars(cls).get(n)) is types.MemberDescriptorType for n in names)


_SLOTS_MADE = ("__slots__", "__getstate__", "__setstate__")


def _first_classes(a: type, b: type, pair: tuple) -> bool:
    """Whether ``a`` and ``b`` are the classes ``dataclass(slots=True)`` made first for the slotted
    classes ``pair`` (a frozen one's ``__setattr__`` holds it): of their name, unslotted, dataclasses."""
    return "__slots__" in vars(pair[0]) and "__slots__" in vars(pair[1]) and \
        a.__qualname__ == b.__qualname__ == pair[0].__qualname__ and \
        "__slots__" not in vars(a) and "__slots__" not in vars(b) and \
        "__dataclass_fields__" in vars(a) and "__dataclass_fields__" in vars(b)


# Note [An Enum it made]
# ``class Color(enum.Enum): RED = 1`` made in the function ran eagerly on every call (its metaclass
# ``EnumType`` would run again). A class statement over one of ``Enum``, ``IntEnum``, ``StrEnum``, ``Flag``
# or ``IntFlag`` whose members have number or text values (``auto()`` ones too: the namespace holds the
# values they gave) is made again per call as its statement made it: ``EnumType`` over a namespace from
# ``EnumType.__prepare__`` filled with the statement's names in their order (``__module__``,
# ``__qualname__``, 3.13's ``__firstlineno__`` and ``__static_attributes__``, its methods), then its
# members (the class puts them after the other names wherever the statement wrote them), and
# ``_checked`` as the other library classes are (a member the same where its name and value are, of the
# class compared). (``Enum``'s functional API made plain ones before, on 3.11 and 3.12 only: on 3.13 it
# writes no ``__firstlineno__``/``__static_attributes__``.) Its members are this call's class's: a copy
# reaching one asks the call's memo (jit/call_copies.py), which gives the member of that name of this
# call's class. Its methods (properties, class and static methods too) are this call's copies, as a
# dataclass's are; one holding a cell (``super()``'s ``__class__``) is not made again. An alias, a
# ``_generate_next_value_`` of its own, a ``Flag`` whose pass made a combined member (``A | B``: it sits
# in ``_value2member_map_``) differ from what that makes: refused as before (the call runs eagerly).
_ENUM_BASES = (enum.Enum, enum.IntEnum, enum.StrEnum, enum.Flag, enum.IntFlag)
_ENUM_STATEMENT = ("__module__", "__firstlineno__", "__static_attributes__")  # (with its methods, in order)


def _enum_maker(cls: type) -> LibraryMaker | None:
    if type(cls) is not enum.EnumType or len(cls.__bases__) != 1 or cls.__bases__[0] not in _ENUM_BASES:
        return None
    base, name, qualname, namespace = cls.__bases__[0], cls.__name__, cls.__qualname__, vars(cls)
    members = [(n, cls._member_map_[n]._value_) for n in cls._member_names_]
    keys = [k for k, v in namespace.items() if k in _ENUM_STATEMENT or _enum_method(v, qualname)]
    if not all(type(v) in _ATOMS for _n, v in members) or type(name) is not str or type(qualname) is not str \
            or not all(type(namespace[k]) in (str, int, tuple) for k in keys if k in _ENUM_STATEMENT):
        return None

    def make(pass_class: type, copied: Callable[[Any], Any]) -> type:  # holds nothing of ``cls``
        statement = enum.EnumType.__prepare__(name, (base,))
        for key in keys:  # the members go after the statement's other names, wherever it wrote them
            value = vars(pass_class)[key]
            statement[key] = value if key in _ENUM_STATEMENT else _member(value, copied)
            if key == "__module__":
                statement["__qualname__"] = qualname
        for key, value in members:
            statement[key] = value
        return enum.EnumType(name, (base,), statement)

    def parts(pass_class: type) -> list[Any]:
        methods = [vars(pass_class)[k] for k in keys if k not in _ENUM_STATEMENT]
        return [p for v in methods for p in _wrapped(v) or [v]]

    return _checked(cls, LibraryMaker(make, parts))


def _enum_method(value: Any, qualname: str) -> bool:
    """A function (or property, classmethod, staticmethod) its class statement wrote, holding no cell
    (``super()``'s ``__class__`` would be the pass's class)."""
    functions = _wrapped(value) or [value]
    return all(type(f) is types.FunctionType and f.__qualname__.startswith(f"{qualname}.") and
               f.__closure__ is None for f in functions)


def _no_parts(_cls: type) -> list[Any]:
    return []


def _statement(cls: type) -> tuple[list[tuple[str, Any]], dict[str, dict[str, Any]]]:
    """A dataclass's class statement's namespace, in its order (what ``dataclass`` wrote left out; a
    field's place is where its Field goes), and each field's arguments to ``dataclasses.field``."""
    namespace = vars(cls)
    slotted = "__slots__" in namespace  # Note [A dataclass with slots]
    own = [(k, v) for k, v in namespace.items() if k not in _DATACLASS_MADE and not (
        slotted and (k in _SLOTS_MADE or type(v) is types.MemberDescriptorType and k not in
                     namespace["__dataclass_fields__"]))]
    keys = list(namespace)
    if "__dict__" in keys and keys.index("__doc__") > keys.index("__dict__"):  # ``type``'s None, rewritten
        own = [(k, v) for k, v in own if k != "__doc__"]
    specs = {f.name: {n: getattr(f, n) for n in ("default", "default_factory", "init", "repr", "hash",
                                                  "compare", "kw_only", "metadata")}
             for f in namespace["__dataclass_fields__"].values()}
    return own, specs


def _remade_dataclass(cls: type, copied: Callable[[Any], Any], options: dict[str, Any]) -> type:
    """``cls``, a dataclass, made again: ``type`` over this call's copy of its statement's namespace with
    a new Field per field (its default and factory this call's copies), then ``dataclass``."""
    own, specs = _statement(cls)
    namespace = {k: None if k in specs else _member(v, copied) for k, v in own}
    for field, spec in specs.items():  # a new Field each call, as eager's class statement makes
        arguments = {k: copied(v) if k in _FIELD_COPIED and v is not dataclasses.MISSING else v
                     for k, v in spec.items()}
        namespace[field] = dataclasses.field(**arguments)
    namespace["__qualname__"] = cls.__qualname__
    return dataclasses.dataclass(type(cls.__name__, tuple(copied(b) for b in cls.__bases__), namespace),
                                 **options)


_FIELD_COPIED = ("default", "default_factory")


def _dataclass_parts(cls: type) -> list[Any]:
    own, specs = _statement(cls)
    found = [*cls.__bases__, *(p for k, v in own if k not in specs for p in _wrapped(v) or [v])]
    return found + [spec[n] for spec in specs.values() for n in _FIELD_COPIED
                    if spec[n] is not dataclasses.MISSING]


def _checked(cls: type, maker: LibraryMaker) -> LibraryMaker | None:
    """``maker`` where the class it makes over the pass's own objects is ``cls`` value by value (Note [A
    class the standard library made]), else None."""
    try:
        fresh = maker.make(cls, lambda value: value)
    except Exception:  # noqa: BLE001 - arguments the library refuses: no call of it made ``cls``
        return None
    namespace = vars(cls)
    same = cls.__qualname__ == fresh.__qualname__ and cls.__bases__ == fresh.__bases__ and \
        list(namespace) == list(vars(fresh)) and \
        all(_type_made(k) or _same(namespace[k], vars(fresh)[k], pair=(cls, fresh)) for k in namespace)
    return maker if same else None


def _same(a: Any, b: Any, depth: int = 0, pair: tuple = ()) -> bool:
    """Whether ``a`` (of the pass's class) and ``b`` (of one made again) are the same value: atoms and
    containers of them equal, functions of one code over the same values (Note [A class the standard
    library made])."""
    if a is b or pair and a is pair[0] and b is pair[1]:  # (``pair``: the pass's class and the new one)
        return True
    kind = type(a)
    if pair and kind is pair[0] and type(b) is pair[1] and isinstance(a, enum.Enum):  # Note [An Enum it made]
        return a._name_ == b._name_ and _same(a._value_, b._value_, depth + 1, pair)
    if kind is not type(b) or depth > 8:
        return False
    if kind in _ATOMS:
        return a == b
    if kind is tuple or kind is list:
        return len(a) == len(b) and all(_same(x, y, depth + 1, pair) for x, y in zip(a, b))
    if kind is dict:
        return list(a) == list(b) and all(_same(a[k], b[k], depth + 1, pair) for k in a)
    if kind is staticmethod or kind is classmethod:
        return _same(a.__func__, b.__func__, depth + 1, pair)
    if kind is property:
        return all(_same(getattr(a, n), getattr(b, n), depth + 1, pair) for n in ("fget", "fset", "fdel",
                                                                                 "__doc__"))
    if kind is types.FunctionType:
        parts = ("__defaults__", "__kwdefaults__", "__dict__", "__qualname__", "__name__", "__module__",
                 "__doc__", "__annotations__")
        return a.__code__ == b.__code__ and \
            all(_same(getattr(a, n), getattr(b, n), depth + 1, pair) for n in parts) and \
            _same(tuple(_contents(c) for c in a.__closure__ or ()),
                  tuple(_contents(c) for c in b.__closure__ or ()), depth + 1, pair)
    if kind is _TUPLEGETTER:
        return a.__reduce__() == b.__reduce__()
    if isinstance(a, type) and pair and _first_classes(a, b, pair):  # Note [A dataclass with slots]
        return True
    if kind is types.MemberDescriptorType:  # a slot's (Note [A dataclass with slots])
        return a.__name__ == b.__name__ and bool(pair) and (a.__objclass__, b.__objclass__) == pair
    if kind is set or kind is frozenset:
        return a == b and all(type(x) in _ATOMS for x in a)
    if kind is types.MappingProxyType:
        return _same(dict(a), dict(b), depth + 1, pair)
    if kind is dataclasses.Field or kind is dataclasses._DataclassParams:  # noqa: SLF001
        return all(_same(getattr(a, n), getattr(b, n), depth + 1, pair) for n in kind.__slots__)
    return False


_TUPLEGETTER = type(collections.namedtuple("_Probe", "a").a)
