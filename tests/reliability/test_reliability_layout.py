"""Sequences of calls that change one property of a tensor input at a time, each compared with eager.

The properties: shape, dtype, contiguity and strides (transposed, sliced with a step, expanded with a
zero stride), storage offset, requires_grad, device (cpu / meta) and aliasing between the two
arguments (independent, the same tensor, another view of the same storage). The functions use view
ops whose aten decomposition depends on the layout (reshape, view, flatten, unfold, diagonal,
as_strided, expand, transposes, contiguous), so a cache entry traced for one layout and reused for
another would raise or read the wrong elements. Each call is compared with eager: value, dtype,
shape, strides, requires_grad, exception type; where the output requires grad, the gradients of its
sum with respect to the inputs too. Meta tensors are compared by metadata only.

Profiles: by default about 150 calls (CI). The heavy profile makes about 5,000:

    JITCORE_FUZZ_PROFILE=heavy python -m pytest tests/reliability/test_reliability_layout.py

(docs/user-guide.md, "What is guarded" and "Reliability testing").
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import outcome

import jitcore

HEAVY = os.environ.get("JITCORE_FUZZ_PROFILE") == "heavy"
# (examples, steps per example): default ~ 15 x 10 calls; heavy ~ 250 x 20 = 5,000 calls.
EXAMPLES, STEPS = (250, 20) if HEAVY else (15, 10)


# --- the functions under test ------------------------------------------------------------------------
def reshape_slice(x, y):
    return x.reshape(-1)[:1] * 2


def view_flat(x, y):
    return x.view(-1) + y.reshape(-1)


def flatten_mul(x, y):
    return x.flatten() * y.flatten()


def unfold_sum(x, y):
    return x.unfold(0, 2, 1).sum(-1) + y[:1]


def diagonal(x, y):
    return x.diagonal() * 3 + y.diagonal(1).sum()


def as_strided_rel(x, y):
    return x.as_strided((2, 2), (1, 2)) * 2


def as_strided_abs(x, y):
    return x.as_strided((2,), (2,), 1) + y.sum()


def expand_reshape(x, y):
    return x.expand(2, *x.shape).reshape(-1, x.shape[-1]) * y.mean()


def transpose_view(x, y):
    return x.t().contiguous().view(-1) + x.transpose(0, 1).reshape(-1)


def contiguous_out(x, y):
    return x.contiguous(), y.t()


def reshape_then_write(x, y):
    z = x.reshape(-1)  # a view of x or a copy, as the layout decides
    w = z * 1
    w.add_(y.reshape(-1))
    return w, z.sum()


def mutate_alias(x, y):
    x.mul_(2)  # x and y may share storage: y then sees the write
    return x + y.reshape(x.shape)


def write_after_save(x, y):
    s = (x * 1.5).sin()  # saves x * 1.5 for the backward (not x: a write to y may still touch x)
    t = x.cos()  # saves x
    y.add_(1)  # when y shares x's storage, eager's backward refuses the modified x
    return s + t


FUNCTIONS = [reshape_slice, view_flat, flatten_mul, unfold_sum, diagonal, as_strided_rel, as_strided_abs,
             expand_reshape, transpose_view, contiguous_out, reshape_then_write, mutate_alias,
             write_after_save]

# --- inputs: properties changed one at a time --------------------------------------------------------
LAYOUTS = ["contiguous", "transposed", "stepped", "expanded", "offset"]
SHAPES = [(3, 4), (4, 4), (2, 5), (5, 3)]
DTYPES = [torch.float32, torch.float64, torch.int64]
ALIASING = ["independent", "same", "shared_storage"]
CHANGES = {
    "shape": SHAPES,
    "dtype": DTYPES,
    "layout": LAYOUTS,
    "requires_grad": [False, True],
    "device": ["cpu", "meta"],
    "aliasing": ALIASING,
}
START = {"shape": (3, 4), "dtype": torch.float32, "layout": "contiguous", "requires_grad": False,
         "device": "cpu", "aliasing": "independent"}


def _laid_out(
    shape: tuple[int, int], layout: str, dtype: torch.dtype, device: str, gen: torch.Generator
) -> torch.Tensor:
    """A tensor of ``shape`` with the given layout (its values drawn from ``gen``)."""
    rows, cols = shape

    def data(*size: int) -> torch.Tensor:
        t = torch.randn(*size, generator=gen) * 4
        return t.to(dtype) if dtype.is_floating_point else t.round().to(dtype)

    if layout == "transposed":
        t = data(cols, rows).t()
    elif layout == "stepped":
        t = data(rows, cols * 2)[:, ::2]
    elif layout == "expanded":
        t = data(1, cols).expand(rows, cols)
    elif layout == "offset":
        t = data(rows * cols + 3)[3:].view(rows, cols)
    else:
        t = data(rows, cols)
    return t.to("meta") if device == "meta" else t


def make_inputs(props: dict[str, Any], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two arguments for ``props`` (deterministic in ``seed``: eager and jit get identical ones)."""
    gen = torch.Generator().manual_seed(seed)
    dtype, device = props["dtype"], props["device"]
    base = _laid_out(props["shape"], props["layout"], dtype, device, gen)
    if device == "meta":  # .to("meta") keeps shape, not strides: lay it out on meta directly
        strides = _laid_out(props["shape"], props["layout"], dtype, "cpu", gen).stride()
        base = torch.empty_strided(base.shape, strides, dtype=dtype, device="meta")
    grad = props["requires_grad"] and dtype.is_floating_point
    x = base.detach().requires_grad_(grad)  # a leaf with the same strides and storage offset
    if props["aliasing"] == "same":
        return x, x
    if props["aliasing"] == "shared_storage":
        return x, base.detach()  # another tensor over the same storage
    return x, _laid_out(props["shape"], "contiguous", dtype, device, gen)


