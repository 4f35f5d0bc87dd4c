"""Hypothesis-generated op chains over tensor subclasses, jitted vs eager; __torch_function__ subclasses."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from subclass_zoo import (
    DISPATCH_LOG,
    ClampedTensor,
    LinearOverrideTensor,
    MirrorTensor,
    ScaledTensor,
    TaggedTensor,
)
from test_dispatch_subclasses import assert_runs_on_plain_tensors, assert_same_value
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

_UNARY = {
    "sin": torch.sin,
    "relu": torch.relu,
    "neg": lambda x: -x,
    "exp_half": lambda x: (x * 0.5).exp(),
    "t": lambda x: x.t(),
    "sum0": lambda x: x.sum(dim=0, keepdim=True).expand_as(x),
    "clone": lambda x: x.clone(),
    "tanh": torch.tanh,
}
_BINARY = {"add": torch.add, "mul": torch.mul, "sub": lambda a, b: a - b, "mm": lambda a, b: a @ b}

_MAKERS = {
    "two": lambda t: TwoTensor(t, t * 2),
    "scaled": lambda t: ScaledTensor(t.to(torch.bfloat16), 2.0),
    "tagged": lambda t: TaggedTensor(t, "h"),
    "mirror": MirrorTensor,
    "clamped": lambda t: ClampedTensor(t, 3.0),
    "plain": lambda t: t,
}


def _program(steps):
    def program(x, y):
        values = [x, y]
        for kind, name, i, j in steps:
            a, b = values[i % len(values)], values[j % len(values)]
            values.append(_UNARY[name](a) if kind == "u" else _BINARY[name](a, b))
        return values[-1], values[len(values) // 2]

    return program


_STEP = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(sorted(_UNARY)), st.integers(0, 20), st.integers(0, 20)),
    st.tuples(st.just("b"), st.sampled_from(sorted(_BINARY)), st.integers(0, 20), st.integers(0, 20)),
)


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(sorted(_MAKERS)),
    other=st.sampled_from(["same", "plain"]),
    steps=st.lists(_STEP, min_size=1, max_size=6),
)
def test_generated_chains_match_eager(kind, other, steps) -> None:
    torch.manual_seed(0)
    make = _MAKERS[kind]
    x = make(torch.randn(3, 3))
    y = make(torch.randn(3, 3)) if other == "same" else torch.randn(3, 3)
    program = _program(steps)
    try:
        expected = program(x, y)
    except Exception as exc:  # noqa: BLE001 - then the jitted call must raise the same type
        try:
            jitcore.jit(program)(x, y)
        except Exception as jexc:  # noqa: BLE001
            assert type(jexc) is type(exc), (jexc, exc)
            return
        raise AssertionError(f"eager raised {exc!r}; jitcore did not") from exc
    jfn = jitcore.jit(program)
    assert_same_value(jfn(x, y), expected)
    assert_same_value(jfn(x, y), expected)
    assert jitcore.cache_hits(jfn) == 1
    assert_runs_on_plain_tensors(jitcore.last_traces(jfn)[-1])


def test_own_torch_function_is_interpreted_before_dispatch() -> None:
    def f(x, w, b):
        return F.linear(x, w, b).relu(), (w + 1).sum()

    x, w, b = torch.randn(2, 4), LinearOverrideTensor(torch.randn(3, 4)), torch.randn(3)
    DISPATCH_LOG.clear()
    expected = f(x, w, b)
    eager_log = list(DISPATCH_LOG)
    DISPATCH_LOG.clear()
    jfn = jitcore.jit(f)
    actual = jfn(x, w, b)
    assert [str(e) for e in DISPATCH_LOG] == [str(e) for e in eager_log]
    assert ("LinearOverrideTensor.__torch_function__", "linear") in DISPATCH_LOG
    assert_same_value(actual, expected)
    assert_same_value(jfn(x, w, b), expected)
    assert_runs_on_plain_tensors(jitcore.last_traces(jfn)[-1])
