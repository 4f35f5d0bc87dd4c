"""A subclass of a traceable subclass that overrides ``__torch_dispatch__`` but inherits a
``__tensor_unflatten__`` naming its base's class (``TwoTensor``'s does): the override runs."""

from __future__ import annotations

import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore


class Doubling(TwoTensor):
    """Doubles the first inner result of every op: eager's values show whether it ran."""

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        return TwoTensor(out.a * 2, out.b) if isinstance(out, TwoTensor) else out


def one_op(x):
    return x * 3


def test_the_override_runs_for_ops_on_the_input():
    x = Doubling(torch.randn(3), torch.randn(3))
    jf = jitcore.jit(one_op)
    got, expected = jf(x), one_op(x)
    assert type(got) is type(expected)
    torch.testing.assert_close(got.a, expected.a)
    torch.testing.assert_close(got.b, expected.b)


class Plain(torch.Tensor):
    """A subclass with torch's default ``__torch_function__``, which converts results to its class."""


def _outcome(fn, *args):
    try:
        out = fn(*args)
    except RuntimeError as exc:
        return RuntimeError, str(exc)
    return type(out), out.a, out.b


def test_a_plain_subclass_operand_converts_a_subclass_result_as_eagerly():
    """``TwoTensor + Plain``: the default ``__torch_function__`` makes the TwoTensor result a Plain
    through ``as_subclass``, which torch refuses for a wrapper subclass's alias (eager raises). jitcore
    returned the TwoTensor, a result eager never gives."""
    t, p = TwoTensor(torch.randn(3), torch.randn(3)), torch.randn(3).as_subclass(Plain)
    expected = _outcome(lambda a, b: a + b, t, p)
    assert expected[0] is RuntimeError
    assert _outcome(jitcore.jit(lambda a, b: a + b), t, p) == expected
