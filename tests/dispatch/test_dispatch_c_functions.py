"""Torch C functions the symbol tables do not know, called on traced tensors (Note [C functions
that compute] in jitcore/dispatch/resolver.py): one that computes is recorded (its values are
this call's, not a trace-time constant or a name nothing produces); metadata functions still act on
the shadows."""

from __future__ import annotations

import torch

import jitcore
from jitcore.langctx.torch import TORCH_TABLE


def test_the_c_functions_here_are_outside_the_tables() -> None:
    assert torch._C._nn.elu not in TORCH_TABLE
    assert torch._C._nn.unflatten_dense_tensors not in TORCH_TABLE


def test_a_computing_c_function_is_recorded() -> None:
    def f(x):
        return torch._C._nn.elu(x, 0.5) * 2

    jf = jitcore.jit(f)
    for _ in range(3):  # cached calls compute with their own values
        x = torch.randn(5)
        torch.testing.assert_close(jf(x), f(x))
    assert len(jf.entries) == 1
    assert "torch._C._nn.elu" in str(jitcore.last_traces(jf)[0])


def test_a_computing_c_function_under_autograd() -> None:
    def f(x):
        return torch._C._nn.elu(x).sum()

    x_e = torch.randn(4, requires_grad=True)
    x_j = x_e.detach().clone().requires_grad_()
    f(x_e).backward()
    jitcore.jit(f)(x_j).backward()
    torch.testing.assert_close(x_j.grad, x_e.grad)


def test_a_c_function_that_makes_views() -> None:
    def f(flat, like):
        first, second = torch._C._nn.unflatten_dense_tensors(flat, [like, like])
        return first * 2 + second

    jf = jitcore.jit(f)
    for _ in range(2):
        flat, like = torch.randn(6), torch.randn(3)
        torch.testing.assert_close(jf(flat, like), f(flat, like))


def test_a_metadata_c_function_still_acts_on_shadows() -> None:
    def f(x, y):
        groups = torch._C._group_tensors_by_device_and_dtype([[x, y]], False)
        return [len(tensors[0]) for tensors, _ in groups.values()], x + y

    jf = jitcore.jit(f)
    x, y = torch.randn(2), torch.randn(2)
    sizes, out = jf(x, y)
    assert sizes == f(x, y)[0] == [2]
    torch.testing.assert_close(out, x + y)
