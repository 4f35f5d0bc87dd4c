"""Builtins and protocols whose CPython behaviour depends on who is calling (the running frame) or on
slot lookup rules: each program agrees natively and interpreted (found by running more of CPython's
own test modules: test_builtin, test_descr, test_types, test_userlist)."""

from __future__ import annotations

import gc
import os
import pickle
import sys
import typing
from collections import UserList, UserString

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_classes_made_by_type_belong_to_the_callers_module() -> None:
    class Meta(type):
        def __new__(mcs, name, bases, ns):
            return super().__new__(mcs, name, bases, ns)

    def program():
        made = type("Made", (), {})
        by_meta = Meta("ByMeta", (), {})
        named = type("Named", (), {"__module__": "elsewhere"})
        return made.__module__, made.__qualname__, by_meta.__module__, named.__module__, type(3)

    assert check(program)[0] == __name__


@pytest.mark.parametrize("program", [
    lambda: None | typing.List[int],  # NoneType has no __or__: typing's __ror__, not type.__or__
    lambda: int | typing.List[int],
    lambda: typing.List[int] | None,
    lambda: "ab" + UserString("c"),  # str's + is sq_concat: the right operand's __radd__ comes first
    lambda: [1] + UserList([2]),
    lambda: [1] * 2 + [3],
    lambda: "x" * 3 + "y",
])
def test_binary_operators_look_slots_up_on_the_type(program) -> None:
    check(program)


@pytest.mark.parametrize("args", [(), (42, 42), (1, 2, 3)])
def test_iter_argument_errors(args) -> None:
    check(lambda: iter(*args))


def test_a_loop_over_the_garbage_collectors_objects() -> None:
    def program():
        count = 0
        for obj in gc.get_objects():  # the interpreter's own sentinels must not be among them
            count += obj is not None
        return count > 0

    check(program)


def test_descriptors_as_attribute_hooks_are_bound_first() -> None:
    def program():
        class Descriptor:
            counter = 0

            def __get__(self, obj, objtype=None):
                def getter(name):
                    self.counter += 1
                    raise AttributeError(name)

                return getter

        descr = Descriptor()

        class A:
            __getattribute__ = descr

        class B:
            __getattr__ = descr

        class C:
            __getattribute__ = descr
            __getattr__ = descr

        counts = []
        for cls in (A, B, C):
            try:
                getattr(cls(), "attr")  # noqa: B009 - the builtin getattr is the behaviour under test
            except AttributeError:
                counts.append(descr.counter)
        return counts

    assert check(program) == [1, 2, 4]


def test_map_and_filter_of_interpreted_functions_pickle() -> None:
    def program():
        doubled = map(abs, [-1, 2])
        evens = filter(callable, [len, 1])
        return [list(pickle.loads(pickle.dumps(it))) for it in (doubled, evens)]

    check(program)

    def with_python_function():
        return list(pickle.loads(pickle.dumps(map(_double, [1, 2]))))

    assert check(with_python_function) == [2, 4]


def _double(x):
    return 2 * x


def _len_of_three() -> int:
    return len([1, 2, 3])


def test_a_builtin_replaced_in_the_builtins_module() -> None:
    """The program sees the replacement; the interpreter's own decoding does not (it broke on ``dis``)."""
    import builtins

    def program():
        before = _len_of_three()
        builtins.len = lambda x: 7
        try:
            return before, _len_of_three(), (lambda: len("ab"))()
        finally:
            builtins.len = len_

    len_ = len
    assert check(program) == (3, 7, 7)


def test_globals_that_are_a_dict_subclass_with_missing() -> None:
    class Globals(dict):
        def __missing__(self, key):
            if not key.startswith("_n"):
                raise KeyError(key)  # then LOAD_GLOBAL looks in the builtins
            return int(key.removeprefix("_n"))

    def program():
        return eval("lambda: _n1 + _n2 + len('abc')", Globals())()

    assert check(program) == 6


@pytest.mark.parametrize("call", [
    lambda: getattr(),
    lambda: getattr(1, "real", 2, 3),
    lambda: hasattr(1, x="real"),
    lambda: next(x=iter([])),
    lambda: getattr(1, name="real"),
    lambda: next(iter([]), 1, 2),
    lambda: enumerate(),
    lambda: enumerate([1], 2, 3),
    lambda: enumerate(iterable=[1], begin=0),
    lambda: list(enumerate(iterable=UserList([1]), start=2)),
    lambda: zip(UserList([1]), 1),
    lambda: list(zip(UserList([1]), [1, 2], strict=True)),
    lambda: zip([1], stricter=True),
    lambda: list([1], [2]),
    lambda: list(iterable=[1]),
    lambda: tuple(UserList([1]), 2),
    lambda: list(3),
    lambda: (tuple(UserList([1, 2])), list(), tuple()),
])
def test_argument_errors_of_builtins_with_lookasides(call) -> None:
    """The builtin's own message, not the lookaside's Python signature (``getattr_() missing ...``)."""
    check(call)


