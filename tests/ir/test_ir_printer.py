"""Printed traces, checked against inline expected text."""

from __future__ import annotations

import collections
import linecache
import math
import textwrap
import tokenize
from io import BytesIO

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_helpers import exec_printed, trace_fn

from jitcore.ir import BoundSymbol, SourceFrame, Symbol, Trace, print_trace, walk
from jitcore.ir.printer import escape_comment


def expect(trace: Trace, text: str, **options: object) -> None:
    assert print_trace(trace, **options).source == textwrap.dedent(text).lstrip("\n")


def test_header_inputs_and_one_line_per_bound_symbol() -> None:
    trace = trace_fn(
        lambda x: (torch.sin(x) + x.T, x.add_(1)), torch.randn(4, 4), header=["Constructed by a test"]
    )
    expect(
        trace,
        """
        # Constructed by a test
        import torch

        def computation(x):
          # x: "cpu f32[4, 4]"
          t0 = torch.sin(x)  # t0: "cpu f32[4, 4]"
          t1 = torch.Tensor.T.__get__(x)  # t1: "cpu f32[4, 4]"
          t2 = torch.add(t0, t1)  # t2: "cpu f32[4, 4]"
          del t0, t1
          x = torch.Tensor.add_(x, 1)  # x: "cpu f32[4, 4]"
          return (t2, x)
        """,
    )
    assert str(trace) == print_trace(trace).source


def test_several_inputs_dtypes_and_in_place_ops() -> None:
    def f(x, y):
        x.mul_(2)
        y[0] = 1
        return x.to(torch.float64).sub_(y)

    trace = trace_fn(f, torch.randn(2, 3), torch.ones(3, dtype=torch.int32))
    expect(
        trace,
        """
        import torch

        def computation(x, y):
          # x: "cpu f32[2, 3]"
          # y: "cpu i32[3]"
          x = torch.Tensor.mul_(x, 2)  # x: "cpu f32[2, 3]"
          torch.Tensor.__setitem__(y, 0, 1)
          t0 = torch.Tensor.to(x, torch.float64)  # t0: "cpu f64[2, 3]"
          t0 = torch.Tensor.sub_(t0, y)  # t0: "cpu f64[2, 3]"
          return t0
        """,
    )


def test_tuple_list_structseq_and_number_outputs() -> None:
    def f(x):
        return [torch.max(x, 0), x.chunk(2), x.shape[0] * 2, x.shape, [x.unbind(1)[0]]]

    trace = trace_fn(f, torch.randn(4, 2))
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[4, 2]"
          (t0, t1) = torch.max(x, 0)  # t0: "cpu f32[2]", t1: "cpu i64[2]"
          (t2, t3) = torch.chunk(x, 2)  # t2: "cpu f32[2, 2]", t3: "cpu f32[2, 2]"
          (t4, t5) = torch.unbind(x, 1)  # t4: "cpu f32[4]", t5: "cpu f32[4]"
          del t5
          return [torch.return_types.max((t0, t1)), (t2, t3), 8, torch.Size([4, 2]), [t4]]
        """,
    )
    assert print_trace(trace).constants == {}


def test_list_output_of_a_symbol_binds_a_list_target() -> None:
    def meta(a):
        return [torch.neg(a), 3, torch.abs(a)]

    sym = Symbol("test.pair", "pair", "test", fn=lambda a: [-a, 3, a.abs()], path=None, meta=meta)
    trace = trace_fn(lambda x: sym(x), torch.randn(2))
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[2]"
          [t0, _, t1] = __c0(x)  # t0: "cpu f32[2]", t1: "cpu f32[2]"
            # t0 = torch.neg(x)  # t0: "cpu f32[2]"
            # t1 = torch.abs(x)  # t1: "cpu f32[2]"
          return [t0, 3, t1]
        """,
    )


