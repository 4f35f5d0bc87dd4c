"""Tensor subclasses as others write them and use them, round 13 (issue 15, helper zoo34): the patterns of
torch's own subclass tests and docs (``MySubclass(t)``, a tensor-like class that is no tensor), each
program run eagerly and under jitcore.jit on equal fresh arguments, three calls. Each test failed before
its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

import jitcore


def _same(got: Any, expected: Any) -> None:
    """Equal values, dtypes, classes and grad flags, down to tensors held by tensor-like objects."""
    assert type(got) is type(expected)
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for a, e in zip(got, expected):
            _same(a, e)
    elif isinstance(expected, torch.Tensor) and hasattr(expected, "__tensor_flatten__"):
        names, ctx = expected.__tensor_flatten__()
        assert got.__tensor_flatten__() == (names, ctx)
        _same([getattr(got, n) for n in names], [getattr(expected, n) for n in names])
    elif isinstance(expected, torch.Tensor):
        assert (got.dtype, got.requires_grad) == (expected.dtype, expected.requires_grad)
        torch.testing.assert_close(got.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
    elif hasattr(expected, "__dict__"):
        _same(sorted(vars(got).items()), sorted(vars(expected).items()))
    else:
        assert got == expected


def _compare(program: Callable[..., Any], make: Callable[[], tuple], after: Callable[[tuple], Any]) -> None:
    """Eager vs jitted on three fresh equal argument sets: results (or the error's type and text), what
    ``after`` reads from the arguments (gradients), and the cache: one miss, then hits."""
    jitted = jitcore.jit(program)
    for seed in range(3):
        made = []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append(make())
        try:
            expected, raised = program(*made[0]), None
        except Exception as exc:  # noqa: BLE001 - eager's error is the expected answer
            expected, raised = None, exc
        if raised is not None:
            with pytest.raises(type(raised)) as traced:
                jitted(*made[1])
            assert str(traced.value) == str(raised)
            continue
        _same(jitted(*made[1]), expected)
        _same(after(made[1]), after(made[0]))
    if raised is None:
        assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def _grads(args: tuple) -> list[Any]:
    held = [a if isinstance(a, torch.Tensor) else getattr(a, "tensor", None) for a in args]
    return [getattr(t, "grad", None) for t in held]


# --- a tensor subclass called on a tensor: ``MySubclass(t)`` -------------------------------------------
# Note [A class whose __new__ has a lookaside] (jitcore/interpreter/calls.py): a subclass that inherits
# torch's C ``__new__`` was called natively on the proxy, and torch refused to retype it ("the raw Tensor
# object is already associated to a python object of type PlainTensorProxy"); eagerly ``P(t)`` is an alias.


class _Plain(torch.Tensor):
    pass


class _Passing(torch.Tensor):
    log: list[str] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.log.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs)


def _aliased_writes(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = _Plain(x)
    y.add_(1)
    return x * 2, y


def _made_and_logged(x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    _Passing.log.clear()
    y = _Passing(x + 1) * 2
    return y, list(_Passing.log)


def _backward_inside(x: torch.Tensor) -> torch.Tensor:
    _Plain(x * 2).sum().backward()
    return x.grad


CONSTRUCTED: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "of_an_input": (lambda x: _Plain(x) * 2, lambda: (torch.randn(2, 3),)),
    "of_a_computed_value": (lambda x: _Plain(x.sin() + 1) * 2, lambda: (torch.randn(2, 3),)),
    "with_a_torch_function": (_made_and_logged, lambda: (torch.randn(2, 3),)),
    "of_a_subclass_instance": (lambda x: _Plain(x) + 1, lambda: (torch.randn(3).as_subclass(_Passing),)),
    "twice": (lambda x: _Passing(_Plain(x)) - 1, lambda: (torch.randn(3),)),
    "torch_tensor_of_a_value": (lambda x: torch.Tensor(x + 1) * 2, lambda: (torch.arange(4),)),
    "aliasing_its_argument": (_aliased_writes, lambda: (torch.randn(3),)),
    "under_grad": (lambda x: _Plain(x * 2).sum(), lambda: (torch.randn(3, requires_grad=True),)),
    "backward_inside": (_backward_inside, lambda: (torch.randn(3, requires_grad=True),)),
}


@pytest.mark.parametrize("name", list(CONSTRUCTED))
def test_a_subclass_called_on_a_tensor_is_an_alias_as_eagerly(name: str) -> None:
    program, make = CONSTRUCTED[name]
    _compare(program, make, lambda args: [*_grads(args), *args])
