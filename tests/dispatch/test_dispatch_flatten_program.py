"""flatten_program's answer for a trace without subclass values (pass 1 is its own pass 2, no input
kept) and with them (Note [A trace without subclasses is walked once], jitcore/dispatch/flatten.py)."""

from __future__ import annotations

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.dispatch.flatten import flatten_program, involves_subclasses
from jitcore.proxies.subclass import SubclassTensorProxy


def _pass_1(fn, *args):
    jf = jitcore.jit(fn)
    jf(*args)
    return jitcore.last_traces(jf)[0]


def test_a_plain_trace_is_its_own_pass_2() -> None:
    trace = _pass_1(lambda x: (x.sin() * 2, x), torch.randn(3))
    assert not involves_subclasses(trace)
    flat = flatten_program(trace, [])
    assert flat.trace is trace and flat.inputs == []


def test_a_subclass_trace_is_flattened_and_a_returned_input_kept() -> None:
    x = TwoTensor(torch.randn(3), torch.randn(3))
    expected = (x.sin() * 2, x)
    jf = jitcore.jit(lambda x: (x.sin() * 2, x))
    out = jf(x)
    assert out[1] is x and type(out[0]) is TwoTensor
    torch.testing.assert_close(out[0].a, expected[0].a)
    torch.testing.assert_close(out[0].b, expected[0].b)
    traces = jitcore.last_traces(jf)
    assert involves_subclasses(traces[0]) and len(traces) == 2  # pass 1, then pass 2
    kept = [a for a in traces[-1].args if isinstance(a, SubclassTensorProxy)]
    assert len(traces[-1].args) == 3 and [a.name for a in kept] == ["x"]  # the inner tensors, then x whole
