"""Immutable objects a program makes and returns or stores are new on every call, as eagerly (Note
[Immutable objects the program makes, anew on every call], jitcore/jit/call_copies.py): ``Fraction``,
``Decimal``, ``range``, and a ``MappingProxyType`` over a dict the program made.

Differential: each program runs several calls eagerly and jitted; the caller compares what it got with
the earlier calls' by identity, and changes the dict a proxy shows.
"""

from __future__ import annotations

import decimal
import fractions
import types
from typing import Any

import pytest
import torch

import jitcore


def _a_fraction(x, box):
    return fractions.Fraction(1, 3), x + 1


def _a_decimal(x, box):
    return decimal.Decimal("1.5"), x + 1


def _a_range(x, box):
    return range(3), x + 1


def _a_fraction_stored_into_the_argument(x, box):
    r = fractions.Fraction(2, 3)
    box.append(r)
    return r, x + 1


def _ranges_in_a_list(x, box):
    return [range(2), range(2)], x + 1


@pytest.mark.parametrize("program", [
    _a_fraction, _a_decimal, _a_range, _a_fraction_stored_into_the_argument, _ranges_in_a_list,
])
def test_an_immutable_object_the_program_made_is_new_on_every_call(program):
    """``deepcopy`` returns these as themselves: every cached call handed on the pass's object (three calls
    stored one ``Fraction`` three times where eager stores three)."""

    def calls(fn: Any) -> list:
        box: list = []
        got, earlier = [], []
        for i in range(4):
            made, y = fn(torch.ones(2) * i, box)
            atom = made[0] if type(made) is list else made
            got.append((made, any(atom is e for e in earlier), box[-1] is made if box else None,
                        len({id(b) for b in box}), type(made) is list and made[0] is made[1], y.tolist()))
            earlier.append(atom)
        return got

    jitted = jitcore.jit(program)
    assert calls(jitted) == calls(program)
    assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


def _a_proxy_over_a_dict_it_returns(x):
    d = {"a": 1}
    return d, types.MappingProxyType(d), x + 1


def _a_proxy_over_a_dict_holding_a_list(x):
    return None, types.MappingProxyType({"a": [1]}), x + 1


def test_a_mapping_proxy_over_a_dict_the_program_made_shows_this_calls_dict():
    """The pass's proxy over the pass's dict: the caller's change to the returned dict did not show through
    it, and a list inside grew across calls ([1, 2, 2, 2, 2] where eager has [1, 2])."""

    def calls(fn: Any) -> list:
        got, earlier = [], []
        for i in range(4):
            d, proxy, y = fn(torch.ones(2) * i)
            if d is not None:
                d["b"] = i
            else:
                proxy["a"].append(2)
            got.append((dict(proxy), any(proxy is e for e in earlier), y.tolist()))
            earlier.append(proxy)
        return got

    for program in (_a_proxy_over_a_dict_it_returns, _a_proxy_over_a_dict_holding_a_list):
        jitted = jitcore.jit(program)
        assert calls(jitted) == calls(program)
        assert jitted.fallback_reason is None and jitcore.cache_misses(jitted) == 1


class _Namespaced:
    k = 1


def test_a_proxy_over_a_class_namespace_is_the_classs():
    """``vars(C)`` shows the class's namespace: not copied, a later change to the class shows through it."""

    def f(x):
        return vars(_Namespaced), x + 1

    jitted = jitcore.jit(f)
    for i in range(3):
        proxy, _ = jitted(torch.ones(2))
        _Namespaced.k = i + 5
        assert proxy["k"] == i + 5
