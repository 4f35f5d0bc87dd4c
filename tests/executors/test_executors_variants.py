"""Variants of a symbolic region (jitcore/executors/inductor.py, Note [Variants of a region]): a
guard that inductor's compile added and that a later call breaks makes a new variant compiled for
that call's sizes, as torch.compile recompiles; up to ``VARIANT_LIMIT``, logged, values as eager.

Inductor adds such a guard when it specializes a size; the tests make the compile specialize the
first dimension (as ``guard_int`` does), so every new first size breaks the guards of the variants
before it."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
from executor_helpers import INDUCTOR, assert_same, executor_log

import jitcore
import jitcore.executors.inductor as inductor_module
from jitcore.executors import BACKGROUND_ENV, wait_for_compiles


def f(x, y):
    return ((x * y).sin() + 1).cos() * 2


@pytest.fixture
def specializing(monkeypatch):
    """Each compile specializes the first dimension of its first tensor (a guard ``s0 == hint``);
    returns the sizes compiled for and the calls of each variant's compiled code."""
    monkeypatch.setenv(BACKGROUND_ENV, "1")
    made, compile_region = inductor_module.compile_inputs, inductor_module._compile
    compiled_for: list[int] = []
    runs: collections.Counter[int] = collections.Counter()

    def specialized(region, shapes=None):
        inputs = made(region, shapes)
        size = next(e for e in inputs.examples if isinstance(e, torch.Tensor)).shape[0]
        assert bool(size == size.node.hint)  # a guard: this size
        compiled_for.append(int(size.node.hint))
        return inputs

    def counted(region, shapes):
        variant = compile_region(region, shapes)
        size = compiled_for[-1]

        def compiled(*args):
            runs[size] += 1
            return variant.compiled(*args)

        return dataclasses.replace(variant, compiled=compiled)

    monkeypatch.setattr(inductor_module, "compile_inputs", specialized)
    monkeypatch.setattr(inductor_module, "_compile", counted)
    yield compiled_for, runs
    assert wait_for_compiles(120)


def _call(jfn, b: int) -> None:
    x, y = torch.randn(b, 3), torch.randn(3)
    assert_same(jfn(x, y), f(x, y))


def test_a_broken_compile_guard_compiles_a_variant_for_the_new_sizes(specializing) -> None:
    compiled_for, runs = specializing
    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    with executor_log() as log:
        _call(jfn, 5)  # variant 1, compiled on the first call
        _call(jfn, 7)  # breaks its guard: runs on torch, variant 2 compiles in the background
        assert wait_for_compiles(120)
        for b in (7, 5, 7):
            _call(jfn, b)
        _call(jfn, 9)  # variant 3
        assert wait_for_compiles(120)
        _call(jfn, 9)
    assert compiled_for == [5, 7, 9], compiled_for
    assert runs == {5: 2, 7: 2, 9: 1}, runs
    assert sum("compiling variant 2" in m for m in log) == 1, log
    assert sum("compiling variant 3" in m for m in log) == 1, log
    assert sum(m.startswith("computation lowered") for m in log) == 1, log  # one entry, one lowering


def test_past_the_variant_limit_new_sizes_run_on_torch(specializing, monkeypatch) -> None:
    compiled_for, runs = specializing
    monkeypatch.setattr(inductor_module, "VARIANT_LIMIT", 2)
    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    with executor_log() as log:
        _call(jfn, 5)
        _call(jfn, 7)
        assert wait_for_compiles(120)
        for b in (9, 11, 9, 7, 5):
            _call(jfn, b)
    assert compiled_for == [5, 7], compiled_for
    assert runs == {5: 2, 7: 1}, runs
    assert sum("(the limit)" in m for m in log) == 1, log


def test_without_the_background_the_variant_compiles_on_the_call_that_needs_it(specializing,
                                                                                monkeypatch) -> None:
    compiled_for, runs = specializing
    monkeypatch.setenv(BACKGROUND_ENV, "0")
    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    for b in (5, 7, 7):
        _call(jfn, b)
    assert compiled_for == [5, 7] and runs == {5: 1, 7: 1}, (compiled_for, runs)


def test_a_variant_that_does_not_take_its_sizes_ends_the_variants(specializing, monkeypatch) -> None:
    compiled_for, runs = specializing
    made = inductor_module.compile_inputs  # the fixture's specializing one

    def wrong(region, shapes=None):  # a variant compiled for other sizes (and size inputs) than the call's
        if shapes is not None:
            shapes = [((s[0][0] + 1, *s[0][1:]), s[1]) if isinstance(s, tuple) else s + 1 for s in shapes]
        return made(region, shapes)

    monkeypatch.setattr(inductor_module, "compile_inputs", wrong)
    jfn = jitcore.jit(f, executors=INDUCTOR, dynamic=True)
    with executor_log() as log:
        for b in (5, 7):
            _call(jfn, b)
        assert wait_for_compiles(120)
        for b in (7, 9, 5):
            _call(jfn, b)
    assert compiled_for == [5, 8] and runs == {5: 2}, (compiled_for, runs)
    assert sum("does not take them" in m for m in log) == 1, log
