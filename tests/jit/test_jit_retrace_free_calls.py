"""Programs that hand the caller's objects to calls (``object.__setattr__``, helpers called with keywords,
after computed arguments, methods, local functions) and must not trace again on every call (issue 14):
each runs eagerly and jitted on equal objects, every result and the objects compared after the calls, and
the number of traces counted (the helpers of test_jit_retrace_free_effects.py)."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from test_jit_retrace_free_effects import run_both

import jitcore
from jitcore.jit.namespace_arguments import attribute_parameters

# --- ``object.__setattr__`` on a namespace argument (Note [A frozen dataclass's field set],
# jitcore/jit/appends.py; Note [A namespace argument only used through its attributes])


def _set_by_object(s: types.SimpleNamespace, x: torch.Tensor) -> torch.Tensor:
    object.__setattr__(s, "step", s.step + 1)
    s.log.append(x.sum())
    return x * s.step


def test_a_namespace_counter_set_by_object_setattr_beside_a_list_traces_once() -> None:
    """Before: the namespace was handed to a call, its items guarded (the log's length): 100 in 100."""
    jf = run_both(_set_by_object, types.SimpleNamespace(step=0, log=[]), 100)
    assert jitcore.cache_misses(jf) == 1


def test_a_namespace_set_by_object_setattr_the_caller_changes_is_the_callers() -> None:
    def change(s: types.SimpleNamespace, i: int) -> None:
        if i == 2:
            s.log[:] = [7.0] * 3
        if i == 4:
            s.step = 10

    run_both(_set_by_object, types.SimpleNamespace(step=0, log=[]), 6, change=change)


def _set_with_itself(s, x):
    object.__setattr__(s, "me", s)  # the namespace is the value too: handed on
    return x


def _set_a_dunder(s, x):
    object.__setattr__(s, "__dict__", {})
    return x


def _set_by_name(s, name, x):
    object.__setattr__(s, name, x)  # a name the caller gives: any attribute
    return x


@pytest.mark.parametrize(("fn", "expected"), [
    (_set_by_object, {"s"}), (_set_with_itself, set()), (_set_a_dunder, set()), (_set_by_name, set()),
])
def test_which_namespaces_object_setattr_sets_is_proved_from_the_bytecode(fn: Any, expected: set) -> None:
    assert attribute_parameters(fn) == expected
