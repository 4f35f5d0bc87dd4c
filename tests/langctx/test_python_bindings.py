"""torch's generated bindings as callees of aten overloads (jitcore/langctx/python_bindings.py).

Note [Bindings that take the same call]: a binding is used only for calls it provably takes as the
overload's ``_op`` does. Checked here: the signature table is torchgen's; over every OpInfo entry's
recorded aten calls, each call the rules admit dispatches the same aten operations with the same
results, aliasing and errors through the binding as through ``_op``; the cases the rules must refuse
are refused; and a jitted module's cached call uses the bindings with eager's results.
"""

from __future__ import annotations

import sys
import warnings

import optree
import pytest
import torch
from opinfo_harness import OPS, first_samples, record_aten_calls, samples
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore
from jitcore.langctx import python_signatures
from jitcore.langctx.python_bindings import derive_signatures, python_binding

aten = torch.ops.aten
VF = torch._C._VariableFunctions  # noqa: SLF001
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_signature_table_is_torchgens_for_this_torch() -> None:
    assert python_signatures.TORCH_SOURCE == torch.version.git_version
    assert derive_signatures() == (python_signatures.FUNCTIONS, python_signatures.METHODS)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _run(fn, args: tuple, kwargs: dict) -> tuple[list[str], object]:  # noqa: ANN001
    """The aten operations ``fn`` dispatches, and its result described (or the type of its exception)."""
    args, kwargs = optree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, (args, kwargs))
    inputs = [x for x in optree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    torch.manual_seed(7)
    recorder = _Ops()
    try:
        with recorder:
            out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception's type is compared
        return recorder.ops, type(exc)
    if isinstance(out, (tuple, list)):
        return recorder.ops, (type(out), *(_describe(x, inputs) for x in out))
    return recorder.ops, _describe(out, inputs)


def _describe(out: object, inputs: list[torch.Tensor]) -> object:
    """Type, metadata, aliasing of the inputs and (last) the values of an output."""
    if not isinstance(out, torch.Tensor):
        return (type(out), out)
    meta = (type(out), out.layout, out.dtype, out.shape, out.requires_grad,
            next((i for i, x in enumerate(inputs) if out._base is x), None),
            [i for i, x in enumerate(inputs) if out is x])
    if out.layout != torch.strided:
        return (*meta, out.detach().to_dense())
    storages = [x.untyped_storage().data_ptr() if x.layout == torch.strided else None for x in inputs]
    shares = [i for i, p in enumerate(storages) if p == out.untyped_storage().data_ptr()]
    after = [_bits(x) for x in inputs if x.layout == torch.strided]
    return (*meta, out.stride(), out.storage_offset(), shares, after, out.detach().clone())


def _bits(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().reshape(-1)).view(torch.uint8)


def _same(expected: object, actual: object) -> bool:
    """Equal metadata and bitwise-equal values (both ran the same kernel on the same inputs)."""
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        return expected.dtype == actual.dtype and torch.equal(_bits(expected), _bits(actual))
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        return type(expected) is type(actual) and len(expected) == len(actual) and all(
            _same(e, a) for e, a in zip(expected, actual))
    return expected == actual


def test_every_admitted_opinfo_call_goes_through_the_binding_as_through_op() -> None:
    bound, differing = set(), []
    for name in sorted(OPS):
        op = OPS[name]
        for dtype, window in first_samples(op):
            for sample in samples(op, dtype, window):
                _, _, calls = record_aten_calls(op, sample)
                for call in calls:
                    binding = python_binding(call.func, [(call.args, call.kwargs)])
                    if binding is None:
                        continue
                    bound.add(call.func)
                    expected = _run(call.func._op, call.args, call.kwargs)  # noqa: SLF001
                    actual = _run(binding, call.args, call.kwargs)
                    if expected[0] != actual[0] or not _same(expected[1], actual[1]):
                        differing.append(f"{name}: {call.func}: {expected[0]} -> {actual[0]}")
    assert not differing, differing[:20]
    assert len(bound) >= 150, len(bound)  # the rules admit the common overloads, not a handful


T = torch.randn(3, 3)


@pytest.mark.parametrize("op, args, kwargs, binding", [
    (aten.addmm.default, (T, T, T), {}, VF.addmm),
    (aten.addmm.default, (T, T, T), {"beta": 2, "alpha": 0.5}, VF.addmm),
    (aten.t.default, (T,), {}, VF.t),
    (aten.view.default, (T, [9]), {}, torch._C.TensorBase.view),  # noqa: SLF001 - a method-only overload
    (aten.sum.dim_IntList, (T, [0], True), {}, VF.sum),
    # a number where the overload takes a Tensor: the binding may parse it by another signature
    (aten.add.Tensor, (T, 2), {}, None),
    (aten.view.dtype, (T, torch.int32), {}, None),  # a dtype is not a kind the rules cover
    (aten.sum.default, (T,), {"dtype": torch.float64}, None),
    (aten.add_.Tensor, (T, T), {}, None),  # in place
    (aten.max.dim, (T, 0), {}, None),  # two results: a structseq from the binding, a tuple from _op
    (aten.zeros_like.default, (T,), {}, None),  # dtype/layout/device options, split out by the binding
    (aten.add.Tensor, (T, T), {"self": T}, None),  # named self: the binding calls it input
])
def test_rules_admit_and_refuse(op, args, kwargs, binding) -> None:  # noqa: ANN001
    assert python_binding(op, [(args, kwargs)]) is binding


def test_one_refused_call_keeps_op_for_the_trace() -> None:
    assert python_binding(aten.add.Tensor, [((T, T), {}), ((T, 2), {})]) is None
    assert python_binding(aten.add.Tensor, None) is None


class _Sub(torch.Tensor):
    pass


def test_a_subclass_argument_is_refused() -> None:
    assert python_binding(aten.relu.default, [((T.as_subclass(_Sub),), {})]) is None


def _builtins_called(fn, *args) -> list:  # noqa: ANN001
    seen: list = []

    def profile(frame, event, arg) -> None:  # noqa: ANN001
        if event == "c_call":
            seen.append(arg)

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return seen


def test_cached_module_call_uses_the_bindings_with_eagers_results() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    jm = jitcore.jit(model, executor="torch")
    x = torch.randn(4, 8)
    for _ in range(3):
        out, expected = jm(x), model(x)
        assert type(out) is type(expected) and out.dtype == expected.dtype and out.requires_grad
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        out.sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected.sum().backward()
        for got, want in zip(grads, (p.grad for p in model.parameters()), strict=True):
            torch.testing.assert_close(got, want, rtol=0, atol=0)
        model.zero_grad()
    # the forward's linears are one aten.linear call each (executors/composites.py); the backward's mm and t
    # take their bindings
    called = _builtins_called(lambda v: jm(v).sum().backward(), x)
    assert all(any(c == binding for c in called) for binding in (VF.mm, VF.t, VF.relu)), called
    assert jitcore.cache_hits(jm) >= 3


class _Double(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        return out * 2 if func is torch.nn.functional.linear else out


def test_a_mode_around_a_cached_call_still_sees_eagers_ops() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    jm = jitcore.jit(model, executor="torch")
    x = torch.randn(4, 8)
    jm(x), jm(x)
    for _ in range(2):  # traced under the mode (its own entry), then a hit: the mode's rewrite kept
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with _Double():
                out = jm(x)
        with _Double():
            expected = model(x)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert (jitcore.cache_misses(jm), jitcore.cache_hits(jm)) == (2, 2)
    with torch.device("cpu"):  # DeviceContext: the entry is still used
        torch.testing.assert_close(jm(x), model(x), rtol=0, atol=0)


# Note [Bindings that take the same call]: a Python number never reaches a Tensor parameter of these
# names, so their Tensor-first signatures cannot take a (tensor, number) call, which goes to the
# overload's own signature. Each call is run through the binding and through ``_op`` over tensors of
# several dtypes and numbers of each type: the same aten operations, results (dtype promotion
# included) and, where one raises, the same exception and message.
_SCALAR_CALLS = [
    (aten.pow.Tensor_Scalar, lambda t, n: ((t, n), {}), VF.pow),
    (aten.pow.Scalar, lambda t, n: ((n, t), {}), VF.pow),
    (aten.gt.Scalar, lambda t, n: ((t, n), {}), VF.gt),
    (aten.ge.Scalar, lambda t, n: ((t, n), {}), VF.ge),
    (aten.lt.Scalar, lambda t, n: ((t, n), {}), VF.lt),
    (aten.le.Scalar, lambda t, n: ((t, n), {}), VF.le),
    (aten.eq.Scalar, lambda t, n: ((t, n), {}), VF.eq),
    (aten.ne.Scalar, lambda t, n: ((t, n), {}), VF.ne),
    (aten.clamp.default, lambda t, n: ((t, n), {}), VF.clamp),
    (aten.clamp.default, lambda t, n: ((t, None, n), {}), VF.clamp),
    (aten.clamp.default, lambda t, n: ((t,), {"min": n, "max": n}), VF.clamp),
    (aten.clamp_min.default, lambda t, n: ((t, n), {}), VF.clamp_min),
    (aten.clamp_max.default, lambda t, n: ((t, n), {}), VF.clamp_max),
    (aten.where.ScalarOther, lambda t, n: ((t > 0, t, n), {}), VF.where),
    (aten.where.ScalarSelf, lambda t, n: ((t > 0, n, t), {}), VF.where),
    (aten.masked_fill.Scalar, lambda t, n: ((t, t > 0, n), {}), VF.masked_fill),
    (aten.fill.Scalar, lambda t, n: ((t, n), {}), VF.fill),
    (aten.remainder.Scalar, lambda t, n: ((t, n), {}), VF.remainder),
    (aten.fmod.Scalar, lambda t, n: ((t, n), {}), VF.fmod),
    (aten.rsub.Scalar, lambda t, n: ((t, n), {}), VF.rsub),
    (aten.bitwise_and.Scalar, lambda t, n: ((t, n), {}), VF.bitwise_and),
]
_TENSORS = [torch.tensor([[-2.5, 0.0], [1.5, 3.0]]), torch.tensor([[-3, 0], [2, 5]]),
            torch.tensor([[True, False], [True, True]]), torch.tensor([0.5, -1.25], dtype=torch.float16),
            torch.tensor([4, 9], dtype=torch.uint8), torch.tensor(2.5, dtype=torch.float64)]
_NUMBERS = [2, -1, 0, 0.5, 2.0, True, 2**63 - 1]


def _run_with_message(fn, args: tuple, kwargs: dict) -> tuple[list[str], object]:  # noqa: ANN001
    args, kwargs = optree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, (args, kwargs))
    recorder = _Ops()
    try:
        with recorder:
            out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception and its message are compared
        return recorder.ops, (type(exc), str(exc).split("\n")[0])
    return recorder.ops, (out.dtype, out.shape, out.stride(), out.clone())


@pytest.mark.parametrize("op, make, expected_binding", _SCALAR_CALLS,  # ids without addresses (conftest.py)
                         ids=[f"{op}-{i}" for i, (op, _, _) in enumerate(_SCALAR_CALLS)])
def test_tensor_first_overloads_with_a_number_take_the_binding_as_op(op, make, expected_binding) -> None:  # noqa: ANN001
    compared = 0
    for tensor in _TENSORS:
        for number in _NUMBERS:
            args, kwargs = make(tensor, number)
            binding = python_binding(op, [(args, kwargs)])
            assert binding is expected_binding, (op, args, kwargs)
            expected = _run_with_message(op._op, args, kwargs)  # noqa: SLF001
            actual = _run_with_message(binding, args, kwargs)
            assert expected[0] == actual[0], (op, args, kwargs, expected[0], actual[0])
            assert _same(expected[1], actual[1]), (op, args, kwargs, expected[1], actual[1])
            compared += 1
    assert compared == len(_TENSORS) * len(_NUMBERS)


def test_numbers_still_refused_where_a_tensor_parameter_takes_them() -> None:
    # add/mul/sub/div take a number as a Tensor: ``torch.add(t, 2)`` is not proven to be add.Scalar's call
    assert python_binding(aten.add.Tensor, [((T, 2), {})]) is None
    assert python_binding(aten.mul.Tensor, [((T, 2.0), {})]) is None
    assert python_binding(aten.div.Tensor, [((T, 2.0), {})]) is None
    # tensor-tensor calls are their names' first signatures, bound as before
    assert python_binding(aten.pow.Tensor_Tensor, [((T, T), {})]) is VF.pow
    assert python_binding(aten.clamp.Tensor, [((T, T), {})]) is VF.clamp


def _scalar_program(x: torch.Tensor, n: float) -> tuple[torch.Tensor, ...]:
    return x ** 2, torch.pow(x, n), (x > 0.5) * x, x.clamp(min=0.1), torch.where(x < n, x, 0.0), 2 ** x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32])
