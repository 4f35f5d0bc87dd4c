"""Semantics found different by the differential probes of issue 14 (2026-12-06, cpy49), checked natively
against ``interpret`` on small programs of their own."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from interp_helpers import check


def test_a_called_pattern_that_is_not_a_class_says_so_in_the_versions_words() -> None:
    """``case P():`` with ``P`` not a class raises TypeError "called match pattern must be a type" on 3.11
    and "... must be a class" on 3.12+ (Note [The word for a called pattern's non-class]); interpreted, 3.11
    said "class"."""

    def f() -> list[str]:
        out = []
        for pattern in (3, "s", len, int):
            try:
                match 1:
                    case pattern():
                        out.append("matched")
            except TypeError as e:
                out.append(str(e))
        return out

    word = "type" if sys.version_info < (3, 12) else "class"
    assert check(f) == [f"called match pattern must be a {word}"] * 3 + ["matched"]

def test_a_frame_left_by_a_re_raise_ends_on_the_line_cpython_gives_it() -> None:
    """Once a frame is gone, its traceback entry's ``tb_frame.f_lineno`` is the line of the last instruction
    it ran, ``tb_lineno`` still the raise's: for a frame that ran a handler or a ``finally`` and left by
    re-raising, the line of the ``except`` clause that did not match, of the end of the ``finally`` (CPython's
    RERAISE sets ``f_lasti`` back to the instruction that raised into a cleanup handler), None after an
    ``except*`` (Note [A frame's last line]). Interpreted, f_lineno was the raise's line in all of them (15 of
    24 probes differed: /tmp/cpy49-probes/flineno.snip)."""

    def f() -> list[object]:
        import contextlib

        def other_except():
            try:
                _ = 1 / 0
            except TypeError:
                pass

        def finally_two_lines():
            try:
                _ = 1 / 0
            finally:
                _ = 1
                _ = 2

        def nested_except():
            try:
                try:
                    _ = 1 / 0
                except KeyError:
                    pass
            except TypeError:
                pass

        def raise_in_named_except():
            try:
                _ = 1 / 0
            except Exception:
                _ = 1 / 0
                _ = 1

        def bare_reraise():
            try:
                _ = 1 / 0
            except ZeroDivisionError:
                _ = 1
                raise

        def in_with():
            with contextlib.nullcontext():
                _ = 1
                _ = 1 / 0

        def callee():
            raise ValueError

        def calls_in_try():
            try:
                callee()
            finally:
                _ = 1

        def gen():
            try:
                yield 1
                _ = 1 / 0
            finally:
                _ = 1

        def except_star():
            try:
                raise ExceptionGroup("e", [ValueError(), KeyError()])
            except* ValueError:
                pass

        out = []
        programs = (other_except, finally_two_lines, nested_except, raise_in_named_except, bare_reraise,
                    in_with, calls_in_try, lambda: list(gen()), except_star)
        for g in programs:
            try:
                g()
            except BaseException as e:  # noqa: BLE001 - its traceback is compared
                tb = e.__traceback__.tb_next  # (this frame's entry: a live frame's line moves on)
            lines = []
            while tb is not None:
                frame = tb.tb_frame
                first = frame.f_code.co_firstlineno
                lines.append((frame.f_code.co_name, tb.tb_lineno - first,
                              None if frame.f_lineno is None else frame.f_lineno - first))
                tb = tb.tb_next
            out.append(lines)
        return out

    check(f)
