"""Tensor subclasses written by others (issue 15, zoo53), eager against ``jitcore.jit`` over several calls
(values, output types, inner tensors, gradients, the subclass code a warm call runs): an int8 weight-only
wrapper (a ``quantize_``-style swap of ``nn.Linear``/``nn.Embedding`` weights) in a small transformer called
on growing prompts with grad on, whose symbolic entry's grad transform relies on symbolic strides of its
inputs (Note [A symbolic layout the shape guards check], jitcore/transforms/jit_hook.py); a training step
over TwoTensor parameters returning its 0-d TwoTensor loss detached, on changing batch sizes (Note [An
assembly with static sizes], jitcore/transforms/assembly.py); wrappers of symbolic size a function
assembles and returns (Note [An assembly with symbolic sizes]).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import protocol_calls
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map_only

import jitcore

aten = torch.ops.aten


class _Int8Weight(torch.Tensor):
    """A weight stored as int8 codes ``q`` and row scales ``s`` (its outer dtype in the flatten ctx); ``t``,
    ``embedding``, ``detach`` and ``_to_copy`` handled, any other op on the dequantized weight."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, s: torch.Tensor, dtype: torch.dtype) -> _Int8Weight:
        return torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=dtype, device=q.device)

    def __init__(self, q: torch.Tensor, s: torch.Tensor, dtype: torch.dtype) -> None:
        self.q, self.s = q, s

    def __tensor_flatten__(self) -> tuple[list[str], torch.dtype]:
        return ["q", "s"], self.dtype

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, dtype: torch.dtype, size: Any, stride: Any) -> _Int8Weight:
        return cls(inner["q"], inner["s"], dtype)

    def __repr__(self) -> str:
        return f"_Int8Weight(shape={tuple(self.shape)}, dtype={self.dtype})"

    @classmethod
    def from_float(cls, w: torch.Tensor) -> _Int8Weight:
        s = w.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
        return cls(torch.round(w / s).to(torch.int8), s, w.dtype)

    def dequantize(self) -> torch.Tensor:
        return self.q.to(self.dtype) * self.s

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is aten.detach.default:
            return cls(args[0].q, args[0].s, args[0].dtype)
        if func is aten._to_copy.default:
            dtype = kwargs.get("dtype", args[0].dtype)
            return cls(args[0].q, args[0].s.to(dtype), dtype)
        if func is aten.t.default:
            return args[0].dequantize().t()
        if func is aten.embedding.default:
            weight, indices = args[0], args[1]
            return weight.q[indices].to(weight.dtype) * weight.s[indices]
        args, kwargs = tree_map_only(cls, lambda t: t.dequantize(), (args, kwargs))
        return func(*args, **kwargs)


