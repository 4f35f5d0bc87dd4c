"""Semantics found different by CPython's regression tests and snippet probes for issue 13 (2026-12-04
evening), checked natively against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_an_athrow_into_an_async_generator_not_started_has_its_entry() -> None:
    """``await agen.athrow(exc)`` (or the awaitable's first ``send``) into an interpreted async generator not
    started yet raised ``exc`` without the generator's traceback entry (CPython's is at its ``def`` line, its
    frame's locals the arguments), and so did ``map(gen.throw, ...)``, whose ``throw`` C calls: the driver
    never ran the frame. The driver's entry becomes the generator's when the exception reaches an interpreted
    frame (Note [A throw into a generator not started]); the awaitable stays CPython's (a second send
    refused)."""

    def f() -> list[object]:
        async def agen(a, b=2):
            yield a + b

        def gen(a):
            yield a

        def entries(e):
            return [(name, line - f.__code__.co_firstlineno) for _, line, name, _ in
                    traceback.extract_tb(e.__traceback__)]

        async def main() -> list[object]:
            out: list[object] = []
            awaitable = agen(1).athrow(ValueError("v"))
            out.append(type(awaitable).__name__)
            try:
                await awaitable
            except ValueError as e:
                out.append(entries(e))
                tb = e.__traceback__
                while tb.tb_next is not None:
                    tb = tb.tb_next
                out.append(sorted(tb.tb_frame.f_locals))
            awaitable = agen(1).athrow(KeyError)
            for _ in range(2):
                try:
                    awaitable.send(None)
                except BaseException as e:  # noqa: BLE001 - compared with CPython's
                    out.append((type(e).__name__, str(e), entries(e)))
            started = agen(3)
            out.append(await started.__anext__())
            try:
                await started.athrow(TypeError)
            except TypeError as e:
                out.append(entries(e))
            for thrower in (lambda g: list(map(g.throw, [ValueError("x")])),
                            lambda g: next(map(g.throw, [KeyError]))):
                try:
                    thrower(gen(1))
                except Exception as e:  # noqa: BLE001 - compared with CPython's
                    out.append(entries(e))
            return out

        coroutine = main()
        try:
            coroutine.send(None)
        except StopIteration as stop:
            return stop.value
        return ["suspended"]

    assert check(f)[1] == [("main", 16), ("agen", 1)]


def test_an_exception_shown_from_an_athrow_not_started_matches_cpythons_text() -> None:
    """The printed traceback of the athrow case above: the generator's line is shown as CPython shows it."""

    def f() -> str:
        async def agen():
            yield 1

        async def main():
            await agen().athrow(ValueError("shown"))

        coroutine = main()
        try:
            coroutine.send(None)
        except ValueError as e:
            lines = traceback.format_exception(e)
            return "".join(line for line in lines if "File" not in line or "test_interp" in line)
        return "no exception"

    text = check(f)
    assert "async def agen():" in text, text


def test_gc_get_referrers_answers_no_interpreter_container() -> None:
    """``gc.get_referrers(x)`` of a local listed the interpreted frame's fast locals and value stack and the
    argument tuple of the call in flight (CPython: a running frame is no referrer), with the ``NULL`` of
    unbound locals in them, which a loop over the answer stored in a local and then read as unbound
    (UnboundLocalError; 3.13 test_asyncio.test_futures' ``test_future_cancelled_exception_refcycles``). The
    program's containers stay, and a suspended generator holding ``x`` in its frame is the generator (Note
    [Referrers of the interpreter's own])."""

    def f() -> list[object]:
        import gc

        def gen(x):
            held = x  # noqa: F841 - the generator's frame holds it
            yield 1

        exc = KeyError(1)
        out: list[object] = [gc.get_referrers(exc)]
        try:
            raise exc
        except KeyError:
            out.append(gc.get_referrers(exc))
        g = gen(exc)
        next(g)
        pair, box = (exc, 1), [exc]
        referrers = gc.get_referrers(exc)
        out.append(sorted(type(r).__name__ for r in referrers))
        out.append([any(r is item for r in referrers) for item in (g, pair, box)])
        names = []
        for referrer in gc.get_referrers(exc):
            names.append(type(referrer).__name__)
        out.append(len(names))
        return out

    check(f)


