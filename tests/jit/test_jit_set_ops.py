"""A reached set changed by merges, pops and clears iterates in eager's order after every call (Note [A set's
merges replayed as C makes them], jitcore/jit/set_ops.py), and a pop whose element the program reads runs
eagerly (its element is the table's, not the contents')."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from jit_helpers import assert_same

import jitcore


def _el(n: int, k: int) -> int:
    return (n * 8 + k * 64) % 200  # small ints that share slots of a small table


def _ior(s: set, n: int) -> None:
    s |= {_el(n, 0), _el(n, 1), _el(n, 2)}


def _update_by_sets(s: set, n: int) -> None:
    s.update({_el(n, 0), _el(n, 3)}, frozenset([_el(n, 5)]))


def _update_by_a_dict(s: set, n: int) -> None:
    s.update(dict.fromkeys([_el(n, 1), _el(n, 4)]))


def _adds_and_pops(s: set, n: int) -> None:
    s.add(_el(n, 0))
    s.add(_el(n, 1))
    if len(s) > 5:
        s.pop()


def _clears_then_merges(s: set, n: int) -> None:
    s.add(_el(n, 0))
    if n % 4 == 3:
        s.clear()
        s |= {_el(n, 1), _el(n, 2), _el(n + 1, 1)}  # into an empty table: C copies the slots


def _isub(s: set, n: int) -> None:
    s |= {_el(n, 0), _el(n, 1), _el(n, 2)}
    s -= {_el(n, 1), _el(n + 1, 0)}


def _difference_update(s: set, n: int) -> None:
    s.update([_el(n, 0), _el(n, 1), _el(n, 2)])
    s.difference_update([_el(n, 0)], {_el(n + 3, 1)})


def _iand(s: set, n: int) -> None:
    s |= {_el(n, 0), _el(n, 1), _el(n, 2), _el(n, 3)}
    s &= {_el(k, j) for k in range(n - 3, n + 1) for j in range(4) if (k + j) % 3}


def _intersection_update(s: set, n: int) -> None:
    s.update([_el(n, 0), _el(n, 1), _el(n, 2)])
    s.intersection_update([_el(k, j) for k in range(n - 4, n + 1) for j in range(3) if (k * j) % 5 != 1])


def _ixor(s: set, n: int) -> None:
    s ^= {_el(n, 0), _el(n, 1), _el(n - 2, 1)}


def _symmetric_difference_update(s: set, n: int) -> None:
    s.symmetric_difference_update([_el(n, 0), _el(n - 1, 2), _el(n, 2), _el(n, 0)])
    s.symmetric_difference_update(dict.fromkeys([_el(n, 3), _el(n - 1, 3)]))


def _grows_and_shrinks(s: set, n: int) -> None:
    s |= {_el(n, k) for k in range(9)}
    s -= {_el(n - 1, k) for k in range(0, 9, 2)}


OPS = [_ior, _update_by_sets, _update_by_a_dict, _adds_and_pops, _clears_then_merges, _isub,
       _difference_update, _iand, _intersection_update, _ixor, _symmetric_difference_update,
       _grows_and_shrinks]


def _on_an_argument(op: Callable[[set, int], None]) -> Callable[..., torch.Tensor]:
    def fn(s: set, x: torch.Tensor, n: int) -> torch.Tensor:
        op(s, n)
        return x * len(s)

    return fn


STATE: set = set()


def _on_a_global(op: Callable[[set, int], None]) -> Callable[..., torch.Tensor]:
    def fn(_s: Any, x: torch.Tensor, n: int) -> torch.Tensor:
        op(STATE, n)
        return x * 2

    return fn


class _Holder:
    def __init__(self) -> None:
        self.s: set = set()


def _on_an_attribute(op: Callable[[set, int], None]) -> Callable[..., torch.Tensor]:
    def fn(h: _Holder, x: torch.Tensor, n: int) -> torch.Tensor:
        op(h.s, n)
        return x - 1

    return fn


def _check(fn: Callable[..., torch.Tensor], form: str) -> None:
    global STATE
    jf = jitcore.jit(fn)
    eager, jitted = (_Holder(), _Holder()) if form == "attribute" else ({120}, {120})
    for n in range(20):
        x = torch.randn(2)
        if form == "global":
            STATE = eager
        expected = fn(eager, x, n)
        if form == "global":
            STATE = jitted
        assert_same(jf(jitted, x, n), expected)
        seen = (lambda o: list(o.s)) if form == "attribute" else list
        assert seen(jitted) == seen(eager), n


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__.strip("_"))
def test_a_set_argument_merged_popped_or_cleared_iterates_in_eagers_order(op: Callable) -> None:
    """Before (/tmp/eff56-probes/set_ops_all.py): these ops were replayed as the set's whole contents (a new
    table), and the set iterated in another order than eager's from call 0 to 4; ``s |= t`` of two sets
    ran natively, unseen (Note [A set changed in place is a call], jitcore/interpreter/protocols.py)."""
    _check(_on_an_argument(op), "argument")


@pytest.mark.parametrize("form", ["global", "attribute"])
@pytest.mark.parametrize("op", [_ior, _adds_and_pops, _clears_then_merges, _iand, _ixor],
                         ids=lambda op: op.__name__.strip("_"))
def test_a_set_of_state_merged_popped_or_cleared_iterates_in_eagers_order(op: Callable, form: str) -> None:
    _check((_on_a_global if form == "global" else _on_an_attribute)(op), form)


def _pops_and_reads(s: set, x: torch.Tensor) -> torch.Tensor:
    v = s.pop()
    s.add(v + 16)
    return x * v


def test_a_popped_element_read_by_the_program_is_eagers() -> None:
    """Before (/tmp/eff56-probes/pop_value.py): ``{1, 9}`` and ``{9, 1}`` hold the same elements, which the
    guard checks, in other slots: the entry traced on the first gave 1 where eager pops 9 from the second."""
    jf = jitcore.jit(_pops_and_reads)
    for order in ([1, 9], [9, 1], [1, 9], [9, 1]):
        eager, jitted = set(), set()
        for e in order:
            eager.add(e)
            jitted.add(e)
        x = torch.ones(2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the eager entry says why once)
            got = jf(jitted, x)
        assert_same(got, _pops_and_reads(eager, x))
        assert list(jitted) == list(eager)


SEEN: set = {120}


def _adds_numbers_then_pops(x: torch.Tensor, n: int) -> torch.Tensor:
    SEEN.add(n * 8)  # only added to: stand-ins, settled by len() (Note [A set's stand-ins settled in eager's
    SEEN.add(n * 8 + 64)  # place], jitcore/jit/set_ops.py)
    if len(SEEN) > 5:
        SEEN.pop()
    return x * sum(1 << (v % 61) for v in SEEN)


def test_a_set_of_state_settled_then_popped_pops_eagers_element() -> None:
    """Before (/tmp/eff56-probes/settle_pop.py): the settle left the stand-ins' slots dummies, the pass's
    table was not eager's, and the replay of the pop's whole contents iterated in another order at call 2."""
    global SEEN
    runs = []
    for run in (_adds_numbers_then_pops, jitcore.jit(_adds_numbers_then_pops)):
        SEEN = {120}
        out = []
        for n in range(12):
            out.append((run(torch.ones(1, dtype=torch.float64), n), list(SEEN)))
        runs.append(out)
    for (expected, eager_order), (got, jit_order) in zip(*runs):
        assert_same(got, expected)
        assert jit_order == eager_order


MADE: set = {0}


def _rebinds_a_made_set(x: torch.Tensor, n: int) -> torch.Tensor:
    global MADE
    MADE = MADE | {n * 8, n * 8 + 64}  # C copies MADE's table, then merges (a resize of its own)
    if len(MADE) > 6:
        MADE = MADE - {min(MADE)}  # a dummy where min(MADE) was
    return x * len(MADE)


def test_a_made_set_stored_into_state_iterates_in_eagers_order() -> None:
    """Before (/tmp/set57-probes/wide_sets.py ``rebind``): the made set was built again each call as
    ``set(elements)``, a table of other slots than C's ``set_or``/``set_sub`` made, and the next call's merge
    iterated in another order at call 2: eager [0, 64, 16, 80, 8, 72], jit [0, 64, 8, 72, 16, 80] (Note [A
    made set's table as the pass made it], jitcore/jit/set_tables.py)."""
    global MADE
    runs = []
    jf = jitcore.jit(_rebinds_a_made_set)
    for run in (_rebinds_a_made_set, jf):
        MADE = {0}
        out = []
        for n in range(20):
            got = run(torch.ones(1), n)
            out.append((got, type(MADE), list(MADE)))
        runs.append(out)
    for n, ((expected, eager_type, eager_order), (got, jit_type, jit_order)) in enumerate(zip(*runs)):
        assert_same(got, expected)
        assert (jit_type, jit_order) == (eager_type, eager_order), n
    assert jitcore.cache_misses(jf) == 20  # MADE's contents differ every call: one pass each, as before


def _makes_a_set_of_constants(x: torch.Tensor, n: int) -> torch.Tensor:
    global MADE
    MADE = {0, 16, 64, 3}  # made again each call (a copy of the pass's)
    return x * 2


def _merges_into_the_made_set(x: torch.Tensor, n: int) -> torch.Tensor:
    global MADE
    MADE = MADE | {n * 8 + 128, n + 1000}  # C copies MADE's table: its slots decide the order
    return x * 3


def test_a_set_of_constants_made_each_call_iterates_in_eagers_order() -> None:
    """Before (/tmp/set57-probes/hit.py): the set of constants was copied each call as ``set(items)``, another
    table than the display's, and merging into it iterated in another order at call 0: eager
    [0, 16, 64, 3, 128, 1000], jit [0, 64, 128, 3, 1000, 16]."""
    global MADE
    jitted = (jitcore.jit(_makes_a_set_of_constants), jitcore.jit(_merges_into_the_made_set))
    runs = []
    for fns in ((_makes_a_set_of_constants, _merges_into_the_made_set), jitted):
        out = []
        for n in range(6):
            for fn in fns:
                out.append((fn(torch.ones(1), n), list(MADE)))
        runs.append(out)
    for k, ((expected, eager_order), (got, jit_order)) in enumerate(zip(*runs)):
        assert_same(got, expected)
        assert jit_order == eager_order, k
