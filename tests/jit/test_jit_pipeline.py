"""The pipeline of a miss (docs/architecture.md): each stage returns what it makes and changes no
record it was given; the entry's prologue is an immutable record built once the stages are done.

The stages are called here as jit/api.py calls them, on the program of a real pass, and the program
is compared before and after; the calls themselves are checked against eager, hit included.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.jit.inspection import as_jitted
from jitcore.transforms import differentiate


def _scaled(x: torch.Tensor, w: torch.Tensor, n: float) -> torch.Tensor:
    return x.sin() + w * n  # n stays a name in pass 1 (on a plain tensor)


def _inputs() -> tuple[TwoTensor, torch.Tensor]:
    return TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_(True), torch.randn(3)


def _snapshot(program) -> tuple:
    return (
        list(program.trace.args),
        [b.symbol for b in program.trace.bound_symbols],
        program.prologue.inputs,
        program.prologue.input_names,
        list(program.prologue.guards),
        list(program.number_inputs),
    )


def test_the_grad_stage_returns_the_specialization_and_changes_no_program():
    # a dynamic number under the grad transform with a subclass input: autograd records aten ops on
    # values, so the transform runs on the program with the number a constant
    jfn = as_jitted(jitcore.jit(_scaled, dynamic_numbers=("n",)))
    (x, w), n = _inputs(), 1.5
    _pass, program = jfn._interpret(0, (x, w, n), {}, False)
    before = _snapshot(program)
    grad = differentiate(program, jfn.executor, jfn)
    assert grad.differentiated is not None
    assert _snapshot(program) == before  # the program is what the pass made
    assert any(g.kind == "value" and g.expected == n for g in grad.guards)  # returned, for the prologue
    assert len(grad.dropped_inputs) == 1
    pass_1 = grad.differentiated.traces[0]  # the specialized copy, without the number argument
    assert pass_1 is not program.trace and len(pass_1.args) == len(program.trace.args) - 1
    # and the entries the jit makes so run as eagerly, the number's value guarded
    jitted = jitcore.jit(_scaled, dynamic_numbers=("n",))
    for value in (1.5, 1.5, 2.0):
        x, w = _inputs()
        ex = TwoTensor(x.a.detach().clone(), x.b.detach().clone()).requires_grad_(True)
        out, expected = jitted(x, w, value), _scaled(ex, w, value)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, ex.grad)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)


def test_the_entry_prologue_is_an_immutable_record():
    jitted = jitcore.jit(lambda x, y: x * 2 + y)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jitted(x, y), x * 2 + y)
    (prologue,) = jitcore.last_prologue_traces(jitted)
    assert prologue is as_jitted(jitted).entries[0].prologue
    assert isinstance(prologue.guards, tuple) and isinstance(prologue.inputs, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prologue.guards = ()  # type: ignore[misc]
    assert [p.describe() for p in prologue.inputs] == ["args[0]", "args[1]"]
