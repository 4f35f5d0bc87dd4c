"""Numbers of the computation formatted into text stay names (jitcore/jit/texts.py, proxies/text.py).

``print(f"loss {loss.item():.4f}")``, ``logger.info("loss %.4f", loss.item())`` and text stored into
state used to read the number while tracing and guard it: each new loss was a new cache entry. Each
program runs eagerly and jitted on the same calls; what it printed, logged, stored and returned must
be equal call by call, with one trace where the text's characters are never needed.
"""

from __future__ import annotations

import enum
import io
import logging
import sys
import warnings
from typing import Any

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from jit_helpers import assert_same, assert_same_prints

import jitcore
from jitcore.jit.texts import format_percent
from jitcore.proxies.number import NumberProxy

CALLS = [(torch.tensor([0.5, -1.25, 2.0]) * (i + 1),) for i in range(4)]


def test_f_string_fields_of_read_numbers_are_made_per_call() -> None:
    def f(x):
        loss = (x * x).mean()
        print(f"loss {loss.item():.4f} | {x.max().item()!r:>22} | {loss.item():+08.2e}|"
              f"{x.sum().item()!s:^12}")
        return loss

    assert_same_prints(f, CALLS)


def test_format_str_format_str_and_repr_of_read_numbers() -> None:
    def f(x):
        m = x.mean().item()
        print("m=" + str(m) + " r=" + repr(m), format(m, ".3f"), f"{m:>9.3e}|{m}|{m}", f"{m}-{m!r}")
        return x * 2

    assert_same_prints(f, CALLS)


def test_percent_formatting_of_read_numbers() -> None:
    def f(x):
        total = x.sum().item()
        print("sum %.3f (%5.1f%%) of %d: %s" % (total, total * 10, x.numel(), total))
        print("alone %+.2e" % total)
        return x - 1

    assert_same_prints(f, CALLS)


def test_a_zero_dim_tensor_formatted_in_an_f_string() -> None:
    """``f"{loss:.4f}"``: ``Tensor.__format__`` formats ``loss.item()``, whose text stays deferred."""

    def f(x):
        loss = x.abs().sum()
        print(f"loss {loss:.4f}")
        return loss

    assert_same_prints(f, CALLS)


class Meter:
    def __init__(self, value: float) -> None:
        self.value = value

    def __str__(self) -> str:
        return f"Meter({self.value:.2f})"


def test_a_str_method_returning_text_of_a_read_number() -> None:
    def f(x):
        print(Meter(x.max().item()), "and", str(Meter(x.min().item())))
        return x

    assert_same_prints(f, CALLS)


def test_log_records_with_read_numbers_are_written_per_call() -> None:
    """logging formats ``msg % args`` and then ``fmt % record.__dict__``; the handler's write is replayed."""
    logger = logging.getLogger("jitcore.tests.texts")
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)

    def f(x):
        loss = (x * x).sum()
        logger.warning("loss %.4f over %d", loss.item(), x.numel())
        logger.warning(f"max {x.max().item():.3f}")
        return loss

    try:
        assert_same_prints(f, CALLS, before=lambda: handler.setStream(sys.stderr))
    finally:
        logger.removeHandler(handler)


