"""Containers in calls and outputs, as eager has them: a torch call sees a list as it is at the call
(Note [Records hold their arguments' containers as called], jitcore/ir/symbol.py), and a function
that returns the caller's own container returns that object, with what the function wrote into it
(Note [Returning the caller's objects], jitcore/jit/effects.py). Both were wrong answers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from jit_helpers import assert_same, clone_tree

import jitcore


def _stack_then_append(a, b):
    xs = [a, b]
    y = torch.stack(xs)
    xs.append(a * 2)
    return y, torch.cat(xs)


def _append_then_stack(xs):
    xs.append(xs[0] * 2)
    return torch.stack(xs).sum(0)


def _cat_then_replace(a, b):
    xs = [a, b]
    y = torch.cat(xs)
    xs[0] = b.exp()
    return y, torch.cat(xs)


@pytest.mark.parametrize("fn", [_stack_then_append, _cat_then_replace])
def test_a_call_sees_a_list_as_it_was_called(fn):
    """The record held the program's list itself: appended to later, the trace stacked three tensors
    where the call stacked two (a crash on the cached call: the third did not exist yet)."""
    jf = jitcore.jit(fn)
    for seed in range(3):
        torch.manual_seed(seed)
        args = (torch.randn(3), torch.randn(3))[: fn.__code__.co_argcount]
        assert_same(jf(*clone_tree(args)), fn(*clone_tree(args)))
    assert jitcore.cache_hits(jf) == 2


def test_an_argument_list_appended_to_before_a_call():
    """The caller's list, appended to inside: the stack is of all three tensors (it was of the two the
    list had when the pass set it back), and the caller's list gets the appended tensor."""
    jf = jitcore.jit(_append_then_stack)
    for seed in range(3):
        torch.manual_seed(seed)
        xs = [torch.randn(3), torch.randn(3)]
        ej, ee = clone_tree(xs), clone_tree(xs)
        assert_same(jf(ej), _append_then_stack(ee))
        assert_same(ej, ee)
    assert jitcore.cache_hits(jf) == 2


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    logits: torch.Tensor | None = None


def _write_logits_dict(batch):
    batch["logits"] = batch["x"] @ batch["w"]
    return batch


def _write_logits_list(batch):
    batch.append(batch[0].sum())
    return batch


def _write_logits_dataclass(batch):
    batch.logits = batch.x.relu()
    return batch


def _return_inside_new_dict(batch):
    batch["logits"] = batch["x"] @ batch["w"]
    return {"batch": batch, "loss": batch["logits"].sum()}, batch["logits"]


def _return_unchanged(batch):
    return batch, batch["x"] * 2


def _make(kind):
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    if kind == "list":
        return [x]
    if kind == "dataclass":
        return Batch(x)
    return {"x": x, "w": w}


@pytest.mark.parametrize(("fn", "kind"), [
    (_write_logits_dict, "dict"), (_write_logits_list, "list"), (_write_logits_dataclass, "dataclass"),
    (_return_inside_new_dict, "dict"), (_return_unchanged, "dict"),
])
def test_returning_the_callers_container(fn, kind):
    """``batch["logits"] = ...; return batch``: eager returns the caller's object with the new key.
    jitcore returned a new container without it, on every call (the pass had set the caller's
    container back, and the trace's output was that container)."""
    jf = jitcore.jit(fn)
    for _ in range(3):
        batch = _make(kind)
        jb, eb = clone_tree(batch), clone_tree(batch)
        got, expected = jf(jb), fn(eb)
        assert_same(got, expected)
        assert_same(jb, eb)
        found = got if not isinstance(got, tuple) else got[0]
        found = found["batch"] if isinstance(found, dict) and "batch" in found else found
        assert found is jb  # the caller's object itself, as eagerly
    assert jitcore.cache_hits(jf) == 2


class Cache:
    """A cache object of the caller's that the function writes and hands back inside its output."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []


@dataclasses.dataclass
class Output:
    """An output class registered with torch's pytree (as Hugging Face registers ModelOutput)."""

    logits: torch.Tensor
    cache: Cache


torch.utils._pytree.register_dataclass(Output)


def _step_with_cache(x, cache):
    cache.keys.append(x * 2)
    return Output(logits=torch.cat(cache.keys).sum(0), cache=cache)


def test_the_callers_object_inside_a_registered_output_comes_back_itself():
    """``return Output(logits, cache=cache)`` with the caller's cache (Hugging Face's static cache
    generation): the output's cache is the caller's object, so the next call extends it. jitcore
    returned a per-call copy inside the registered class, and the caller's next step used it."""
    jf = jitcore.jit(_step_with_cache)
    jc, ec = Cache(), Cache()
    for i in range(3):
        x = torch.full((1, 2), float(i))
        got, expected = jf(x, jc), _step_with_cache(x.clone(), ec)
        assert got.cache is jc
        assert_same(got.logits, expected.logits)
        assert len(jc.keys) == len(ec.keys) == i + 1
        jc = got.cache  # the caller goes on with the cache the output hands back