def test_cached_calls_of_number_overloads_match_eager_and_use_the_bindings(dtype) -> None:  # noqa: ANN001
    jf = jitcore.jit(_scalar_program, executor="torch")
    x = torch.tensor([[-2, 0, 1], [3, 4, 2]]).to(dtype)
    for _ in range(3):
        got, expected = jf(x, 3), _scalar_program(x, 3)
        for g, e in zip(got, expected, strict=True):
            assert type(g) is type(e) and g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=0, atol=0)
    called = _builtins_called(jf, x, 3)
    assert all(any(c == b for c in called) for b in (VF.pow, VF.gt, VF.clamp, VF.where)), called
    assert jitcore.cache_misses(jf) == 1


def test_a_cached_call_of_a_number_overload_raises_as_eager() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.pow(x, n) + 1

    jf = jitcore.jit(f, executor="torch", dynamic_numbers=("n",))
    x = torch.tensor([1, 2, 3])
    torch.testing.assert_close(jf(x, 2), torch.pow(x, 2) + 1, rtol=0, atol=0)
    assert any(c == VF.pow for c in _builtins_called(jf, x, 3))
    with pytest.raises(RuntimeError) as eager:
        torch.pow(x, -2)
    with pytest.raises(RuntimeError) as jitted:
        jf(x, -2)  # integers to a negative integer power: the kernel raises, through the binding too
    assert jitcore.cache_misses(jf) == 1  # the cached entry's call raised, not a new trace
    assert str(jitted.value).split("\n")[0] == str(eager.value).split("\n")[0]