class Recorder:
    """A user's metrics writer holding the stream it writes to."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def log(self, name: str, value: float) -> None:
        self.stream.write(f"{name}: {value:.3f}\n")
        self.stream.flush()


def test_prints_and_writes_to_streams_of_the_caller() -> None:
    """``print(..., file=f)`` to a stream the function is passed, and writes to a stream reached through
    an object it is passed: on every call, to the stream each call reaches (the print ran eagerly,
    and the write happened while tracing only)."""

    def f(x, stream, recorder):
        loss = x.abs().sum()
        print("loss", f"{loss.item():.3f}", sep="=", file=stream, flush=True)
        recorder.log("max", x.max().item())
        return loss

    results = {}
    for mode in ("eager", "jit"):
        fn = f if mode == "eager" else jitcore.jit(f)
        streams = [(io.StringIO(), io.StringIO()) for _ in CALLS]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # traced: no eager entry
            outputs = [fn(x, a, Recorder(b)) for (x,), (a, b) in zip(CALLS, streams)]
        results[mode] = ([(a.getvalue(), b.getvalue()) for a, b in streams], outputs)
        if mode == "jit":
            assert (jitcore.cache_misses(fn), jitcore.cache_hits(fn)) == (1, len(CALLS) - 1)
    assert results["jit"][0] == results["eager"][0]
    assert_same(results["jit"][1], results["eager"][1])


def test_direct_writes_of_text() -> None:
    def f(x):
        sys.stdout.write(f"{x.sum().item():.2f}\n")
        return x

    assert_same_prints(f, CALLS)


def test_the_length_written_is_the_texts_when_the_program_reads_it() -> None:
    """``n = write(text)``: the result needs the characters; the number is checked (a new entry when
    the text's length changes), never stale."""

    def f(x):
        n = sys.stdout.write(f"{x.sum().item():.2f}\n")
        return x * n

    assert_same_prints(f, CALLS, misses=4)


def test_uses_that_need_the_characters_read_the_number() -> None:
    """Comparing, measuring or indexing the text needs its characters: the number is then checked on
    every call, so a call with another value traces again (never a stale answer)."""

    def f(x):
        text = f"{x.sum().item():.1f}"
        return x * len(text) if text.startswith("-") or text == "1.2" else x + len(text)

    assert_same_prints(f, CALLS, misses=4)


def test_text_is_a_str_to_the_program() -> None:
    def f(x):
        text = f"{x.sum().item():.3f}"
        both = text + "!"
        return x * 2, type(text) is str, isinstance(both, str), text.__class__ is str

    assert_same_prints(f, CALLS)


class History:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.last: dict[str, Any] = {"text": ""}


def test_text_stored_into_state_and_returned_is_a_str_of_each_call() -> None:
    eager, jitted = History(), History()

    def f(x, history):
        text = f"sum {x.sum().item():.3f}"
        history.lines.append(text)
        history.last["text"] = "last " + text
        return x + 1, {"text": text, "pair": (text, 1)}

    jf = jitcore.jit(f)
    for (x,) in CALLS:
        assert_same(jf(x, jitted), f(x, eager))
    assert jitted.lines == eager.lines and jitted.last == eager.last
    assert all(type(s) is str for s in [*jitted.lines, *jitted.last.values()])
    assert jitcore.cache_misses(jf) == 1


def test_text_used_as_a_key_is_a_str_key() -> None:
    """A dict key is hashed (its characters are read); the key the caller finds is a str."""
    eager, jitted = History(), History()

    def f(x, history):
        history.last[f"k{x.sum().item():.0f}"] = 1
        return {f"{x.max().item():.1f}": x}

    jf = jitcore.jit(f)
    for (x,) in CALLS:
        got, want = jf(x, jitted), f(x, eager)
        assert_same(got, want)
        assert all(type(k) is str for k in got)
    assert jitted.last == eager.last and all(type(k) is str for k in jitted.last)


def test_dynamic_numbers_formatted() -> None:
    def f(x, step):
        print(f"step {step:>4}", "lr %.1e" % (0.1 / step))
        return x * step

    assert_same_prints(f, [(CALLS[0][0], i) for i in range(1, 5)], dynamic_numbers=("step",))


_SPECS = st.builds(
    lambda flags, width, precision, kind: f"%{flags}{width}{precision}{kind}",
    st.sampled_from(["", "-", "+", " ", "0", "#", "-0", "+0", " 0", "#0", "-+"]),
    st.sampled_from(["", "1", "8", "12"]),
    st.sampled_from(["", ".", ".0", ".3", ".10"]),
    st.sampled_from(list("diouxXeEfFgGsrac")),
)
_NUMBERS = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=400, deadline=None)
@given(spec=_SPECS, value=_NUMBERS)
def test_percent_fields_make_the_text_python_makes(spec: str, value: float) -> None:
    """Each ``%`` conversion of a number left deferred makes, from the number's value, exactly what
    Python's ``%`` makes (or is left to Python, never different)."""
    template = f"<{spec}> %% [{spec}]"
    try:
        expected: Any = template % (value, value)
    except (TypeError, ValueError, OverflowError) as exc:
        expected = type(exc)
    text = format_percent(template, (NumberProxy("n", value), NumberProxy("m", value)))
    if text is NotImplemented:
        return
    try:
        got: Any = text.text_of([value, value])
    except (TypeError, ValueError, OverflowError) as exc:
        got = type(exc)
    assert got == expected


@pytest.mark.parametrize("template, values", [
    ("%s %s", (1,)), ("%s", (1, 2)), ("%(a)s", (1,)), ("%*d", (3, 4)), ("%c", (65,)), ("%.3d", (5,)),
    ("%d", (2.5,)),
])
def test_percent_formats_left_to_python(template: str, values: tuple) -> None:
    """Where Python raises, or a conversion's text is not ``format``'s, the whole ``%`` is Python's."""
    numbers = tuple(NumberProxy("n", v) for v in values)
    assert format_percent(template, numbers) is NotImplemented


def test_nothing_deferred_without_numbers_of_the_computation() -> None:
    assert format_percent("%s and %d", ("a", 2)) is NotImplemented
    out = io.StringIO()
    print("plain %s" % "text", file=out)
    assert out.getvalue() == "plain text\n"


def _type_named(n: int) -> str:
    return type(f"C{n}", (), {}).__name__


def test_a_class_made_with_a_name_from_a_number_as_eager() -> None:
    # type(f"C{n}", (), {}) raised TypeError under the jit (the jit's text for the name reached C)
    jfn = jitcore.jit(_type_named)
    for n in (1, 2, 3):
        assert jfn(n) == _type_named(n)


class _Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class _Kind(enum.IntFlag):
    A = 1
    B = 2


def test_str_of_an_int_enum_is_ints_text() -> None:
    """An IntEnum's ``__str__`` is ``int.__repr__`` (C) and its ``__repr__`` Enum's (Python):
    ``str(member)`` was taken for ``repr`` interpreted, whose C ``str`` call came back to the jit's
    ``str`` without end (RecursionError; 15 of CPython's test_enum tests jitted)."""

    def f(x):
        texts = (str(_Level.HIGH), repr(_Level.LOW), f"{_Level.LOW}", str(_Kind.A | _Kind.B),
                 format(_Level.HIGH))
        return x + len("".join(texts)), texts

    assert_same(jitcore.jit(f)(torch.ones(2)), f(torch.ones(2)))