def test_an_exception_thrown_into_a_generator_is_chained_in_its_frame() -> None:
    """``gen.throw(exc)`` chains ``exc`` to the exception the generator's own frame is handling, never to the
    thrower's (CPython's ``_PyErr_ChainStackItem``): interpreted, a throw inside ``except KeyError`` got the
    KeyError as context, and a throw into a generator suspended in an ``except`` block (an asyncio C Task
    delivering an awaited task's exception to a coroutine awaiting inside ``except``: test_asyncio.test_tasks'
    ``test_exception_chaining_after_await``) got none (Note [A thrown exception is chained in its frame])."""

    def f() -> list[object]:
        import asyncio

        out: list[object] = []

        def plain():
            yield 1

        def handling():
            try:
                raise KeyError("in gen")
            except KeyError:
                yield 1

        def delegating():
            yield from handling()

        for make in (plain, handling, delegating):
            gen = make()
            next(gen)
            try:
                raise IndexError("thrower")
            except IndexError:
                try:
                    gen.throw(ValueError("thrown"))
                except ValueError as e:
                    out.append((make.__name__, repr(e.__context__)))
        loop = asyncio.new_event_loop()

        async def raise_error():
            raise ValueError("inner")

        async def run():
            try:
                raise KeyError(3)
            except KeyError:
                try:
                    await loop.create_task(raise_error())
                except ValueError as e:
                    out.append(repr(e.__context__))

        try:
            loop.run_until_complete(run())
        finally:
            loop.close()
        return out

    assert check(f)[0] == ("plain", "None")


def test_an_index_method_of_a_sequences_key_runs_interpreted() -> None:
    """A built-in sequence's index, slice bounds and repeat count ask the key's Python ``__index__`` the
    CPython way, interpreted (Note [A stand-in's number is given to C as its value]): before, C called it
    natively, so its ``sys._getframe(1)`` was jitcore's ``get_item``, not the program's function. Its errors
    and the warning for a strict int subclass are CPython's."""

    def f() -> list[object]:
        import operator
        import warnings

        class Sub(int):
            pass

        class OwnIndex(int):  # an int is its own index: its __index__ is not asked
            def __index__(self):
                return 0

        class Ix:
            def __init__(self, v):
                self.v = v

            def __index__(self):
                seen.append(sys._getframe(1).f_code.co_name)
                return self.v

        seen: list[str] = []
        seq = [0, 1, 2, 3, 4, 5]

        def reads():
            out: list[object] = [seq[Ix(1):Ix(4):Ix(2)], seq[Ix(2)], "abcdef"[Ix(3):], [7] * Ix(2),
                                 operator.index(Ix(5))]
            copy = list(seq)
            copy[Ix(1):Ix(3)] = ["x"]
            del copy[Ix(0)]
            out.append(copy)
            for bad in (Ix("a"), Ix(2.0)):
                try:
                    seq[bad:]
                except TypeError as e:
                    out.append(str(e))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out.append((seq[Ix(Sub(4))], type(operator.index(Ix(Sub(3)))).__name__))
            out.append([(w.category.__name__, str(w.message)[:40]) for w in caught])
            out.append((operator.index(OwnIndex(3)), seq[OwnIndex(2)], seq[OwnIndex(1):]))
            return out

        return [reads(), seen]

    check(f)


def test_a_memoryview_released_by_its_keys_index_method() -> None:
    """A memoryview checks that it is not released before it asks its key for ``__index__`` (gh-92888,
    CPython's test_memoryview ``test_use_released_memory``): its subscripts are left to C, not converted
    first (Note [A stand-in's number is given to C as its value])."""

    def f() -> list[object]:
        out: list[object] = []

        class Releasing:
            def __index__(self):
                view.release()
                return 4

        for use in (lambda v: list(v[:Releasing()]), lambda v: v[Releasing()]):
            view = memoryview(bytearray(b"\xff" * 16))
            try:
                out.append(use(view))
            except (ValueError, BufferError) as e:
                out.append((type(e).__name__, str(e)))
        return out

    check(f)