def test_subsymbols_print_as_comments_indented_under_their_parent() -> None:
    def sin2(a):
        return torch.mul(torch.sin(a), 2)

    inner = Symbol("test.sin2", "sin2", "test", fn=sin2, path=None, meta=sin2)
    outer = Symbol(
        "test.outer",
        "outer",
        "test",
        fn=lambda a: sin2(a).relu(),
        path=None,
        meta=lambda a: torch.relu(inner(a)),
    )
    trace = trace_fn(lambda x: outer(x).cos(), torch.randn(3))
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[3]"
          t2 = __c0(x)  # t2: "cpu f32[3]"
            # t1 = __c1(x)  # t1: "cpu f32[3]"
              # t0 = torch.sin(x)  # t0: "cpu f32[3]"
              # t1 = torch.mul(t0, 2)  # t1: "cpu f32[3]"
            # t2 = torch.relu(t1)  # t2: "cpu f32[3]"
          t3 = torch.cos(t2)  # t3: "cpu f32[3]"
          del t2
          return t3
        """,
    )
    [top, _] = trace.bound_symbols
    assert [s.symbol.id for s in top.subsymbols] == ["test.sin2", "torch.relu"]
    assert [(depth, b.symbol.id) for depth, b in walk(trace.bound_symbols)] == [
        (0, "test.outer"), (1, "test.sin2"), (2, "torch.sin"), (2, "torch.mul"), (1, "torch.relu"),
        (0, "torch.cos"),
    ]  # fmt: skip
    x = torch.randn(3)
    torch.testing.assert_close(exec_printed(trace)(x), (torch.sin(x) * 2).relu().cos())


def test_directly_constructed_bound_symbols_and_headers() -> None:
    trace = trace_fn(lambda x: torch.neg(x), torch.randn(2))
    [neg] = trace.bound_symbols
    relu = Symbol("torch.relu", "relu", "torch", fn=torch.relu, path="torch.relu", meta=torch.relu)
    trace.bound_symbols = [
        BoundSymbol(
            neg.symbol,
            neg.args,
            neg.kwargs,
            neg.output,
            subsymbols=(BoundSymbol(relu, neg.args, {}, neg.output),),
            header="resolved by MySubclass.__torch_dispatch__\nsecond line",
        )
    ]
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[2]"
          # resolved by MySubclass.__torch_dispatch__\\nsecond line
          t0 = torch.neg(x)  # t0: "cpu f32[2]"
            # t0 = torch.relu(x)  # t0: "cpu f32[2]"
          return t0
        """,
    )


USER_FILE = "<user-code-for-printer-tests>"
USER_SOURCE = "def f(x):\n    y = x.sin()\n    return y.cos() + 1\n"


@pytest.fixture
def user_file():
    linecache.cache[USER_FILE] = (len(USER_SOURCE), None, USER_SOURCE.splitlines(True), USER_FILE)
    yield USER_FILE
    linecache.cache.pop(USER_FILE, None)


