"""Printed traces run: exec of ``str(trace)``, ``compile_trace`` and eager agree.

Also: errors raised while a compiled trace runs point at the trace's own lines (linecache), and
``inspect`` finds its source.
"""

from __future__ import annotations

import inspect
import linecache
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ir_helpers import assert_same, exec_printed, trace_fn

from jitcore.ir import Symbol, compile_trace, print_trace


def check_three_ways(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    """Eager, exec of the printed trace and compile_trace give the same outputs and input mutations."""
    trace = trace_fn(fn, *[t.clone() for t in inputs])
    runs = []
    for run in (fn, exec_printed(trace), compile_trace(trace)):
        args = [t.clone() for t in inputs]
        runs.append((run(*args), args))
    for actual in runs[1:]:
        assert_same(actual, runs[0])


def views_and_in_place(x, y):
    v = x[1:, ::2]
    v.mul_(2)  # writes through the view into x
    w = x.t().reshape((-1,))  # Tensor.reshape(-1) fails: see report
    y.add_(w[:3])
    x.relu_()
    return v, w, x.unsqueeze(0).expand(2, -1, -1)


def tuple_ops(x, y):
    values, indices = torch.max(x, dim=1)
    a, b = x.split([1, 2], dim=0)
    return values, indices, torch.sort(y, descending=True), (a, b), torch.aminmax(x)


def python_numbers(x, y):
    return x.shape[0] * 2, x.numel(), x.dim(), x.size(1) / 3, x.sum() * x.shape[1], y.shape


def list_outputs(x, y):
    out = [x.sin(), [y.cos(), x.exp()], list(x.unbind(0))]
    out.append(torch.stack([x[0], y]))
    return out


def dtype_and_device_changes(x, y):
    z = x.to(torch.float64) + y.to(dtype=torch.int32)
    return (
        z.to(torch.device("cpu")),
        (x > 0).to(torch.uint8),
        x.int() // 2,
        torch.where(x > 0, x, -x),
    )  # where(c, x, 0.0) segfaults: see report


def input_returned_unchanged(x, y):
    return x, y.add_(1), y


@pytest.mark.parametrize(
    "fn",
    [
        views_and_in_place,
        tuple_ops,
        python_numbers,
        list_outputs,
        dtype_and_device_changes,
        input_returned_unchanged,
    ],
)
def test_printed_compiled_and_eager_agree(fn: Callable[..., Any]) -> None:
    torch.manual_seed(0)
    check_three_ways(fn, torch.randn(3, 3), torch.randn(3))


def test_special_float_constants_run() -> None:
    check_three_ways(
        lambda x: (x * float("nan"), x + float("-inf"), x * -0.0, x + complex(0, -0.0)), torch.ones(2)
    )


# --- random chains of ops --------------------------------------------------------------------------

UNARY = ["sin", "cos", "tanh", "relu", "neg", "abs", "sigmoid", "exp", "sqrt"]
BINARY = ["add", "mul", "sub", "maximum", "div"]
# Not pow or remainder: torch.pow(proxy, 2) segfaults (see report).
SCALAR = ["add", "mul", "sub", "div"]
REDUCTIONS = ["sum", "mean", "amax", "prod"]
VIEWS = ["t", "unsqueeze", "flatten", "slice"]


def step(kind: str):
    if kind == "unary":
        return st.tuples(st.just(kind), st.sampled_from(UNARY), st.booleans())
    if kind == "binary":
        return st.tuples(st.just(kind), st.sampled_from(BINARY), st.integers(0, 10))
    if kind == "scalar":
        return st.tuples(st.just(kind), st.sampled_from(SCALAR), st.sampled_from([2, -1.5, 0.0, -0.0, 1e-3]))
    if kind == "reduction":
        return st.tuples(st.just(kind), st.sampled_from(REDUCTIONS), st.integers(-3, 2), st.booleans())
    return st.tuples(st.just(kind), st.sampled_from(VIEWS), st.integers(0, 3))


programs = st.lists(
    st.sampled_from(["unary", "binary", "scalar", "reduction", "view"]).flatmap(step), min_size=1, max_size=8
)
shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


def run_program(program: list[tuple], x: Any) -> list[Any]:
    """Interpret ``program`` on ``x`` (a tensor or a proxy); every step appends one value."""
    values = [x]
    for op in program:
        kind, name, *rest = op
        last = values[-1]
        if kind == "unary":
            [in_place] = rest
            # In-place only on values this program made, so eager and traced inputs stay comparable.
            values.append(
                getattr(last, name + "_")() if in_place and len(values) > 1 else getattr(torch, name)(last)
            )
        elif kind == "binary":
            other = values[rest[0] % len(values)]
            try:
                torch.broadcast_shapes(last.shape, other.shape)
            except RuntimeError:
                other = last
            values.append(getattr(torch, name)(last, other))
        elif kind == "scalar":
            values.append(getattr(torch, name)(last, rest[0]))
        elif kind == "reduction":
            dim, keepdim = rest
            if last.dim() == 0:
                values.append(getattr(torch, name)(last))
            else:
                values.append(getattr(torch, name)(last, dim % last.dim(), keepdim=keepdim))
        else:
            values.append(view(name, rest[0], last))
    return values


def view(name: str, n: int, t: Any) -> Any:
    if name == "t":
        return t.t() if t.dim() <= 2 else t.transpose(0, -1)
    if name == "unsqueeze":
        return t.unsqueeze(n % (t.dim() + 1))
    if name == "flatten":
        return t.flatten()
    return t[n % t.shape[0] :] if t.dim() else t[None]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, shape=shapes, seed=st.integers(0, 2**16))
