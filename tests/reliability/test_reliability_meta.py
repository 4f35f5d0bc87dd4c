"""Meta tensors are ordinary inputs: the jitted function computes on meta as eager does.

Shapes, dtypes, devices and requires_grad of the outputs match eager's, on the first (traced) call
and on cached calls; a call that mixes meta and CPU tensors raises eager's own error with eager's
message, and so does an op that needs values on meta (``nonzero``, ``item``). A meta call and a CPU
call of the same shapes are separate cache entries (the device is guarded).
"""

from __future__ import annotations

import pytest
import torch
from reliability_helpers import outcome, same, same_outcome

import jitcore

META = torch.device("meta")


def _compare_meta(actual, expected) -> None:
    """Meta tensors have no values: compare type, dtype, shape, device, requires_grad."""
    assert actual[0] == expected[0], f"jit {actual[0]} {actual[1]!r}, eager {expected[0]} {expected[1]!r}"
    if actual[0] == "raised":
        assert type(actual[1]) is type(expected[1]) and str(actual[1]) == str(expected[1])
        return
    a, e = actual[1], expected[1]
    for attr in ("dtype", "shape", "device", "requires_grad"):
        assert getattr(a, attr) == getattr(e, attr), f"{attr}: {getattr(a, attr)} != {getattr(e, attr)}"
    assert a.stride() == e.stride()


PROGRAMS = {
    "elementwise": lambda x: (x * 2 + 1).sin(),
    "reduction_view": lambda x: x.sum(0).reshape(-1)[:2],
    "matmul": lambda x: x @ x.t(),
    "factory_like": lambda x: torch.ones_like(x) + torch.zeros(x.shape[-1], device=x.device),
    "views": lambda x: x.t().flatten().unfold(0, 2, 1).diagonal(),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_programs_on_meta_tensors_match_eager(name: str, requires_grad: bool) -> None:
    fn = PROGRAMS[name]
    jf = jitcore.jit(fn)
    for shape in ((3, 4), (3, 4), (5, 2)):
        x = torch.empty(shape, device=META, requires_grad=requires_grad)
        _compare_meta(outcome(jf, x), outcome(fn, x))
    assert jitcore.cache_hits(jf) == 1
    cpu = torch.randn(3, 4, requires_grad=requires_grad)  # the same shape on CPU: another entry, real values
    same_outcome(outcome(jf, cpu), outcome(fn, cpu))


@pytest.mark.parametrize("order", ["meta_first", "cpu_first"])
def test_mixed_meta_and_cpu_raise_eagers_error(order: str) -> None:
    def f(x, y):
        return x + y

    jf = jitcore.jit(f)
    meta, cpu = torch.ones(2, device=META), torch.ones(2)
    args = (meta, cpu) if order == "meta_first" else (cpu, meta)
    for _ in range(2):
        _compare_meta(outcome(jf, *args), outcome(f, *args))
    assert "is not on the expected device" in str(outcome(jf, *args)[1])
    _compare_meta(outcome(jf, meta, meta), outcome(f, meta, meta))  # the function still works after


def test_ops_that_need_values_raise_eagers_error_on_meta() -> None:
    for fn in (lambda x: x.nonzero(), lambda x: x.sum().item(), lambda x: x[x > 0], lambda x: bool(x.any())):
        jf, x = jitcore.jit(fn), torch.ones(3, device=META)
        for _ in range(2):
            _compare_meta(outcome(jf, x), outcome(fn, x))


def test_meta_gradients_match_eager() -> None:
    def f(x, w):
        return (x @ w).relu().sum()

    jf = jitcore.jit(f)
    for _ in range(2):
        xs = [torch.empty(4, 3, device=META, requires_grad=True),
              torch.empty(3, 2, device=META, requires_grad=True)]
        ys = [t.detach().requires_grad_() for t in xs]
        jf(*xs).backward()
        f(*ys).backward()
        for a, e in zip(xs, ys):
            for attr in ("shape", "device", "dtype"):
                assert getattr(a.grad, attr) == getattr(e.grad, attr), attr


def test_a_meta_call_does_not_change_cpu_answers() -> None:
    def f(x):
        return x.cumsum(0) * 2

    jf, cpu = jitcore.jit(f), torch.arange(4.0)
    same(jf(cpu), f(cpu))
    _compare_meta(outcome(jf, cpu.to(META)), outcome(f, cpu.to(META)))
    same(jf(cpu), f(cpu))
