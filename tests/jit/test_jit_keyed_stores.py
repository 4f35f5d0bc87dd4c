"""Stores into a caller's dict, set or heap keyed or ordered by a number of the call: every call's result
and the caller's container equal eager's, with one entry per key or length today (docs/user-guide.md,
"Side effects": "one entry per value, because a set or dict hashes the number itself"), except a dict
argument the function only stores into: two entries (the number specialized, then dynamic; Note [A dict
argument only stored into], jitcore/jit/appends.py).

Why an entry per call, and not one entry (issue 14): the effects of a call on the caller's containers are
the difference between the container as the pass found it and as it left it (``_diff`` in
jitcore/jit/effects.py), so an entry holds for a container with the traced keys, contents or length (the
guards ``args[1] has keys [...]``, ``args[1] holds (...)``, ``len(args[1]) == n``); the stored key is a
plain number (Note [A key of the computation's numbers]), the argument hashed and so specialized; and
``heapq.heappush`` compares the call's ``loss.item()`` with the heap's items in C, so where it lands is
decided by values of the caller's list. One entry would need a store that does not read the container
(no guard on its keys, a key taken from the call) and a per-call native ``heappush`` effect, each only
where nothing else in the call reads the container: these tests pin the correct behaviour until then.
"""

from __future__ import annotations

import heapq

import torch
from jit_helpers import assert_same

import jitcore


def _x(i: int) -> torch.Tensor:
    return torch.randn(4, generator=torch.Generator().manual_seed(i))


def _step_keyed(x: torch.Tensor, hist: dict, step: int) -> torch.Tensor:
    loss = (x * 2).sum()
    hist[step] = loss.detach()
    return loss


def _into_a_set(x: torch.Tensor, seen: set, n: int) -> torch.Tensor:
    seen.add(n)
    return x * len(seen)


def _into_a_heap(x: torch.Tensor, heap: list, i: int) -> torch.Tensor:
    loss = (x ** 2).mean()
    heapq.heappush(heap, (loss.item(), i))
    return loss


# a module bound by no import statement: 3.11 loads its function with LOAD_METHOD, 3.12 with a method
# LOAD_ATTR, where ``heapq.heappush`` is the global with its NULL and a plain LOAD_ATTR
_hq = __import__("heapq")


def _into_a_heap_by_another_name(x: torch.Tensor, heap: list, i: int) -> torch.Tensor:
    loss = (x ** 2).mean()
    _hq.heappush(heap, (loss.item(), i))
    return loss


def _run(fn, mine, theirs, keys) -> object:
    jfn = jitcore.jit(fn)
    for i, key in enumerate(keys):
        assert_same(jfn(_x(i), mine, key), fn(_x(i), theirs, key))
        assert_same(mine, theirs)
    return jfn


def test_a_step_keyed_dict_of_the_caller() -> None:
    jfn = _run(_step_keyed, {}, {}, list(range(12)))
    assert jitcore.cache_misses(jfn) == 2  # only stored into: its keys unguarded, the step a dynamic key


def test_a_step_keyed_dict_with_steps_seen_again() -> None:
    mine, theirs = {}, {}
    jfn = _run(_step_keyed, mine, theirs, [0, 1, 2] * 4)
    assert jitcore.cache_misses(jfn) == 2  # 0, then any step: keys seen again keep their place
    mine[0], theirs[0] = torch.tensor(5.0), torch.tensor(5.0)  # the caller's item changed: still eager's
    assert_same(jitcore.jit(_step_keyed)(_x(0), mine, 0), _step_keyed(_x(0), theirs, 0))
    assert_same(mine, theirs)


def test_an_int_argument_added_to_a_set_of_the_callers() -> None:
    jfn = _run(_into_a_set, set(), set(), list(range(12)))
    assert jitcore.cache_misses(jfn) == 12


def test_an_int_argument_added_again_hits() -> None:
    jfn = _run(_into_a_set, set(), set(), [0, 1, 2] * 4)
    assert jitcore.cache_misses(jfn) == 6


def test_heappush_of_a_read_loss_into_the_callers_heap() -> None:
    jfn = _run(_into_a_heap, [], [], list(range(12)))
    # only pushed onto: the push replayed with each call's item (Note [A list argument only pushed onto]),
    # the step specialized on the first trace
    assert jitcore.cache_misses(jfn) == 2


def test_heappush_through_a_module_loaded_as_a_method() -> None:
    """The push seen whichever way the bytecode loads ``heappush`` (3.11 to 3.13): a trace, not one a call."""
    jfn = _run(_into_a_heap_by_another_name, [], [], list(range(12)))
    assert jitcore.cache_misses(jfn) == 2
