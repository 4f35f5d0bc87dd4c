"""Semantics found different by the differential probes of issue 14 (2026-12-07, cpy51), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys

import torch

import jitcore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_pickle_dump_writes_the_file_once_and_not_at_all_when_refused() -> None:
    """``pickle.dump(obj, file)`` is C's: one ``file.write(bytes)`` at the end, nothing written where the
    pickling is refused part-way, the protocol checked before ``file.write`` is looked up (Note [pickle.dump
    writes the file once]). Interpreted, the Python pickler wrote opcode by opcode: a refused graph left
    116 bytes (protocol 0), 56 (2) or 2 (4) in the file (/tmp/cpy50-probes/pkfile.py), and a counting file
    saw dozens of writes; a str protocol was the Python pickler's "'<' not supported" TypeError."""

    def f() -> list[object]:
        import io
        import pickle

        class Holder:
            def __init__(self, refused: bool) -> None:
                self.a = [1, 2, 3]
                self.f = (lambda: 1) if refused else "text"

        class Counting:
            def __init__(self) -> None:
                self.writes: list[tuple[str, int]] = []

            def write(self, data: object) -> int:
                self.writes.append((type(data).__name__, len(data)))
                return 0

        class LooksUp:
            def __getattr__(self, name: str) -> object:
                out.append(("looked up", name))
                raise AttributeError(name)

        out: list[object] = []
        for protocol in (0, 2, 4, 5):
            for refused in (True, False):
                file, counting = io.BytesIO(), Counting()
                for target in (file, counting):
                    try:
                        out.append(pickle.dump(Holder(refused), target, protocol))
                    except Exception as e:
                        out.append((type(e).__name__, str(e)))
                out.append((protocol, refused, file.getvalue(), counting.writes))
        for args in ((LooksUp(),), (LooksUp(), 9), (None,), (io.BytesIO(), "x")):
            try:
                pickle.dump(Holder(True), *args)
            except Exception as e:
                out.append((type(e).__name__, str(e), e.__context__))
        try:
            pickle.dumps(Holder(False), "x")
        except Exception as e:
            out.append((type(e).__name__, str(e)))
        file = io.BytesIO()
        pickle.dump(obj=Holder(False), file=file, protocol=2)
        out.append(pickle.loads(file.getvalue()).f)
        out.append(pickle.loads(pickle.dumps(obj=Holder(False))).a)
        return out

    check(f)


class _Store(dict):
    """A dict subclass at module level: its ``__setitem__`` is the caller's state, replaced between calls."""

    def __setitem__(self, key: object, value: object) -> None:
        dict.__setitem__(self, key, ("stored", value))


def test_a_class_the_jitted_function_defines_is_its_own_on_every_call() -> None:
    """A dict subclass the jitted function defines, whose ``__setitem__`` appends to the function's own
    list: ``n['a'] = 1`` found ``__setitem__`` on the class (a special method), which pinned the class as
    state and the list in its closure with it, so every cached call replayed the append on the pass's list
    and returned that one list: 1, 2, 3 items over three calls where eager returns 1 each time (Note [A class
    the program made is its own], /tmp/cpy51-probes/prep_jit2.py). The same through a metaclass's
    ``__prepare__`` namespace. A base class of the caller's is still pinned: its ``__setitem__`` replaced
    between calls is seen."""

    def appended(x: torch.Tensor) -> tuple:
        log: list[str] = []

        class Ns(dict):
            def __setitem__(self, key: str, value: object) -> None:
                log.append(key)
                dict.__setitem__(self, key, value)

        n = Ns()
        n["a"] = 1
        return x + 1, log

    def prepared(x: torch.Tensor) -> tuple:
        log: list[str] = []

        class Meta(type):
            @classmethod
            def __prepare__(mcls, name: str, bases: tuple, **kw: object) -> dict:
                class Namespace(dict):
                    def __setitem__(self, key: str, value: object) -> None:
                        log.append(key)
                        dict.__setitem__(self, key, value)

                return Namespace()

        class C(metaclass=Meta):
            x = 1

        return x * 2, log

    def based(x: torch.Tensor) -> tuple:
        class Mine(_Store):
            pass

        n = Mine()
        n["a"] = 1
        return x - 1, dict(n)

    original = _Store.__setitem__
    try:
        for fn in (appended, prepared, based):
            jitted = jitcore.jit(fn)
            outs = []
            for call in range(3):
                if fn is based and call == 2:
                    _Store.__setitem__ = lambda self, key, value: dict.__setitem__(self, key, ("new", value))
                eager = fn(torch.ones(2))
                out = jitted(torch.ones(2))
                assert out[1] == eager[1], (fn.__name__, call)
                assert torch.equal(out[0], eager[0])
                outs.append(out[1])
            assert len({id(out) for out in outs}) == 3
    finally:
        _Store.__setitem__ = original
    assert outs == [{"a": ("stored", 1)}, {"a": ("stored", 1)}, {"a": ("new", 1)}]
    assert jitcore.cache_misses(jitted) == 2  # the replaced base method: traced again


