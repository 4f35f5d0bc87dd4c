"""Tensor subclasses written by others (issue 15, ao51), eager against ``jitcore.jit`` over several calls
(values, gradients, optimizer state, cache entries, the subclass code a warm call runs): an
``autograd.Function`` whose forward makes subclass values from plain arguments (torchao's ``Float8Linear``)
in an entry whose dynamic numbers run pass 1 under torch's autograd (a scale changing per call, AdamW's
step-derived floats; Note [A Function split alone], jitcore/transforms/function_records.py), and
subclass_zoo's EmptyTensor, whose dispatch computes on meta tensors (Note [Meta tensors beside others],
jitcore/langctx/shadows.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from subclass_checks import protocol_calls
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map_only
from torchao.float8 import convert_to_float8_training
from torchao.float8.float8_training_tensor import Float8TrainingTensor

import jitcore


def _float8_mlp() -> nn.Module:
    torch.manual_seed(0)
    return convert_to_float8_training(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)))


def _scaled_step(m: nn.Module, x: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    loss = (m(x) * scale).square().mean()
    loss.backward()
    g = m[0].weight.grad.clone()
    m.zero_grad()
    return loss.detach(), g


def test_a_float8_step_with_a_scale_changing_per_call_runs_no_float8_dispatch_when_warm() -> None:
    eager_model, jit_model = _float8_mlp(), _float8_mlp()
    step = jitcore.jit(_scaled_step)
    for i in range(4):
        x = torch.randn(8, 32)
        expected = _scaled_step(eager_model, x, 0.5 + i)
        with protocol_calls(Float8TrainingTensor) as seen:
            got = step(jit_model, x, 0.5 + i)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert jitcore.cache_misses(step) == 2
    assert seen == []  # before: 12 Float8TrainingTensor.__torch_dispatch__ calls on a warm call
    assert len(jitcore.last_backward_traces(step)) >= 2  # one backward per Float8Linear's Function


def _adamw_step(m: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = m(x).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


def test_a_float8_adamw_step_keeps_eagers_parameters_and_state_and_runs_no_float8_dispatch_warm() -> None:
    eager_model, jit_model = _float8_mlp(), _float8_mlp()
    eager_opt = torch.optim.AdamW(eager_model.parameters(), lr=1e-2)
    jit_opt = torch.optim.AdamW(jit_model.parameters(), lr=1e-2)
    step = jitcore.jit(_adamw_step)
    for _ in range(4):
        x = torch.randn(8, 32)
        expected = _adamw_step(eager_model, eager_opt, x)
        with protocol_calls(Float8TrainingTensor) as seen:
            got = step(jit_model, jit_opt, x)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        torch.testing.assert_close(jit_model.state_dict(), eager_model.state_dict(), rtol=0, atol=0)
        torch.testing.assert_close(jit_opt.state_dict(), eager_opt.state_dict(), rtol=0, atol=0)
    assert jitcore.cache_misses(step) == 2
    assert seen == []  # before: 12 on a warm call


# --- the same without torchao: a Function computing through TwoTensor inside -------------------------------


class _ThroughPairs(torch.autograd.Function):
    """``3 * x @ w``, computed through TwoTensor values in the forward and in the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        x, w = x.detach(), w.detach()
        pair = TwoTensor(x, x * 2) @ TwoTensor(w, w)
        return pair.a + pair.b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, w = ctx.saved_tensors
        gx = TwoTensor(g, g * 2) @ TwoTensor(w, w).t()
        gw = TwoTensor(x, x).t() @ TwoTensor(g, g * 2)
        return gx.a + gx.b, gw.a + gw.b


def _through_pairs(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    return _ThroughPairs.apply(x.reshape(4, 3), w) * scale


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)


def test_a_function_through_pairs_gives_eagers_gradients_with_no_pair_dispatch_when_warm() -> None:
    f = jitcore.jit(_through_pairs)
    for i in range(4):
        x, w = _inputs()
        xj, wj = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        expected = _through_pairs(x, w, 1.5 + i)
        expected.square().sum().backward()
        with protocol_calls(TwoTensor) as seen:
            got = f(xj, wj, 1.5 + i)
            got.square().sum().backward()
        assert type(got) is torch.Tensor and got.requires_grad
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close((xj.grad, wj.grad), (x.grad, w.grad))
    assert jitcore.cache_misses(f) == 2
    assert seen == []  # before: the forward's and the backward's TwoTensor ops on every call


def test_a_function_split_alone_given_another_layout_computes_as_eagerly() -> None:
    f = jitcore.jit(_through_pairs)
    for i in range(3):
        x, w = _inputs()
        f(x, w, 1.5 + i)
    for x, w in (_inputs(), (torch.randn(3, 4).t().requires_grad_(), torch.randn(5, 3).t().requires_grad_())):
        xj, wj = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        if not x.is_contiguous():
            xj, wj = x.detach().t().clone().t().requires_grad_(), w.detach().t().clone().t().requires_grad_()
        expected = _through_pairs(x, w, 0.25)
        expected.sum().backward()
        got = f(xj, wj, 0.25)
        got.sum().backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close((xj.grad, wj.grad), (x.grad, w.grad))


# --- subclass_zoo's EmptyTensor: its dispatch computes on meta tensors beside the caller's CPU tensors ---
# Note [Meta tensors beside others] (jitcore/langctx/shadows.py): fake mode refused the mix of meta and CPU
# tensors that eager's meta kernels take (FakeTensorDeviceMismatchError on every call, where eager computes).