def test_random_chains_match_eager(program: list[tuple], shape: tuple[int, ...], seed: int) -> None:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    trace = trace_fn(lambda t: run_program(program, t), x.clone())
    expected = run_program(program, x.clone())
    assert_same(compile_trace(trace)(x.clone()), expected)
    assert_same(exec_printed(trace)(x.clone()), expected)


# --- tracebacks and inspect ------------------------------------------------------------------------


def test_error_while_running_points_at_the_trace_line() -> None:
    trace = trace_fn(lambda x, y: (x.sin() + y).cos(), torch.randn(4, 4), torch.randn(4, 4))
    compiled = compile_trace(trace)
    with pytest.raises(RuntimeError) as info:
        compiled(torch.randn(3, 3), torch.randn(4, 4))  # shapes the trace was not made for
    frames = traceback.extract_tb(info.value.__traceback__)
    ours = [f for f in frames if f.filename.startswith("<jitcore-computation-")]
    assert len(ours) == 1
    assert ours[0].name == "computation"
    assert ours[0].line == 't1 = torch.add(t0, y)  # t1: "cpu f32[4, 4]"'
    assert "t1 = torch.add(t0, y)" in "".join(traceback.format_exception(info.value))


def test_inspect_and_linecache_find_the_compiled_source() -> None:
    trace = trace_fn(lambda x: x.exp().sum(0), torch.randn(2, 2), header=["for inspect"])
    compiled = compile_trace(trace)
    source = print_trace(trace).source
    filename = compiled.__code__.co_filename
    assert filename.startswith("<jitcore-computation-") and filename.endswith(">")
    assert inspect.getsourcefile(compiled) == filename
    assert "".join(linecache.getlines(filename)) == source
    assert inspect.getsource(compiled) == source[source.index("def computation") :]
    _, first = inspect.getsourcelines(compiled)
    assert first == source.splitlines().index("def computation(x):") + 1
    linecache.checkcache()  # entries without a file on disk survive cache checks
    assert linecache.getline(filename, first) == "def computation(x):\n"


