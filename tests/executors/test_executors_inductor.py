"""The inductor executor on plain-tensor programs: eager and ``jit(executors=("inductor", "torch"))``
agree (values, dtypes, aliasing of outputs), fused regions print as one call with their ops as
subsymbols, and what inductor must not take (custom ops, random ops, value reads, in-place writes,
compile failures) runs on torch with a log line saying why."""

from __future__ import annotations

import pytest
import torch
from executor_helpers import INDUCTOR, assert_same, check, executor_log, fused, lowered_trace

import jitcore
from jitcore.executors import InductorExecutor


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for _ in range(5):
        x = torch.sin(x) * y + 0.5
        x = x.relu() - y.exp() / 3
    return x


def test_elementwise_chain_is_one_fusion_and_matches_eager() -> None:
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    jfn = jitcore.jit(chain, executors=INDUCTOR)
    check(chain, x, y, jfn=jfn)
    check(chain, x, y, jfn=jfn)  # cached call
    text = lowered_trace(jfn)
    assert fused(text) == ['(t34,) = fusion0(x, y)  # t34: "cpu f32[8, 16]"'], text
    assert "# fusion0: 35 ops fused by inductor" in text
    assert '    # t0 = torch.sin(x)  # t0: "cpu f32[8, 16]"' in text  # the ops stay readable as subsymbols
    assert jitcore.cache_hits(jfn) == 1


def test_reductions_views_and_several_outputs() -> None:
    def f(x, y):
        z = x * 2 + y
        return torch.sin(z).sum(0), z.view(-1), z.amax(dim=1, keepdim=True), torch.max(z, dim=0)

    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        check(f, torch.randn(3, 4), torch.randn(3, 4), jfn=jfn)
    assert len(fused(lowered_trace(jfn))) == 1


def test_an_output_view_of_an_input_still_aliases_it() -> None:
    def f(x):
        v = x.view(-1)
        return v, (v * 2).cos()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    x = torch.randn(2, 3)
    v, _ = jfn(x)
    assert v.data_ptr() == x.data_ptr() and v._base is x
    v.add_(1)
    torch.testing.assert_close(x.view(-1), v)


def test_inputs_with_other_strides_than_compiled_for_run_the_same_ops() -> None:
    def f(x):
        return (x.sin() + 1).cumsum(0) * 2  # cumsum keeps the result's values order-dependent

    jfn = jitcore.jit(f, executors=INDUCTOR)
    check(f, torch.randn(4, 5), jfn=jfn)
    check(f, torch.randn(5, 4).t(), jfn=jfn)  # same shape, other strides: the prologue may accept it


def test_integer_and_mixed_dtype_programs() -> None:
    def f(a, b):
        return (a * 3 + b).to(torch.float32).div(7).floor(), (a // 2) % 5

    a, b = torch.arange(12).view(3, 4), torch.ones(3, 4, dtype=torch.int64)
    check(f, a, b, jfn=jitcore.jit(f, executors=INDUCTOR))


def test_a_custom_op_splits_the_regions_and_runs_on_torch() -> None:
    @torch.library.custom_op("jitcore_executors_test::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    def f(x):
        y = (x + 1).sin()
        return (twice(y).cos() - 1).abs()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    with executor_log() as log:
        check(f, torch.randn(6), jfn=jfn)
    text = lowered_trace(jfn)
    assert len(fused(text)) == 2, text
    assert "torch.ops.jitcore_executors_test.twice.default(" in text.replace("# ", "")
    assert any("fusion0: 2 ops" in m and "fusion1: 3 ops" in m for m in log), log


def test_random_ops_run_on_torch_and_match_eager_draws() -> None:
    def f(x):
        y = torch.nn.functional.dropout(x.sin() * 2, p=0.5) + torch.rand_like(x)
        return (y + 1).exp()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        torch.manual_seed(0)
        expected = f(torch.ones(16))
        torch.manual_seed(0)
        assert_same(jfn(torch.ones(16)), expected)
    text = lowered_trace(jfn)
    assert "  t2 = torch.nn.functional.dropout(" in text and "  t3 = torch.rand_like(" in text, text


def test_a_value_read_stays_on_torch_and_its_check_still_runs() -> None:
    def f(x):
        y = x.cos() * 2
        if y.sum() > 0:
            return (y + 1).sin()
        return (y - 1).sin()

    jfn = jitcore.jit(f, executors=INDUCTOR)
    pos, neg = torch.zeros(5), torch.full((5,), 3.0)
    check(f, pos, jfn=jfn)
    check(f, pos, jfn=jfn)
    check(f, neg, jfn=jfn)  # the read's check fails: a second entry
    assert jitcore.cache_misses(jfn) == 2
    assert "check" in lowered_trace(jfn)


def test_in_place_writes_split_regions_and_mutate_the_input() -> None:
    def f(x):
        y = x.sin() * 2
        x.add_(y)
        return (x + 1).cos() * 3

    jfn = jitcore.jit(f, executors=INDUCTOR)
    check(f, torch.randn(4), jfn=jfn)
    check(f, torch.randn(4), jfn=jfn)
    assert len(fused(lowered_trace(jfn))) == 2


def test_a_region_that_fails_to_compile_runs_on_torch_with_a_log_line() -> None:
    class Failing(InductorExecutor):
        def fuse(self, region):
            raise RuntimeError("no kernel for this today")

    def f(x):
        return (x + 1).sin() * 2

    jfn = jitcore.jit(f, executors=(Failing("failing"), "torch"))
    with executor_log() as log:
        check(f, torch.randn(3), jfn=jfn)
    why = "failing declined 3 ops (torch.add, torch.sin, torch.mul): RuntimeError: no kernel for this today"
    assert any(why in m for m in log), log
    assert "fusion" not in lowered_trace(jfn)


def test_a_single_op_is_not_worth_a_compile() -> None:
    jfn = jitcore.jit(lambda x: x.sin(), executors=INDUCTOR)
    check(lambda x: x.sin(), torch.randn(3), jfn=jfn)
    assert "fusion" not in lowered_trace(jfn)


def test_dynamic_numbers_stay_on_torch() -> None:
    def f(x, n):
        return (x * n + 1).sin() * 2

    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic_numbers=("n",))
    for n in (2, 3):
        check(f, torch.randn(3), n, jfn=jfn)
    assert jitcore.cache_misses(jfn) == 1


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_float_dtypes(dtype: torch.dtype) -> None:
    def f(x):
        return torch.softmax(x * 2, dim=-1).log1p() + x.mean()

    x = torch.randn(4, 8, dtype=dtype)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    expected, actual = f(x), jfn(x)
    # Note [Fusion and rounding]: inductor computes bfloat16 chains in float32 and rounds once at the
    # end, eager rounds after every op: results differ by up to a few bfloat16 ulps.
    tol = {"rtol": 1.6e-2, "atol": 1e-2} if dtype is torch.bfloat16 else {}
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, **tol)