# --- comparison ---------------------------------------------------------------------------------------
def _compare(actual: Any, expected: Any, where: str, strides: bool = True) -> None:
    """Strict comparison; ``strides``: also the tensors' strides (not for gradients, whose strides are
    autograd's own choice: eager's can be an expanded zero-stride tensor where jitcore's backward
    returns a dense one)."""
    assert type(actual) is type(expected), f"{where}: type {type(actual)} != {type(expected)}"
    if isinstance(expected, BaseException):
        return
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, f"{where}[{i}]", strides)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        return
    for attr in ("dtype", "shape", "device", "requires_grad"):
        got, want = getattr(actual, attr), getattr(expected, attr)
        assert got == want, f"{where}.{attr}: {got} != {want}"
    if strides:
        got, want = actual.stride(), expected.stride()
        assert got == want, f"{where}.stride(): {got} != {want}"
    if expected.device.type != "meta":
        torch.testing.assert_close(actual.detach(), expected.detach(), equal_nan=True,
                                   msg=lambda m: f"{where}: {m}")


def _grads(result: Any, inputs: tuple[torch.Tensor, ...]) -> Any:
    """Gradients of the sum of the result's tensors that require grad, w.r.t. the inputs that do."""
    results = result if isinstance(result, tuple) else (result,)
    outs = [t for t in results if isinstance(t, torch.Tensor) and t.requires_grad]
    wrt = [t for t in dict.fromkeys(inputs) if t.requires_grad]
    if not outs or not wrt:
        return None
    return outcome(lambda: torch.autograd.grad(sum(o.sum() for o in outs), wrt, allow_unused=True))


