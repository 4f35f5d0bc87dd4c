"""Semantics found different by CPython's regression tests added to the conformance list on 2026-12-02
(test_descr, test_types, test_builtin, test_typing, test_weakref, ...), checked natively against ``interpret``
on small programs of their own."""

from __future__ import annotations

import ast
import asyncio
import enum
import functools
import gc
import os
import sys
import types
import typing
import warnings
import weakref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_class_attribute_lookup_runs_a_key_eq_once_over_the_mro_it_began_with():
    """type.__getattribute__ looks a name up once per class dict, over the MRO as it was when it began: a
    colliding key's ``__eq__`` that assigns ``__bases__`` runs once and changes only later lookups
    (test_descr.MiscTests.test_type_lookup_mro_reference)."""

    def f():
        calls = []

        class Key:
            def __hash__(self):
                return hash("mykey")

            def __eq__(self, other):
                calls.append(other)
                X.__bases__ = (Base2,)
                return False

        class Base:
            mykey = "from Base"
            mykey2 = "from Base"
            method = classmethod(lambda cls: cls.__name__)

        class Base2:
            mykey = "from Base2"
            mykey2 = "from Base2"

        X = type("X", (Base,), {Key(): 5})
        first = X.mykey
        return first, X.mykey2, calls, X.__doc__, X.__name__

    check(f)

    def inherited():
        class Base:
            attr = [1]
            method = classmethod(lambda cls: cls.__name__)
            static = staticmethod(lambda: 3)
            prop = property(lambda self: 4)

        class Meta(type):
            shadowed = property(lambda cls: "meta's data descriptor")

        class X(Base, metaclass=Meta):
            shadowed = "class attribute"

        return X.attr, X.method(), X.static(), type(X.prop), X.shadowed, type(X).__name__

    check(inherited)


