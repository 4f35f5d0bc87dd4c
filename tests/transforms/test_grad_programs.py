"""Autograd through jitcore on whole programs: training steps, torch.autograd.grad, the no-grad path,
printed forward/backward traces, tensor subclasses (TwoTensor, a float8-like scaled tensor) with
subclass tangents, and the tangent check."""

from __future__ import annotations

import copy
import math
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

aten = torch.ops.aten


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """The pre-norm transformer block of tests/jit/test_jit_programs.py."""

    def __init__(self, dim: int = 32, heads: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (self.drop(att) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.drop(self.mlp(self.ln2(x)))


def _train(model: nn.Module, step_fn, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for i, (x, y) in enumerate(batches):
        torch.manual_seed(100 + i)  # dropout masks drawn from the same state eagerly and jitted
        opt.zero_grad()
        loss = F.mse_loss(step_fn(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("make, shape", [(MLP, (8, 16)), (Block, (2, 6, 32))], ids=["mlp", "block"])
def test_training_matches_eager(make, shape) -> None:
    torch.manual_seed(0)
    model = make()
    jmodel_src = copy.deepcopy(model)
    jmodel = jitcore.jit(jmodel_src)
    out_dim = 4 if make is MLP else 32
    batches = [(torch.randn(shape), torch.randn(*shape[:-1], out_dim)) for _ in range(4)]
    eager = _train(model, model, batches)
    jitted = _train(jmodel_src, jmodel, batches)
    torch.testing.assert_close(jitted, eager, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), jmodel_src.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
    assert jitcore.cache_misses(jmodel) == 1 and jitcore.cache_hits(jmodel) == 3
    assert jitcore.last_backward_traces(jmodel)


def test_autograd_grad_and_inputs() -> None:
    def f(x, w):
        return (x @ w).tanh().sum(dim=0), x.shape[0]

    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    jf = jitcore.jit(f)
    (out, n), (eout, en) = jf(x, w), f(x, w)
    assert n == en == 3
    g = torch.randn(5)
    torch.testing.assert_close(torch.autograd.grad(out, (x, w), g), torch.autograd.grad(eout, (x, w), g))
    assert out.grad_fn is not None


def test_no_grad_builds_no_backward() -> None:
    jf = jitcore.jit(lambda x, w: (x @ w).relu())
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    with torch.no_grad():
        out = jf(x, w)
    assert out.grad_fn is None and not out.requires_grad
    assert jitcore.last_backward_traces(jf) == []
    assert jitcore.last_traces(jf)[-1].name == "computation"
    out = jf(x, w)  # grad mode is part of the prologue's checks: a new entry, with a backward
    assert out.requires_grad and jitcore.cache_misses(jf) == 2
    assert [t.name for t in jitcore.last_traces(jf)] == ["computation", "forward"]


def test_plain_inputs_without_grad_stay_on_the_plain_path() -> None:
    jf = jitcore.jit(lambda x: x.sin() * 2)
    out = jf(torch.randn(3))
    assert out.grad_fn is None and jitcore.last_backward_traces(jf) == []


def test_forward_saves_what_backward_needs_and_recomputes_cheap_ops() -> None:
    def f(x, w):
        return torch.nn.functional.gelu(x @ w.t()).sum()

    jf = jitcore.jit(f)
    jf(torch.randn(3, 4), torch.randn(5, 4, requires_grad=True)).backward()
    # the recorded forward; the one that runs (last) has the program's t + mm, which is exactly what a
    # linear makes, as one linear call (executors/composites.py), saving the same values
    forward, run = jitcore.last_traces(jf)[-2:]
    backward = jitcore.last_backward_traces(jf)[0]
    assert run.python_source(source=None).splitlines()[5:9] == """
def forward(x, w):
  # x: "cpu f32[3, 4]"
  # w: "cpu f32[5, 4]"
  t3 = torch.ops.aten.linear.default(x, w)  # t3: "cpu f32[3, 5]"
""".splitlines()[1:]
    assert [p.name for p in run.output[1]] == [p.name for p in forward.output[1]] == ["x", "t3"]
    assert forward.python_source(source=None).splitlines()[3:] == """
def forward(x, w):
  # x: "cpu f32[3, 4]"
  # w: "cpu f32[5, 4]"
  t2 = torch.ops.aten.t.default(w)  # t2: "cpu f32[4, 5]"
  t3 = torch.ops.aten.mm.default(x, t2)  # t3: "cpu f32[3, 5]"
  del t2
  t4 = torch.ops.aten.gelu.default(t3)  # t4: "cpu f32[3, 5]"
  t5 = torch.ops.aten.sum.default(t4)  # t5: "cpu f32[]"
  del t4
  return ((t5,), (x, t3))""".splitlines()
    # the gelu output is not saved (gelu_backward reads its input); only w's gradient is computed
    assert backward.python_source(source=None).splitlines()[3:] == """
def backward(x, t3, grad_t5):
  # x: "cpu f32[3, 4]"
  # t3: "cpu f32[3, 5]"
  # grad_t5: "cpu f32[]"
  t7 = torch.ops.aten.expand.default(grad_t5, [3, 5])  # t7: "cpu f32[3, 5]"
  t8 = torch.ops.aten.gelu_backward.default(t7, t3)  # t8: "cpu f32[3, 5]"
  del t7
  t9 = torch.ops.aten.t.default(t8)  # t9: "cpu f32[5, 3]"
  del t8
  t10 = torch.ops.aten.mm.default(t9, x)  # t10: "cpu f32[5, 4]"
  del t9
  t11 = torch.ops.aten.t.default(t10)  # t11: "cpu f32[4, 5]"
  del t10
  t12 = torch.ops.aten.t.default(t11)  # t12: "cpu f32[5, 4]"
  del t11
  return (t12,)""".splitlines()


def test_recomputed_ops_are_not_saved() -> None:
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum()

    jf = jitcore.jit(f)
    jf(torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True)).backward()
    forward = jitcore.last_traces(jf)[-1]
    backward = jitcore.last_backward_traces(jf)[0]
    saved = [p.name for p in forward.output[1]]
    assert saved == ["x", "w", "t2"]  # the inputs and the matmul; not the gelu output
    assert [a.name for a in backward.args] == [*saved, "grad_t4"]


def test_dropout_masks_are_saved_not_redrawn() -> None:
    def f(x):
        return F.dropout(x, 0.5, training=True) * 3

    x = torch.randn(64, requires_grad=True)
    torch.manual_seed(1)
    eout = f(x)
    (eg,) = torch.autograd.grad(eout.sum(), x)
    jf = jitcore.jit(f)
    torch.manual_seed(1)
    out = jf(x)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(out, eout)
    torch.testing.assert_close(g, eg)


# --- tensor subclasses ------------------------------------------------------------------------------
def _two(a: torch.Tensor, b: torch.Tensor) -> TwoTensor:
    return TwoTensor(a.clone(), b.clone()).requires_grad_()


def test_two_tensor_gradients_match_eager() -> None:
    def f(x, w):
        return (x * 2 + w).sin() @ w

    torch.manual_seed(0)
    a, b, w0 = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    tangent = TwoTensor(torch.randn(4, 4), torch.randn(4, 4))
    results = []
    for fn in (f, jitcore.jit(f)):
        x, w = _two(a, b), w0.clone().requires_grad_()
        out = fn(x, w)
        assert type(out) is TwoTensor
        out.backward(tangent)
        results.append((x.grad, w.grad))
    (ex, ew), (jx, jw) = results
    assert type(jx) is type(ex) is TwoTensor and type(jw) is type(ew)
    torch.testing.assert_close((jx.a, jx.b), (ex.a, ex.b))
    torch.testing.assert_close(
        jw.a if isinstance(jw, TwoTensor) else jw, ew.a if isinstance(ew, TwoTensor) else ew
    )


def test_backward_trace_of_a_subclass_holds_plain_tensors_only() -> None:
    jf = jitcore.jit(lambda x: (x * x).sum())
    jf(_two(torch.randn(3), torch.randn(3))).backward()
    backward = jitcore.last_backward_traces(jf)[0]
    text = str(backward)
    assert "unflatten_tensor_subclass" in text  # the gradient is rebuilt as a TwoTensor at the end
    for bsym in backward.bound_symbols[:-1]:
        assert bsym.symbol.langctx == "aten", bsym.symbol.id


class Scaled(torch.Tensor):
    """float8-like: bfloat16 ``data`` and a Python-float ``scale`` in the flatten ctx. Views and
    multiplication by a Python number stay Scaled (a new scale); everything else dequantizes. (clone
    stays Scaled too: autograd clones a gradient it cannot steal before storing it in ``.grad``.)"""

    _VIEWS: ClassVar = {
        aten.t.default,
        aten.view.default,
        aten.transpose.int,
        aten.permute.default,
        aten.clone.default,
        aten.detach.default,
        aten.alias.default,
        aten._unsafe_view.default,
        aten.expand.default,
    }

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: float):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), dtype=torch.float32, device=data.device
        )

    def __init__(self, data: torch.Tensor, scale: float) -> None:
        self.data_ = data
        self.scale = scale

    @classmethod
    def quantize(cls, x: torch.Tensor, scale: float = 4.0) -> Scaled:
        return cls((x / scale).to(torch.bfloat16), scale)

    def dequantize(self) -> torch.Tensor:
        return self.data_.to(torch.float32) * self.scale

    def __tensor_flatten__(self):
        return ["data_"], self.scale

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return Scaled(inner["data_"], ctx)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in cls._VIEWS:
            return Scaled(func(args[0].data_, *args[1:], **kwargs), args[0].scale)
        if func is aten.mul.Tensor and isinstance(args[0], Scaled) and isinstance(args[1], (int, float)):
            return Scaled(args[0].data_, args[0].scale * args[1])
        if func is aten.mul.Tensor and isinstance(args[0], Scaled) and isinstance(args[1], Scaled):
            return Scaled((args[0].data_.float() * args[1].data_.float()).to(torch.bfloat16),
                          args[0].scale * args[1].scale)
        def plain(v):
            return v.dequantize() if isinstance(v, Scaled) else v
        return func(*[plain(a) for a in args], **{k: plain(v) for k, v in kwargs.items()})


def test_scaled_tensor_backward_ops_dispatch_through_the_subclass() -> None:
    """The output is Scaled, so is its tangent: the backward's ``t`` and ``mul`` on the tangent run
    Scaled's own dispatch (a new scale, no dequantization), as in eager."""

    def f(x):
        return x.t() * 3.0

    torch.manual_seed(0)
    data = torch.randn(4, 6)
    tangent = Scaled.quantize(torch.randn(6, 4), 12.0)  # like the output (x's scale 4.0 times 3.0)
    grads = []
    jf = jitcore.jit(f)
    for fn in (f, jf):
        x = Scaled.quantize(data).requires_grad_()
        out = fn(x)
        assert type(out) is Scaled and out.scale == 12.0
        out.backward(tangent)
        grads.append(x.grad)
    eager, jitted = grads
    # autograd copies the gradient into x's layout (new_empty_strided + copy_), which Scaled
    # dequantizes: .grad is plain in eager and jitted alike
    assert type(jitted) is type(eager)
    torch.testing.assert_close(jitted, eager)
    backward = jitcore.last_backward_traces(jf)[0]
    assert [b.symbol.id for b in backward.bound_symbols] == [
        "torch.ops.aten.t.default",
        "unflatten_tensor_subclass",
    ]
    assert backward.bound_symbols[-1].args[2] == 36.0  # t and mul ran Scaled's dispatch: a new scale


def test_scaled_weight_in_a_matmul_gets_eager_gradients() -> None:
    """Saved Scaled values are used by the backward (``mm(x.t(), grad)`` dequantizes through the
    subclass); the gradients of both the Scaled weight and the plain input match eager."""

    def f(x, w):
        return (x @ w).relu().sum()

    torch.manual_seed(0)
    x0, w0 = torch.randn(3, 4), torch.randn(4, 5)
    results = []
    for fn in (f, jitcore.jit(f)):
        x, w = x0.clone().requires_grad_(), Scaled.quantize(w0).requires_grad_()
        fn(x, w).backward()
        results.append((x.grad, w.grad))
    (ex, ew), (jx, jw) = results
    torch.testing.assert_close(jx, ex)
    assert type(jw) is type(ew)
    torch.testing.assert_close(jw.dequantize() if isinstance(jw, Scaled) else jw,
                               ew.dequantize() if isinstance(ew, Scaled) else ew)


class CoercibleScaled(Scaled):
    """Scaled with torch's tangent protocol (for torch.compile: a tangent of another scale is
    rescaled to the traced one), which eager never calls."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), dtype=torch.float32, device=data.device
        )

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return CoercibleScaled(inner["data_"], ctx)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        out = Scaled.__torch_dispatch__.__func__(cls, func, types, args, kwargs)
        if type(out) is Scaled:
            return CoercibleScaled(out.data_, out.scale)
        return out

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        data = (self.data_.float() * (self.scale / expected_metadata)).to(torch.bfloat16)
        return CoercibleScaled(data, expected_metadata)


def test_a_tangent_of_another_scale_gets_eager_gradients_despite_the_coercion_protocol() -> None:
    """A backward is derived for the gradient's own scale (tests/transforms/test_grad_tangent_kinds.py),
    as eager computes it: ``__coerce_same_metadata_as_tangent__`` is not called."""
    def f(x):
        return x.t() * 3.0

    data, g = torch.randn(2, 3), torch.randn(3, 2)
    grads = []
    for fn in (f, jitcore.jit(f)):
        x = CoercibleScaled(data.to(torch.bfloat16), 4.0).requires_grad_()
        out = fn(x)
        out.backward(CoercibleScaled(g.to(torch.bfloat16), 2.0))
        grads.append(x.grad)
    eager, jitted = grads
    assert type(jitted) is type(eager)
    torch.testing.assert_close(jitted, eager)  # exactly: no rescaled (rounded) tangent


class TwoTensorLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(4, 6)
        self.w = nn.Parameter(TwoTensor(w.clone(), w * 0.5))
        self.b = nn.Parameter(torch.zeros(4))

    def forward(self, x):
        return F.linear(x, self.w, self.b).relu()


def test_module_with_a_subclass_parameter_trains_like_eager() -> None:
    torch.manual_seed(0)
    model = TwoTensorLinear()
    jitted_model = copy.deepcopy(model)
    jmodel = jitcore.jit(jitted_model)
    x = torch.randn(3, 6)
    for m, fn in ((model, model), (jitted_model, jmodel)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            out = fn(x)
            (out * out).sum().backward()
            opt.step()
        assert type(m.w.grad) is TwoTensor
    torch.testing.assert_close(
        (jitted_model.w.a, jitted_model.w.b, jitted_model.b), (model.w.a, model.w.b, model.b)
    )
    assert jitcore.cache_misses(jmodel) == 1


def test_backward_ops_carry_the_user_line_of_the_forward_op_they_differentiate() -> None:
    def helper(h):
        return torch.nn.functional.gelu(h)

    def f(x, w):
        y = x @ w
        return helper(y).sum()

    jf = jitcore.jit(f)
    jf(torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)).backward()
    backward = jitcore.last_backward_traces(jf)[0]
    lines = {b.symbol.id: b.source[-1] for b in backward.bound_symbols if b.source}
    assert lines["torch.ops.aten.gelu_backward.default"].function == "helper"
    assert lines["torch.ops.aten.mm.default"].function == "f"
    assert lines["torch.ops.aten.mm.default"].lineno == f.__code__.co_firstlineno + 1
    assert "in helper" in str(backward)
