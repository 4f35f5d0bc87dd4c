"""Tensor subclasses in the styles people write them (torch's docs, tutorials, torch's own test
subclasses), each program run eagerly and under jitcore and compared: output type, values, dtype,
the Python attributes the outputs carry, and what a ``__torch_function__`` is handed.

Each test here failed before the fix it names (issue 15): a ``__torch_function__`` unwrapping with
``as_subclass`` recursed without end, attributes set on a subclass output were lost, ``super()`` in
an overriding method called the override again, operators handed ``torch.add`` where eager hands
``Tensor.add``, ``Tensor.__new__(cls, t)`` and ``x.new_tensor`` were refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing._internal.common_subclass import NonWrapperTensor
from torch.utils._pytree import tree_map_only

import jitcore


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _same(a, e)
    elif isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape
        assert actual.requires_grad == expected.requires_grad
        torch.testing.assert_close(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        assert vars(actual).keys() == vars(expected).keys()
        for name, value in vars(expected).items():
            _same(vars(actual)[name], value)
    else:
        assert actual == expected


def _check(fn: Callable[..., Any], make: Callable[[], tuple]) -> Callable[..., Any]:
    """``fn`` eagerly and jitted, twice (the second call cached), on equal fresh arguments."""
    jitted = jitcore.jit(fn)
    for _ in range(2):
        torch.manual_seed(0)
        expected = fn(*make())
        torch.manual_seed(0)
        _same(jitted(*make()), expected)
    return jitted


class Tagged(torch.Tensor):
    """The common pattern: a ``_make_subclass`` tensor with a tag, whose ``__torch_function__``
    unwraps its arguments with ``as_subclass`` and rewraps the results."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, tag: str | None = None) -> Tagged:
        out = torch.Tensor._make_subclass(cls, data)
        out.tag = tag
        return out

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        tags = [a.tag for a in args if isinstance(a, Tagged)]
        plain = tree_map_only(Tagged, lambda t: t.as_subclass(torch.Tensor), (args, kwargs or {}))
        out = func(*plain[0], **plain[1])
        return tree_map_only(torch.Tensor, lambda t: Tagged(t, tags[0] if tags else None), out)


@pytest.mark.parametrize(
    "program",
    [
        lambda x: (x * 2).sin(),
        lambda x: (x + 1).tag,
        lambda x: (x @ x.t(), x.sum(0)),
    ],
    ids=["ops", "tag", "tuple"],
)
def test_torch_function_that_unwraps_with_as_subclass_and_rewraps(program: Callable[..., Any]) -> None:
    _check(program, lambda: (Tagged(torch.randn(3, 3), "a"),))


def test_tagged_tensor_made_inside_keeps_its_tag() -> None:
    _check(lambda a: Tagged(a, "q") @ a.t(), lambda: (torch.randn(3, 3),))


def test_attributes_a_torch_function_sets_on_its_results() -> None:
    """torch's NonWrapperTensor stores a fresh ``extra_state`` dict on each result."""
    jitted = _check(lambda x: (x + 1) * 2, lambda: (NonWrapperTensor(torch.randn(3)),))
    first, second = jitted(NonWrapperTensor(torch.randn(3))), jitted(NonWrapperTensor(torch.randn(3)))
    assert first.extra_state == {"last_func_called": "mul"}
    assert first.extra_state is not second.extra_state  # a new dict per call, as eagerly


class Noted(torch.Tensor):
    pass


def _noted() -> tuple:
    x = torch.randn(3).as_subclass(Noted)
    x.note = "hi"
    return (x,)


def test_attributes_the_program_sets_on_a_subclass_output() -> None:
    def program(x: Noted) -> Noted:
        y = x * 2
        y.note = x.note + "!"
        y.scale = x.abs().amax()  # a tensor attribute: an output of the computation
        return y

    _check(program, _noted)


class Cloning(torch.Tensor):
    def clone(self, *args: Any, **kwargs: Any) -> Cloning:
        out = super().clone(*args, **kwargs)
        out.cloned = True
        return out


def test_super_call_in_a_method_the_subclass_overrides() -> None:
    _check(lambda x: x.clone() * 2, lambda: (torch.randn(3).as_subclass(Cloning),))