def test_module_level_code_called_as_a_function_has_its_globals_as_locals():
    """A code object without CO_OPTIMIZED (``compile(..., "exec")``) called through ``FunctionType(code,
    globals)`` runs with its globals as locals, as _PyFunction_Vectorcall passes them
    (test_builtin.BuiltinTest.test_compile_top_level_await)."""

    def plain():
        namespace = {"b": 1}
        types.FunctionType(compile("a = b + 1\nc = [a for _ in 'xy']", "<s>", "exec"), namespace)()
        return namespace["a"], namespace["c"]

    check(plain)

    async def arange(n):
        for i in range(n):
            yield i

    def top_level_await():
        source = "a = await asyncio.sleep(0, result=1)\nb = [x async for x in arange(3)]"
        code = compile(source, "<s>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        namespace = {"asyncio": asyncio, "arange": arange}
        asyncio.run(types.FunctionType(code, namespace)())
        evaluated = {"asyncio": asyncio, "arange": arange}
        asyncio.run(eval(code, evaluated))
        return namespace["a"], namespace["b"], evaluated["b"]

    check(top_level_await)


def test_prepare_returning_a_non_mapping_names_the_metaclass_as_cpython_does():
    """``<metaclass>.__prepare__() must return a mapping`` for a metaclass that is not a class
    (test_types.ClassCreationTests.test_bad___prepare__)."""

    class BadMeta:
        @classmethod
        def __prepare__(cls, *args):
            return None

    class BadMetaType(type):
        @classmethod
        def __prepare__(cls, *args):
            return None

    def not_a_class():
        class Bar(metaclass=BadMeta()):
            pass

    def a_class():
        class Foo(metaclass=BadMetaType):
            pass

    check(not_a_class)
    check(a_class)


def test_a_frame_object_is_the_same_object_while_held():
    """``sys._getframe()`` twice, ``gen.gi_frame`` twice: the same frame object, as in CPython
    (test_types.CoroutineTests.test_gen); ``f_back`` is the current caller."""

    def f():
        def gen_func():
            yield sys._getframe()
            yield sys._getframe()

        gen = gen_func()
        held = gen.gi_frame
        inside = next(gen)
        again = next(gen)

        def callee():
            return sys._getframe(), sys._getframe(1)

        here = sys._getframe()
        frame, back = callee()
        return (
            held is gen.gi_frame,
            inside is held,
            again is held,
            sys._getframe() is sys._getframe(),
            here is back,
            here is sys._getframe(),
            frame.f_back is here,
            held.f_back is None,
        )

    check(f)


def test_classes_the_program_used_are_freed():
    """The interpreter's per-type attribute caches hold no class alive: a class whose instances' attributes
    were read and written (natively and through Python descriptors) dies when the program drops it, and a
    weakref callback on it runs (test_weakref.ReferencesTestCase.test_callback_in_cycle_resurrection)."""

    def f():
        died = []

        class Meta(type):
            tag = property(lambda cls: cls.__name__)

        class C(metaclass=Meta):
            def __init__(self, value):
                self.attribute = value

            @property
            def doubled(self):
                return self.attribute * 2

        c = C(3)
        seen = (c.attribute, c.doubled, C.tag, type(c).__name__)
        c.attribute = 4
        del c.attribute
        ref = weakref.ref(C, lambda r: died.append("C went away"))
        del C, c
        gc.collect()
        return seen, died, ref()

    check(f)


def test_registering_a_class_with_a_data_protocol():
    """``P.register(C)`` runs ABCMeta.register natively, so typing's check of who asks issubclass (the abc
    module may, the program may not, for a protocol with data members) sees abc, as natively
    (test_typing.ProtocolTests.test_protocols_support_register)."""

    @typing.runtime_checkable
    class P(typing.Protocol):
        x = 1

    class PM(typing.Protocol):
        def meth(self):
            pass

    def f():
        class D(PM):
            pass

        class C:
            pass

        D.register(C)
        P.register(C)
        return isinstance(C(), P), isinstance(C(), D), issubclass(C, D)

    check(f)

    def program_asks():
        class C:
            x = 1

        return issubclass(C, P)

    check(program_asks)


def test_code_of_a_finished_generator_or_coroutine_is_its_own():
    """``gi_code``/``cr_code``/``ag_code`` stay the generator's code after it finished or was closed (the
    driver's frame is gone then: test_types.CoroutineTests.test_async_def); gi_frame, cr_await, ... are
    None."""

    def f():
        def gen_func():
            yield 1

        async def coro_func():
            pass

        async def agen_func():
            yield 1

        gen, coro, agen = gen_func(), coro_func(), agen_func()
        before = (gen.gi_code.co_name, coro.cr_code.co_name, agen.ag_code.co_name)
        list(gen)
        coro.close()
        asyncio.run(agen.aclose())
        after = (gen.gi_code is gen_func.__code__, coro.cr_code is coro_func.__code__,
                 agen.ag_code is agen_func.__code__, coro.cr_code.co_flags == coro_func.__code__.co_flags)
        gone = (gen.gi_frame, gen.gi_yieldfrom, coro.cr_await, agen.ag_await)
        wrapped = types.coroutine(lambda: coro)()
        return before, after, gone, wrapped is coro, (gen.__name__, coro.__qualname__)

    check(f)


A_GLOBAL_VALUE = 123


def test_eval_and_exec_take_their_namespaces_by_keyword_on_313():
    """3.13's ``eval(s, globals=g)``, ``exec(s, locals=l)`` (3.11: "takes no keyword arguments", from the
    builtin itself) (test_builtin.BuiltinTest.test_eval_kwargs, test_exec_kwargs on 3.13)."""

    def by_keyword():
        data = {"A_GLOBAL_VALUE": 456}
        g, l_ = {}, {}
        exec("global z\nz = 1\nw = 2", locals=l_)
        exec("global z\nz = 1", globals=g)
        return (eval("globals()['A_GLOBAL_VALUE']", globals=data), eval("A_GLOBAL_VALUE", locals=data),
                eval("globals()['A_GLOBAL_VALUE']", locals=data), g["z"], l_)

    check(by_keyword)
    check(lambda: eval("1", globals={}, locals={}, extra=1))
    check(lambda: exec("1", {}, globals={}))


def test_zero_argument_super_does_not_ask_the_metaclass():
    """``super().__new__(cls)`` in a class whose metaclass's ``__instancecheck__`` raises (typing.Any's on
    3.13): super's own check of its second argument runs no Python hook
    (test_typing.AnyTests.test_can_subclass)."""

    class Meta(type):
        def __instancecheck__(cls, obj):
            raise TypeError("no isinstance() with this class")

    class Base(metaclass=Meta):
        def __new__(cls, *args):
            return super().__new__(cls)

        def method(self):
            return "base"

    class Derived(Base):
        def method(self):
            return super().method() + "+derived"

    def f():
        mock = type("Mock", (typing.Any,), {})
        return type(Derived()).__name__, Derived().method(), type(mock()).__name__

    check(f)
    check(lambda: super(Derived, 1).method())


def test_typing_constructors_record_the_callers_module():
    """TypeVar, ParamSpec, TypeVarTuple and TypeAliasType take ``__module__`` from their caller's function on
    3.12+ (C code): the program's module, not jitcore's (test_typing.TypeVarTests.test_basic_plain and the
    pickling tests on 3.13)."""
    namespace = {"__name__": "a_user_module", "typing": typing}
    exec(
        "def f():\n"
        "    made = [typing.TypeVar('T'), typing.ParamSpec('P'), typing.TypeVarTuple('Ts')]\n"
        "    if hasattr(typing, 'TypeAliasType'):\n"
        "        made.append(typing.TypeAliasType('A', int))\n"
        "    return [value.__module__ for value in made]\n",
        namespace,
    )
    check(namespace["f"])
    check(lambda: typing.TypeVar("T", int))


def test_a_class_namespace_from_prepare_has_its_python_methods_interpreted():
    """STORE_NAME, LOAD_NAME and DELETE_NAME in a class body whose namespace is not a dict (``__prepare__``,
    enum's _EnumDict) call its Python ``__setitem__``/``__getitem__``/``__delitem__`` interpreted, as
    PyObject_SetItem would: a warning they raise with stacklevel=2 names the class body's line
    (test_enum.TestSpecial.test_partial on 3.13)."""

    class Namespace(dict):
        def __setitem__(self, key, value):
            if not key.startswith("__"):
                self.setdefault("__seen__", []).append((key, sys._getframe(1).f_code.co_name))
                warnings.warn(f"set {key}", UserWarning, stacklevel=2)
            super().__setitem__(key, value)

        def __getitem__(self, key):
            if key == "magic":
                return sys._getframe(1).f_code.co_name
            return super().__getitem__(key)

        def __delitem__(self, key):
            self.setdefault("__deleted__", []).append(key)
            super().__delitem__(key)

    class Meta(type):
        @classmethod
        def __prepare__(mcs, name, bases):
            return Namespace()

    def f():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            class C(metaclass=Meta):
                a = 1
                b = magic  # noqa: F821 - answered by the namespace
                del a

            class E(enum.Enum):
                x = 1
                y = functools.partial(len)  # 3.13: FutureWarning, stacklevel=2

        return C.__seen__, C.b, C.__deleted__, [(w.filename, w.lineno, str(w.message)) for w in caught]

    check(f)
