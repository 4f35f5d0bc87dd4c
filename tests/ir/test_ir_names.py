"""Names are unique and safe; user text reaches printed traces only as literals or comments.

The injection tests place code in every spot user-controlled text can reach (input names,
constants, keyword names, headers, source lines, file and function names) and prove with a sentinel
that nothing ran: a smuggled statement would set ``builtins.jitcore_smuggled``.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import linecache
import runpy
import tokenize
from io import BytesIO
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ir_helpers import exec_printed, trace_fn

from jitcore.ir import NameGenerator, SourceFrame, Symbol, Trace, compile_trace, print_trace
from jitcore.ir.names import RESERVED_NAMES

SENTINEL = "jitcore_smuggled"
RUN = f"__import__('builtins').{SENTINEL} = True"
PAYLOADS = [
    f"\n{RUN}",
    f"\r{RUN}",
    f"\r\n{RUN}",
    f"\u2028{RUN}",
    f"\u2029{RUN}",
    f"\x0b{RUN}",
    f"\x0c{RUN}",
    f"\x85{RUN}",
    f"\x00{RUN}",
    f"'; {RUN}; '",
    f'"; {RUN}; "',
    f"'''\n{RUN}\n'''",
    f'"""\n{RUN}\n"""',
    f"\\\n{RUN}",
    f"x) or {RUN} or (x",
    f"\\u000a{RUN}",
    f"# -*- coding: unicode_escape -*-\\u000a{RUN}",
    "\ud800 lone surrogate",
]


def assert_nothing_ran() -> None:
    assert not hasattr(builtins, SENTINEL), "smuggled code ran"


def assert_inert(source: str) -> None:
    """``source`` is imports plus one function of plain statements; the payload is only ever text."""
    # Only "\n" ends a line, so linecache (str.splitlines) and the compiler number lines alike.
    assert source.splitlines() == source.split("\n")[:-1]
    module = ast.parse(source)
    *imports, function = module.body
    assert all(isinstance(node, ast.Import) for node in imports)
    assert isinstance(function, ast.FunctionDef)
    for node in ast.walk(module):
        assert not (isinstance(node, ast.Attribute) and node.attr == SENTINEL)
        assert not isinstance(node, (ast.Import, ast.ImportFrom)) or node in imports
    assert tokenize.detect_encoding(BytesIO(source.encode("utf-8", "surrogatepass")).readline)[0] == "utf-8"


def run_everywhere(trace: Trace, *args: torch.Tensor, tmp_path: Path | None = None) -> list:
    """Run ``trace`` printed+exec'd, compiled, and (with ``tmp_path``) saved to a file and run from it."""
    printed = print_trace(trace, source="full")
    assert_inert(printed.source)
    results = [exec_printed(trace, source="full")(*args), compile_trace(trace)(*args)]
    if tmp_path is not None:
        path = tmp_path / "trace.py"
        path.write_text(printed.source, encoding="utf-8")
        namespace = runpy.run_path(str(path), init_globals=dict(printed.constants))
        results.append(namespace[trace.name](*args))
    assert_nothing_ran()
    return results


# --- names -----------------------------------------------------------------------------------------

HOSTILE_NAMES = [
    "torch",
    "len",
    "print",
    "class",
    "x y",
    "ﬁeld",
    "__c0",
    "t0",
    "1abc",
    "_",
    "",
    "match",
    "__",
]


def test_hostile_input_names_are_sanitised() -> None:
    names = NameGenerator()
    claimed = [names.claim(n) for n in HOSTILE_NAMES]
    assert claimed == [
        "torch_0", "len_0", "print_0", "class_0", "x_y", "field", "c0_0", "t0", "_1abc", "v0", "v", "match_0",
        "v1",
    ]  # fmt: skip
    assert names.fresh() == "t1"  # t0 was claimed by an input


def test_hostile_input_names_run() -> None:
    inputs = [torch.full((2,), float(i)) for i in range(len(HOSTILE_NAMES))]

    def f(*xs):
        total = xs[0]
        for x in xs[1:]:
            total = torch.add(total, x)
        return total, len(xs), print

    trace = trace_fn(f, *inputs, names=HOSTILE_NAMES)
    source = str(trace)
    assert source.splitlines()[2].startswith("def computation(torch_0, len_0, print_0, class_0, x_y, field,")
    for result in run_everywhere(trace, *inputs):
        torch.testing.assert_close(result[0], torch.full((2,), float(sum(range(len(inputs))))))
        assert result[1:] == (len(inputs), print)


