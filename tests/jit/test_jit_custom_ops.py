"""Custom operators (``torch.library``) and C functions reached with traced tensors: recorded as
bound symbols of their own, executed, differentiated through their registered autograd."""

from __future__ import annotations

import functools
import traceback

import pytest
import torch
import torch.nn.functional as F
from jit_helpers import assert_same

import jitcore


@torch.library.custom_op("jitcore_test::scale_add", mutates_args=())
def scale_add(a: torch.Tensor, b: torch.Tensor, s: float) -> torch.Tensor:
    return a * s + b


@scale_add.register_fake
def _scale_add_fake(a, b, s):
    return torch.empty_like(a)


def _scale_add_backward(ctx, grad):
    return grad * ctx.s, grad, None


def _scale_add_setup(ctx, inputs, output):
    ctx.s = inputs[2]


scale_add.register_autograd(_scale_add_backward, setup_context=_scale_add_setup)


# An operator defined the TORCH_LIBRARY way, in a namespace of its own: a schema, a kernel, a fake
# kernel and an autograd formula registered one by one (as C++ extensions and libraries do).
_LIBRARY = torch.library.Library("jitcore_test_lib", "DEF")
_LIBRARY.define("cube_plus(Tensor x, float c) -> Tensor")
_LIBRARY.impl("cube_plus", lambda x, c: x * x * x + c, "CompositeExplicitAutograd")
torch.library.register_fake("jitcore_test_lib::cube_plus", lambda x, c: torch.empty_like(x))
torch.library.register_autograd(
    "jitcore_test_lib::cube_plus",
    lambda ctx, grad: (grad * 3 * ctx.saved_tensors[0] ** 2, None),
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]),
)


@torch.library.custom_op("jitcore_test::no_fake", mutates_args=())
def no_fake(a: torch.Tensor) -> torch.Tensor:
    return a.clone()


def test_custom_op_is_its_own_symbol_and_matches_eager():
    def f(a, b):
        return scale_add(a, b, 2.0).sin() + torch.ops.jitcore_test.scale_add(b, a, 0.5)

    jf = jitcore.jit(f)
    for _ in range(2):
        a, b = torch.randn(3), torch.randn(3)
        assert_same(jf(a, b), f(a, b))
    assert "torch.ops.jitcore_test.scale_add.default(" in str(jitcore.last_traces(jf)[-1])


def test_custom_op_gradients_use_its_registered_autograd():
    def f(a, b):
        return scale_add(a, b, 3.0).sum()

    a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    jitcore.jit(f)(a, b).backward()
    ea, eb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    f(ea, eb).backward()
    assert_same(a.grad, ea.grad)
    assert_same(b.grad, eb.grad)


def test_an_operator_of_a_library_namespace_with_its_registered_kernels():
    def f(x, c):
        return torch.ops.jitcore_test_lib.cube_plus(x.sin(), c).sum()

    jf = jitcore.jit(f)
    for c in (1.0, 1.0, 2.5):
        x = torch.randn(5, requires_grad=True)
        ex = x.detach().clone().requires_grad_()
        got, expected = jf(x, c), f(ex, c)
        assert_same(got, expected)
        got.backward()
        expected.backward()
        assert_same(x.grad, ex.grad)
    assert "torch.ops.jitcore_test_lib.cube_plus.default(" in str(jitcore.last_traces(jf)[-1])


def test_custom_op_without_a_fake_kernel_is_a_clear_error():
    def f(a):
        return no_fake(a) + 1

    with pytest.raises(Exception) as info:
        jitcore.jit(f, fullgraph=True)(torch.randn(2))
    text = str(info.value) + "".join(getattr(info.value, "__notes__", []))
    assert "no_fake has no fake (meta) kernel" in text
    assert "return no_fake(a) + 1" in "".join(traceback.format_exception(info.value))


def test_custom_op_without_a_fake_kernel_runs_on_the_values():
    """Without fullgraph, the op runs on the values while tracing (its outputs' metadata is then
    known) and a cached call checks that metadata, as for ``nonzero``."""
    def f(a):
        return no_fake(a.sin()) * 2

    jf = jitcore.jit(f)
    for _ in range(3):
        a = torch.randn(4)
        assert_same(jf(a), f(a))
    assert jitcore.cache_misses(jf) == 1
    assert "torch.ops.jitcore_test.no_fake.default(" in str(jitcore.last_traces(jf)[-1])


@pytest.mark.parametrize(
    "fn, make",
    [
        (
            lambda a, b: torch._int_mm(a, b),
            lambda: (
                torch.randint(-5, 5, (32, 32), dtype=torch.int8),
                torch.randint(-5, 5, (32, 32), dtype=torch.int8),
            ),
        ),
        (lambda a, b: torch.Tensor.__getitem__(a, 0) + b[0], lambda: (torch.randn(3, 2), torch.randn(3, 2))),
        (lambda a, b: torch._C.TensorBase.add(a, b), lambda: (torch.randn(3), torch.randn(3))),
        (lambda a, b: torch._C._nn.linear(a, b), lambda: (torch.randn(2, 3), torch.randn(4, 3))),
    ],
    ids=["int_mm", "getitem-descriptor", "tensorbase-method", "C-linear"],
)
def test_c_functions_on_traced_tensors(fn, make):
    jf = jitcore.jit(fn)
    for _ in range(2):
        args = make()
        assert_same(jf(*args), fn(*args))