def _context_chain(e: BaseException | None) -> list[str]:
    """The class names along ``e``'s ``__context__`` chain (at most 4), as the program sees them."""
    out = []
    while e is not None and len(out) < 4:
        out.append(type(e).__name__)
        e = e.__context__
    return out


def test_a_stored_exception_that_c_raises_again_is_chained() -> None:
    """An asyncio Future's ``result()`` raises the exception ``set_exception`` stored with
    ``PyErr_SetObject``, which chains it to the exception being handled: inside ``except KeyError`` CPython
    gives it the KeyError as context; the interpreter gave none (Note [A stored exception C raises again]).
    One passing through a callee keeps the context its raise gave it."""

    def f() -> list[object]:
        import asyncio

        out: list[object] = []
        loop = asyncio.new_event_loop()
        try:
            fut = loop.create_future()
            try:
                raise ValueError("stored")
            except ValueError as e:
                fut.set_exception(e)
            for _ in range(2):
                try:
                    raise KeyError("handled")
                except KeyError:
                    try:
                        fut.result()
                    except ValueError as e:
                        out.append(_context_chain(e))
            err = TypeError("t")

            def raiser(x):
                try:
                    raise OSError
                except OSError:
                    raise err  # noqa: B904 - the implicit context is what is compared

            try:
                raise KeyError("h")
            except KeyError:
                try:
                    list(map(raiser, [1]))
                except TypeError as e:
                    out.append(_context_chain(e))
        finally:
            loop.close()
        return out

    check(f)


def test_an_exception_a_task_stored_is_chained_where_it_is_awaited() -> None:
    """An exception that left a coroutine driven by an asyncio Task is stored by the Task and raised again
    by ``await task`` and ``task.result()`` (C, ``PyErr_SetObject``): inside ``except KeyError`` CPython
    chains it to the KeyError; the interpreter gave none (Note [A stored exception C raises again]). An
    exception leaving a coroutine the frame awaits itself keeps its context."""

    def f() -> list[object]:
        import asyncio

        async def boom(kind):
            raise kind("in task")

        async def main() -> list[object]:
            out: list[object] = []
            tasks = [asyncio.ensure_future(boom(ValueError)), asyncio.ensure_future(boom(TypeError))]
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            for use in (lambda: tasks[0].result(), None):
                try:
                    raise KeyError("handled")
                except KeyError:
                    try:
                        if use is None:
                            await tasks[1]
                        else:
                            use()
                    except (ValueError, TypeError) as e:
                        out.append(_context_chain(e))
            try:
                raise KeyError("handled")
            except KeyError:
                try:
                    await boom(OSError)
                except OSError as e:
                    out.append(_context_chain(e))
            return out

        return asyncio.run(main())

    check(f)


def test_a_stale_record_of_an_exception_that_left_a_frame_does_not_chain_it() -> None:
    """The run records an exception that leaves a frame by ids (its own, its entry's, the caller frame's).
    Ids outlive their objects: an exception and entry of a first pass that died may leave their addresses to
    the second pass's, which then left a frame for this one. Any matching record counted, so the stale one
    (another caller) chained the second pass's exception as if C raised it again: CPython's
    test_exit_exception_explicit_none_context got an IndexError as context about one run in eight, as
    addresses fell. The newest record of the pair decides (Note [A stored exception C raises again]).
    Address reuse cannot be forced from Python, so the records are laid out as the failing run had them."""
    from types import SimpleNamespace

    from jitcore.interpreter.loop import _raised_again

    try:
        raise ValueError("left a callee")
    except ValueError as e:
        exc = e
    head = exc.__traceback__
    frame = SimpleNamespace(code=_raised_again.__code__, caught=None, run=SimpleNamespace(left=()))
    other_caller = object()
    stale = (id(exc), id(head), id(other_caller))
    frame.run.left = ((id(exc), id(head), id(frame)), stale)  # newest first: it left a callee of this frame
    assert not _raised_again(frame, exc)
    frame.run.left = (stale,)  # it left a frame another frame called (a Task's coroutine): C raises it again
    assert _raised_again(frame, exc)
    frame.run.left = ((id(exc), id(head), id(frame)),)
    assert not _raised_again(frame, exc)
