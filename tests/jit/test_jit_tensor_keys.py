"""A caller's tensor as a key of the caller's dicts and sets, and searched for in a list, inside a jitted
function (Note [A caller's tensor as a key] in jitcore/jit/tensor_keys.py).
Each program runs eagerly and jitted on equal copies of its state; results, exceptions and the state
after the calls match, the caller's containers hold the caller's tensors (never a proxy), and a
repeated call is a cache hit.

Before: ``D[k]`` raised KeyError, ``D.get(k, 0)`` and ``k in D`` were silently the default and False, and
``D[k] = v`` put the trace's proxy into the caller's dict, one more entry per call.
"""

from __future__ import annotations

import collections
import copy
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from jitcore.ir import Proxy

KEY, OTHER = torch.ones(2), torch.zeros(2)
STATE: dict[str, Any] = {}  # the programs' global state, filled per run


def _outcome(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001 - the exception is the outcome compared
        return type(error)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return type(a) is type(b) and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(map(id, a)) == list(map(id, b)) and all(
            _same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _fresh_state() -> None:
    STATE.clear()
    STATE.update(d={KEY: 3.0}, s={KEY}, seq=[KEY, OTHER], out={})


def _lookup(x: torch.Tensor, k: torch.Tensor) -> Any:
    return x * STATE["d"][k]


def _get(x: torch.Tensor, k: torch.Tensor) -> Any:
    return x * STATE["d"].get(k, -1.0)


def _contains(x: torch.Tensor, k: torch.Tensor) -> Any:
    return x * (k in STATE["d"]) + (k in STATE["s"]) + (k in STATE["d"].keys())


def _global_key(x: torch.Tensor, k: torch.Tensor) -> Any:
    return x * STATE["d"][KEY] + (KEY in STATE["s"])


def _store(x: torch.Tensor, k: torch.Tensor) -> Any:
    STATE["out"][k] = x * 2
    STATE["s"].add(k)
    return x + 1


def _delete(x: torch.Tensor, k: torch.Tensor) -> Any:
    STATE["d"][k] = 1.0
    del STATE["d"][k]
    return x + STATE["d"].pop(k, 5.0)


def _index(x: torch.Tensor, k: torch.Tensor) -> Any:
    return x * STATE["seq"].index(k)


def _returned(x: torch.Tensor, k: torch.Tensor) -> Any:
    memo = {}
    memo[k] = x * 2
    return {k: memo[k] + 1}, k in memo


PROGRAMS = (_lookup, _get, _contains, _global_key, _store, _delete, _index, _returned)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_a_callers_tensor_as_a_key_behaves_as_eagerly(program: Callable[..., Any]) -> None:
    x = torch.arange(2.0) + 1
    calls = ((x, KEY), (x + 1, KEY), (x, OTHER), (x + 2, KEY), (x + 3, KEY))
    _fresh_state()
    expected = [_outcome(program, *args) for args in calls]
    eager_state = dict(STATE)
    _fresh_state()
    jitted = jitcore.jit(program)
    got = [_outcome(jitted, *args) for args in calls]
    for call, (want, have) in enumerate(zip(expected, got)):
        assert _same(want, have), f"call {call}: eager {want!r}, jitted {have!r}"
    for name, want in eager_state.items():
        have = STATE[name]
        assert not any(isinstance(key, Proxy) for key in have), f"{name}: a proxy escaped into {have}"
        assert _same(want, have) if isinstance(want, dict) else want == have, f"{name}: {want} != {have}"
    assert jitcore.cache_hits(jitted) >= 1  # the last call repeats the one before: no retrace


def test_a_proxy_key_of_a_container_built_while_tracing_is_found_without_an_identity_guard() -> None:
    """A dict or set the program builds with the argument as a key keeps finding it: a fresh tensor on
    the next call is a cache hit (only the caller's containers need the caller's tensor)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        seen = {x: 2.0}
        memo: dict = {}
        memo[x] = x * 3
        members = set()
        members.add(x)
        return x * seen[x] + (x in seen) + memo.get(x) + (x in members) + len(copy.deepcopy([x, x]))

    jitted = jitcore.jit(f)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(jitted(x), f(x))
    assert jitcore.cache_misses(jitted) == 1


class _Stepper:
    """An optimizer's shape: parameter groups and a per-parameter state dict (or defaultdict)."""

    def __init__(self, params: list[torch.Tensor], state: dict) -> None:
        self.param_groups = [{"params": params}]
        self.state = state


def _step_over_the_groups(opt: _Stepper) -> None:
    for p in opt.param_groups[0]["params"]:  # the key is the caller's tensor itself, reached by iteration
        keyed = isinstance(opt.state, collections.defaultdict)
        state = opt.state[p] if keyed else opt.state.setdefault(p, {})
        if len(state) == 0:
            state["step"] = torch.tensor(0.0)
        state["step"].add_(1)
        p.data.add_(state["step"])


@pytest.mark.parametrize("make_state", [dict, lambda: collections.defaultdict(dict)],
                         ids=["dict", "defaultdict"])
def test_a_callers_tensor_reached_by_iteration_as_a_key_is_the_calls_own(
    make_state: Callable[[], dict],
) -> None:
    """A tensor the program iterates out of the caller's list and uses as a key of the caller's dict
    (an optimizer's ``self.state[p]`` over fresh parameters) is guarded by identity. Before: a later
    call found the first call's parameter baked in as the key (its own ``p`` missing from its state)."""
    jitted = jitcore.jit(_step_over_the_groups)
    for i in range(3):
        params = [torch.full((2,), float(i))]
        eager, jit = _Stepper([p.clone() for p in params], make_state()), _Stepper(params, make_state())
        _step_over_the_groups(eager)
        jitted(jit)
        assert [k is p for k, p in zip(jit.state, jit.param_groups[0]["params"])] == [True], i
        for (ke, ve), (kj, vj) in zip(eager.state.items(), jit.state.items()):
            torch.testing.assert_close(kj, ke)
            torch.testing.assert_close(vj["step"], ve["step"])


def _a_list_of_a_weak_reference(x, store):
    made = [weakref.ref(x)]
    store.append(made)
    return made, x + 1


def _a_weak_reference(x, store):
    ref = weakref.ref(x)
    store.append(ref)
    return ref, x + 1


@pytest.mark.parametrize("program", [_a_list_of_a_weak_reference, _a_weak_reference])
def test_a_weak_reference_to_the_callers_tensor_refers_to_this_calls(program):
    """``weakref.ref(x)`` of the tensor the caller passes, returned and stored: every cached call handed on
    the pass's reference, to the first call's tensor (Note [A weak reference to the caller's tensor],
    jitcore/jit/outputs.py); the returned and the stored one are one object, as eagerly."""
    jitted = jitcore.jit(program)
    xs = [torch.ones(2) * i for i in range(3)]
    store: list = []
    for i, x in enumerate(xs):
        out, y = jitted(x, store)
        ref = out[0] if isinstance(out, list) else out
        assert out is store[-1] and ref() is x and torch.equal(y, x + 1), f"call {i}"
    assert jitcore.cache_misses(jitted) == 1
