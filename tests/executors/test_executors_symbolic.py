"""Symbolic sizes and dynamic numbers through the inductor executor (jitcore/executors/symbolic.py,
Note [Symbolic regions]): regions of an entry with symbolic sizes, int and float dynamic numbers are
compiled once for every size and value, values and dtypes match eager, a training step with a
dynamic batch size is fused forward and backward, and a region whose compile added a guard that a
call breaks runs on torch for that call."""

from __future__ import annotations

import torch
from executor_helpers import INDUCTOR, assert_same, executor_log, fused, lowered_trace

import jitcore


def _lowerings(log: list[str]) -> list[str]:
    return [m for m in log if " lowered: " in m]


def test_symbolic_sizes_are_fused_once_for_every_later_size() -> None:
    def f(x, y):
        z = (x * 2 + y).sin()
        return z.view(x.shape[0] * x.shape[1], -1).sum(1), z.amax(0)

    jfn = jitcore.jit(f, executors=INDUCTOR)
    with executor_log() as log:
        for b in (3, 5, 7, 9, 12):
            x, y = torch.randn(b, 4, 6), torch.randn(b, 4, 6)
            assert_same(jfn(x, y), f(x, y))
    # the static entry of size 3, then the symbolic entry: compiled at 5, reused at 7, 9 and 12
    # (torch.compile's automatic dynamic shapes compile the same two graphs)
    assert len(_lowerings(log)) == 2, log
    trace = lowered_trace(jfn)
    assert '"cpu f32[s0, 4, 6]"' in trace and len(fused(trace)) == 1, trace
    assert "operator.mul" in trace.split("= fusion0")[1], trace  # size arithmetic inside the region
    assert not any("guards failed" in m for m in log), log


def test_dynamic_shapes_from_the_first_call() -> None:
    def f(x, w):
        return torch.relu(x @ w + 1).tanh() * 3

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    w = torch.randn(8, 5)
    with executor_log() as log:
        for b in (2, 6, 11):
            x = torch.randn(b, 8)
            assert_same(jfn(x, w), f(x, w))
    assert len(_lowerings(log)) == 1, log


def test_inputs_with_other_strides_than_compiled_for_run_the_same_ops() -> None:
    """Transposed and sliced inputs: entries of their own (the prologue guards the stride relations
    of symbolic sizes), a sliced input's region declined (its stride is a symbol no input gives),
    and a transposed input handed to the region compiled for contiguous ones runs it on torch."""
    def f(x):
        return (x.sin() + 1) * 2

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    for x in (torch.randn(5, 6), torch.randn(6, 7).t(), torch.randn(7, 10)[:, :6], torch.randn(3, 4),
              torch.randn(8, 9).t()):
        assert_same(jfn(x), f(x))
    contiguous = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    contiguous(torch.randn(5, 6))
    trace = jitcore.last_traces(contiguous)[-1]
    (call,) = [b for b in trace.bound_symbols if b.symbol.name == "fusion0"]
    x = torch.randn(6, 7).t()
    assert_same(call.symbol.fn(x, 7, 6)[0], f(x))  # (x, s0, s1)


def test_int_and_float_dynamic_numbers_are_fused() -> None:
    def f(x, lr, n):
        return ((x * lr + 1 - lr) * n).relu() / lr

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr", "n"))
    x = torch.randn(6, 5)
    with executor_log() as log:
        for lr, n in ((0.1, 3), (2.5, -4), (1e-3, 0), (0.3, 1)):
            assert_same(jfn(x, lr, n), f(x, lr, n))
    assert len(_lowerings(log)) == 1, log
    trace = lowered_trace(jfn)
    assert len(fused(trace)) == 1 and "fusion0(x, lr, n)" in trace, trace


def test_a_float_number_converts_as_eager_converts_a_scalar() -> None:
    def f(x, lr):
        return (x * lr + x) - lr

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr",))
    for x in (torch.arange(12).reshape(3, 4), torch.randn(3, 4, dtype=torch.float64),
              torch.randn(3, 4).to(torch.bfloat16), torch.tensor(2.0, dtype=torch.float16)):
        for lr in (0.1, 1 / 3):
            got, want = jfn(x, lr), f(x, lr)
            assert got.dtype == want.dtype  # an int tensor times a float is the default dtype
            torch.testing.assert_close(got, want, rtol=1.6e-2 if x.dtype == torch.bfloat16 else None,
                                       atol=None if x.dtype != torch.bfloat16 else 1e-2)
    assert "fusion" in lowered_trace(jfn)


def test_a_float_read_other_than_as_an_operand_stays_on_torch() -> None:
    def f(x, lr):  # pow's kernel depends on the exponent's value: float_reads.py
        return torch.pow(x.abs() * 2 + 1, lr).cos() + 1

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("lr",))
    x = torch.randn(4, 4)
    with executor_log():
        for lr in (0.5, 2.0):
            assert_same(jfn(x, lr), f(x, lr))
    trace = lowered_trace(jfn)
    assert "= torch.pow(" in trace.replace("# t", "#t"), trace  # the pow is a call of its own


