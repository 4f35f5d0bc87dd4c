"""Tensor subclasses as others write them and use them, round 11 (issue 15, helper zoo31): NumPy on a
subclass with a ``__torch_function__`` of its own, each program run eagerly and under jitcore.jit on
equal fresh arguments. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_values

import jitcore

# --- numpy() through the class's __torch_function__ ---------------------------------------------------
# Note [numpy() through a class's __torch_function__] (jitcore/numpy/lookasides.py): eagerly the class is
# handed Tensor.numpy first; the bridge's lookaside answered before it.


class _Recording(torch.Tensor):
    log: list[tuple[str, tuple[str, ...]]] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        cls.log.append((getattr(func, "__name__", str(func)), tuple(sorted(kwargs))))
        return super().__torch_function__(func, types, args, kwargs)


class _Doubling(torch.Tensor):
    """Answers ``numpy()`` with twice the array."""

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs or {})
        return out * 2 if func is torch.Tensor.numpy else out


class _Refusing(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is torch.Tensor.numpy:
            raise TypeError("no numpy() for this class")
        return super().__torch_function__(func, types, args, kwargs or {})


def _logged(program: Callable[[torch.Tensor], Any]) -> Callable[[torch.Tensor], Any]:
    def run(x: torch.Tensor) -> Any:
        _Recording.log.clear()
        out = program(x)
        return out, list(_Recording.log)

    return run


NUMPY_OF: dict[str, tuple[Callable[[torch.Tensor], Any], type, bool]] = {
    "handed": (_logged(lambda x: torch.from_numpy(x.numpy() + 1)), _Recording, False),
    "handed_force": (_logged(lambda x: torch.from_numpy(x.numpy(force=True) * 2)), _Recording, True),
    "answered": (lambda x: torch.from_numpy(x.numpy()), _Doubling, False),
    "answered_transposed": (lambda x: torch.from_numpy(x.numpy().T.copy()) + 1, _Doubling, False),
}


@pytest.mark.parametrize("name", list(NUMPY_OF))
def test_numpy_of_a_class_with_a_torch_function_is_what_it_answers(name: str) -> None:
    """The value (the class's answer: twice the array) and what the class was handed (``numpy``, with
    ``force`` where given) are eager's, on cached calls too."""
    program, cls, requires_grad = NUMPY_OF[name]
    jitted = jitcore.jit(program)
    for seed in range(3):
        made = []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append(torch.randn(4, 6, requires_grad=requires_grad).as_subclass(cls))
        expected, got = program(made[0]), jitted(made[1])
        assert_same_values(got, expected)
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 2)


def test_numpy_refused_by_the_class_raises_as_eagerly() -> None:
    jitted = jitcore.jit(lambda x: x.numpy())
    for _ in range(2):
        with pytest.raises(TypeError, match="no numpy"):
            jitted(torch.randn(3).as_subclass(_Refusing))