def test_an_input_named_self() -> None:
    fn = eval("lambda self, other: torch.where(self > 0, self, other) * 2")  # noqa: S307 - a parameter: self
    jfn = jitcore.jit(fn, executors=INDUCTOR)
    check(fn, torch.randn(4), torch.randn(4), jfn=jfn)
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)


def _functions_called(fn, *args) -> set[str]:
    """The names of the Python functions a call of ``fn`` runs."""
    import sys

    names: set[str] = set()

    def profile(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's callback
        if event == "call":
            names.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return names


def test_a_region_without_aliases_runs_inductors_code_without_aotautograds_wrapper() -> None:
    """Note [Calling inductor's code without AOTAutograd's wrapper]: the wrapper did nothing for such a
    region but cost ~2.4 us a call; values as eager, with grad mode on and off around the call."""
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    jfn = jitcore.jit(chain, executors=INDUCTOR)
    check(chain, x, y, jfn=jfn)
    assert "runtime_wrapper" not in _functions_called(jfn, x, y)
    with torch.no_grad():
        check(chain, x, y, jfn=jfn)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # under autocast: through the wrapper
        assert "runtime_wrapper" in _functions_called(jfn, x, y)


@pytest.mark.parametrize("case", ["input_view", "output_view", "intermediate_view", "returns_input"])
def test_a_region_whose_outputs_alias_keeps_aotautograds_wrapper(case: str) -> None:
    """Outputs that are views or share memory with an input or another output keep the wrapper, which
    regenerates them: which outputs share memory with an input or each other is eager's; values as
    eager. (Whether a view of an intermediate has a ``_base`` is not eager's with or without it.)"""
    def f(x, y):
        z = (x * 2 + y).sin()
        if case == "input_view":
            return z, (x + 0).view(-1), x.view(-1)
        if case == "output_view":
            return z, z.view(-1)
        if case == "intermediate_view":
            return z.cos().view(-1), z * 3
        return z, x

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    jfn = jitcore.jit(f, executors=INDUCTOR)
    for _ in range(2):
        check(f, x, y, jfn=jfn)
    assert fused(lowered_trace(jfn)), lowered_trace(jfn)
    def sharing(outputs: tuple[torch.Tensor, ...]) -> list[int]:
        """For each output, the first of (x, y, *outputs) over the same memory."""
        tensors = [x, y, *outputs]
        pointers = [t.untyped_storage().data_ptr() for t in tensors]
        return [pointers.index(p) for p in pointers[2:]]

    assert sharing(jfn(x, y)) == sharing(f(x, y))


def _codes_run(fn, *args) -> set:
    """The code objects of the Python functions a call of ``fn`` runs."""
    import sys

    codes: set = set()

    def profile(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's callback
        if event == "call":
            codes.add(frame.f_code)

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return codes


def test_an_unwrapped_region_calls_inductors_code_without_the_compiled_graphs_call() -> None:
    """Note [Calling the compiled graph's code]: a cached call runs inductor's generated code without
    ``CompiledFxGraph.__call__`` (~1 us a region); under torch's profiler that call runs, so the
    profile holds its range; values as eager either way, with grad mode on and off."""
    from torch._inductor.output_code import CompiledFxGraph

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    jfn = jitcore.jit(chain, executors=INDUCTOR)
    check(chain, x, y, jfn=jfn)
    check(chain, x, y, jfn=jfn)
    assert CompiledFxGraph.__call__.__code__ not in _codes_run(jfn, x, y)
    with torch.no_grad():
        check(chain, x, y, jfn=jfn)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        check(chain, x, y, jfn=jfn)
    assert any("Call CompiledFxGraph" in e.name for e in prof.events())
    assert CompiledFxGraph.__call__.__code__ not in _codes_run(jfn, x, y)  # the profiler closed: direct again
    assert jitcore.cache_hits(jfn) == 4  # the first call traced, and the first under no_grad
