"""Items of state read at a key the program computes from a dynamic number, without a trace per call.

Issue 14. Note [An item at a computed number's key] (jitcore/jit/state_reads.py): ``D.setdefault(n % 3,
set()).add(v)``, ``D.setdefault(n % 3, []).append(v)`` and ``D[n % 3].append(v)`` on a dict of state bind
the item at the key's value (the hash guarded the value), not the whole dict, so the lists and sets at its
keys growing every call trace nothing again. Each case runs eagerly and jitted from equal state, compares
every call's result and the state after each call (a set's iteration order included), and counts traces.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import jitcore

STATE: dict = {}


def _sets_by_default(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE.setdefault(n % 3, set()).add(n * 8)
    return x * 2


def _lists_by_default(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE.setdefault(n % 3, []).append(n * 8)
    return x - n


def _lists_subscripted(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE[n % 2].append(x.sum().item())
    STATE[n % 2].extend((n, "a"))
    return x + 1


def _counts_at_a_computed_key(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE[n % 2] += 1
    return x * STATE[n % 2]


def _view(state: dict) -> list:
    return [(k, type(v).__name__, list(v) if isinstance(v, (set, list)) else v) for k, v in state.items()]


@pytest.mark.parametrize(("fn", "start", "traces"), [
    (_sets_by_default, {}, 6),  # n == 0 as a constant; keys [0], [0, 1]; then one entry per n % 3
    (_lists_by_default, {}, 6),
    (_lists_subscripted, {0: [], 1: [9]}, 3),  # n == 0 as a constant; then one entry per n % 2
    (_counts_at_a_computed_key, {0: 5, 1: 7}, 3),
])
def test_an_item_at_a_computed_numbers_key_grows_without_traces(
        fn: Callable[[torch.Tensor, int], torch.Tensor], start: dict, traces: int) -> None:
    """20 calls with n = 0..19: each call's result and the dict after it as eagerly; before the fix every
    call traced again (20 traces: the read at ``n % 3`` bound the whole dict, each list's or set's contents
    guarded)."""

    def run(call: Callable[[torch.Tensor, int], torch.Tensor]) -> list:
        STATE.clear()
        STATE.update({k: (type(v)(v) if isinstance(v, (list, set)) else v) for k, v in start.items()})
        return [(call(torch.full((2,), float(n)), n).tolist(), _view(STATE)) for n in range(20)]

    eager = run(fn)
    jf = jitcore.jit(fn)
    assert run(jf) == eager
    assert jitcore.cache_misses(jf) == traces


# --- ``len()`` of such a dict (Note [A dict measured by len()], jitcore/jit/state_reads.py)


def _lists_by_default_measured(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE.setdefault(n % 3, []).append(n * 8)
    return x * len(STATE)


def _lists_subscripted_measured(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE[n % 2].append(n)
    return x + len(STATE)


def _stored_then_measured(x: torch.Tensor, n: int) -> torch.Tensor:
    STATE[n % 4] = n  # a dict only stored into: its type guarded (Note [A dict only stored into])
    return x * len(STATE)


def _callers_changes(n: int) -> None:
    """What the caller does to the dict between calls: the length ``len()`` reads changes (a key added, the
    dict emptied), or does not (a list replaced by another, an item of another type)."""
    if n == 7:
        STATE["other"] = 1.5
    if n == 9:
        STATE[1] = [-1]
    if n == 12:
        STATE.clear()
        STATE.update({0: [], 1: []})
    if n == 15:
        STATE[5] = []


@pytest.mark.parametrize(("fn", "start", "traces", "change"), [
    (_lists_by_default_measured, {}, 6, False),  # as _lists_by_default: n == 0, keys [0], [0, 1], n % 3
    (_lists_subscripted_measured, {0: [], 1: [9]}, 3, False),
    (_lists_by_default_measured, {}, 20, True),
    (_lists_subscripted_measured, {0: [], 1: [9]}, 20, True),
    (_stored_then_measured, {}, 20, True),  # here the keys only ``len()`` guards decide the length
])
def test_the_length_of_a_dict_whose_items_grow_reads_its_keys(
        fn: Callable[[torch.Tensor, int], torch.Tensor], start: dict, traces: int, change: bool) -> None:
    """Before: the load ``len()`` takes bound the dict whole, each list's length guarded: 20 traces in 20."""

    def run(call: Callable[[torch.Tensor, int], torch.Tensor]) -> list:
        STATE.clear()
        STATE.update({k: list(v) for k, v in start.items()})
        out = []
        for n in range(20):
            if change:
                _callers_changes(n)
            out.append((call(torch.full((2,), float(n)), n).tolist(), _view(STATE)))
        return out

    eager = run(fn)
    jf = jitcore.jit(fn)
    assert run(jf) == eager
    assert jitcore.cache_misses(jf) <= traces
