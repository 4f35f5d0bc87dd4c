"""``operator.attrgetter`` over the caller's objects inside a jitted function (Note [An attribute getter
reads as getattr], jitcore/interpreter/getters.py): C read the attribute unseen, and a cached call
returned the first call's value after the caller changed it. Differential against eager."""

from __future__ import annotations

import operator

import torch
from jit_helpers import assert_same

import jitcore


class Layer:
    def __init__(self, scale: float, order: int) -> None:
        self.scale = scale
        self.order = order


def test_an_attribute_getter_reads_the_callers_object_on_every_call() -> None:
    layers = [Layer(1.0, 2), Layer(2.0, 1)]
    get_scale = operator.attrgetter("scale")

    def f(x: torch.Tensor) -> torch.Tensor:
        first = sorted(layers, key=operator.attrgetter("order"))[0]
        return x * get_scale(first) + get_scale(layers[0])

    jf = jitcore.jit(f)
    for step in range(5):
        if step == 2:
            layers[1].scale = 5.0
        if step == 3:
            layers[0].order = 0  # the sort picks the other layer
        x = torch.randn(3)
        assert_same(jf(x), f(x))
    assert jitcore.cache_hits(jf) >= 2
