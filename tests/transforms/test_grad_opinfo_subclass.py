"""Forward + backward through jitcore with TwoTensor inputs, against eager TwoTensor, for a curated
set of OpInfo entries (pointwise, reductions, matmuls, views, normalizations, losses, convolutions).

Every floating tensor of the sample that requires grad becomes a ``TwoTensor(t, t / 2)`` leaf;
tangents of TwoTensor outputs are TwoTensors. Autograd's backward formulas then run on TwoTensor
tangents and saved values, so each backward op is resolved through TwoTensor's
``__torch_dispatch__`` — after the forward/backward split — and the executed traces hold plain
tensors only. (A sweep over all differentiable entries: see docs/autograd.md.)
"""

from __future__ import annotations

import warnings

import optree
import pytest
import torch
from test_grad_opinfo_harness import GRAD_OPS, _function, seeded_without_freezing
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

NAMES = [
    "abs", "acos", "add", "addcmul", "addmm", "amax", "atan2", "baddbmm", "bmm", "cat", "chunk", "clamp",
    "cos", "cumsum", "diagonal", "div.no_rounding_mode", "einsum", "exp", "expand", "gather", "index_add",
    "linalg.vector_norm", "log_softmax", "logsumexp", "masked_fill", "matmul", "max.reduction_with_dim",
    "mean", "mm", "mul", "native_layer_norm", "nn.functional.conv2d", "nn.functional.cross_entropy",
    "nn.functional.embedding", "nn.functional.gelu", "nn.functional.group_norm", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.max_pool2d", "nn.functional.mse_loss", "nn.functional.relu",
    "nn.functional.rms_norm", "nn.functional.scaled_dot_product_attention", "nn.functional.silu",
    "permute", "pow", "prod", "reshape", "rsqrt", "scatter_add", "select", "sigmoid", "sin", "slice",
    "softmax", "sort", "split", "sqrt", "squeeze", "stack", "sub", "sum", "t", "tanh", "transpose",
    "tril", "unbind", "unsqueeze", "var", "view", "where",
]


def _two(t: torch.Tensor) -> TwoTensor:
    return TwoTensor(t.detach().clone(), (t.detach() * 0.5).clone()).requires_grad_()


def _run(fn, tensors):
    leaves = [_two(t) for t in tensors]
    out = fn(*leaves)
    outs = [o for o in optree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    gen = torch.Generator().manual_seed(0)
    tangents = [
        TwoTensor(torch.randn(o.shape, generator=gen), torch.randn(o.shape, generator=gen))
        if type(o) is TwoTensor else torch.randn(o.shape, generator=gen)
        for o in outs
    ]
    grads = torch.autograd.grad(outs, leaves, tangents, allow_unused=True) if outs else ()
    return out, grads


def _flat(tree):
    flat = []
    for v in optree.tree_leaves(tree, none_is_leaf=True):
        if type(v) is TwoTensor:
            flat += [type(v), v.a, v.b]
        elif isinstance(v, torch.Tensor):
            flat += [type(v), v]
        else:
            flat.append(v)
    return flat


@pytest.mark.parametrize("name", NAMES)
def test_two_tensor_forward_and_backward_match_eager(name: str) -> None:
    op = GRAD_OPS[name]
    sample = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=True)))
    fn, tensors = _function(op, sample)
    with warnings.catch_warnings(), seeded_without_freezing():
        warnings.simplefilter("ignore")
        expected = _run(fn, tensors)
        jfn = jitcore.jit(fn)
        got = _run(jfn, tensors)
    e, g = _flat(expected), _flat(got)
    assert [x for x in g if isinstance(x, type)] == [x for x in e if isinstance(x, type)]
    torch.testing.assert_close(
        [x for x in g if not isinstance(x, type)],
        [x for x in e if not isinstance(x, type)],
        atol=1e-4,
        rtol=1e-4,
        equal_nan=True,
    )
    if expected[1]:
        backward = jitcore.last_backward_traces(jfn)[0]
        others = [b for b in backward.bound_symbols
                  if not (b.symbol.id == "unflatten_tensor_subclass" or b.symbol.langctx in ("aten", "ops"))]
        assert not others, f"the executed backward holds non-aten ops: {others}\n{backward}"
