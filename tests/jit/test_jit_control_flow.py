"""torch's control-flow operators and torch.compile called inside a jitted function are traced as
the Python control flow they mean (jitcore/jit/control_flow.py); each ran eagerly before (JC-J002:
eagerly they compile their functions with Dynamo). Differential: values and gradients against eager,
and which calls come from the cache."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._higher_order_ops as hops
import torch.nn as nn
from jit_helpers import assert_same, check, clone_tree

import jitcore


def _traced(fn, calls, **options):
    """``fn`` jitted over ``calls`` (argument tuples), each compared with eager; no eager entry."""
    jf = jitcore.jit(fn, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs eagerly.*")
        for args in calls:
            check(fn, *args, jfn=jf)
    assert jf.fallback_reason is None
    return jf


def _branches(x):
    return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() - 1, (x,))


def test_cond_on_a_tensor_takes_eagers_branch_on_every_call():
    """The predicate is a value read, checked on every call: each branch is one entry, and a call
    whose predicate flips takes the other one (never the traced branch's answer)."""
    calls = [(torch.rand(3) + 1,), (-torch.rand(3) - 1,), (torch.rand(3) + 1,), (-torch.rand(3) - 1,)]
    jf = _traced(_branches, calls)
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (2, 2)


def test_cond_on_a_python_bool_and_nested_operands():
    def f(x, y, flag):
        return torch.cond(flag, lambda a, b: (a + b, a * b), lambda a, b: (a - b, a / b), (x, y))

    _traced(f, [(torch.randn(2), torch.randn(2), True), (torch.randn(2), torch.randn(2), False)])


def test_gradients_through_a_cond_branch():
    def step(w, x):
        loss = torch.cond(x.mean() > 0, lambda a, b: (a * b).sum(), lambda a, b: (a - b).pow(2).sum(), (w, x))
        loss.backward()
        return loss, w.grad

    for x in (torch.rand(3) + 1, -torch.rand(3) - 1):
        w = torch.randn(3, requires_grad=True)
        (wj, xj), (we, xe) = clone_tree((w, x)), clone_tree((w, x))
        jf = jitcore.jit(step)
        assert_same(jf(wj, xj), step(we, xe))
        assert jf.fallback_reason is None


def test_cond_refuses_what_eager_refuses():
    def f(x):
        return torch.cond(x > 0, lambda t: t, lambda t: -t, (x,))

    check(f, torch.randn(3))  # a predicate of three elements: eager's RuntimeError


def test_while_loop_runs_until_its_condition_fails():
    def f(x, limit):
        return hops.while_loop(lambda i, y: i < limit, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x))

    jf = _traced(f, [(torch.randn(2), torch.tensor(3)), (torch.randn(2), torch.tensor(3)),
                     (torch.randn(2), torch.tensor(5))])
    assert jitcore.cache_hits(jf) == 1  # the trip count is read: 3 again hits, 5 traces


def test_map_over_the_first_dimension():
    def f(xs, y):
        return hops.map(lambda t, b: (t * b, t.sum()), xs, y)

    _traced(f, [(torch.randn(4, 3), torch.randn(3)), (torch.randn(4, 3), torch.randn(3))])


def _compiled_inside(x):
    return torch.compile(lambda y: y.sin() * 2)(x) + 1


def _compiled_decorator(x):
    @torch.compile(fullgraph=True)
    def inner(y):
        return y.cos()

    return inner(x)


@pytest.mark.parametrize("fn", [_compiled_inside, _compiled_decorator])
def test_a_function_compiled_inside_is_traced(fn):
    jf = _traced(fn, [(torch.randn(3),), (torch.randn(3),)])
    assert jitcore.cache_hits(jf) == 1
    lines = str(jitcore.last_traces(jf)[-1]).splitlines()
    assert not any("compile" in line for line in lines if not line.strip().startswith("#"))


def _causal(b, h, q, kv):
    return q >= kv


def _relative_bias(score, b, h, q, kv):
    return score + (q - kv) * 0.1


@pytest.mark.parametrize("kind", ["plain", "score_mod", "block_mask"])
def test_flex_attention_is_traced(kind):
    """flex_attention's higher-order operator runs its dense implementation, written with torch ops
    (``score_mod`` and ``mask_mod`` under vmap): it ran eagerly before. ``create_block_mask`` inside
    the function is traced too."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def f(q, k, v):
        if kind == "score_mod":
            return flex_attention(q, k, v, score_mod=_relative_bias)
        if kind == "block_mask":
            return flex_attention(q, k, v, block_mask=create_block_mask(_causal, 1, 1, 16, 16, device="cpu"))
        return flex_attention(q, k, v)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        jf = _traced(f, [tuple(torch.randn(1, 2, 16, 8) for _ in range(3)) for _ in range(3)])
    assert jitcore.cache_hits(jf) >= 1


def test_other_higher_order_operators_run_eagerly():
    """``scan``'s higher-order operator dispatches on its inputs' types and has no rule for a traced
    tensor: the call runs eagerly, with eager's values."""
    from torch._higher_order_ops.scan import scan

    def f(x):
        return scan(lambda c, y: (c + y, c * 2), torch.zeros(3), x)

    jf = jitcore.jit(f)
    x = torch.randn(4, 3)
    with pytest.warns(UserWarning, match="higher-order operator 'scan'"):
        assert_same(jf(x), f(x))
    assert jf.fallback_reason.code == "JC-J002"


def test_a_module_compiled_inside_runs_its_forward():
    lin = nn.Linear(3, 2)

    def f(x):
        return torch.compile(lin)(x).relu()

    _traced(f, [(torch.randn(4, 3),), (torch.randn(4, 3),)])
