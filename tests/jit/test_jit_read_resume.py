"""A cached call that a value check sends away goes on in the entry that computed the same up to that check
(Note [Resuming at a failed check], jitcore/jit/read_resume.py). Differential: every call's result and
every written input are compared with eager's, and the number of traces with the number of distinct
paths; the ops a cached call runs are counted with torch's profiler (no timing)."""

from __future__ import annotations

import torch
from jit_helpers import assert_same

import jitcore


def _kmeans(x: torch.Tensor, c: torch.Tensor, iters: int):
    for _ in range(iters):
        d = torch.cdist(x, c)
        a = d.argmin(1)
        new = torch.zeros_like(c).index_add_(0, a, x)
        cnt = torch.bincount(a, minlength=c.size(0)).clamp(min=1).unsqueeze(1)
        new = new / cnt
        if torch.allclose(new, c):
            break
        c = new
    return c, a


def _ops(fn, calls: list[tuple], name: str) -> int:
    """How many times ``name`` (an aten op) ran over ``calls`` of ``fn``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for args in calls:
            fn(*args)
    return sum(e.count for e in prof.key_averages() if e.key == name)


def _kmeans_calls(n: int) -> list[tuple]:
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(30, 2, generator=g), torch.randn(3, 2, generator=g), 5) for _ in range(n)]


def test_kmeans_calls_run_each_round_once() -> None:
    """k-means stops after 2 to 5 rounds, each count its own entry. A cached call ran every entry it
    tried from the start until the check that sent it away: about 3.5 entries' rounds a call, 5 ms against
    eager's 0.3 ms. Going on at the failed check, a cached call runs each round's check once, as eager."""
    calls = _kmeans_calls(40)
    jfn = jitcore.jit(_kmeans)
    for args in calls:
        assert_same(jfn(*args), _kmeans(*args))
    paths = {tuple(_kmeans(*args)[1].tolist()) for args in calls}
    assert jitcore.cache_misses(jfn) <= len(paths)
    eager, jitted = _ops(_kmeans, calls, "aten::allclose"), _ops(jfn, calls, "aten::allclose")
    assert jitted == eager, (jitted, eager)


def _stops_early(x: torch.Tensor):
    for i in range(4):
        x = torch.sin(x) * 1.5 + 0.25
        if x.sum() > 0:
            return x, i
    return x, -1


def test_a_loop_that_stops_on_a_value_runs_each_round_once_and_returns_eagers_values() -> None:
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(6, generator=g) - 1.5,) for _ in range(30)]
    jfn = jitcore.jit(_stops_early)
    for args in calls:
        assert_same(jfn(*args), _stops_early(*args))
    assert jitcore.cache_misses(jfn) == len({_stops_early(*a)[1] for a in calls})
    assert _ops(jfn, calls, "aten::sin") == _ops(_stops_early, calls, "aten::sin")


def _writes_its_input(x: torch.Tensor):
    x.mul_(2)  # an input written before the read: the failed entry's undo puts it back, no going on
    if x.sum() > 0:
        return x + 1
    return x - 1


def test_a_read_after_an_input_write_goes_on_from_the_start() -> None:
    g = torch.Generator().manual_seed(1)
    calls = [torch.randn(5, generator=g) for _ in range(12)]
    jfn = jitcore.jit(_writes_its_input)
    for x in calls:
        mine, theirs = x.clone(), x.clone()
        assert_same(jfn(mine), _writes_its_input(theirs))
        assert_same(mine, theirs)
    assert jitcore.cache_misses(jfn) == 2


def _through_a_view(x: torch.Tensor):
    t = x * 2
    t[:2].mul_(3)  # an intermediate written through a view, before the read
    if t.sum() > 0:
        return t + 1
    return t - 1


def test_an_intermediate_written_through_a_view_before_the_read() -> None:
    g = torch.Generator().manual_seed(2)
    calls = [(torch.randn(5, generator=g),) for _ in range(12)]
    jfn = jitcore.jit(_through_a_view)
    for args in calls:
        assert_same(jfn(*args), _through_a_view(*args))
    assert jitcore.cache_misses(jfn) == 2


def _needs_a_written_value(x: torch.Tensor):
    t = torch.zeros(5).add_(x)  # made by an in-place write: not remade for the entry that returns it
    u = t * 2
    if u.sum() > 0:
        return u
    return t, x.sum()


def test_a_value_deleted_before_the_check_and_made_in_place_is_not_remade() -> None:
    g = torch.Generator().manual_seed(3)
    calls = [(torch.randn(5, generator=g),) for _ in range(12)]
    jfn = jitcore.jit(_needs_a_written_value)
    for args in calls:
        assert_same(jfn(*args), _needs_a_written_value(*args))
    assert jitcore.cache_misses(jfn) == 2


def _draws_before(x: torch.Tensor):
    noise = torch.rand(5)  # a draw before the read: the call goes on from the start, drawing as eager
    if (x + noise).sum() > 5.0:
        return x * noise
    return x - noise


def test_a_random_draw_before_the_read_draws_as_eager() -> None:
    g = torch.Generator().manual_seed(4)
    calls = [(torch.randn(5, generator=g) + 0.5,) for _ in range(12)]
    jfn = jitcore.jit(_draws_before)
    for i, args in enumerate(calls):
        torch.manual_seed(100 + i)
        expected = _draws_before(*args)
        torch.manual_seed(100 + i)
        assert_same(jfn(*args), expected)
    assert jitcore.cache_misses(jfn) == 2


def _adds_into_a_new_tensor(x: torch.Tensor, index: torch.Tensor):
    t = torch.zeros(3).index_add_(0, index, x)  # writes t, reads x (Note [In-place methods write only self])
    if t.sum() > 0:
        return t
    return -t


def test_an_input_an_in_place_method_only_reads_is_not_copied_back_after_a_failed_check() -> None:
    """The undo of a failed check took ``x`` as written by ``index_add_`` and copied it back: every call
    that went to another entry bumped ``x``'s version counter (eager's stays; autograd compares it)."""
    index = torch.tensor([0, 1, 2, 0])
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    jfn = jitcore.jit(_adds_into_a_new_tensor)
    for sign in (1, -1, 1, -1, 1, -1):
        y = x * sign
        version = y._version
        assert_same(jfn(y, index), _adds_into_a_new_tensor(y, index))
        assert y._version == version
    assert jitcore.cache_misses(jfn) == 2


def test_kmeans_lowered_by_inductor_goes_on_from_the_lowered_code() -> None:
    """An entry lowered by an executor (after 100 calls by default; at once here) holds its values in
    other code: the call still goes on from it (Note [Lowered frames])."""
    calls = _kmeans_calls(16)
    jfn = jitcore.jit(_kmeans, executors=("inductor", "torch"))
    for args in calls:
        assert_same(jfn(*args), _kmeans(*args))
    assert len(jitcore.last_traces(jfn)) > 1, "nothing was lowered"
    eager, jitted = _ops(_kmeans, calls, "aten::allclose"), _ops(jfn, calls, "aten::allclose")
    assert jitted == eager, (jitted, eager)


def _two_reads(x: torch.Tensor):
    positive = bool(x.sum() > 0)
    y = x + 1
    if y.mean() > 1.5:
        return y * 2
    return y * (3 if positive else 4)


def test_an_entry_whose_earlier_check_expects_another_value_is_not_gone_on_in() -> None:
    """Entries (False, False) and (True, True) make the same records but for their checks' values; a
    call (True, False) that the second check sends away from (True, True) must not go on in (False,
    False) after that check: its first check would have sent the call away (it returns ``y * 4``)."""
    calls = [torch.full((4,), -1.0), torch.full((4,), 2.0), torch.full((4,), 0.25)]
    jfn = jitcore.jit(_two_reads)
    for x in calls:
        assert_same(jfn(x), _two_reads(x))
    assert jitcore.cache_misses(jfn) == 3