def test_source_lines_above_groups_of_ops(user_file: str) -> None:
    outer = SourceFrame(user_file, 1, "f")
    frames = {"y": (outer, SourceFrame(user_file, 2, "f")), "ret": (outer, SourceFrame(user_file, 3, "f"))}
    current = ["y"]

    def f(x):
        y = x.sin()
        current[0] = "ret"
        return y.cos() + 1

    trace = trace_fn(f, torch.randn(3), source_provider=lambda: frames[current[0]])
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[3]"
          # <user-code-for-printer-tests>:2 in f: y = x.sin()
          t0 = torch.sin(x)  # t0: "cpu f32[3]"
          # <user-code-for-printer-tests>:3 in f: return y.cos() + 1
          t1 = torch.cos(t0)  # t1: "cpu f32[3]"
          del t0
          t2 = torch.add(t1, 1)  # t2: "cpu f32[3]"
          del t1
          return t2
        """,
        source="innermost",
    )
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[3]"
          # <user-code-for-printer-tests>:1 in f: def f(x):
          # <user-code-for-printer-tests>:2 in f: y = x.sin()
          t0 = torch.sin(x)  # t0: "cpu f32[3]"
          # <user-code-for-printer-tests>:1 in f: def f(x):
          # <user-code-for-printer-tests>:3 in f: return y.cos() + 1
          t1 = torch.cos(t0)  # t1: "cpu f32[3]"
          del t0
          t2 = torch.add(t1, 1)  # t2: "cpu f32[3]"
          del t1
          return t2
        """,
        source="full",
    )
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[3]"
          t0 = torch.sin(x)  # t0: "cpu f32[3]"
          t1 = torch.cos(t0)  # t1: "cpu f32[3]"
          del t0
          t2 = torch.add(t1, 1)  # t2: "cpu f32[3]"
          del t1
          return t2
        """,
        source=None,
    )


def test_source_line_of_a_missing_file_prints_the_location_only() -> None:
    frame = SourceFrame("<no-such-file>", 7, "g")
    trace = trace_fn(torch.neg, torch.randn(1), source_provider=lambda: (frame,))
    assert '  # <no-such-file>:7 in g\n  t0 = torch.neg(x)  # t0: "cpu f32[1]"\n' in str(trace)


def test_constants_that_print_as_literals() -> None:
    def f(x):
        y = x.to(torch.float64).to(device=torch.device("cpu"))[..., 1:3:2, None]
        y = y * float("nan") + float("-inf") - (-0.0) + complex(1, -0.0)
        z = x.clamp(min=-0.0, max=math.inf).view(torch.Size([16]))
        return y, z.to(memory_format=torch.contiguous_format), 'it\'s "quoted"\nand\r\u2028broken', b"\x00'"

    trace = trace_fn(f, torch.randn(4, 4))
    expect(
        trace,
        r"""
        import torch

        def computation(x):
          # x: "cpu f32[4, 4]"
          t0 = torch.Tensor.to(x, torch.float64)  # t0: "cpu f64[4, 4]"
          t0 = torch.Tensor.to(t0, device=torch.device('cpu'))  # t0: "cpu f64[4, 4]"
          t1 = torch.Tensor.__getitem__(t0, (Ellipsis, slice(1, 3, 2), None))  # t1: "cpu f64[4, 1, 1]"
          del t0
          t2 = torch.mul(t1, float('nan'))  # t2: "cpu f64[4, 1, 1]"
          del t1
          t3 = torch.add(t2, -float('inf'))  # t3: "cpu f64[4, 1, 1]"
          del t2
          t4 = torch.sub(t3, -0.0)  # t4: "cpu f64[4, 1, 1]"
          del t3
          t5 = torch.add(t4, complex(1.0, -0.0))  # t5: "cpu c128[4, 1, 1]"
          del t4
          t6 = torch.clamp(x, min=-0.0, max=float('inf'))  # t6: "cpu f32[4, 4]"
          t7 = torch.Tensor.view(t6, torch.Size([16]))  # t7: "cpu f32[16]"
          del t6
          t7 = torch.Tensor.to(t7, memory_format=torch.contiguous_format)  # t7: "cpu f32[16]"
          return (t5, t7, 'it\'s "quoted"\nand\r\u2028broken', b"\x00'")
        """,
    )
    assert print_trace(trace).constants == {}
    x = torch.randn(4, 4)
    assert_literals_round_trip(exec_printed(trace)(x.clone()), f(x.clone()))


def assert_literals_round_trip(actual: tuple, expected: tuple) -> None:
    torch.testing.assert_close(actual[0], expected[0], equal_nan=True)
    torch.testing.assert_close(actual[1], expected[1])
    assert actual[2:] == expected[2:]


def test_signed_zeros_and_special_floats_survive_printing() -> None:
    values = (-0.0, 0.0, math.inf, -math.inf, math.nan, complex(-0.0, math.inf), 1e300, 5e-324)
    trace = Trace(imports={"torch": torch})
    trace.output = values
    printed = exec_printed(trace)()
    assert [repr(v) for v in printed] == [repr(v) for v in values]
    assert math.copysign(1, printed[0]) == -1 and math.copysign(1, printed[5].real) == -1


def test_constants_without_a_literal_are_bound_by_reference() -> None:
    weight = torch.arange(4.0)  # a real tensor used by the program, not an input
    marker = object()

    def meta(a, w, tag):
        return torch.add(a, a)  # a real tensor does not mix with fake ones; its value is irrelevant here

    sym = Symbol("test.addw", "addw", "test", fn=lambda a, w, tag: a + w, path=None, meta=meta)
    trace = trace_fn(lambda x: (sym(x, weight, tag=marker), sym(x, weight, tag=marker)), torch.randn(4))
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[4]"
          t0 = __c0(x, __c1, tag=__c2)  # t0: "cpu f32[4]"
            # t0 = torch.add(x, x)  # t0: "cpu f32[4]"
          t1 = __c0(x, __c1, tag=__c2)  # t1: "cpu f32[4]"
            # t1 = torch.add(x, x)  # t1: "cpu f32[4]"
          return (t0, t1)
        """,
    )
    constants = print_trace(trace).constants
    assert list(constants) == ["__c0", "__c1", "__c2"]
    assert constants["__c1"] is weight and constants["__c2"] is marker


def test_keyword_arguments_that_are_not_identifiers_stay_strings() -> None:
    def meta(a, **kwargs):
        return torch.neg(a)

    sym = Symbol("test.kw", "kw", "test", fn=lambda a, **kwargs: -a, path=None, meta=meta)
    trace = trace_fn(
        lambda x: sym(x, **{"class": 1, "a=1) or print('boom') or (": 2, "ok": 3}), torch.randn(1)
    )
    assert "t0 = __c0(x, **{'class': 1}, **{\"a=1) or print('boom') or (\": 2}, ok=3)" in str(trace)


def test_header_lines_cannot_choose_the_source_encoding() -> None:
    trace = Trace(
        imports={"torch": torch}, header=["-*- coding: unicode_escape -*-", "vim: set fileencoding=rot13"]
    )
    source = str(trace)
    assert source.startswith("# -*- coding : unicode_escape -*-\n# vim: set fileencoding =rot13\n")
    assert tokenize.detect_encoding(BytesIO(source.encode()).readline)[0] == "utf-8"