def _quantize(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight = nn.Parameter(_Int8Weight.from_float(m.weight.detach()), requires_grad=False)
    return model


class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class _TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 16) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_Block(d, 2) for _ in range(2))
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _model(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return _quantize(_TinyLM().to(dtype)).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_a_quantized_transformer_on_growing_prompts_under_grad_runs_no_dispatch_when_warm(
        dtype: torch.dtype) -> None:
    eager, model = _model(dtype), _model(dtype)
    jitted = jitcore.jit(model)
    warm: list[str] = []
    for i, n in enumerate((5, 6, 7, 8)):
        torch.manual_seed(i)
        ids = torch.randint(0, 50, (2, n))
        expected = eager(ids)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(_Int8Weight) as frames:
            actual = jitted(ids)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        torch.testing.assert_close(actual, expected)
        assert actual.requires_grad == expected.requires_grad
        expected.float().square().mean().backward()
        actual.float().square().mean().backward()
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            if p.requires_grad:
                torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert jitcore.cache_misses(jitted) == 2  # the first prompt's length, then every length
    # before: the symbolic entry ran pass 1 under torch's autograd: 10 dispatches a call (aten.t, embedding)
    assert warm == []


_PROGRAMS = {
    "linear_3d": lambda x, b, w, e: F.linear(x, w, b),
    "layer_norm_linear": lambda x, b, w, e: F.linear(F.layer_norm(x, (8,)) * b[:1], w),
    "embedding": lambda x, b, w, e: F.embedding(x, e) * b.repeat(2),  # x: indices
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_a_symbolic_entry_relying_on_its_inputs_strides_differentiates_as_eagerly(name: str) -> None:
    torch.manual_seed(0)
    w, e = _Int8Weight.from_float(torch.randn(4, 8)), _Int8Weight.from_float(torch.randn(50, 8))
    program = _PROGRAMS[name]
    jitted = jitcore.jit(program)
    # contiguous, then a transposed layout of the same sizes and an offset view: new entries, not wrong ones
    inputs = [torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 7, 8),
              torch.randn(2, 8, 7).transpose(1, 2), torch.randn(2, 9, 8), torch.randn(3, 10, 8)[1:],
              torch.randn(2, 11, 8)]
    if name == "embedding":
        inputs = [torch.randint(0, 50, (2, n)) for n in (5, 6, 7)] + [
            torch.randint(0, 50, (8, 2)).t(), torch.randint(0, 50, (2, 9)), torch.randint(0, 50, (3, 10))[1:]]
    warm: list[str] = []
    for x in inputs:
        b = torch.randn(4, requires_grad=True)
        bj = b.detach().clone().requires_grad_()
        misses = jitcore.cache_misses(jitted)
        expected = program(x, b, w, e)
        with protocol_calls(_Int8Weight) as frames:
            actual = jitted(x, bj, w, e)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        torch.testing.assert_close(actual, expected)
        expected.square().sum().backward()
        actual.square().sum().backward()
        torch.testing.assert_close(bj.grad, b.grad)
    assert warm == []


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)
        weight = self.l1.weight.detach()
        self.l1.weight = nn.Parameter(TwoTensor(weight.clone(), weight * 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(F.relu(self.l1(x)))


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).square().mean()  # a TwoTensor: the parameter's class spreads to every activation
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()  # no op with a graph makes it: assembled from its inner tensors after the node


@pytest.mark.parametrize("shape", [(2, 8), (2, 3, 8)], ids=["2d", "3d"])
def test_a_training_step_over_twotensor_parameters_on_changing_batches_runs_no_dispatch_when_warm(
        shape: tuple[int, ...]) -> None:
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = _Mlp()
        models.append((model, torch.optim.SGD(model.parameters(), lr=0.01)))
    (eager, eager_opt), (model, opt) = models
    jitted = jitcore.jit(_train_step)
    warm: list[str] = []
    for i, n in enumerate((4, 5, 6, 7)):
        torch.manual_seed(i)
        x = torch.randn(*shape[:-2], n, shape[-1])
        expected = _train_step(eager, eager_opt, x)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(TwoTensor) as frames:
            actual = jitted(model, opt, x)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert type(actual) is type(expected)
        torch.testing.assert_close((actual.a, actual.b), (expected.a, expected.b))
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            assert type(q) is type(p), name
            torch.testing.assert_close(q.detach(), p.detach(), msg=name)
            if isinstance(p, TwoTensor):
                torch.testing.assert_close((q.a, q.b), (p.a, p.b), msg=name)
    assert jitcore.cache_misses(jitted) == 2
    assert warm == []  # before: the symbolic entry ran pass 1 under torch's autograd (74 dispatches a call)


def _activation_detached(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    out = (x @ w).relu()
    out.sum().backward()
    return out.detach()


def _assembled_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return TwoTensor(a * 2, b * 3)


def _pair_inputs(n: int) -> tuple[torch.Tensor, ...]:
    return torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)


def _weight_and_batch(n: int) -> tuple[torch.Tensor, ...]:
    return TwoTensor(torch.randn(8, 4), torch.randn(8, 4)).requires_grad_(), torch.randn(n, 8)


@pytest.mark.parametrize("program, make", [(_activation_detached, _weight_and_batch),
                                           (_assembled_pair, _pair_inputs)], ids=["detached", "made"])
def test_a_wrapper_of_symbolic_size_the_function_assembles_keeps_one_entry(program: Any, make: Any) -> None:
    jitted = jitcore.jit(program)
    warm: list[str] = []
    for n in (3, 4, 5, 6, 7):
        torch.manual_seed(n)
        args = make(n)
        ours = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        expected = program(*args)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(TwoTensor) as frames:
            actual = jitted(*ours)
        if jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert type(actual) is TwoTensor and actual.shape == expected.shape
        flags = (expected.requires_grad, expected.a.requires_grad)
        assert (actual.requires_grad, actual.a.requires_grad) == flags
        torch.testing.assert_close((actual.a, actual.b), (expected.a, expected.b))
        if expected.a.requires_grad:
            (expected.a.square().sum() + expected.b.sum()).backward()
            (actual.a.square().sum() + actual.b.sum()).backward()
        for mine, theirs in zip(ours, args):
            if theirs.requires_grad:
                torch.testing.assert_close(mine.grad, theirs.grad)
    # before: an entry per size ("made"), or pass 1 under torch's autograd on every warm call ("detached")
    assert jitcore.cache_misses(jitted) == 2
    assert warm == []
