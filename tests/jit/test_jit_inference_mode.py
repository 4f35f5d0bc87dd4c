"""``torch.inference_mode()`` entered inside a jitted function is traced: entered and left at the same
points of the computation (langctx/thread_state.py), so its outputs are inference tensors as eagerly.
Before, every such call ran eagerly (JC-T001). Also: a read check failing inside ``no_grad`` or
``inference_mode`` leaves the caller's thread as it was (grad mode stayed off after such a call).
Differential: values, ``is_inference()``, ``requires_grad``, eager's errors, the thread's modes."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn

import jitcore


def _facts(out):
    """What a caller can see of each output: the value, and for tensors its inference and grad flags."""
    return [(v, v.is_inference(), v.requires_grad) if isinstance(v, torch.Tensor) else v for v in out]


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(_facts(got), _facts(want)):
        if isinstance(w, tuple):
            torch.testing.assert_close(g[0].detach(), w[0].detach())  # inductor's fusion may round apart
            assert g[1:] == w[1:]
        else:
            assert g == w


def _traced(fn, calls, **options):
    jf = jitcore.jit(fn, **options)
    for args in calls:
        want = fn(*args)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*runs eagerly.*")
            got = jf(*args)
        _same(got, want)
        assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    assert jf.fallback_reason is None
    return jf


def _linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def test_a_with_block_inside_makes_inference_tensors():
    def f(m, x):
        with torch.inference_mode():
            y = m(x).relu()
            z = y * 2
        return y, z, y.is_inference(), z.requires_grad, (x * 3).is_inference(), (x * 3).requires_grad

    m = _linear()
    jf = _traced(f, [(m, torch.randn(2, 4, requires_grad=True)) for _ in range(3)])
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)


def test_the_decorator_and_a_nested_inference_mode_false():
    @torch.inference_mode()
    def head(m, x):
        return m(x) * 2

    def f(m, x):
        a = head(m, x)
        with torch.inference_mode():
            b = a + 1
            with torch.inference_mode(False):
                c = x * 2
                inner = torch.is_inference_mode_enabled()
        return a, b, c, inner, torch.is_inference_mode_enabled()

    _traced(f, [(_linear(), torch.randn(2, 4)) for _ in range(2)])


@pytest.mark.parametrize("executors", [("torch",), ("inductor", "torch")], ids=["torch", "inductor"])
def test_regions_inside_run_in_inference_mode(executors, monkeypatch):
    monkeypatch.setenv("JITCORE_BACKGROUND_COMPILE", "0")

    def f(x, w):
        with torch.inference_mode():
            z = ((x * w).sin().cos() + 1).exp()
        return z, (x + 1).relu()

    _traced(f, [(torch.randn(8), torch.randn(8)) for _ in range(12)], executors=executors)


def _saved_for_backward(x, w):
    with torch.inference_mode():
        w2 = w * 2
    return (x * w2).sum()


def _written_outside(x):
    with torch.inference_mode():
        y = x * 2
    y.add_(1)
    return y


@pytest.mark.parametrize("fn, make", [
    (_saved_for_backward, lambda: (torch.randn(3, requires_grad=True), torch.randn(3))),
    (_written_outside, lambda: (torch.randn(3),)),
], ids=["saved-for-backward", "in-place-outside"])
def test_eagers_errors_on_inference_tensors(fn, make):
    with pytest.raises(RuntimeError) as eager:
        fn(*make())
    jf = jitcore.jit(fn)
    for _ in range(2):
        with pytest.raises(RuntimeError) as traced:
            jf(*make())
        assert str(traced.value).split(".")[0] == str(eager.value).split(".")[0]
    assert not torch.is_inference_mode_enabled()


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
def test_a_read_check_failing_inside_the_block_leaves_the_thread_as_it_was(mode):
    """The second call's read differs: the computation stops at the check inside the block and the
    call goes to another entry; the modes the block set must not stay set in the caller's thread."""

    def f(x):
        with getattr(torch, mode)():
            y = x * 2
            if y.sum() > 0:
                return y + 1
            return y - 1

    jf = jitcore.jit(f)
    for v in (1.0, -1.0, 1.0, -1.0):
        x = torch.full((3,), v, requires_grad=True)
        _same([jf(x)], [f(x)])
        assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (2, 2)