class Handled(torch.Tensor):
    """A ``__torch_function__`` with handlers keyed by the callable it is handed."""

    HANDLERS: dict[Any, Callable[..., Any]] = {
        torch.add: lambda x, y: "torch.add",
        torch.Tensor.mul: lambda x, y: "Tensor.mul",
        torch.Tensor.__floordiv__: lambda x, y: "Tensor.__floordiv__",
        torch.Tensor.__and__: lambda x, y: "Tensor.__and__",
        torch.Tensor.sub: lambda x, y: "Tensor.sub",
    }

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in cls.HANDLERS:
            return cls.HANDLERS[func](*args)
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(
    "program",
    [
        lambda x: x + 1,  # eager hands Tensor.add, not torch.add
        lambda x: 2 * x,  # Tensor.mul
        lambda x: x // 2,
        lambda x: x.abs().to(torch.int64) & 1,
        lambda x: (-x, x - 1, x > 0, x ** 2),
    ],
    ids=["add_operator", "rmul", "floordiv", "and", "others"],
)
def test_operators_hand_torch_function_what_eager_hands(program: Callable[..., Any]) -> None:
    _check(program, lambda: (torch.randn(3).as_subclass(Handled),))


class OldStyle(torch.Tensor):
    """A subclass made through ``torch.Tensor.__new__(cls, data)``, as older code does."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, extra: Any = None) -> OldStyle:
        return super().__new__(cls, data)

    def __init__(self, data: torch.Tensor, extra: Any = None) -> None:
        self.extra = extra


def test_subclass_made_with_tensor_new_inside() -> None:
    def program(a: torch.Tensor) -> torch.Tensor:
        made = OldStyle(a, "z")
        return made * 2, made.extra

    _check(program, lambda: (torch.randn(3),))


def test_subclass_made_with_tensor_new_keeps_the_gradient_path() -> None:
    def program(a: torch.Tensor) -> torch.Tensor:
        return (OldStyle(a) * a).sum()

    a_eager = torch.randn(3, requires_grad=True)
    program(a_eager).backward()
    a_jit = a_eager.detach().clone().requires_grad_()
    jitcore.jit(program)(a_jit).backward()
    torch.testing.assert_close(a_jit.grad, a_eager.grad)


@pytest.mark.parametrize("cls", [torch.Tensor, Noted], ids=["plain", "subclass"])
def test_new_tensor(cls: type) -> None:
    def program(x: torch.Tensor) -> tuple:
        return x.new_tensor([1.0, 2.0]), x.new_tensor(3, dtype=torch.int32), x + x.new_tensor(0.5)

    _check(program, lambda: (torch.randn(2, dtype=torch.float64).as_subclass(cls),))


@pytest.mark.parametrize(
    "program",
    [
        lambda x: x.sum().item() * 2,
        lambda x: x * 2 if x.sum() > 0 else x * 3,
        lambda x: x.tolist(),
        lambda x: x * float(x.amax()),
    ],
    ids=["item", "bool", "tolist", "float"],
)
def test_value_reads_of_a_subclass_without_its_own_torch_function_are_traced(
    program: Callable[..., Any],
) -> None:
    """Note [Value reads of plain subclasses]: read and checked per call, not run eagerly."""
    jitted = _check(program, lambda: (torch.randn(3).as_subclass(Noted),))
    assert jitted.fallback_reason is None
    for sign in (1.0, -1.0):  # the other branch: the read's check sends the call to another entry
        x = (sign * torch.randn(3).abs()).as_subclass(Noted)
        _same(jitted(x), program(x))


def test_tensor_split_at_a_tensor_of_indices_on_a_wrapper_subclass() -> None:
    """torch's C++ reads the index tensor's values before any dispatch: it raised "data is not
    allocated yet" under jit. The indices are read (checked on every call) and the split is traced on
    the inner tensors; other indices make another entry."""
    from torch.testing._internal.two_tensor import TwoTensor

    for indices in ([1, 4], [2, 3]):
        def make(indices: list[int] = indices) -> tuple:
            return TwoTensor(torch.randn(6), torch.randn(6)), torch.tensor(indices)

        jitted = _check(lambda x, idx: torch.tensor_split(x, idx), make)
        assert jitted.fallback_reason is None and jitcore.cache_hits(jitted) == 1
