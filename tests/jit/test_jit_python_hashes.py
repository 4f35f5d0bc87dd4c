"""``hash()`` of the program's objects, and the containers built and changed with them as keys, traced:
their Python ``__hash__``/``__eq__`` run on the interpreter, what they read is guarded, and no call runs
eagerly (jitcore/interpreter/hashes.py).

Before, C's ``hash`` (and ``set``, ``dict``, ``d[k] = v``, ...) called those dunders natively, which made
every such call run eagerly (Note [Python code a C call ran natively], jitcore/jit/native_python.py): a
frozen dataclass's generated ``__hash__`` is the program's code.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import jitcore
from tests.jit.jit_helpers import assert_same


@dataclasses.dataclass(frozen=True)
class Cfg:
    a: int = 1
    name: str = "x"


class Keyed:
    """A mutable key: its hash and equality read ``self.v``, which the caller changes between calls."""

    def __init__(self, v: int) -> None:
        self.v = v

    def __hash__(self) -> int:
        return hash(self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyed) and self.v == other.v


def _traced_as_eagerly(fn: Callable[[torch.Tensor], Any], change: Callable[[], None] = lambda: None, *,
                       misses: int = 1, calls: int = 4) -> Any:
    """``calls`` calls of ``fn`` jitted and eagerly, ``change()`` before the third: every answer equal,
    no call run eagerly (no jitcore warning), ``misses`` traces."""
    jfn = jitcore.jit(fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(calls):
            if step == 2:
                change()
            x = torch.ones(2)
            assert_same(jfn(x), fn(x))
    assert not [str(w.message) for w in caught if "jitcore" in str(w.message)]
    assert jfn.fallback_reason is None
    assert jitcore.cache_misses(jfn) == misses
    return jfn


_HASHES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "dataclass": lambda x: x * (hash(Cfg(3)) == hash(Cfg(3))) + hash(Cfg(2)) % 5,
    "tuple of a dataclass": lambda x: x + hash((Cfg(1), 2)) % 7 + (hash((Cfg(1), 2)) == hash((Cfg(1), 2))),
    "nested tuple": lambda x: x + hash(((Cfg(1),), "k", (2, Cfg(4)))) % 11,
}


@pytest.mark.parametrize("name", sorted(_HASHES))
def test_hash_of_a_dataclass_is_traced(name: str) -> None:
    _traced_as_eagerly(_HASHES[name])


def test_hash_reads_the_state_it_hashes() -> None:
    """A cached call after the caller changed ``key.v`` returns what eager returns: the read of ``v`` in
    ``__hash__`` is guarded."""
    key = Keyed(5)
    _traced_as_eagerly(lambda x: x + hash(key) + hash((key, 1)) % 3, lambda: setattr(key, "v", 6), misses=2)


def test_hash_errors_as_eagerly() -> None:
    class NoInt:
        def __hash__(self) -> Any:
            return 1.5

    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            hash(NoInt())
        except TypeError as e:
            return x * len(str(e))
        return x

    _traced_as_eagerly(f)
