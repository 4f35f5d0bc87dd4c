"""The torch and aten tables: every OpInfo entry reaches a symbol, and a function, its method, its
operators and its in-place twin share one table entry; printed traces name what was called."""

from __future__ import annotations

import functools
import textwrap

import pytest
import torch
from opinfo_harness import OPS

import jitcore.langctx as L
from jitcore.errors import DataDependentError
from jitcore.ir import Symbol, Trace, compile_trace, tracing
from jitcore.langctx.aten import aten_symbol
from jitcore.langctx.torch import TORCH_TABLE


def _is_wrapper(fn: object) -> bool:
    """OpInfo's own lambdas and partials: test scaffolding, not torch callables."""
    return isinstance(fn, functools.partial) or getattr(fn, "__name__", "") == "<lambda>"


# op_db callables that are not tensor operations, with the reason they have no symbol.
NOT_OPERATIONS: dict[str, str] = {
    "broadcast_shapes": "computes a shape from shapes; runs on Python ints, no tensor is involved",
    "max_pool2d_with_indices_backward": "op.op is a test helper that calls autograd.grad",
    "sparse.mm.reduce": "sparse layouts are not supported: TensorProxy shadows are strided tensors",
    "sparse.sampled_addmm": "sparse layouts are not supported: TensorProxy shadows are strided tensors",
    **{
        f"jiterator_{kind}": "CUDA-only kernel compiled from a string at run time (torch.cuda.jiterator)"
        for kind in ("2inputs_2outputs", "4inputs_with_extra_args", "binary", "binary_return_by_ref", "unary")
    },
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_entry_reaches_a_symbol(name: str) -> None:
    op = OPS[name]
    if name in NOT_OPERATIONS:
        pytest.skip(NOT_OPERATIONS[name])
    found = []
    for kind, fn in (("op", op.op), ("method", op.method_variant), ("inplace", op.inplace_variant)):
        if fn is None or _is_wrapper(fn):
            continue
        assert L.lookup(fn) is not None, f"{kind} {fn!r} has no symbol"
        found.append(kind)
    packet = getattr(torch.ops.aten, op.aten_name, None) if op.aten_name else None
    if packet is not None:
        target = L.lookup(packet)
        assert isinstance(target, Symbol) and target.langctx == "aten"
        found.append("aten")
    # Entries whose callables are all OpInfo lambdas (``lambda x: x.H``) name the torch callable.
    named = _named_callable(op.name)
    if named is not None and L.lookup(named) is not None:
        found.append("named")
    assert found, f"{name}: neither its callables nor torch.ops.aten.{op.aten_name} reach a symbol"


def _named_callable(name: str) -> object:
    """``torch.<name>`` or the Tensor member ``name`` (a property's ``__get__``), if any."""
    member = torch.Tensor.__dict__.get(name) or torch._C.TensorBase.__dict__.get(name)
    if member is not None and hasattr(member, "__get__") and not callable(getattr(torch.Tensor, name)):
        return member.__get__
    if hasattr(torch.Tensor, name):
        return getattr(torch.Tensor, name)
    target: object = torch
    for part in name.split("."):
        target = getattr(target, part, None)
    return target


def _symbol_of(target: object) -> object:
    """The symbol an adapter (operator, method) calls: the closure's Symbol, through adapters of
    adapters (an operator handing ``__torch_function__`` eager's callable)."""
    if isinstance(target, Symbol):
        return target
    for cell in getattr(target, "__closure__", None) or ():
        found = _symbol_of(cell.cell_contents) if callable(cell.cell_contents) else None
        if found is not None:
            return found
    return None


def test_function_method_and_operator_share_one_symbol() -> None:
    exp = L.lookup(torch.exp)
    assert isinstance(exp, Symbol) and exp.id == "torch.exp"
    assert _symbol_of(L.lookup(torch.Tensor.exp)) is exp  # an adapter handing on Tensor.exp (modes see it)
    add = L.lookup(torch.add)
    assert _symbol_of(L.lookup(torch.Tensor.__add__)) is add
    assert _symbol_of(L.lookup(torch.Tensor.__radd__)) is add
    add_ = L.lookup(torch.Tensor.add_)
    assert isinstance(add_, Symbol) and "inplace" in add_.tags
    assert _symbol_of(L.lookup(torch.Tensor.__iadd__)) is add_
    assert L.lookup(torch.ops.aten.add.Tensor) is aten_symbol(torch.ops.aten.add.Tensor)
    assert L.lookup(lambda x: x) is None


def test_random_tag_comes_from_aten_schema_tags() -> None:
    """``random`` is aten's ``nondeterministic_seeded`` for the operator a function is named after: not a
    substring of the name (``F.normalize`` is no ``normal``, the window ``exponential`` no draw)."""
    random = {
        torch.rand, torch.randn_like, torch.nn.functional.dropout, torch.nn.functional.dropout2d,
        torch.Tensor.exponential_, torch.Tensor.bernoulli_, torch.normal, torch.nn.functional.rrelu,
    }
    not_random = {
        torch.nn.functional.normalize, torch.nn.functional.poisson_nll_loss, torch.signal.windows.exponential,
        torch.Tensor.__rand__, torch.exp,
    }
    for fn in random | not_random:
        symbol = _symbol_of(L.lookup(fn))
        assert isinstance(symbol, Symbol), fn
        assert ("random" in symbol.tags) == (fn in random), (symbol.id, symbol.tags)


def test_every_table_symbol_is_reachable_by_id() -> None:
    for symbol in TORCH_TABLE.symbols():
        assert TORCH_TABLE.symbol(symbol.id) is symbol


def _traced(fn, *inputs: torch.Tensor) -> tuple[str, object]:
    trace = Trace(imports={"torch": torch})
    context = L.new_context(trace)
    proxies = [context.values.input_proxy(t, f"x{i}") for i, t in enumerate(inputs)]
    trace.args = proxies
    with tracing(context):
        trace.output = fn(*proxies)
    return trace.python_source(source=None), compile_trace(trace)


def _body(source: str) -> str:
    """The function body, dedented."""
    return textwrap.dedent("\n".join(line for line in source.splitlines() if line.startswith("  ")))


def test_printed_trace_of_methods_and_reflected_operators() -> None:
    x = torch.randn(2, 3)
    source, compiled = _traced(lambda a: (2 + a.exp()).sub_(1) * 3, x)
    assert _body(source) == textwrap.dedent(
        """\
        # x0: "cpu f32[2, 3]"
        t0 = torch.exp(x0)  # t0: "cpu f32[2, 3]"
        t1 = torch.add(t0, 2)  # t1: "cpu f32[2, 3]"
        del t0
        t1 = torch.Tensor.sub_(t1, 1)  # t1: "cpu f32[2, 3]"
        t2 = torch.mul(t1, 3)  # t2: "cpu f32[2, 3]"
        del t1
        return t2"""
    )
    torch.testing.assert_close(compiled(x), (2 + x.exp()).sub_(1) * 3)


def test_printed_trace_of_structseq_and_aten() -> None:
    x = torch.randn(3, 4)
    source, compiled = _traced(lambda a: torch.max(a, dim=1), x)
    assert "torch.max(x0, dim=1)" in source
    values, indices = compiled(x)
    expected = torch.max(x, dim=1)
    assert type(compiled(x)) is type(expected)
    torch.testing.assert_close(values, expected.values)
    torch.testing.assert_close(indices, expected.indices)
    source, compiled = _traced(lambda a: aten_symbol(torch.ops.aten.mul.Tensor)(a, a), x)
    assert "torch.ops.aten.mul.Tensor(x0, x0)" in source
    torch.testing.assert_close(compiled(x), x * x)


_REFLECTED = {
    "radd": lambda a: 2 + a,
    "rsub": lambda a: 2 - a,
    "rmul": lambda a: 2 * a,
    "rtruediv": lambda a: 2 / a,
    "rfloordiv": lambda a: 7 // a,
    "rmod": lambda a: 7 % a,
    "rpow": lambda a: 2**a,
    "rand": lambda a: 6 & a,
    "ror": lambda a: 6 | a,
    "rxor": lambda a: 6 ^ a,
    "rlshift": lambda a: 1 << a,
    "rrshift": lambda a: 64 >> a,
    "neg_abs_invert": lambda a: (-a, abs(a), ~a),
    "compare": lambda a: (3 < a, 3 >= a, 3 == a),
    "iadd": lambda a: a.__iadd__(1),
}


@pytest.mark.parametrize("name", sorted(_REFLECTED))
def test_reflected_operators_with_a_number_on_the_left(name: str) -> None:
    fn = _REFLECTED[name]
    x = torch.arange(1, 7).reshape(2, 3)
    _, compiled = _traced(fn, x.clone())
    expected, actual = fn(x.clone()), compiled(x.clone())
    torch.testing.assert_close(actual, expected)


_VALUE_READS = {
    "item": lambda a: a.item(),
    "tolist": lambda a: a.tolist(),
    "bool": lambda a: bool(a),
    "int": lambda a: int(a),
    "float": lambda a: float(a),
    "index": lambda a: [1, 2, 3][a.long()],
    "if": lambda a: 1 if a > 0 else 2,
    "is_nonzero": lambda a: torch.is_nonzero(a),
    "nonzero": lambda a: a.nonzero(),
    "masked_select": lambda a: a.masked_select(a > 0),
    "boolean_mask": lambda a: a.reshape(1)[a.reshape(1) > 0],
}


@pytest.mark.parametrize("name", sorted(_VALUE_READS))
def test_reading_tensor_values_on_shadows_is_a_data_dependent_error(name: str) -> None:
    # Symbols alone cannot read values; the jit's pass turns this error into checked reads.
    with pytest.raises(DataDependentError, match=r"JC-T002"):
        _traced(_VALUE_READS[name], torch.tensor(1.0))


def test_metadata_reads_are_python_values() -> None:
    source, compiled = _traced(lambda a: (a.numel(), a.dim(), len(a), a.shape[0], a.dtype), torch.ones(3))
    assert compiled(torch.ones(3)) == (3, 1, 3, 3, torch.float32)
    assert "return (3, 1, 3, 3, torch.float32)" in source


_INDEX = torch.tensor([2, 0])


def _set_int(a: torch.Tensor) -> torch.Tensor:
    a[0] = 5
    return a


def _set_slice(a: torch.Tensor) -> torch.Tensor:
    a[:, 1:3] = a[:, :2] * 2
    return a


def _set_mask(a: torch.Tensor) -> torch.Tensor:
    a[a > 3] = 0
    return a


def _set_index(a: torch.Tensor) -> torch.Tensor:
    a[_INDEX] = 1.5
    return a


def _iadd_view(a: torch.Tensor) -> torch.Tensor:
    a[..., None][1] += 1
    return a


_INDEXING = {
    "int": lambda a: a[0],
    "slice": lambda a: a[:, 1],
    "none_ellipsis_step": lambda a: a[None, ..., 1:3:2],
    "tensor": lambda a: a[_INDEX],  # a real tensor: a constant of the trace
    "negative": lambda a: a[-1, -2],
    "set_int": _set_int,
    "set_slice": _set_slice,
    "set_mask": _set_mask,
    "set_index": _set_index,
    "iadd_view": _iadd_view,
}


@pytest.mark.parametrize("name", sorted(_INDEXING))
def test_indexing_and_index_assignment(name: str) -> None:
    fn = _INDEXING[name]
    x = torch.arange(12.0).reshape(3, 4)
    _, compiled = _traced(fn, x.clone())
    torch.testing.assert_close(compiled(x.clone()), fn(x.clone()))


def test_a_real_tensor_made_while_tracing_is_a_constant() -> None:
    x = torch.randn(4)
    source, compiled = _traced(lambda a: torch.where(a > 0, a, torch.tensor(0.5)), x)
    assert "t1 = torch.where(t0, x0, __c0)" in source
    torch.testing.assert_close(compiled(x), torch.where(x > 0, x, torch.tensor(0.5)))


_METHODS_UNLIKE_FUNCTIONS = {
    "polygamma": lambda a: a.polygamma(1),
    "where": lambda a: a.where(a > 0, -a),
    "lu": lambda a: a.lu(),
    "norm": lambda a: a.norm(2, 0, False, torch.float64),
}


@pytest.mark.parametrize("name", sorted(_METHODS_UNLIKE_FUNCTIONS))
def test_methods_whose_arguments_differ_from_their_function(name: str) -> None:
    fn = _METHODS_UNLIKE_FUNCTIONS[name]
    x = torch.randn(3, 3)
    _, compiled = _traced(fn, x)
    expected, actual = fn(x), compiled(x)
    assert type(actual) is type(expected)
    torch.testing.assert_close(actual, expected)


_IN_PLACE_RESIZES = {
    "lt_": lambda a, b: a.lt_(b),
    "pow_": lambda a, b: a.pow_(b),
    "__iadd__": lambda a, b: a.__iadd__(b),
}


@pytest.mark.parametrize("name", sorted(_IN_PLACE_RESIZES))
def test_an_in_place_resize_eager_rejects_is_rejected_on_every_trace(name: str) -> None:
    """torch's fake-dispatch cache, shared by all traces of a process, must not hide eager's error the
    second time (Note [FakeTensor cache and in-place resizes])."""
    call = _IN_PLACE_RESIZES[name]
    a, b = torch.randn(5, 1), torch.randn(5, 5)
    with pytest.raises(RuntimeError) as eager:
        call(a.clone(), b)
    for _ in range(2):
        with pytest.raises(RuntimeError) as traced:
            _traced(call, a.clone(), b)
        assert str(traced.value) == str(eager.value)


def test_an_aten_op_reaching_torch_function_is_the_aten_symbol() -> None:
    """OpOverload.__call__ on a proxy arrives at __torch_function__; it must record the aten symbol and
    leave the lookup of that op to the aten table for later traces."""
    op = torch.ops.aten.max_pool2d_with_indices_backward.default
    x = torch.randn(1, 2, 4, 4)
    out, idx = torch.ops.aten.max_pool2d_with_indices.default(x, [2, 2])
    grad = torch.randn_like(out)
    source, compiled = _traced(
        lambda g, a, i: op(g, a, [2, 2], [2, 2], [0, 0], [1, 1], False, i), grad, x, idx
    )
    assert "torch.ops.aten.max_pool2d_with_indices_backward.default(" in source
    assert L.lookup(op).langctx == "aten"
    torch.testing.assert_close(
        compiled(grad, x, idx), op(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx)
    )


_METHODS_GIVEN_OUT = {
    "x.amax(0, out=o)": lambda x, o: x.amax(0, out=o),
    "x.add(x, out=o)": lambda x, o: x.add(x, out=o),
    "x.index_select(0, i, out=o)": lambda x, o: x.index_select(0, torch.tensor([0]), out=o),
    "x.reshape(12, out=o)": lambda x, o: x.reshape(12, out=o),
    "Tensor.amax(x, 0, out=o)": lambda x, o: torch.Tensor.amax(x, 0, out=o),
}


@pytest.mark.parametrize("name", sorted(_METHODS_GIVEN_OUT))
def test_a_method_given_out_raises_eagers_type_error(name: str) -> None:
    """No Tensor method takes ``out=``: eager raises TypeError and writes nothing; a method sharing its
    function's symbol wrote ``o`` through the function's out= form (OpInfo's error inputs, called as
    methods by tests/jit/jit_opinfo_sequences.py)."""
    import jitcore

    fn = _METHODS_GIVEN_OUT[name]
    x = torch.randn(3, 4)
    with pytest.raises(TypeError) as eager:
        fn(x, torch.zeros(4))
    out = torch.zeros(4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'out'|invalid combination") as jitted:
        jitcore.jit(fn)(x, out)
    assert type(jitted.value) is type(eager.value) and not out.any()
