"""Arguments and state whose structure contains cycles are traced and guarded, never a crash.

A list or dict that contains itself (directly, or through a tuple or another container) is bound
once; where the cycle closes, the prologue checks that the value is the very object it was while
tracing (an ``alias`` guard). Each call is compared with eager; a call with the same shape but no
cycle is a cache miss, not a wrong answer.
"""

from __future__ import annotations

import torch
from reliability_helpers import outcome, same_outcome

import jitcore


def _cyclic_list(t: torch.Tensor) -> list:
    items: list = [t]
    items.append(items)
    return items


def test_a_list_that_contains_itself() -> None:
    def f(items):
        return items[0] * len(items) + items[1][1][0]

    jf = jitcore.jit(f)
    for scale in (1.0, 1.0, 3.0):
        items = _cyclic_list(torch.arange(3.0) * scale)
        same_outcome(outcome(jf, items), outcome(f, items))
    assert jitcore.cache_misses(jf) == 1  # another cyclic list of the same shape reuses the entry
    acyclic = [torch.ones(3), [torch.zeros(3), [torch.ones(3)]]]
    same_outcome(outcome(jf, acyclic), outcome(f, acyclic))  # same lengths, no cycle: traced anew
    assert jitcore.cache_misses(jf) == 2
    assert "expected the same object as args[0]" in str(jitcore.miss_reasons(jf)[-1][0])


def test_the_program_sees_the_cycle() -> None:
    def f(items):
        return items[1] is items, items[1][1][0] + 1

    jf = jitcore.jit(f)
    items = _cyclic_list(torch.ones(2))
    for _ in range(2):
        same_outcome(outcome(jf, items), outcome(f, items))


def test_a_dict_that_contains_itself_passed_by_keyword() -> None:
    def f(x, *, cfg):
        return x * cfg["scale"] + cfg["self"]["self"]["shift"]

    jf = jitcore.jit(f)
    for scale in (2.0, 2.0, 5.0):
        cfg = {"scale": scale, "shift": torch.ones(2)}
        cfg["self"] = cfg
        same_outcome(outcome(jf, torch.arange(2.0), cfg=cfg), outcome(f, torch.arange(2.0), cfg=cfg))


def test_a_cycle_through_a_tuple() -> None:
    def f(pair):
        return pair[0][1][0][0] * pair[1]

    jf = jitcore.jit(f)
    for n in (2, 2, 3):
        inner: list = [torch.full((2,), float(n))]
        pair = (inner, n)
        inner.append(pair)
        same_outcome(outcome(jf, pair), outcome(f, pair))


def test_a_global_list_that_contains_itself() -> None:
    state: list = [2.0]
    state.append(state)

    def f(x):
        return x * state[1][1][0] + len(state[1])

    jf = jitcore.jit(f)
    for _ in range(2):
        same_outcome(outcome(jf, torch.ones(2)), outcome(f, torch.ones(2)))
    state[0] = 4.0  # the contents are still guarded through the first path
    same_outcome(outcome(jf, torch.ones(2)), outcome(f, torch.ones(2)))


def test_two_lists_that_contain_each_other() -> None:
    def f(a, b):
        return a[0] + b[0] + a[1][1][0]

    jf = jitcore.jit(f)
    for _ in range(2):
        a: list = [torch.ones(2)]
        b: list = [torch.full((2,), 2.0), a]
        a.append(b)
        same_outcome(outcome(jf, a, b), outcome(f, a, b))
