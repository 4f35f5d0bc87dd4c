"""``t.tolist()`` gives names of the computation, as ``t.item()`` does (Note [The numbers of tolist],
jitcore/jit/value_reads.py): programs that add up or scale by a tensor's elements run one entry over
changing values, with eager's answers; where an element decides control flow it is checked.

Every test is differential: each call's result and every mutated input are compared with eager.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import assert_same, clone_tree

import jitcore


def run_calls(fn, calls, **options):
    """Call ``fn`` eagerly and jitted on each argument tuple; compare results and mutated inputs."""
    jfn = jitcore.jit(fn, **options)
    for args in calls:
        eager_args, jit_args = clone_tree(args), clone_tree(args)
        expected = fn(*eager_args)
        assert_same(jfn(*jit_args), expected)
        assert_same(jit_args, eager_args)
    return jfn


def _values(n, shape=(4,), dtype=torch.float32):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(shape, generator=g) * 4
    return x.to(dtype) if dtype is not torch.float32 else x


def sum_of_list(x):
    return x * sum(x.tolist())


def loop_total(x):
    total = 0.0
    for v in x.tolist():
        total += v
    return x - total, total


def nested_rows(x):
    rows = x.tolist()
    return [sum(r) for r in rows], x + rows[0][1] * rows[1][0]


def int_elements(x):
    xs = x.long().tolist()
    return x * (xs[0] + xs[1]), xs[2] * 3 - xs[3]


def bool_elements(x):
    bs = (x > 0).tolist()
    return sum(bs), bs


def scalar_tensor(x):
    v = x.sum().tolist()
    return x * v, v


def returned_list(x):
    return x.tolist(), x.long().tolist()


def test_sums_of_a_list_hit_the_cache_over_changing_values():
    for fn in (sum_of_list, loop_total):
        jfn = run_calls(fn, [(_values(i),) for i in range(10)])
        assert jitcore.cache_misses(jfn) == 1 and jitcore.cache_hits(jfn) == 9, fn.__name__


def test_nested_int_bool_and_scalar_lists_are_names():
    for fn, shape in ((nested_rows, (2, 2)), (int_elements, (4,)), (bool_elements, (5,)),
                      (scalar_tensor, ()), (returned_list, (3, 2))):
        jfn = run_calls(fn, [(_values(i, shape),) for i in range(8)])
        assert jitcore.cache_misses(jfn) == 1 and jitcore.cache_hits(jfn) == 7, fn.__name__


def test_the_list_read_binds_its_elements_as_names():
    jfn = jitcore.jit(loop_total)
    jfn(_values(0))
    text = str(jitcore.last_traces(jfn)[-1])
    assert "[n0, n1, n2, n3] = torch.Tensor.tolist(x)" in text and "check_read" not in text


def branch_on_an_element(x):
    xs = x.tolist()
    if xs[0] > 0:
        return x + xs[1]
    return x - xs[1]


def test_an_element_that_decides_a_branch_is_checked():
    # the branch's outcome is checked, not the values: two entries, one per side
    calls = [(torch.tensor([s, float(i), 0.0]),) for i in range(6) for s in (1.0, -1.0)]
    jfn = run_calls(branch_on_an_element, calls)
    assert jitcore.cache_misses(jfn) == 2 and jitcore.cache_hits(jfn) == 10


def index_by_an_element(x, table):
    i = x.long().tolist()[0]
    return table[i]


def test_an_element_used_as_an_index_is_checked():
    table = [10, 20, 30]
    calls = [(torch.tensor([float(i % 3), 5.0]), table) for i in range(6)]
    jfn = run_calls(index_by_an_element, calls)
    assert jitcore.cache_misses(jfn) == 3 and jitcore.cache_hits(jfn) == 3


def read_then_written(x):
    before = x.tolist()
    x.add_(1)
    return sum(before), x


def test_a_list_read_before_a_write_keeps_the_values_read():
    jfn = run_calls(read_then_written, [(_values(i),) for i in range(5)])
    assert jitcore.cache_misses(jfn) == 1 and jitcore.cache_hits(jfn) == 4


def grad_scaled(x):
    return (x * sum(x.detach().tolist())).sum()


def test_list_numbers_under_grad():
    jfn = jitcore.jit(grad_scaled)
    for i in range(5):
        x = _values(i).requires_grad_(True)
        xe = x.detach().clone().requires_grad_(True)
        out, expected = jfn(x), grad_scaled(xe)
        out.backward()
        expected.backward()
        assert_same(out, expected)
        assert_same(x.grad, xe.grad)
    assert jitcore.cache_misses(jfn) == 1 and jitcore.cache_hits(jfn) == 4


def test_a_complex_list_stays_a_checked_read():
    def f(x):
        return torch.complex(x, x).tolist()

    jfn = run_calls(f, [(_values(i, (2,)),) for i in range(3)])
    assert jitcore.cache_misses(jfn) == 3


def test_a_symbolic_length_is_specialized():
    jfn = run_calls(sum_of_list, [(_values(i, (n,)),) for i, n in enumerate([3, 4, 5, 3, 4, 5, 6, 3])],
                    dynamic=True)
    # one entry per length (a ShapeEnv guard), none per value
    assert jitcore.cache_misses(jfn) == 4 and jitcore.cache_hits(jfn) == 4


@settings(max_examples=15, deadline=None)
@given(rows=st.lists(st.lists(st.integers(-50, 50), min_size=3, max_size=3), min_size=2, max_size=2),
       dtype=st.sampled_from([torch.float32, torch.float64, torch.int64, torch.int32, torch.bool]))
def test_arithmetic_on_list_elements_matches_eager(rows, dtype):
    def f(x):
        values = x.tolist()
        flat = [v for row in values for v in row]
        return sum(flat) * 2 - flat[0], x.to(torch.float64) * (flat[1] + 1), values

    x = torch.tensor(rows).to(dtype)
    jfn = jitcore.jit(f)
    for shift in range(3):
        y = (x.to(torch.int64) + shift).to(dtype)
        assert_same(jfn(y.clone()), f(y.clone()))
    assert jitcore.cache_misses(jfn) == 1


def written_list(x):
    values = x.tolist()
    values[0] = 0.5
    values.append(2.0)
    values.reverse()
    return values, x * values[1]


def test_the_program_may_write_the_list_it_got():
    jfn = run_calls(written_list, [(_values(i),) for i in range(4)])
    assert jitcore.cache_misses(jfn) == 1 and jitcore.cache_hits(jfn) == 3


def test_a_count_read_with_tolist_splits_a_tensor_that_requires_grad() -> None:
    """``n = mask.sum().tolist()`` then ``z.split([n, len - n])`` with ``z`` requiring grad (a mixture of
    experts' ``expert_size.tolist()`` in training): the split needs the count, so it is checked on every
    call (Note [A check of a specialized read], jitcore/transforms/replayed_numbers.py). The grad
    transform's copy of the check compared the traced count with itself: a call with another count
    ran the traced split sizes, with a wrong loss and wrong gradients."""

    def step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        n = (x > 0).long().sum().tolist()
        counts = (x > 0).long().sum(0).tolist()
        z = (x * w).reshape(-1)
        a, b = z.split([n, z.numel() - n])
        parts = (x * w).t().reshape(-1).split([*counts, x.numel() - sum(counts)])
        loss = a.square().sum() * 2 + b.sum() + sum(p.sum() * (k + 1) for k, p in enumerate(parts))
        loss.backward()
        return loss.detach()

    jitted = jitcore.jit(step)
    seen = set()
    for seed in (0, 1, 2, 0, 3):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))
        w_eager = torch.randn(3, 4, generator=torch.Generator().manual_seed(9)).requires_grad_()
        w_jit = w_eager.detach().clone().requires_grad_()
        assert_same(jitted(x, w_jit), step(x, w_eager))
        assert_same(w_jit.grad, w_eager.grad)
        seen.add(tuple((x > 0).long().sum(0).tolist()))
    assert jitcore.cache_misses(jitted) == len(seen)
