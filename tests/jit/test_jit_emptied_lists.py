"""A list of state the program empties and fills again (``feats.clear(); feats.append(h)``): one entry,
not one for the empty list and one for the filled one, with every result and the caller's list as eager
has them (Note [A list the program empties], jitcore/jit/appends.py). Differential against eager."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jit_helpers import assert_same, six_calls

import jitcore

_PROGRAMS = {  # name: (the global's first value, the body, a change the caller makes before call 3, entries)
    "clear_append": ("[]", "L.clear(); L.append(x + 1)", None, 1),
    "clear_extend": ("[1, 2]", "L.clear(); L.extend([x, x * 2])", None, 1),
    "store_whole_slice": ("[]", "L[:] = [x, 3]", None, 1),
    "store_empty_slice_append": ("[5]", "L[:] = []; L.append(x)", None, 1),
    "caller_adds_items": ("[]", "L.clear(); L.append(x + 1)", "L.extend([1, 2, 3])", 1),
    "caller_replaces_list": ("[]", "L.clear(); L.append(x + 1)", "L = [9, 9]", 1),
    "clear_only": ("[1]", "L.clear()", "L.append(4)", 1),
    "len_before_clear": ("[1]", "n = len(L); L.clear(); L.append(n); y = y + n", "L.append(4)", 1),
    "len_after_fill": ("[]", "L.clear(); L.append(x); y = y * len(L)", "L.append(1)", 1),
    # read another way: guarded as the call began (sound, not narrowed)
    "read_after_clear": ("[]", "L.clear(); L.append(x + 1); y = y + L[0]", None, 2),
    "clear_looked_up_not_called": ("[1, 2]", "m = L.clear; y = y + len(L)", "L.append(3)", 2),
    "clear_then_extend_by_itself": ("[1, 2]", "L.clear(); L.extend(L + [x])", None, 2),
    "aliased_by_the_caller": ("[]", "L.clear(); M.append(1); y = y + len(L)", "M = L", 2),
}


def _run(first: str, body: str, change: str | None, jit: bool) -> tuple[list, str, Any]:
    """Six calls of a program over a global list ``L``: the results, the list after, the callable."""
    namespace: dict = {"torch": torch}
    source = f"L = {first}\nM = []\ndef f(x):\n    y = x * 2\n    {body}\n    return y\n"
    results, fn = six_calls(source, namespace, change, jit)
    return results, repr(namespace["L"]), fn


@pytest.mark.parametrize("name", list(_PROGRAMS))
def test_a_list_the_program_empties_and_fills_is_eagers(name) -> None:
    first, body, change, entries = _PROGRAMS[name]
    expected, expected_list, _ = _run(first, body, change, jit=False)
    actual, final_list, jf = _run(first, body, change, jit=True)
    for a, b in zip(actual, expected):
        assert_same(a, b)
    assert final_list == expected_list
    assert jitcore.cache_misses(jf) == entries


def _hooked(features: list) -> tuple[torch.nn.Module, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    model[1].register_forward_hook(lambda m, i, o: features.append(o.detach()))

    def extract(x: torch.Tensor) -> torch.Tensor:
        features.clear()
        return model(x)

    return model, extract


def test_a_forward_hooks_feature_list_cleared_per_call_takes_one_entry() -> None:
    """A feature extractor: the hook appends to a list the program clears before each forward (two entries
    before: the empty list's contents guarded, then the filled one's length)."""
    eager_features: list = []
    jit_features: list = []
    _, eager = _hooked(eager_features)
    _, program = _hooked(jit_features)
    jf = jitcore.jit(program)
    for _ in range(6):
        x = torch.randn(3, 4)
        assert_same(jf(x), eager(x))
        assert len(jit_features) == len(eager_features) == 1
        assert_same(jit_features[0], eager_features[0])
    assert jitcore.cache_misses(jf) == 1


def _clear_append(x: torch.Tensor, log: list) -> torch.Tensor:
    log.clear()
    log.append(x + 1)
    return x * 2


def _append_clear_append(x: torch.Tensor, log: list) -> torch.Tensor:
    log.append(0)
    log.clear()
    log.append(x.sum())
    return x * 2


def _clear_on_request(x: torch.Tensor, log: list, reset: bool) -> torch.Tensor:
    if reset:
        log.clear()
    log.append(x.sum())
    return x * 2


@pytest.mark.parametrize(("program", "entries"), [
    (_clear_append, 1), (_append_clear_append, 1), (_clear_on_request, 2),
], ids=["clear_append", "append_clear_append", "clear_on_request"])
def test_a_list_argument_the_function_empties_and_fills_is_eagers(program, entries) -> None:
    """A list parameter whose every use appends to it or empties it at once (``log.clear()``): the program's
    copy is replayed whole onto the caller's list when the pass emptied it, its appends otherwise (two or
    three entries before, by the list's length and items)."""
    eager_log, jit_log = [3], [3]
    jf = jitcore.jit(program)
    for step in range(8):
        if step == 4:
            eager_log.extend([5, 6])
            jit_log.extend([5, 6])
        extra = (step % 3 == 0,) if program is _clear_on_request else ()
        x = torch.full((2,), float(step))
        assert_same(jf(x, jit_log, *extra), program(x, eager_log, *extra))
        assert repr(jit_log) == repr(eager_log)
    assert jitcore.cache_misses(jf) == entries