def test_the_file_name_is_stable_for_the_same_source() -> None:
    trace = trace_fn(lambda x: x.exp(), torch.randn(2))
    first, second = compile_trace(trace), compile_trace(trace)
    assert first.__code__.co_filename == second.__code__.co_filename
    other = compile_trace(trace_fn(lambda x: x.cos(), torch.randn(2)))
    assert other.__code__.co_filename != first.__code__.co_filename


def test_intermediates_are_freed_after_their_last_use() -> None:
    """A compiled trace frees each intermediate after its last use, as hand-written code does."""
    refs: list[weakref.ref] = []
    freed: list[bool] = []

    def remember(a):
        refs.append(weakref.ref(a))
        return torch.clone(a)

    def check(a):
        freed.append(refs[-1]() is None)
        return torch.clone(a)

    sym_remember = Symbol("test.remember", "remember", "test", fn=remember, path=None, meta=torch.clone)
    sym_check = Symbol("test.check", "check", "test", fn=check, path=None, meta=torch.clone)
    trace = trace_fn(lambda x: sym_check(sym_remember(x.sin())), torch.randn(3))
    for run in (compile_trace(trace), exec_printed(trace)):
        run(torch.randn(3))
    assert freed == [True, True]


def test_imported_modules_are_snapshotted_along_the_chains_the_source_reads() -> None:
    from jitcore.ir import compile_source

    source = (
        "import torch\n\n"
        "def f(x):\n"
        "  a = torch.ops.aten.mul.Tensor(x, x)\n"
        "  b = torch.ops.aten.add(a, x)\n"  # a packet read as a value and, below, through it
        "  c = torch.ops.aten.add.Tensor(b, 1)\n"
        "  return torch.nn.functional.relu(c), torch\n"
    )
    fn = compile_source(source, "f", {}, fast_imports=("torch",))
    x = torch.randn(3)
    out, module = fn(x)
    torch.testing.assert_close(out, torch.relu(x * x + x + 1))
    assert module is torch  # the bare name is read as a value: never replaced
    fn = compile_source(source.replace(", torch\n", ", 0\n"), "f", {}, fast_imports=("torch",))
    snapshot = fn.__globals__["torch"]
    assert snapshot is not torch and "jitcore snapshot" in snapshot.__doc__
    assert snapshot.ops.aten.mul.Tensor is torch.ops.aten.mul.Tensor._op  # what OpOverload.__call__ calls
    assert snapshot.ops.aten.add is torch.ops.aten.add  # read as a value: the real packet
    assert snapshot.nn.functional.relu is torch.nn.functional.relu
    assert snapshot.randn is torch.randn  # not read by the source: looked up on the real module
    torch.testing.assert_close(fn(x)[0], out)
    quoted = compile_source(
        "import torch\n\ndef f():\n  return 'torch.cuda.x', torch.sin  # torch.distributed.y\n",
        "f", {}, fast_imports=("torch",),
    )
    assert set(vars(quoted.__globals__["torch"])) & {"cuda", "distributed"} == set()  # strings, comments
    assert quoted() == ("torch.cuda.x", torch.sin)


def test_bound_constants_are_never_snapshotted() -> None:
    import types

    from jitcore.ir import compile_source

    config = types.ModuleType("config")
    config.scale = 2.0
    fn = compile_source("def f():\n  return cfg.scale\n", "f", {"cfg": config}, fast_imports=("torch",))
    config.scale = 3.0
    assert fn() == 3.0


def test_linecache_entries_live_as_long_as_a_function_compiled_from_them() -> None:
    import gc

    from jitcore.ir import compile_source

    source = "def f(x):\n  return x + 12345\n"
    first = compile_source(source, "f", {})
    second = compile_source(source, "f", {})  # same content, same file name
    filename = first.__code__.co_filename
    assert linecache.getline(filename, 2).strip() == "return x + 12345"
    del first
    gc.collect()
    assert linecache.getline(filename, 2).strip() == "return x + 12345"  # the second still uses it
    del second
    gc.collect()
    assert filename not in linecache.cache