def test_compile_flags_given_by_index() -> None:
    class Flags:
        def __index__(self):
            return 0

    check(lambda: compile("1 + 1", "<s>", "eval", Flags()).co_name)


def test_calling_a_weakref_whose_referent_cannot_be_hashed() -> None:
    """Looking a weakref up among the lookasides hashes its referent: a writable memoryview raises
    ValueError there, not TypeError (CPython's test_memoryview ``test_weakref``)."""
    import weakref

    def program():
        m = memoryview(bytearray(b"abc"))
        return weakref.ref(m)() is m

    assert check(program) is True


def _takes_nothing() -> None:
    pass


@pytest.mark.parametrize("program", [
    lambda: None(*_takes_nothing),  # noqa: B018
    lambda: (3)(**_takes_nothing),
    lambda: _takes_nothing(**[]),
    lambda: dir(*_takes_nothing),
], ids=["none_star", "int_starstar", "function_starstar", "builtin_star"])
def test_the_callable_named_by_a_bad_star_argument_error(program) -> None:
    """CPython names the callable by ``str()`` when it has no ``__qualname__`` (test_extcall): it was
    ``NoneType object argument after * ...`` for ``None(*f)``."""
    check(program)


def test_list_tuple_and_sorted_ask_the_length_hint_after_the_iterator() -> None:
    """``list(x)``, ``tuple(x)`` and ``sorted(x)`` of an object with a Python ``__iter__`` iterate it on the
    interpreter, and still ask ``__len__``/``__length_hint__`` after taking its iterator, as CPython
    does (test_descr's special method lookup counts the call)."""

    def program():
        seen = []

        class Hinted:
            def __iter__(self):
                seen.append("iter")
                return self

            def __next__(self):
                raise StopIteration

            def __length_hint__(self):
                seen.append("hint")
                return 0

        class Sized:
            def __iter__(self):
                seen.append("iter")
                return iter([2, 1])

            def __len__(self):
                seen.append("len")
                return 2

        return list(Hinted()), tuple(Sized()), sorted(Sized()), seen

    check(program)


def test_a_metaclass_getattribute_answers_class_attributes_only() -> None:
    # a metaclass's __getattribute__ answers ``Class.name``, interpreted (the seen list), and nothing else:
    # the lookups on the class's MRO and dicts behind its instances' attributes, descriptors and stores
    # read the type itself, as CPython's _PyType_Lookup does (test_opcache's test_metaclass_getattribute:
    # 'bool' object is not iterable, from ``Class.__mro__`` answered by the hook)
    def program():
        seen = []

        class Meta(type):
            def __getattribute__(cls, name):
                seen.append(name)
                if name.startswith("x"):
                    return "meta:" + name
                if name == "__mro__":
                    return True
                return super().__getattribute__(name)

            def __getattr__(cls, name):
                return "missing:" + name

        class Class(metaclass=Meta):
            attribute = 1

            def __init__(self):
                self.y = 2

            @property
            def p(self):
                return self.y + 1

            def m(self):
                return 3

        obj = Class()
        obj.z = 4
        del obj.z
        found = [Class.xa, Class.attribute, Class.nothing, obj.y, obj.m(), obj.p, obj.attribute]
        return found, seen

    check(program)


def test_attribute_errors_from_python_hooks_name_the_object_and_attribute() -> None:
    # PyObject_GetAttr gives an AttributeError that Python code raised (a __getattr__, __getattribute__ or
    # property getter) its ``name`` and ``obj`` unless it has them, for traceback's "Did you mean" (CPython's
    # test_traceback test_getattr_suggestions_no_args)
    def program():
        class A:
            blech = None

            def __getattr__(self, attr):
                raise AttributeError()

        class B:
            def __getattribute__(self, attr):
                raise AttributeError("Error", 23)

        class C:
            @property
            def p(self):
                raise AttributeError("inner")

        class Meta(type):
            def __getattr__(cls, attr):
                raise AttributeError

        class D(metaclass=Meta):
            pass

        class E:
            def __getattr__(self, attr):
                error = AttributeError("preset")
                error.name = "other"
                raise error

        out = []
        for obj, name in ((A(), "bluch"), (B(), "x"), (C(), "p"), (D, "y"), (E(), "z")):
            for through_getattr in (True, False):
                try:
                    getattr(obj, name) if through_getattr else eval(f"obj.{name}", {"obj": obj})
                except AttributeError as e:
                    out.append((repr(e.obj)[:12], e.name, str(e)))
        return out

    check(program)