def test_imported_module_names_are_reserved() -> None:
    import math

    trace = Trace(imports={"torch": torch, "math": math})
    assert trace.names.claim("math") == "math_0"
    assert trace.names.fresh("math") == "math0"


def test_fresh_and_claimed_names_interleave_without_collisions() -> None:
    names = NameGenerator()
    got = [
        names.fresh(),
        names.claim("t1"),
        names.fresh(),
        names.claim("t2"),
        names.claim("t3"),
        names.fresh(),
    ]
    assert got == ["t0", "t1", "t2", "t2_0", "t3", "t4"]


@settings(max_examples=200, deadline=None)
@given(
    hints=st.lists(st.text(), max_size=20),
    fresh=st.lists(st.sampled_from(["t", "v", "a_", "len"]), max_size=5),
)
def test_names_are_unique_ascii_identifiers_that_shadow_nothing(hints: list[str], fresh: list[str]) -> None:
    names = NameGenerator()
    got = [names.claim(h) for h in hints] + [names.fresh(p) for p in fresh]
    assert len(set(got)) == len(got)
    for name in got:
        assert name.isascii() and name.isidentifier(), name
        assert not keyword.iskeyword(name) and not keyword.issoftkeyword(name)
        assert name not in RESERVED_NAMES and not name.startswith("__")
        assert name in names


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hints=st.lists(st.text(max_size=8), min_size=1, max_size=4))
def test_traces_with_arbitrary_input_names_run(hints: list[str]) -> None:
    inputs = [torch.full((1,), float(i + 1)) for i in range(len(hints))]
    trace = trace_fn(lambda *xs: [x.neg() for x in xs], *inputs, names=hints)
    for result in run_everywhere(trace, *inputs):
        assert [r.item() for r in result] == [-(i + 1.0) for i in range(len(hints))]


# --- text that must stay text ----------------------------------------------------------------------


def text_symbol() -> Symbol:
    """A symbol taking arbitrary text arguments and keywords; it returns its tensor negated."""

    def neg(a, /, *texts, **named):
        return torch.neg(a)

    return Symbol("test.neg_with_text", "neg_with_text", "test", fn=neg, path=None, meta=neg)


def register_user_file(filename: str, lines: list[str]) -> None:
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_never_execute(payload: str, tmp_path: Path) -> None:
    filename = f"<user{payload}>"
    register_user_file(filename, ["def f(x):\n", f"    return g(x)  {payload}\n"])
    frames = (SourceFrame(filename, 1, f"f{payload}"), SourceFrame(filename, 2, payload))
    sym = text_symbol()

    def f(x):
        y = sym(
            x,
            payload,
            [payload],
            {payload: payload},
            payload.encode("utf-8", "surrogatepass"),
            **{payload: 1},
        )
        return y, payload, {payload: (payload,)}

    trace = trace_fn(f, torch.ones(2), source_provider=lambda: frames, header=[payload, f"second {payload}"])
    trace.bound_symbols[0] = type(trace.bound_symbols[0])(
        *[
            getattr(trace.bound_symbols[0], f)
            for f in ("symbol", "args", "kwargs", "output", "subsymbols", "source")
        ],
        header=payload,
    )
    try:
        for result in run_everywhere(trace, torch.ones(2), tmp_path=tmp_path):
            assert result[1:] == (payload, {payload: (payload,)})
            torch.testing.assert_close(result[0], -torch.ones(2))
    finally:
        linecache.cache.pop(filename, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(), line=st.text().map(lambda s: s.replace("\n", "")))
def test_arbitrary_text_never_executes(text: str, line: str) -> None:
    filename = "<user-arbitrary-text>"
    register_user_file(filename, [line + "\n"])
    frames = (SourceFrame(filename, 1, text),)
    sym = text_symbol()
    trace = trace_fn(lambda x: (sym(x, text, **{text: text}), text), torch.ones(1),
                     source_provider=lambda: frames, header=[text, line])  # fmt: skip
    for result in run_everywhere(trace, torch.ones(1)):
        assert result[1] == text
