"""Semantics found different by the differential probes of issue 13 (2026-12-04, late), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import _random
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _chain(e: BaseException | None) -> list[tuple[str, str]]:
    out = []
    while e is not None and len(out) < 5:
        out.append((type(e).__name__, str(e)))
        e = e.__context__
    return out


def test_close_chains_its_generator_exit_to_the_closers_exception() -> None:
    """``gen.close()`` inside ``except KeyError`` gives the GeneratorExit it makes (and the RuntimeError of a
    generator that ignores it) the KeyError as ``__context__``, as ``PyErr_SetNone`` chains it to the
    thread's handled exception; interpreted, the caller's handled exception was not the thread's, and the
    GeneratorExit had none (Note [close() chains to the closer's exception]). A generator handling its own
    exception chains to that one; a native generator and a coroutine are closed the same way; the caller's
    handled exception is unchanged after."""

    def f() -> list[object]:
        out: list[object] = []

        def raises():
            try:
                yield 1
            except GeneratorExit as e:
                out.append(("seen", _chain(e)))
                raise ValueError("in close")  # noqa: B904 - chained as CPython chains it

        def ignores():
            try:
                yield 1
            except GeneratorExit:
                yield 2

        def handles_its_own():
            try:
                raise TypeError("own")
            except TypeError:
                try:
                    yield 1
                except GeneratorExit as e:
                    out.append(("own", _chain(e)))
                    raise

        def returns():
            try:
                yield 1
            except GeneratorExit:
                return 5

        for make in (raises, ignores, handles_its_own, returns):
            it = make()
            next(it)
            try:
                raise KeyError("outer")
            except KeyError as outer:
                try:
                    out.append(("closed", it.close()))
                except Exception as e:  # noqa: BLE001 - compared with CPython's
                    out.append(("raised", _chain(e)))
                out.append((sys.exception() is outer, _chain(outer), outer.__traceback__.tb_next))
        it = raises()
        next(it)
        try:
            it.close()
        except ValueError as e:
            out.append(("outside", _chain(e)))
        try:
            raise KeyError("a")
        except KeyError:
            try:
                raise IndexError("b")
            except IndexError:
                it = raises()
                next(it)
                try:
                    it.close()
                except ValueError as e:
                    out.append(("nested", _chain(e)))
        gen = (i for i in range(3))
        next(gen)
        try:
            raise KeyError("n")
        except KeyError:
            gen.close()

        async def coroutine() -> int:
            return 1

        c = coroutine()
        try:
            raise KeyError("c")
        except KeyError:
            c.close()
        return out

    check(f)


def test_a_function_context_run_calls_sees_the_callers_handled_exception() -> None:
    """The function ``contextvars.Context.run`` calls ran natively: inside ``except KeyError`` its
    ``sys.exc_info()`` was not the KeyError, and the exception it raised (a stored one raised again, or a
    new one) was not chained to it, where CPython's thread state gives both. It is interpreted now, as
    ``map``'s function is, its frame's caller the calling frame."""
    import contextvars

    var = contextvars.ContextVar("var", default=0)

    def f() -> list[object]:
        out: list[object] = []
        stored = ValueError("stored")
        try:
            raise stored
        except ValueError:
            pass

        def raise_stored() -> None:
            raise stored

        def raise_new(n: int, *, key: str) -> None:
            var.set(n)
            out.append((sys.exc_info()[0].__name__, var.get(), key))
            raise TypeError(key)

        try:
            raise KeyError("handled")
        except KeyError:
            for fn, args, kwargs in ((raise_stored, (), {}), (raise_new, (3,), {"key": "k"})):
                context = contextvars.copy_context()
                try:
                    context.run(fn, *args, **kwargs)
                except (ValueError, TypeError) as e:
                    out.append((_chain(e), context.get(var), var.get()))
        out.append(contextvars.copy_context().run(lambda a: a + var.get(), 1))
        return out

    check(f)


def test_bytes_of_an_object_whose_index_raises_type_error_reads_it_as_bytes() -> None:
    """``bytes(x)``/``bytearray(x)`` of an object whose Python ``__index__`` raises TypeError (or returns a
    non-int) read it as a buffer or an iterable, as CPython clears that TypeError (test_bytes'
    ``test_from_buffer``); interpreted, the TypeError reached the caller. Another exception propagates, and
    text is refused without asking its ``__index__`` (Note [bytes() past an __index__ raising TypeError])."""

    class B(bytes):
        def __index__(self):
            raise TypeError

    class Items:
        def __init__(self, result):
            self.result = result

        def __index__(self):
            print("index", type(self.result).__name__)
            if isinstance(self.result, BaseException):
                raise self.result
            return self.result

        def __iter__(self):
            return iter([1, 2])

    class Text(str):
        def __index__(self):
            print("text index")
            return 2

    def f() -> list[object]:
        out: list[object] = [bytes(B(b"foobar")), bytearray(B(b"ab"))]
        for result in (TypeError("t"), "two", 1.5, 3, ValueError("v"), OverflowError("o")):
            for make in (bytes, bytearray):
                try:
                    out.append(make(Items(result)))
                except Exception as e:  # noqa: BLE001 - compared with CPython's
                    out.append(_chain(e))
        for make in (bytes, bytearray):
            try:
                make(Text("x"))
            except TypeError as e:
                out.append(_chain(e))
        return out

    check(f)


class _RandomSub(_random.Random):
    pass


class _RandomWithArgs(_random.Random):
    def __getnewargs__(self):
        return ()


class _Slots:
    __slots__ = ("a", "b", "__dict__", "__weakref__")


class _Plain:
    pass


def test_reducing_an_object_of_an_extensions_class_refuses_as_c_does() -> None:
    """``pickle.dumps``/``copy.copy`` of an object whose class is an extension module's heap type with C
    fields (``_random.Random``), or a Python class over one, raise C's "cannot pickle '_random.Random'
    object" where the state is required; interpreted, such an object pickled as a Python class's would
    (test_random's ``test_bug_41052``). Python classes with a dict, slots and weak references reduce as
    before, and one with ``__getnewargs__`` is not checked (Note [C's size check of a required state])."""
    import copy
    import pickle

    def f() -> list[object]:
        out: list[object] = []
        for make in (_random.Random, _RandomSub, _RandomWithArgs, _Slots, _Plain):
            obj = make()
            if isinstance(obj, _Slots):
                obj.a, obj.c = 1, 2
            for reduce in (*(lambda o, p=p: pickle.dumps(o, p) for p in range(6)), copy.copy):
                try:
                    result = reduce(obj)
                    out.append(result if isinstance(result, bytes) else type(result).__name__)
                except TypeError as e:
                    out.append(_chain(e))
        return out

    check(f)


def test_an_index_past_ssize_t_names_the_objects_own_type() -> None:
    """A repeat count, a subscript or a ``bytes``/``bytearray`` size whose Python ``__index__`` answers more
    than ``sys.maxsize`` raises "cannot fit 'Big' into an index-sized integer" (OverflowError, IndexError
    for a subscript), naming the object's type as C does; interpreted, C was handed the int and named
    'int' (Note [An index too large names its own type])."""

    class Big:
        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    def f() -> list[object]:
        out: list[object] = []
        ops = (lambda n: [1] * n, lambda n: n * "a", lambda n: b"a" * n, lambda n: bytearray(3) * n,
               lambda n: [1, 2, 3][n], lambda n: "abc"[n], lambda n: (1, 2, 3)[n], lambda n: b"abc"[n],
               lambda n: bytes(n), lambda n: bytearray(n), lambda n: [1, 2, 3].__setitem__(n, 0),
               lambda n: [1, 2, 3].__delitem__(n))
        for value in (2**70, -(2**70), 2):
            for op in ops:
                try:
                    out.append(op(Big(value)))
                except (OverflowError, IndexError, ValueError) as e:
                    out.append(_chain(e))
        return out

    check(f)
