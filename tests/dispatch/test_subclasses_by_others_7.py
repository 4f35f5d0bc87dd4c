"""Tensor subclasses as others write them, round 7 (issue 15, helper zoo27): Python protocol methods a
subclass defines for itself (a comparison answering a bool, ...), each program run eagerly and under
jitcore.jit on equal fresh arguments (subclass_checks.check_twice). Each test failed before its fix."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from subclass_checks import check_twice
from torch.testing._internal.autograd_function_db import ForwardHasDefaultArgs
from torch.testing._internal.logging_tensor import LoggingTensorMode, capture_logs
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import TorchDispatchMode

import jitcore

# --- comparisons a subclass defines in Python -----------------------------------------------------------
# Note [A stand-in's comparison is its class's] (interpreter/protocols.py): the proxy's class keeps its
# own ``__eq__``, so ``x == y`` recorded torch's ``eq`` where eager ran the subclass's method.


class IdentityEq(torch.Tensor):
    """Compares by identity, as a tensor used as a key or a cache tag does (a bool, not a mask)."""

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = torch.Tensor.__hash__


class CloseEq(torch.Tensor):
    """``==`` as "all values within a tolerance", a bool; ``<`` stays torch's."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        return bool(torch.allclose(self.as_subclass(torch.Tensor), other.as_subclass(torch.Tensor)))

    __hash__ = torch.Tensor.__hash__


def _identity(x: torch.Tensor) -> tuple[Any, ...]:
    return x == x, x != x, x == 1, 1 == x, x * 2


def _branch(x: torch.Tensor) -> torch.Tensor:
    y = x
    if x == y:
        return x + 1
    return x - 1


def _close(x: torch.Tensor) -> tuple[Any, ...]:
    return x == x + 1e-9, x == x + 1, 3 == x, x < 0


def _identity_args() -> tuple[torch.Tensor]:
    return (torch.randn(3).as_subclass(IdentityEq),)


def _close_args() -> tuple[torch.Tensor]:
    return (torch.randn(3).as_subclass(CloseEq),)


@pytest.mark.parametrize(("program", "make"), [
    (_identity, _identity_args), (_branch, _identity_args), (_close, _close_args),
], ids=["identity", "branch", "tolerance"])
def test_a_comparison_the_subclass_defines(program: Callable[..., Any],
                                           make: Callable[[], tuple]) -> None:
    check_twice(program, make)


class TagHash(torch.Tensor):
    """Hashes by a tag of its class (as a content-addressed cache key would), not by identity."""

    tag = "weights"

    def __hash__(self) -> int:
        return hash((type(self).tag, 7))


class TwoTagHash(TwoTensor):
    """TwoTensor hashing by its size."""

    def __hash__(self) -> int:
        return hash(tuple(self.shape)) + 1


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(3).as_subclass(TagHash),),
    lambda: (TwoTagHash(torch.randn(3), torch.randn(3)),),
], ids=["plain", "wrapper"])
def test_a_hash_the_subclass_defines(make: Callable[[], tuple]) -> None:
    # Note [A subclass's own hash] (jit/tensor_keys.py): ``hash(x)`` answered the proxy's id
    check_twice(lambda x: (hash(x), hash(x * 2), x + 1), make)


# --- attribute hooks a plain subclass defines ------------------------------------------------------------
# Note [A stand-in's attribute hooks are its class's] (interpreter/attributes.py): the proxy of a subclass
# without ``__torch_dispatch__`` keeps jitcore's own hooks; ``x.meta_name`` raised AttributeError and
# ``x.n = 3`` skipped the subclass's ``__setattr__``.


