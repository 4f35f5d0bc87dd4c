"""Semantics found different by the differential probes of issue 14 (2026-12-06, cpy48), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def _raised(call: object) -> tuple[str, str, str | None, str | None] | None:
    try:
        call()
    except Exception as e:  # noqa: BLE001 - what is raised is compared
        context = e.__context__
        return (type(e).__name__, str(e), type(context).__name__ if context else None,
                str(context) if context else None)
    return None


def test_a_type_error_of_iter_is_replaced_by_the_c_callers_own() -> None:
    """``"".join(x)``, ``b"".join(x)``, ``bytearray().join(x)``, ``bytes(x)``, ``bytearray(x)``,
    ``functools.reduce(f, x)`` and ``item in x`` (no ``__contains__``) clear the TypeError of ``iter(x)`` and
    raise their own ("can only join an iterable", "cannot convert 'C' object to bytes", ...), not chained to
    it but to the handled exception (Note [A TypeError of iter() replaced by the caller's]). Interpreted, the
    TypeError of a Python ``__iter__`` (raised, or a non-iterator returned) propagated as it was, and
    ``"".join(1)`` said "'int' object is not iterable". A TypeError from a step of the iterator, and any
    other exception of ``__iter__``, propagate unchanged."""

    def f() -> list[object]:
        class Raises:
            def __iter__(self):
                raise TypeError("from __iter__")

        class NotAnIterator:
            def __iter__(self):
                return 5

        class StepRaises:
            def __iter__(self):
                return self

            def __next__(self):
                raise TypeError("from __next__")

        class OtherError:
            def __iter__(self):
                raise KeyError("from __iter__")

        calls = [
            lambda x: "".join(x), lambda x: b"".join(x), lambda x: bytearray().join(x), bytes, bytearray,
            lambda x: functools.reduce(max, x), lambda x: 1 in x,
        ]
        out: list[object] = []
        for x in (1, Raises(), NotAnIterator(), StepRaises(), OtherError()):
            for c in calls:
                out.append(_raised(lambda c=c, x=x: c(x)))
                try:
                    raise LookupError("handled")
                except LookupError:
                    out.append(_raised(lambda c=c, x=x: c(x)))
        return out

    assert check(f)[:2] == [("TypeError", "can only join an iterable", None, None),
                            ("TypeError", "can only join an iterable", "LookupError", "handled")]


def test_a_mapping_unpacked_by_double_star_is_merged_as_cpython_merges_it() -> None:
    """``f(**m)``, ``{**m}``, ``dict(m)`` and ``d.update(m)`` of a mapping with a Python ``keys()`` and
    ``__getitem__`` (Note [A mapping merged as CPython merges it]): an AttributeError they raise becomes
    "argument after ** must be a mapping" (a call) or "'C' object is not a mapping" (a display); a ``keys()``
    answering a non-iterable raises "C.keys() returned a non-iterable (type int)"; the keys are listed
    before any value is read, and a duplicate keyword is refused before its value is read; on 3.12 and
    later a KeyError of one argument becomes "got multiple values for keyword argument" (3.11: it
    propagates, and a duplicate, of a dict too, raises ``KeyError(key)`` inside an ``except`` block).
    Interpreted, the AttributeError and the KeyError propagated, the non-iterable said "'int' object is not
    iterable", and the values were read as the keys were stepped."""

    def f() -> list[object]:
        log: list[str] = []

        def mapping(keys_answer: object, on_get: type[BaseException] | None = None) -> object:
            class M:
                def keys(self):
                    if isinstance(keys_answer, type):
                        raise keys_answer("from keys")
                    return keys_answer

                def __getitem__(self, key):
                    log.append(f"get {key}")
                    if on_get is not None:
                        raise on_get("from __getitem__")
                    return key * 2

            return M()

        def keys_stepped():
            for key in ("a", "b"):
                log.append(f"key {key}")
                yield key

        def g(*args, **kwargs):
            return kwargs

        ms = [mapping(AttributeError), mapping(KeyError), mapping(TypeError), mapping(["a"], AttributeError),
              mapping(["a"], KeyError), mapping(5), mapping(["a", "a"]), mapping(["b"]),
              mapping(keys_stepped()), {"a": 3}]
        out: list[object] = []
        for m in ms:
            for use in (lambda m: g(**m), lambda m: g(a=1, **m), lambda m: {**m}, dict,
                        lambda m: {}.update(m), lambda m: dict(**m)):
                out.append(_raised(lambda use=use, m=m: use(m)))
                try:
                    raise LookupError("handled")
                except LookupError:
                    out.append(_raised(lambda use=use, m=m: use(m)))
        return [out, log]

    check(f)