_SPECIAL_USES = {  # a special method of a class the function defines, and a use that finds it on the class
    "__add__": ("def __add__(self, other): log.append('add'); return 1", "o + 1"),
    "__len__": ("def __len__(self): log.append('len'); return 1", "len(o)"),
    "__call__": ("def __call__(self): log.append('call')", "o()"),
    "__getattr__": ("def __getattr__(self, name): log.append(name); return 1", "o.missing"),
    "__iter__": ("def __iter__(self): log.append('iter'); return iter([1])", "list(o)"),
    "__init__": ("def __init__(self): log.append('init')", "o"),
    "__format__": ("def __format__(self, spec): log.append('format'); return 'F'", "f'{o}'"),
}


def test_special_methods_of_a_class_the_jitted_function_defines_run_on_every_call() -> None:
    """The same (Note [A class the program made is its own]) for the other protocols that find their method
    on the class: before, every cached call returned the pass's log with one more entry
    (/tmp/cpy51-probes/typelookup.snip: 23 of 27 protocols differed under jitcore.jit, 0 after)."""
    for method, (definition, use) in _SPECIAL_USES.items():
        namespace: dict = {"torch": torch, "__name__": __name__}
        exec(f"def make():\n    log = []\n    class C:\n        {definition}\n    o = C()\n    {use}\n"
             "    return log\ndef f(x):\n    return x + 1, make()\n", namespace)
        fn, jitted = namespace["f"], jitcore.jit(namespace["f"])
        outs = [jitted(torch.ones(2))[1] for _ in range(3)]
        assert outs == [fn(torch.ones(2))[1]] * 3, method
        assert jitcore.cache_misses(jitted) == 1, method


def test_a_callable_hashed_by_python_is_not_hashed_to_be_called() -> None:
    """Calling a ``MagicMock`` (or a callable whose class has a Python ``__hash__``) hashes nothing, as
    CPython: the interpreter hashed it to look for a lookaside, which recorded ``call.__hash__()`` in the
    mock's ``mock_calls`` (and ran the class's ``__hash__``) (Note [A callable hashed by Python is looked up
    by identity], calls.py; test_httplib's ``test_tunnel_connect_single_send_connection_setup``,
    /tmp/cpy52-probes/p6_mock.py)."""

    def f() -> list[object]:
        from unittest import mock

        hashed: list[str] = []

        class Conn:
            def send(self, data: bytes, flag: int = 0) -> None:
                pass

            def go(self) -> None:
                self.send(b"abc")
                self.send(b"x", flag=1)

        class Hashed:
            def __hash__(self) -> int:
                hashed.append("hash")
                return 1

            def __call__(self, v: int) -> int:
                return v + 1

        conn = Conn()
        with mock.patch.object(conn, "send") as send:
            conn.go()
        m = mock.MagicMock()
        m(1, 2, k=3)
        sent = [tuple(c) for c in send.mock_calls]
        return [sent, send.mock_calls[0][1][0], [tuple(c) for c in m.mock_calls], Hashed()(1), hashed]

    check(f)