class Hooked(torch.Tensor):
    """Computed attributes (``x.meta_<key>``), integers doubled on assignment, deletions remembered."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("meta_"):
            return name[5:]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value * 2 if isinstance(value, int) else value)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        super().__setattr__("deleted", name)


def _computed(x: torch.Tensor) -> tuple[Any, ...]:
    return x.meta_unit, hasattr(x, "meta_a"), hasattr(x, "other"), getattr(x, "meta_q", None), x * 2


def _stored(x: torch.Tensor) -> tuple[Any, ...]:
    x.n = 3
    x.scratch = 1
    del x.scratch
    return x.n + 1, x.deleted, x + x.n


def _hooked_args() -> tuple[torch.Tensor]:
    return (torch.randn(3).as_subclass(Hooked),)


@pytest.mark.parametrize("program", [_computed, _stored], ids=["getattr", "setattr_and_delattr"])
def test_attribute_hooks_of_a_plain_subclass(program: Callable[..., Any]) -> None:
    jitted = check_twice(program, _hooked_args)
    eager_arg, jit_arg = _hooked_args()[0], _hooked_args()[0]
    program(eager_arg)
    jitted(jit_arg)
    assert vars(jit_arg) == vars(eager_arg)  # the caller's tensor holds what the hooks stored


# --- factories under a dispatch mode of the program's ---------------------------------------------------
# Note [The detach of a variable factory] (dispatch/resolver.py): ``torch.ones(2, 3)`` under a mode
# offered the mode an ``aten.detach`` after the factory's op, which eager never offers.


class OpNames(TorchDispatchMode):
    """Lists the aten operations it is offered."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("factory", [
    lambda: torch.ones(3), lambda: torch.zeros(3, dtype=torch.float64), lambda: torch.full((3,), 2.0),
    lambda: torch.randn(3), lambda: torch.arange(3), lambda: torch.linspace(0, 1, 3), lambda: torch.eye(3)[0],
    lambda: torch.empty(3).fill_(1.0), lambda: torch.ones(3).detach(),
], ids=["ones", "zeros", "full", "randn", "arange", "linspace", "eye", "empty", "detach_of_a_factory"])
def test_a_factory_under_a_mode_is_offered_as_eagerly(factory: Callable[[], torch.Tensor]) -> None:
    def program(x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
        mode = OpNames()
        with mode:
            y = factory() + x
        return y, mode.ops

    check_twice(program, lambda: (torch.randn(3),))


def test_logging_tensor_mode_logs_a_linear_over_a_factory_as_eagerly() -> None:
    def program(x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
        with capture_logs(is_mode=True) as logs, LoggingTensorMode():
            y = F.linear(x, torch.ones(2, 3))
        return y, list(logs)

    logger = logging.getLogger("LoggingTensor")
    level, propagate = logger.level, logger.propagate
    try:
        check_twice(program, lambda: (torch.randn(4, 3),))
    finally:  # capture_logs leaves the logger at INFO, not propagating: pytest then attaches its
        logger.setLevel(level)  # handlers to it, which fail on LoggingTensor's records in later tests
        logger.propagate = propagate


# --- torch's autograd_function_db: a forward with a default argument and a setup_context --------------
# torch's ``apply`` binds the forward's defaults before ``setup_context`` sees the inputs; while tracing
# they were not bound (``x, idx = inputs`` raised ValueError).


def _gradient(output: torch.Tensor, args: tuple) -> torch.Tensor:
    output.sum().backward()
    return args[0].grad


@pytest.mark.parametrize("make", [
    lambda: (torch.randn(3, 5, requires_grad=True),),
    lambda: (TwoTensor(torch.randn(3, 5), torch.randn(3, 5)).requires_grad_(),),
], ids=["plain", "two_tensor"])
def test_a_function_whose_forward_has_a_default_argument(make: Callable[[], tuple]) -> None:
    check_twice(lambda x: ForwardHasDefaultArgs.apply(x), make, _gradient)
    check_twice(lambda x: ForwardHasDefaultArgs.apply(x, (1,)), make, _gradient)


# --- a plain subclass's own __repr__ ---------------------------------------------------------------------
# Note [A plain subclass's own repr] (langctx/tensor_text.py): ``repr(x)`` reached the proxy's ``__repr__``
# and the call ran eagerly (JC-T001); a wrapper subclass's own was already interpreted.


class ShapeText(torch.Tensor):
    """Shows its shape and class, not its values."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype})"


class ShapeTextChild(ShapeText):
    """Inherits its base's ``__repr__``."""


@pytest.mark.parametrize("cls", [ShapeText, ShapeTextChild], ids=["own", "inherited"])
def test_repr_a_plain_subclass_defines(cls: type) -> None:
    check_twice(lambda x: (repr(x), f"{x * 2!r}", "%r" % (x,), x + 1),
                lambda: (torch.randn(3).as_subclass(cls),))


class BaseText(torch.Tensor):
    """Prefixes torch's text, which shows the values: the call runs eagerly, with eager's text."""

    def __repr__(self) -> str:
        return "BaseText:" + super().__repr__()


def test_repr_a_plain_subclass_defines_over_torchs_text() -> None:
    def program(x: torch.Tensor) -> tuple[str, torch.Tensor]:
        return repr(x), x + 1

    jitted = jitcore.jit(program)
    expected = program(torch.arange(3.0).as_subclass(BaseText))
    with pytest.warns(UserWarning, match="runs eagerly"):
        actual = jitted(torch.arange(3.0).as_subclass(BaseText))
    assert actual[0] == expected[0] == "BaseText:BaseText([0., 1., 2.])"
    assert "repr() of a traced tensor" in str(jitted.fallback_reason)


class ClaimsItsSize(torch.Tensor):
    """A plain subclass whose ``size()`` answers something else than torch's ``shape``."""

    def size(self, dim: int | None = None) -> Any:
        return torch.Size([42]) if dim is None else 42


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "requires_grad"])
def test_a_size_the_subclass_overrides(requires_grad: bool) -> None:
    """Eager's ``x.shape`` is torch's and ``x.size()`` the class's: the shadow was built from the
    class's answer, so ``x.shape`` read (42,) and ``x.reshape(-1, 1)`` raised while tracing (Note [A
    plain subclass's shadow], jitcore/langctx/shadows.py). Over three lengths, with a gradient."""
    def program(x: torch.Tensor) -> Any:
        return tuple(x.shape), x.size(), x.is_leaf, (x.reshape(-1, 1) * 2).sum()

    jitted = jitcore.jit(program)
    for n in (3, 4, 5):
        base = torch.arange(float(n))
        x = torch.Tensor._make_subclass(ClaimsItsSize, base, requires_grad)
        x_eager = torch.Tensor._make_subclass(ClaimsItsSize, base, requires_grad)
        expected, actual = program(x_eager), jitted(x)
        assert actual[:3] == expected[:3]
        torch.testing.assert_close(actual[3].as_subclass(torch.Tensor), expected[3].as_subclass(torch.Tensor))
        if requires_grad:
            expected[3].backward()
            actual[3].backward()
            torch.testing.assert_close(x.grad, x_eager.grad)