class _Empty(torch.Tensor):
    """A tensor with no data: each op is computed on meta tensors of its shape (subclass_zoo's style)."""

    @staticmethod
    def __new__(cls, shape: Any, dtype: torch.dtype = torch.float32) -> _Empty:
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype)

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def on_meta(e: _Empty) -> torch.Tensor:
            return torch.empty(e.shape, dtype=e.dtype, device="meta")

        def wrapped(o: torch.Tensor) -> _Empty:
            return _Empty(o.shape, o.dtype)

        unwrapped_args, unwrapped_kwargs = tree_map_only(_Empty, on_meta, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, wrapped, func(*unwrapped_args, **unwrapped_kwargs))


_EMPTY_PROGRAMS = {
    "matmul_shape": lambda e, w: tuple((e @ w).shape),
    "matmul": lambda e, w: e @ w,
    "chain": lambda e, w: ((e @ w).relu() * 2).sum(),
    "made_inside": lambda e, w: _Empty((2, 8)) @ w,
    "beside_plain": lambda e, w: (e @ w, w * 2),
    "views": lambda e, w: (e.view(32), e.t() @ w[:4]),
}


def _described(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_described(v) for v in value)
    if isinstance(value, torch.Tensor):
        return type(value), value.shape, value.dtype, value.device
    return value


@pytest.mark.parametrize("name", sorted(_EMPTY_PROGRAMS))
def test_an_empty_tensor_computing_on_meta_tensors_gives_eagers_answer(name: str) -> None:
    program = _EMPTY_PROGRAMS[name]
    f = jitcore.jit(program)
    for _ in range(3):
        e, w = _Empty((4, 8)), torch.randn(8, 3)
        expected = program(e, w)
        with protocol_calls(_Empty) as seen:
            got = f(e, w)
        assert _described(got) == _described(expected)
        if name == "beside_plain":
            torch.testing.assert_close(got[1], expected[1])
    assert jitcore.cache_misses(f) == 1
    assert seen == []


def test_an_empty_tensor_beside_a_tensor_its_meta_kernel_refuses_raises_eagers_error() -> None:
    def program(e: torch.Tensor) -> torch.Tensor:
        return e + torch.ones(4, 8)

    with pytest.raises(RuntimeError) as eager:
        program(_Empty((4, 8)))
    with pytest.raises(RuntimeError) as jitted:
        jitcore.jit(program)(_Empty((4, 8)))
    assert str(jitted.value).splitlines()[0] == str(eager.value).splitlines()[0]


# --- a Function that takes the number: float8-style scaling with a scale argument per call ---------------
# Note [A number a split Function takes] (jitcore/transforms/function_records.py): a record taking a number
# was never split, so every warm call ran the Function's forward and backward natively, their TwoTensor
# dispatches included.


class _ScaledThroughPairs(torch.autograd.Function):
    """``(scale * x) @ w + x @ w`` through TwoTensor values, the scale kept on ``ctx`` for the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        x, w = x.detach(), w.detach()
        pair = TwoTensor(x * scale, x) @ TwoTensor(w, w)
        return pair.a + pair.b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, w = (t.detach() for t in ctx.saved_tensors)
        gx = TwoTensor(g, g) @ TwoTensor(w, w * ctx.scale).t()
        gw = TwoTensor(x * ctx.scale, x).t() @ TwoTensor(g, g)
        return gx.a + gx.b, gw.a + gw.b, None


class _BranchingOnScale(torch.autograd.Function):
    """Decides with the scale's value in its forward: the split checks the comparison's outcome per call
    (Note [Python arithmetic on a split Function's numbers], jitcore/transforms/function_numbers.py)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        x = x.detach()
        pair = (TwoTensor(x * scale, x) if scale > 2 else TwoTensor(x, -x)) * 2
        return pair.a + pair.b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        pair = TwoTensor(g * ctx.scale, g) * 3
        return pair.a + pair.b, None


class _ScaleTensorPairs(torch.autograd.Function):
    """Makes its scale a tensor as float8 casts do (``torch.tensor(scale)``, ``x.new_tensor(scale)``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x, w)
        x, w = x.detach(), w.detach()
        pair = TwoTensor(x * torch.tensor(scale), x) @ TwoTensor(w, w * w.new_tensor(scale))
        return pair.a + pair.b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, w = (t.detach() for t in ctx.saved_tensors)
        return (TwoTensor(g, g) @ TwoTensor(w, w).t()).a, (TwoTensor(x, x).t() @ TwoTensor(g, g)).b, None


def _scaled_pairs(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    return _ScaledThroughPairs.apply(x, w, scale) * 2


def _scale_tensors(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    return _ScaleTensorPairs.apply(x, w, scale) * 2


def _branching(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
    return _BranchingOnScale.apply(x @ w, scale)


@pytest.mark.parametrize(
    ("program", "warm_frames"), [(_scaled_pairs, 0), (_scale_tensors, 0), (_branching, 0)])
def test_a_function_taking_a_scale_per_call_gives_eagers_gradients(program: Any, warm_frames: int) -> None:
    f = jitcore.jit(program)
    scales = (0.5, 1.5, 3.0, 2.5, 0.25)
    for i, scale in enumerate(scales):
        x, w = _inputs()
        xj, wj = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        expected = program(x, w, scale)
        expected.square().sum().backward()
        with protocol_calls(TwoTensor) as seen:
            got = f(xj, wj, scale)
            got.square().sum().backward()
        assert type(got) is torch.Tensor and got.requires_grad
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close((xj.grad, wj.grad), (x.grad, w.grad))
        if i >= 3:  # warm: the dynamic-scale entry and (for the branch) its other outcome are traced
            assert len(seen) == warm_frames, seen  # before: 5 TwoTensor dispatches per warm call
    if program is not _branching:
        assert jitcore.cache_misses(f) == 2
        assert "scale" in str(jitcore.last_backward_traces(f)[-1])  # the scale is a name