def test_a_training_step_with_a_dynamic_batch_size_is_fused_forward_and_backward() -> None:
    torch.manual_seed(0)
    w1, w2 = torch.randn(8, 16, requires_grad=True), torch.randn(16, 3, requires_grad=True)

    def loss(x, t):
        h = torch.nn.functional.gelu(x @ w1) * 0.5 + 1
        return ((h.tanh() @ w2 - t) ** 2).mean()

    jfn = jitcore.jit(loss, executors=INDUCTOR)
    with executor_log() as log:
        for b in (4, 6, 10, 13):
            x, t = torch.randn(b, 8), torch.randn(b, 3)
            grads = []
            for fn in (loss, jfn):
                w1.grad = w2.grad = None
                value = fn(x, t)
                value.backward()
                grads.append((value.detach(), w1.grad.clone(), w2.grad.clone()))
            for got, want in zip(grads[1], grads[0]):
                torch.testing.assert_close(got, want)
            if b > 4:  # the symbolic entry runs under torch's autograd: one compiled forward/backward
                assert "Compiled" in type(value.grad_fn).__name__, value.grad_fn
    assert sum("computation lowered" in m for m in log) == 1, log  # once for sizes 6, 10 and 13
    trace = lowered_trace(jfn)
    assert '"cpu f32[s0, 8]"' in trace and len(fused(trace)) == 1, trace


def test_the_default_policy_fuses_a_symbolic_training_entry_in_the_background() -> None:
    torch.manual_seed(0)
    w = torch.randn(8, 4, requires_grad=True)

    def loss(x):
        return ((x @ w).sin() * 2 + 1).pow(2).mean()

    jfn = jitcore.jit(loss, fuse_after=2)  # default executors: inductor once hot, in the background
    for i, b in enumerate((3, 5, 6, 7, 9, 11, 12)):
        x = torch.randn(b, 8)
        w.grad = None
        want = loss(x)
        want.backward()
        expected = w.grad.clone()
        w.grad = None
        got = jfn(x)
        got.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(w.grad, expected)
        if i == 4:
            assert jitcore.executors.wait_for_compiles(timeout=600)
    trace = lowered_trace(jfn)
    assert '"cpu f32[s0, 8]"' in trace and len(fused(trace)) == 1, trace
    assert "Compiled" in type(got.grad_fn).__name__


def test_regions_with_sizes_that_values_decide_are_fused() -> None:
    """Note [Sizes that values decide]: the regions after a mask whose count changes take the count as a
    symbol of their own (its traced value the hint) and are compiled once for every later count."""
    def f(x, y):
        loss = ((x - y) ** 2).sin() * 2 + 1
        picked = loss[y > 0]
        return picked.mean() + picked.exp().sum()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    generator = torch.Generator().manual_seed(0)
    calls = [(torch.randn(64, generator=generator), torch.randn(64, generator=generator)) for _ in range(8)]
    assert len({int((y > 0).sum()) for _x, y in calls}) > 3
    with executor_log() as log:
        for x, y in calls:
            assert_same(jfn(x, y), f(x, y))
    assert jitcore.cache_misses(jfn) == 2
    trace = lowered_trace(jfn)
    assert "size_of(" in trace and '"cpu f32[u' in trace, trace
    assert len(fused(trace)) == 2, trace  # before the mask's read, and after it over the symbolic count
    assert not any("declined" in m for m in log), log


def test_a_symbolic_njt_entry_under_grad_fuses_and_takes_every_ragged_structure() -> None:
    """A nested jagged tensor under grad: the grad transform's forward of the symbolic entry holds
    the values' ragged size as a number of the computation, while the region's inputs have the
    traced sizes, so the region is compiled for them. A later structure's values have another total
    length: inductor's size check refuses them, and the region runs its torch calls (before: the
    AssertionError reached the caller, 'expected size 170==160', once the trial had lowered it)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)

    def f(x):
        return lin(x).relu() * 2

    jfn = jitcore.jit(f, executors=INDUCTOR)
    for lengths in ((5, 3, 2), (4, 4, 4), (1, 9, 3), (6, 2, 2), (2, 2)):
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        values = torch.randn(sum(lengths), 8)
        outputs, grads = [], []
        for fn in (f, jfn):
            leaf = values.clone().requires_grad_()
            out = fn(torch.nested.nested_tensor_from_jagged(leaf, offsets))
            out.values().square().sum().backward()
            outputs.append(out.values().detach())
            grads.append((leaf.grad, lin.weight.grad.clone()))
            lin.weight.grad = None
            lin.bias.grad = None
        torch.testing.assert_close(outputs[1], outputs[0])
        torch.testing.assert_close(grads[1], grads[0])
    assert "fusion" in lowered_trace(jfn)
