"""Differential tests of jitcore.jit on realistic programs (eager vs jitted)."""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from jit_helpers import assert_same, check
from torch import nn

import jitcore

torch.manual_seed(0)


def test_mlp_function() -> None:
    def mlp(x, w1, b1, w2):
        return F.linear(F.relu(F.linear(x, w1, b1)), w2).log_softmax(-1)

    check(mlp, torch.randn(8, 16), torch.randn(32, 16), torch.randn(32), torch.randn(10, 32))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)
        self.act = nn.GELU()

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_mlp_module() -> None:
    model = MLP()
    jmodel = jitcore.jit(model)
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_same(jmodel(x), model(x))
        assert_same(jmodel(x), model(x))
    assert jitcore.cache_hits(jmodel) == 1


class Block(nn.Module):
    """A small pre-norm transformer block."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(0.1)

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


def test_transformer_block_eval() -> None:
    block = Block().eval()
    jblock = jitcore.jit(block)
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        assert_same(jblock(x), block(x))
        assert_same(jblock(x), block(x))
    assert jitcore.cache_hits(jblock) == 1


def test_transformer_block_with_grad_values() -> None:
    block = Block().eval()
    x = torch.randn(2, 6, 32)
    out = jitcore.jit(block)(x)
    torch.testing.assert_close(out, block(x))
    assert out.requires_grad


def test_control_flow_on_shapes_and_loops() -> None:
    def f(x, n: int):
        acc = torch.zeros_like(x[0])
        for i in range(n):
            if x.shape[0] > 2 and i % 2 == 0:
                acc = acc + x[i % x.shape[0]] * i
            else:
                acc = acc - x.mean(0)
        while acc.ndim < 3:
            acc = acc.unsqueeze(0)
        return acc

    check(f, torch.randn(4, 3), 5)
    check(f, torch.randn(2, 3), 3)


def _helper(x, scale):
    return torch.tanh(x) * scale


def test_helpers_closures_comprehensions_and_dict_outputs() -> None:
    offset = 0.25

    def inner(t):
        return t + offset

    def f(xs, scale=2.0):
        ys = [inner(_helper(x, scale)) for x in xs]
        return {"sum": sum(ys), "stack": torch.stack(ys), "n": len(ys), "name": "out"}

    check(f, [torch.randn(3), torch.randn(3), torch.randn(3)])
    check(f, [torch.randn(3)], scale=0.5)


Pair = namedtuple("Pair", ["a", "b"])


@dataclass
class Config:
    alpha: float
    x: torch.Tensor


def test_namedtuple_and_dataclass_inputs_and_outputs() -> None:
    def f(p, cfg):
        return Pair(p.a * cfg.alpha + cfg.x, p.b.relu())

    out = check(f, Pair(torch.randn(3), torch.randn(3)), Config(0.5, torch.randn(3)))
    assert jitcore.cache_misses(out) == 1


def test_in_place_on_inputs_mutates_the_callers_tensors() -> None:
    def f(x, y):
        x.add_(1)
        y[0] = 5.0
        return x * 2

    check(f, torch.randn(3), torch.randn(2))


def test_outputs_alias_inputs() -> None:
    def f(x):
        return x, x.view(-1), x[1:]

    x = torch.randn(2, 3)
    jf = jitcore.jit(f)
    a, b, c = jf(x)
    assert a is x
    assert b._base is x and c._base is x


def test_python_number_and_none_outputs() -> None:
    def f(x):
        return x.shape[0] * 2, None, x.dtype, x.sum()

    check(f, torch.randn(4))


def test_aten_calls_are_recorded_as_aten_symbols() -> None:
    def f(x):
        return torch.ops.aten.add.Tensor(x, x), torch.ops.aten.mm(x, x)

    jf = check(f, torch.randn(3, 3))
    text = str(jitcore.last_traces(jf)[-1])
    assert "torch.ops.aten.add.Tensor(x, x)" in text and "torch.ops.aten.mm(" in text


def test_tensor_methods_properties_operators() -> None:
    def f(x, w):
        y = (x @ w).T.contiguous()
        y += 1
        z = -y ** 2 / 3 + 1 - y.abs() // 2 % 3
        return z, y.mT, x[..., None, 1:].squeeze(-2), (x > 0).sum(), 2 - x, 1 / (x.abs() + 1)

    check(f, torch.randn(4, 5), torch.randn(5, 4))


def test_data_dependent_control_flow_is_a_clear_error_with_fullgraph() -> None:
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(jitcore.DataDependentError) as info:
        jitcore.jit(f, fullgraph=True)(torch.randn(3))
    assert "values" in str(info.value)


def test_fallback_eager_runs_data_dependent_functions() -> None:
    def f(x):
        return x * 2 if x.sum().item() > 0 else -x

    jf = jitcore.jit(f, fallback="eager", fullgraph=True)
    x = torch.ones(3)
    with pytest.warns(UserWarning, match="eagerly"):
        assert_same(jf(x), f(x))
    assert_same(jf(-x), f(-x))


def test_torch_rejecting_arguments_raises_torchs_error() -> None:
    def f(x, y):
        return x + y

    check(f, torch.randn(3), torch.randn(4))


def test_a_missing_tensor_attribute_raises_eagers_error() -> None:
    """The message names the program's class (Tensor, Parameter), not the tracing proxy's."""
    check(lambda t: t.append(1), torch.randn(2))
    check(lambda t: torch.nn.Parameter(t).not_there, torch.randn(2))
    check(lambda t: (getattr(t, "absent", 3), hasattr(t, "absent")), torch.randn(2))


def test_decorator_with_options() -> None:
    @jitcore.jit(cache_limit=4)
    def f(x):
        return x.cos()

    assert_same(f(torch.zeros(2)), torch.ones(2))


def test_method_forms_with_spread_out_int_lists_and_number_operands() -> None:
    def f(x, c):
        return (
            torch.pow(x, 2), torch.remainder(x, 2), torch.where(c, x, 0.0), x.reshape(-1), x.permute(1, 0),
            x.tile(2, 1), x.flip(0), torch.Tensor.reshape(x, 3, 2), x.broadcast_to(2, 2, 3), x.hsplit(3),
            x.hsplit([1, 2]),
        )

    x = torch.randn(2, 3)
    check(f, x, x > 0)


def test_a_torch_compiled_helper_is_traced_as_its_function():
    """``torch.compile(helper)`` called inside a jitted function: the helper's own code is interpreted
    (dynamo cannot trace jitcore's values; torchao's optimizers compile their per-parameter step)."""

    @torch.compile(fullgraph=True)
    def helper(x, y):
        return (x * y).sin() + 1

    def f(x, y):
        return helper(x, y).sum(-1)

    jf = jitcore.jit(f)
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        x, y = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
        torch.testing.assert_close(jf(x, y), f(x, y))
    assert "torch.sin" in str(jitcore.last_traces(jf)[0])