def test_names_that_cannot_be_printed_are_rejected() -> None:
    trace = Trace(name="f(): pass\nimport os\ndef g")
    with pytest.raises(ValueError, match="cannot be printed as a Python name"):
        str(trace)
    trace = Trace(args=["*args", "**kwargs"])
    assert "def computation(*args, **kwargs):" in str(trace)
    for bad in (["x=__import__('os')"], ["***x"], [3]):
        with pytest.raises(ValueError):
            str(Trace(args=bad))
    with pytest.raises(ValueError, match="module name"):
        str(Trace(imports={"os; import sys": torch}))


def test_printing_does_not_change_the_trace() -> None:
    trace = trace_fn(lambda x: torch.max(x, 0), torch.randn(2, 2))
    before = (list(trace.bound_symbols), trace.output, list(trace.args))
    first = str(trace)
    assert str(trace) == first
    assert (list(trace.bound_symbols), trace.output, list(trace.args)) == before


def test_dead_values_are_deleted_after_their_last_use() -> None:
    def use(a, s, d=None):
        return torch.neg(a)

    sym = Symbol("test.use", "use", "test", fn=use, path=None, meta=use)

    def f(x):
        a, b, c = x.sin(), x.cos(), x.exp()
        _unused, _ = x.split(1)
        return sym(x, slice(a, None), d={b: c}), x

    trace = trace_fn(f, torch.randn(2))
    expect(
        trace,
        """
        import torch

        def computation(x):
          # x: "cpu f32[2]"
          t0 = torch.sin(x)  # t0: "cpu f32[2]"
          t1 = torch.cos(x)  # t1: "cpu f32[2]"
          t2 = torch.exp(x)  # t2: "cpu f32[2]"
          (t3, t4) = torch.split(x, 1)  # t3: "cpu f32[1]", t4: "cpu f32[1]"
          del t3, t4
          t5 = __c0(x, slice(t0, None, None), d={t1: t2})  # t5: "cpu f32[2]"
            # t5 = torch.neg(x)  # t5: "cpu f32[2]"
          del t0, t1, t2
          return (t5, x)
        """,
    )
    x = torch.randn(2)
    torch.testing.assert_close(exec_printed(trace)(x), (-x, x))


def test_values_without_a_repr_and_signed_nans() -> None:
    huge = 7**6000  # repr() refuses ints this long
    negative_nan = -math.nan
    trace = Trace(imports={"torch": torch})
    trace.output = (huge, -huge, 10**1000, negative_nan, complex(negative_nan, math.nan))
    printed = print_trace(trace)
    assert printed.source.endswith(
        "return (__c0, __c1, " + str(10**1000) + ", -float('nan'), complex(-float('nan'), float('nan')))\n"
    )
    result = exec_printed(trace)()
    assert result[:3] == (huge, -huge, 10**1000)
    assert math.copysign(1, result[3]) == -1 and math.copysign(1, result[4].real) == -1


def test_proxies_a_statement_cannot_bind_are_not_deleted() -> None:
    def pack(a):
        return {"neg": torch.neg(a)}

    sym = Symbol("test.pack", "pack", "test", fn=pack, path=None, meta=pack)
    trace = trace_fn(lambda x: (sym(x), x.sin())[1], torch.randn(2))
    assert "del" not in str(trace)  # t0 lives only inside a dict: no name to delete
    torch.testing.assert_close(exec_printed(trace)(torch.ones(2)), torch.ones(2).sin())


Pair = collections.namedtuple("Pair", ["first", "second"])


def test_tuple_types_not_reachable_from_the_imports_are_bound_by_reference() -> None:
    trace = trace_fn(lambda x: Pair(x.sin(), torch.max(x, 0)), torch.randn(2, 2))
    source = str(trace)
    assert source.endswith(
        "  return Pair(t0, torch.return_types.max((t1, t2)))\n"
    )  # a class: named after itself
    assert print_trace(trace).constants == {"Pair": Pair}
    result = exec_printed(trace)(torch.ones(2, 2))
    assert type(result) is Pair and type(result.second) is torch.return_types.max


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=40) | st.integers())
def test_a_comment_escapes_each_character_that_does_not_print(text: object) -> None:
    """``escape_comment`` skips its per-character pass for text that prints as it is (a speed path):
    the result is still the per-character definition, for any text (line breaks, U+2028, NUL, a
    non-breaking space, surrogates) and for non-strings."""
    expected = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in str(text))
    assert escape_comment(text) == expected
    assert "\n" not in escape_comment(text) and "\r" not in escape_comment(text)
