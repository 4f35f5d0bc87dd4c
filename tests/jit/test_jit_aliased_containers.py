"""Containers reached through two paths (Note [Containers reached twice] in jitcore/jit/provenance.py).

Differential: each program runs eagerly and under jitcore on the same sequence of aliasing patterns
(``a is b`` and not, in both orders), the result compared after every call. A write through one path
and a read through the other give another answer when the two are one object, so the aliasing a call
was traced with must hold on a cache hit: the prologue guards it.
"""

from __future__ import annotations

import re

import torch
from jit_helpers import assert_same

import jitcore


class Holder:
    pass


def _state(aliased: bool, start: tuple = ()) -> Holder:
    holder = Holder()
    holder.a = list(start)
    holder.b = holder.a if aliased else list(start)
    return holder


def test_a_list_of_state_reached_through_two_attributes():
    def make(holder):
        def f(x):
            holder.a.append(1)
            return x * len(holder.b)

        return f

    x = torch.ones(2)
    for pattern in ((True, False, True), (False, True, False)):
        eager_holder, jit_holder = _state(pattern[0]), _state(pattern[0])
        jf = jitcore.jit(make(jit_holder))
        eager_f = make(eager_holder)
        for aliased in pattern:
            for holder in (eager_holder, jit_holder):
                holder.a = []
                holder.b = holder.a if aliased else []
            assert_same(jf(x), eager_f(x))
            assert jit_holder.a == eager_holder.a and jit_holder.b == eager_holder.b
        assert jitcore.cache_misses(jf) == 2  # aliased and not are two entries: the third call hits


def test_a_list_passed_twice():
    def append_then_len(a, b):
        a.append(1)
        return torch.ones(2) * len(b)

    def len_then_append(b, a):  # the read parameter is bound first
        a.append(1)
        return torch.ones(2) * len(b)

    for f in (append_then_len, len_then_append):
        jf = jitcore.jit(f)
        for start in ([], [7], [7, 8]):
            eager_list, jit_list = list(start), list(start)
            assert_same(jf(jit_list, jit_list), f(eager_list, eager_list))
            assert jit_list == eager_list
            # the same call with two lists: the aliased entry must not answer
            e1, e2, j1, j2 = list(start), list(start), list(start), list(start)
            assert_same(jf(j1, j2), f(e1, e2))
            assert (j1, j2) == (e1, e2)


def test_a_list_argument_that_is_also_a_global():
    shared: list = []

    def f(acc):
        acc.append(1)
        return torch.ones(2) * len(shared)

    jf = jitcore.jit(f)
    for passed_shared in (True, True, False, True):
        shared.clear()
        other: list = []
        eager_result = f(shared if passed_shared else other)
        eager_state = (list(shared), list(other))
        shared.clear()
        other.clear()
        assert_same(jf(shared if passed_shared else other), eager_result)
        assert (shared, other) == eager_state
    assert jitcore.cache_misses(jf) == 2


def test_a_dict_passed_twice():
    def f(a, b):
        a["k"] = 1
        return torch.ones(2) * len(b)

    jf = jitcore.jit(f)
    eager_dict, jit_dict = {}, {}
    assert_same(jf(jit_dict, jit_dict), f(eager_dict, eager_dict))
    assert jit_dict == eager_dict
    assert_same(jf({}, {}), f({}, {}))
    assert_same(jf({}, {}), torch.zeros(2))


def test_containers_only_read_are_not_related():
    """Reading alone answers the same aliased or not: no guard on it, one entry."""
    holder = _state(True, (1, 2))

    def f(x):
        return x * (len(holder.a) + len(holder.b))

    jf = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jf(x), f(x))
    holder.b = [1, 2]  # the same contents, another object
    assert_same(jf(x), f(x))
    assert jitcore.cache_misses(jf) == 1


class _Config:
    """A config whose ``__getattribute__`` reads its own ``__dict__`` first, as transformers' does."""

    def __init__(self) -> None:
        self.id2label = {0: "a"}
        self.scale = 2.0

    def __getattribute__(self, key: str):
        if super().__getattribute__("__dict__").get("_per_layer") is not None:
            raise AttributeError(key)
        return super().__getattribute__(key)


def test_a_dict_walked_again_by_its_own_path_is_not_guarded_as_its_own_alias():
    # Each attribute read walks the config's ``__dict__`` again: its items were found already at the same
    # paths, and each got a vacuous ``v3 is not v3`` guard. What the walk does guard still holds.
    cfg = _Config()

    def f(x):
        return x * cfg.scale + len(cfg.id2label)

    jfn = jitcore.jit(f)
    x = torch.ones(2)
    assert_same(jfn(x), f(x))
    prologue = str(jitcore.last_prologue_traces(jfn)[-1])
    assert not [line for line in prologue.splitlines() if re.search(r"if (v\d+) is not \1:", line)], prologue
    cfg.id2label[1] = "b"  # the dict's contents are still guarded
    assert_same(jfn(x), f(x))
    assert jitcore.cache_misses(jfn) == 2
