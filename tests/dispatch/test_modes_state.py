"""A mode made outside the jitted function and entered inside it (``with mode:``) that keeps state of its
own: its state changes are effects replayed by every call (jitcore/jit/effects.py), and the second call
is a cache hit. (A dispatch mode whose only state is a counter hit the cache before: the counter is a
dynamic number.)

Each program runs eagerly on one mode and under jitcore.jit on an equal one, four times: the outputs and
the modes' state equal after every call, one cache entry. Before, torch's ``TorchDispatchMode.__exit__``
read ``self.__dict__.get("_dispatch_key")``, which guarded the mode's whole ``__dict__`` (its counter's
value, its log's length): every call missed.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from subclass_checks import CountingFunctionMode as CountingFunctions
from subclass_checks import assert_same_values
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore


class CountingDispatch(TorchDispatchMode):
    """Counts the aten calls and logs their names (a counter alone hit the cache before)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.count += 1
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


class LoggingDispatch(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _state(mode: Any) -> Any:
    return {k: v for k, v in vars(mode).items() if not k.startswith("old_")}


def _under(x: torch.Tensor, mode: Any) -> torch.Tensor:
    with mode:
        return x.sin() * 2 + 1


def _under_both(x: torch.Tensor, functions: Any, dispatch: Any) -> torch.Tensor:
    with dispatch, functions:
        return torch.relu(x) + x.sum()


@pytest.mark.parametrize("kind", [CountingDispatch, LoggingDispatch])
def test_a_dispatch_mode_passed_in_keeps_its_state_and_hits(kind: type) -> None:
    jitted = jitcore.jit(_under)
    mine, eager = kind(), kind()
    for _ in range(4):
        x = torch.randn(3)
        assert_same_values(jitted(x, mine), _under(x, eager))
        assert _state(mine) == _state(eager)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


GLOBAL_MODE = CountingDispatch()


def _under_the_global_mode(x: torch.Tensor) -> torch.Tensor:
    with GLOBAL_MODE:
        return x.cos() - 1


def test_a_global_dispatch_mode_keeps_its_state_and_hits() -> None:
    global GLOBAL_MODE
    jitted = jitcore.jit(_under_the_global_mode)
    mine, eager = CountingDispatch(), CountingDispatch()
    for _ in range(4):
        x = torch.randn(3)
        GLOBAL_MODE = mine
        out = jitted(x)
        GLOBAL_MODE = eager
        assert_same_values(out, _under_the_global_mode(x))
        assert _state(mine) == _state(eager)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)


def test_function_and_dispatch_modes_passed_in_keep_their_state_and_hit() -> None:
    jitted = jitcore.jit(_under_both)
    mine, eager = (CountingFunctions(), CountingDispatch()), (CountingFunctions(), CountingDispatch())
    for _ in range(4):
        x = torch.randn(3)
        assert_same_values(jitted(x, *mine), _under_both(x, *eager))
        assert [_state(m) for m in mine] == [_state(m) for m in eager]
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 3)