def check_call(fn: Any, jfn: Any, props: dict[str, Any], seed: int, where: str) -> None:
    eager_inputs, jit_inputs = make_inputs(props, seed), make_inputs(props, seed)
    expected, actual = outcome(fn, *eager_inputs), outcome(jfn, *jit_inputs)
    assert actual[0] == expected[0], (
        f"{where}: jit {actual[0]} {actual[1]!r}, eager {expected[0]} {expected[1]!r}")
    _compare(actual[1], expected[1], where)
    if expected[0] == "ok":
        for i, (a, e) in enumerate(zip(jit_inputs, eager_inputs)):  # writes into the inputs match too
            _compare(a, e, f"{where}: input {i} after the call")
        grads_expected, grads_actual = _grads(expected[1], eager_inputs), _grads(actual[1], jit_inputs)
        if grads_expected is not None:
            assert grads_actual is not None and grads_actual[0] == grads_expected[0], f"{where}: gradients"
            _compare(grads_actual[1], grads_expected[1], f"{where} gradient", strides=False)


# --- the hypothesis test -------------------------------------------------------------------------------
STEP = st.sampled_from(sorted(CHANGES)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(CHANGES[k])))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          derandomize=not HEAVY)
@given(st.sampled_from(FUNCTIONS), st.lists(STEP, min_size=STEPS, max_size=STEPS), st.booleans(),
       st.integers(0, 2**16))
def test_changing_one_input_property_at_a_time_matches_eager(fn, steps, grad_mode, seed) -> None:
    jfn = jitcore.jit(fn)
    props = dict(START)
    history = []
    with warnings.catch_warnings(), torch.set_grad_enabled(grad_mode):
        warnings.simplefilter("ignore")
        check_call(fn, jfn, props, seed, f"{fn.__name__} {props}")
        for i, (key, value) in enumerate(steps):
            props[key] = value
            history.append(f"{key}={value}")
            check_call(fn, jfn, props, seed + i + 1, f"{fn.__name__} after {', '.join(history)}")


# --- the cases of issue 21, item 1, as written ---------------------------------------------------------
def test_reshape_traced_contiguous_then_called_permuted() -> None:
    def f(x):
        return x.reshape(-1)[:1] * 2

    jf = jitcore.jit(f)
    contiguous = torch.randn(5, 2, requires_grad=True)
    permuted = torch.randn(2, 5).permute(1, 0).requires_grad_(True)
    for x in (contiguous, permuted, contiguous, permuted):
        expected, actual = outcome(f, x), outcome(jf, x)
        assert actual[0] == expected[0] == "ok", actual
        _compare(actual[1], expected[1], "reshape")
    assert jitcore.cache_misses(jf) == 2
    assert "stride()" in str(jitcore.miss_reasons(jf)[1][0])


def test_elementwise_programs_keep_one_entry_for_every_layout() -> None:
    def f(x):
        return (x * 2).sin()

    jf = jitcore.jit(f)
    for layout in LAYOUTS:
        props = dict(START, layout=layout, requires_grad=True)
        x = make_inputs(props, 0)[0]
        _compare(jf(x), f(x), layout)
    assert jitcore.cache_misses(jf) == 1  # no recorded op relied on the layout: it is not guarded


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_as_strided_with_an_absolute_offset_reads_the_callers_elements(offset: int) -> None:
    def f(x):
        return x.as_strided((2,), (2,), 1) * 3

    jf = jitcore.jit(f)
    for start in (0, offset, 0):
        base = torch.arange(12.0)
        x = base[start:start + 8].view(2, 4).detach().requires_grad_(True)
        y = base[start:start + 8].view(2, 4).detach().requires_grad_(True)
        out, expected = jf(x), f(y)
        _compare(out, expected, f"offset {start}")
        (g,), (e,) = torch.autograd.grad(out.sum(), [x]), torch.autograd.grad(expected.sum(), [y])
        _compare(g, e, f"offset {start} gradient", strides=False)


def test_a_write_through_another_view_of_an_input_saved_for_backward() -> None:
    jf = jitcore.jit(write_after_save)
    for sharing in ("independent", "shared_storage", "shared_storage", "independent"):
        props = dict(START, requires_grad=True, aliasing=sharing)
        check_call(write_after_save, jf, props, 0, sharing)
    assert jitcore.cache_misses(jf) == 2
    assert "share storage" in str(jitcore.miss_reasons(jf)[1][0])
