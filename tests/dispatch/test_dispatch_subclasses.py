"""Tensor subclasses under jitcore.jit, differentially against eager: values, exact output types,
inner-tensor metadata, the aten ops each __torch_dispatch__ receives, and the trace's shape."""

from __future__ import annotations

from typing import Any

import optree
import pytest
import torch
import torch.nn.functional as F
from subclass_zoo import (
    DISPATCH_LOG,
    ClampedTensor,
    Int8RowwiseTensor,
    MirrorTensor,
    NotImplementedTensor,
    ScaledTensor,
    TaggedTensor,
    UnsupportedOpTensor,
    dispatched_ops,
)
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

torch.manual_seed(0)


def _inner(t: torch.Tensor) -> tuple[list[str], Any, list[torch.Tensor]]:
    names, ctx = t.__tensor_flatten__()
    return list(names), ctx, [getattr(t, n) for n in names]


def assert_same_value(actual: Any, expected: Any) -> None:
    """Exact types (subclass included), outer and inner metadata, inner values."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert actual.device == expected.device
        if type(expected) is torch.Tensor:
            torch.testing.assert_close(actual, expected, equal_nan=True)
            return
        names, ctx, inner = _inner(expected)
        anames, actx, ainner = _inner(actual)
        assert anames == names and actx == ctx
        assert actual.stride() == expected.stride()
        for a, e in zip(ainner, inner):
            assert_same_value(a, e)
        return
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_value(a, e)
        return
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_same_value(actual[k], expected[k])
        return
    assert actual == expected


def run_both(fn, *args: Any) -> tuple[Any, Any, list[str], list[str], Any]:
    """Eager and jitted results, the aten ops dispatched eagerly and while tracing, the jitted fn."""
    DISPATCH_LOG.clear()
    expected = fn(*args)
    eager_ops = dispatched_ops(DISPATCH_LOG)
    DISPATCH_LOG.clear()
    jfn = jitcore.jit(fn)
    actual = jfn(*args)
    traced_ops = dispatched_ops(DISPATCH_LOG)
    DISPATCH_LOG.clear()
    return actual, expected, eager_ops, traced_ops, jfn


def check(fn, *args: Any) -> Any:
    actual, expected, eager_ops, traced_ops, jfn = run_both(fn, *args)
    assert_same_value(actual, expected)
    assert traced_ops == eager_ops
    again = jfn(*args)
    assert_same_value(again, expected)
    assert DISPATCH_LOG == [], "a cached call must not run __torch_dispatch__"
    # views as eager's (Note [Subclass views without grad], jitcore/jit/subclass_views.py)
    assert _views(again) == _views(expected)
    assert jitcore.cache_hits(jfn) == 1
    assert_runs_on_plain_tensors(jitcore.last_traces(jfn)[-1])
    return jfn


def _views(value: Any) -> list[tuple[bool, int | None]]:
    """Of each tensor in ``value``: whether it is a view, and which earlier one is its base."""
    tensors = [t for t in optree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    return [(t._is_view(), next((k for k, u in enumerate(tensors) if u is t._base), None)) for t in tensors]


def assert_runs_on_plain_tensors(trace) -> None:
    """The executed trace: torch/aten ops on plain tensors; subclasses only rebuilt at the end."""
    from jitcore.proxies.subclass import SubclassTensorProxy

    for bsym in trace.bound_symbols:
        if bsym.symbol.id == "unflatten_tensor_subclass":
            continue  # rebuilds an output (possibly from rebuilt inner subclasses)
        leaves = optree.tree_leaves((bsym.args, bsym.kwargs, bsym.output), none_is_leaf=True)
        assert not any(isinstance(v, SubclassTensorProxy) for v in leaves), bsym
        assert bsym.symbol.langctx in ("aten", "torch"), bsym.symbol


def _executed_ops(jfn) -> list[str]:
    trace = jitcore.last_traces(jfn)[-1]
    return [b.symbol.id for b in trace.bound_symbols]


def test_two_tensor_end_to_end_and_trace_shape() -> None:
    def f(x, w):
        y = x + 1
        return F.linear(y, w).T

    x = TwoTensor(torch.randn(4, 4), torch.randn(4, 4))
    jfn = check(f, x, torch.randn(3, 4))
    first, executed = (str(t) for t in jitcore.last_traces(jfn))
    assert 't2 = torch.add(x, 1)  # t2: "TwoTensor[cpu f32[4, 4]]"' in first
    assert "    # t0 = torch.ops.aten.add.Tensor(x_a, 1)" in first
    assert "    # t1 = torch.ops.aten.add.Tensor(x_b, 1)" in first
    # the resolution ends with how the output is built: the class by name, inner tensors, ctx, size, strides
    assert (
        "    # t2 = jitcore.dispatch.flatten.unflatten_tensor_subclass(TwoTensor, {'a': t0, 'b': t1}, None, "
        "(4, 4), (4, 1))"
    ) in first
    assert "torch.ops.aten.mm.default(t0, t3)" in executed
    assert _executed_ops(jfn) == [
        "torch.ops.aten.add.Tensor", "torch.ops.aten.add.Tensor", "torch.ops.aten.t.default",
        "torch.ops.aten.mm.default", "torch.ops.aten.mm.default", "torch.ops.aten.permute.default",
        "torch.ops.aten.permute.default", "unflatten_tensor_subclass", "unflatten_tensor_subclass",
    ]  # the output's base, ``F.linear``'s, rebuilt too: its ``.T`` is made of it after the computation


def test_linear_reaches_subclass_decomposed_never_as_linear() -> None:
    def f(x, w, b):
        return F.linear(x, w, b)

    _, _, eager_ops, traced_ops, _ = run_both(
        f, ScaledTensor.quantize(torch.randn(2, 3, 4)), torch.randn(5, 4), torch.randn(5)
    )
    assert traced_ops == eager_ops
    assert not any("linear" in op for op in traced_ops)


def test_scaled_tensor_python_float_scale_in_ctx() -> None:
    def f(x, w):
        y = x * 3.0  # handled by the subclass: only the scale changes
        return y.t(), y @ w, y.dequantize()

    check(f, ScaledTensor.quantize(torch.randn(4, 4)), torch.randn(4, 2))


def test_int8_rowwise_with_scale_tensor() -> None:
    def f(x, w):
        return x @ w, x.clone(), x + 1

    check(f, Int8RowwiseTensor.quantize(torch.randn(4, 8)), torch.randn(8, 3))


def test_non_tensor_metadata_flows_and_mixes() -> None:
    def f(a, b):
        c = a * 2 + b
        return c, c.sum(dim=0), torch.relu(a)

    check(f, TaggedTensor(torch.randn(3, 3), "left"), TaggedTensor(torch.randn(3, 3), "right"))


def test_nested_subclasses() -> None:
    def f(x):
        return (x * 2).sin() + x

    inner = TwoTensor(torch.randn(3), torch.randn(3))
    check(f, TwoTensor(inner, TwoTensor(torch.randn(3), torch.randn(3))))
    check(f, MirrorTensor(TaggedTensor(torch.randn(2, 2), "t")))


def test_in_place_ops_and_views_with_aliasing() -> None:
    def f(x):
        v = x.view(-1)
        x.add_(1)
        x.mul_(2)
        return v * 1, x.t(), x[0]

    x = MirrorTensor(torch.randn(2, 3))
    x_eager = MirrorTensor(x.elem.clone())
    expected = f(x_eager)
    jfn = jitcore.jit(f)
    actual = jfn(x)
    assert_same_value(actual, expected)
    assert_same_value(x, x_eager)  # the caller's subclass tensor was mutated in place


def test_dispatch_with_control_flow() -> None:
    def f(x, y):
        z = x + y
        w = z @ z.t() if z.dim() == 2 else z
        return w, z > 0, z.sum()

    check(f, ClampedTensor(torch.randn(3, 3) * 4, 1.5), ClampedTensor(torch.randn(3, 3), 0.5))


def test_mixes_with_plain_tensors_and_scalars() -> None:
    def f(x, p, s):
        return x * s + p, p - x, torch.where(p > 0, x, p)

    check(f, TwoTensor(torch.randn(3), torch.randn(3)), torch.randn(3), 2.5)


def test_not_implemented_and_type_ordering() -> None:
    def f(a, b):
        return a + b

    a = NotImplementedTensor(torch.randn(2))
    check(f, a, NotImplementedTensor(torch.randn(2)))
    # NotImplementedTensor declines, TaggedTensor (next in eager's order) handles the mixed call
    check(f, a, TaggedTensor(torch.randn(2), "x"))
    # every handler declines: the TypeError eager raises
    def g(a, b):
        return a * b

    with pytest.raises(TypeError) as eager:
        g(a, torch.randn(2))
    with pytest.raises(TypeError) as traced:
        jitcore.jit(g)(a, torch.randn(2))
    assert type(traced.value) is type(eager.value)


def test_user_code_calls_aten_directly() -> None:
    def f(x):
        return torch.ops.aten.mul.Tensor(torch.ops.aten.add.Tensor(x, x), 3)

    check(f, TwoTensor(torch.randn(3), torch.randn(3)))


def test_subclass_constructed_inside_the_function() -> None:
    def f(a, b):
        t = TwoTensor(a, b)
        return (t * 2).cos()

    check(f, torch.randn(4), torch.randn(4))


def test_subclass_outputs_nested_in_pytrees() -> None:
    def f(x):
        return {"out": [x + 1, (x * 2, 3)], "plain": x.a if False else None}

    check(f, TwoTensor(torch.randn(2), torch.randn(2)))


def test_type_isinstance_and_attributes_inside_the_function() -> None:
    def f(x):
        y = x + 1
        assert type(y) is TwoTensor and isinstance(y, TwoTensor) and isinstance(y, torch.Tensor)
        if y.shape[0] == 3:
            return y.a * 2 + y.b
        return y

    check(f, TwoTensor(torch.randn(3), torch.randn(3)))


def test_exception_inside_torch_dispatch_reaches_the_user() -> None:
    def f(x):
        return x @ x

    x = UnsupportedOpTensor(torch.randn(2, 2))
    with pytest.raises(NotImplementedError, match="does not support aten.mm.default"):
        f(x)
    with pytest.raises(NotImplementedError, match="does not support aten.mm.default") as info:
        jitcore.jit(f)(x)
    import traceback

    text = "".join(traceback.format_exception(info.value))
    assert "return x @ x" in text and "subclass_zoo.py" in text


def test_cache_misses_for_every_structural_change() -> None:
    def f(x):
        return x * 2

    jfn = jitcore.jit(f)
    a = torch.randn(3)
    calls = [
        ScaledTensor(a.bfloat16(), 2.0),
        ScaledTensor(a.bfloat16(), 3.0),  # another ctx (Python float scale)
        a,  # a plain tensor where a subclass was traced
        TwoTensor(a, a.clone()),  # another subclass
        ScaledTensor(a.bfloat16(), 2.0, torch.float64),  # another ctx entry (dtype)
        ScaledTensor(a.half(), 2.0),  # inner dtype
        ScaledTensor(torch.randn(4).bfloat16(), 2.0),  # outer and inner shape
        TaggedTensor(a, "x"),
        TaggedTensor(a, "y"),
        TwoTensor(TwoTensor(a, a), TwoTensor(a, a)),  # nested
    ]
    for x in calls:
        assert_same_value(jfn(x), f(x))
    assert jitcore.cache_misses(jfn) == len(calls)
    for x in calls:
        assert_same_value(jfn(x), f(x))
    assert jitcore.cache_hits(jfn) == len(calls)


def test_subclass_methods_and_attributes_in_user_code() -> None:
    def f(x):
        return x.dequantize() * x.scale, x.orig_dtype

    check(f, ScaledTensor.quantize(torch.randn(3)))





def test_dispatch_returning_tuples_and_mixes() -> None:
    def f(x):
        values, indices = x.max(dim=0)
        parts = torch.split(x, 1)
        return values, indices, parts, x.unbind(1)

    check(f, TwoTensor(torch.randn(2, 3), torch.randn(2, 3)))
    check(f, TaggedTensor(torch.randn(2, 3), "t"))


def test_metadata_guard_decides_ctx_equality() -> None:
    from subclass_zoo import ToleranceTensor

    def f(x):
        return x * 2

    jfn = jitcore.jit(f)
    a = torch.randn(3)
    assert_same_value(jfn(ToleranceTensor(a, "Scale")), f(ToleranceTensor(a, "Scale")))
    jfn(ToleranceTensor(a, "SCALE"))  # equal by the class's __metadata_guard__: a cache hit
    assert jitcore.cache_hits(jfn) == 1
    jfn(ToleranceTensor(a, "other"))
    assert jitcore.cache_misses(jfn) == 2
    assert "ctx" in str(jitcore.miss_reasons(jfn)[-1][0])


def test_a_subclass_argument_returned_as_it_came_is_the_callers_object() -> None:
    """eager returns the very object (``f(x) is x``); so does every call of the jitted function."""

    def mutate_and_return(x):
        x.add_(1)
        return x

    def return_in_structures(x, y):
        return x, x.a, {"k": x}, y * 2

    x = TwoTensor(torch.randn(3), torch.randn(3))
    expected_a = x.a + 2
    jfn = jitcore.jit(mutate_and_return)
    assert jfn(x) is x and jfn(x) is x  # traced call, then a cached call
    torch.testing.assert_close(x.a, expected_a)
    out = jitcore.jit(return_in_structures)(x, x)
    assert out[0] is x and out[1] is x.a and out[2]["k"] is x and out[3] is not x
    assert "def computation(x_a, x_b, x):" in str(jitcore.last_traces(jfn)[-1])  # the object is an argument


def test_an_in_place_view_op_on_a_subclass_argument_restrides_the_callers_object() -> None:
    def transpose_in_place(x):
        return x.t_()

    def make():
        return TwoTensor(torch.arange(6.0).view(2, 3), torch.arange(6.0).view(2, 3) * 2)

    def transpose_in_place_and_sum(x):
        x.t_()
        return x.sum()

    expected = transpose_in_place(make())
    jfn = jitcore.jit(transpose_in_place)
    for _ in range(2):
        arg = make()
        out = jfn(arg)
        assert out is arg  # eagerly the same object, its wrapper restrided by return_and_correct_aliasing
        assert type(out) is TwoTensor and out.shape == expected.shape == (3, 2)
        assert out.stride() == expected.stride()
        torch.testing.assert_close(out.a, expected.a)
        torch.testing.assert_close(out.b, expected.b)
    def shape_after_transpose_in_place(x):
        x.t_()
        return x.shape, x.sum(0)  # code after the op sees eager's new shape

    eager_shape, eager_sum = shape_after_transpose_in_place(make())
    shape, summed = jitcore.jit(shape_after_transpose_in_place)(make())
    assert shape == eager_shape == (3, 2)
    torch.testing.assert_close(summed.a, eager_sum.a)
    jfn = jitcore.jit(transpose_in_place_and_sum)
    for _ in range(2):
        eager_arg, arg = make(), make()
        torch.testing.assert_close(jfn(arg), transpose_in_place_and_sum(eager_arg))
        assert (arg.shape, arg.stride()) == (eager_arg.shape, eager_arg.stride()) == ((3, 2), (1, 3))


def test_a_subclass_argument_whose_inner_tensor_is_replaced_is_returned_with_the_new_one() -> None:
    def replace_inner(x):
        x.a = x.a * 10
        return x

    def make():
        return TwoTensor(torch.ones(3), torch.ones(3))

    expected = replace_inner(make())
    jfn = jitcore.jit(replace_inner)
    for _ in range(2):
        out = jfn(make())
        assert type(out) is TwoTensor
        torch.testing.assert_close(out.a, expected.a)
        torch.testing.assert_close(out.b, expected.b)