def test_linear_with_torch_function_disabled():
    def f(a, b):
        with torch._C.DisableTorchFunctionSubclass():
            return F.linear(a, b)

    a, b = torch.randn(2, 3), torch.randn(4, 3)
    assert_same(jitcore.jit(f)(a, b), f(a, b))


def test_torch_called_by_native_code_with_torch_function_disabled():
    """Code jitcore does not interpret (``functools.reduce``, C) calls torch with torch functions off:
    the traced tensors reach torch's dispatcher, and each aten op is recorded, at the user's line."""
    def f(a, b):
        with torch._C.DisableTorchFunctionSubclass():
            product = functools.reduce(torch.mul, [a, b, a])
        return product.sin()

    jf = jitcore.jit(f)
    for _ in range(2):
        a, b = torch.randn(3), torch.randn(3)
        assert_same(jf(a, b), f(a, b))
    trace = str(jitcore.last_traces(jf)[-1])
    assert trace.count("torch.ops.aten.mul.Tensor(") == 2
    assert "product = functools.reduce(torch.mul, [a, b, a])" in trace


def test_custom_op_called_by_native_code_with_torch_function_disabled():
    def f(a, b):
        with torch._C.DisableTorchFunctionSubclass():
            out = functools.reduce(lambda x, y: torch.ops.jitcore_test.scale_add(x, y, 2.0), [a, b, a])
        return out + 1

    jf = jitcore.jit(f)
    a, b = torch.randn(3, requires_grad=True), torch.randn(3)
    got, want = jf(a, b), f(a, b)
    assert_same(got, want)
    (ga,) = torch.autograd.grad(got.sum(), a)
    (wa,) = torch.autograd.grad(want.sum(), a)
    assert_same(ga, wa)


@torch.library.custom_op("jitcore_test::strict_fake", mutates_args=())
def strict_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[-1] != b.shape[0]:
        raise RuntimeError("strict_fake: inner sizes differ")
    return (a @ b).relu()


@strict_fake.register_fake
def _strict_fake_fake(a, b):
    # stricter than the kernel, as torch._grouped_mm's meta kernel is on CPU (it demands bfloat16)
    torch._check(a.dtype == torch.bfloat16, lambda: "Expected inputs of BF16 type")
    return a.new_empty(a.shape[0], b.shape[1])


def _strict_fake_backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad = grad * ((a @ b) > 0)
    return grad @ b.T, a.T @ grad


strict_fake.register_autograd(
    _strict_fake_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs)
)


def test_fake_kernel_stricter_than_eager_takes_the_eager_kernels_metadata():
    """Note [Fake kernels stricter than eager]: the fake kernel rejects float32, the kernel takes it;
    the op is traced with the metadata of its eager outputs (no value read: one trace, fullgraph works)."""
    def f(a, b):
        return strict_fake(a.sin(), b) * 2

    jf = jitcore.jit(f, fullgraph=True)
    for _ in range(3):
        a, b = torch.randn(4, 3), torch.randn(3, 5)
        assert_same(jf(a, b), f(a, b))
    assert jitcore.cache_misses(jf) == 1
    assert "torch.ops.jitcore_test.strict_fake.default(" in str(jitcore.last_traces(jf)[-1])


def test_fake_kernel_stricter_than_eager_under_grad():
    def f(a, b):
        return strict_fake(a, b).sum()

    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    ea, eb = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    jitcore.jit(f)(a, b).backward()
    f(ea, eb).backward()
    assert_same(a.grad, ea.grad)
    assert_same(b.grad, eb.grad)


def test_fake_kernel_stricter_than_eager_keeps_eagers_errors():
    def f(a, b):
        return strict_fake(a, b)

    a, b = torch.randn(4, 3), torch.randn(2, 5)
    with pytest.raises(RuntimeError, match="inner sizes differ"):
        f(a, b)
    with pytest.raises(RuntimeError, match="inner sizes differ"):
        jitcore.jit(f)(a, b)


def test_grouped_mm_on_cpu_float32_with_gradients():
    """``torch._grouped_mm`` (mixture-of-experts layers): float32 on CPU, which its meta kernel refuses."""
    def f(x, w, offs):
        return torch._grouped_mm(x, w.transpose(-2, -1), offs=offs).tanh().sum(0)

    offs = torch.tensor([3, 3, 8, 12], dtype=torch.int32)
    jf = jitcore.jit(f)
    for _ in range(2):
        x, w = torch.randn(12, 8, requires_grad=True), torch.randn(4, 16, 8, requires_grad=True)
        ex, ew = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        got, expected = jf(x, w, offs), f(ex, ew, offs)
        assert_same(got, expected)
        got.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, ex.grad)
        torch.testing.assert_close(w.grad, ew.grad)
