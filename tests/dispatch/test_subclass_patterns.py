"""Tensor subclasses in authoring patterns others write (issue 15, round 2), each program run eagerly and
under jitcore, the second call a cache hit, comparing output types, inner tensors, flatten contexts,
``requires_grad`` and gradients. Every test here failed before the fix it names:
- a wrapper built from a tensor that requires grad without passing ``requires_grad`` (the graph stops
  at it eagerly: its dispatch runs below autograd) returned outputs requiring grad (Note [A graph no
  output reaches], jit/api.py);
- a wrapper made inside with ``_make_wrapper_subclass(..., requires_grad=True)`` (a leaf requiring
  grad) gave outputs that did not require grad;
- ``torch.ones_like`` (every ``*_like`` factory) of a subclass sent its ``__torch_dispatch__`` an
  ``aten.detach`` eager never sends (Note [The detach of a variable factory], dispatch/resolver.py);
- an optimizer step inside the function on subclass parameters whose state is read with ``.item()``
  (Adam's ``step``) after ``loss.backward()`` raised LookupError (Note [The probe runs a subclass
  call's operations], jit/probe.py), and a foreach step raised "grad transform: t18 is used before it
  is produced" (the caller's parameters reached ``torch._C._group_tensors_by_device_and_dtype`` as
  themselves, and came back values no record makes);
- a subclass's methods named as jitcore's proxies' own (``describe``, ``hold``, ``inner_tensors``,
  ``shadow``) ran jitcore's (Note [Names a stand-in shares with the class it stands for],
  jitcore/interpreter/attributes.py), and ``x.outer(y)``, torch's outer product, raised TypeError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import assert_same_values, check_twice
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._pytree import tree_map, tree_map_only

import jitcore

aten = torch.ops.aten


def _requiring_grad() -> tuple:
    return (torch.randn(3, 4, requires_grad=True),)


def _backward(out: torch.Tensor, args: tuple) -> Any:
    out.sum().backward()
    return args[0].grad


# --- a wrapper built from a tensor that requires grad, without requires_grad ------------------------
class Contiguous(torch.Tensor):
    """Keeps its tensor contiguous, validates it, and is made without ``requires_grad``: eagerly no
    graph reaches through it (its dispatch runs below autograd)."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device)

    def __init__(self, a: torch.Tensor) -> None:
        if a.dtype != torch.float32:
            raise TypeError("float32 only")
        self.a = a.contiguous()

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Contiguous:
        return Contiguous(inner["a"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        out = func(*tree_map_only(Contiguous, lambda x: x.a, args),
                   **tree_map_only(Contiguous, lambda x: x.a, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: Contiguous(t) if t.dim() else t, out)


@pytest.mark.parametrize("program", [
    lambda x: (Contiguous(x) * 3).sum(),  # a plain tensor its dispatch returns
    lambda x: (Contiguous(x.t()) * 3).sum(dim=0).sum(),
    lambda x: ((Contiguous(x) * 3).sum(), x.detach() * 2),
], ids=["sum", "transposed", "two-outputs"])
def test_a_wrapper_made_without_requires_grad_stops_the_graph(program: Callable[..., Any]) -> None:
    check_twice(program, _requiring_grad)


# --- a wrapper made inside as a leaf that requires grad -------------------------------------------
@dataclasses.dataclass
class Names:
    """A flatten context that records the ops a value went through (mutable, compared by value)."""

    ops: list[str]


class Logged(torch.Tensor):
    """Its flatten context lists the aten ops that made it (so an op eager does not send shows)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, names: Names, requires_grad: bool = False) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                   device=elem.device, requires_grad=requires_grad)

    def __init__(self, elem: torch.Tensor, names: Names, requires_grad: bool = False) -> None:
        self.elem = elem
        self.names = names

    def __repr__(self) -> str:
        return f"Logged({self.elem!r}, {self.names})"

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], self.names

    @staticmethod
    def __tensor_unflatten__(inner: dict, names: Names, size: Any, stride: Any) -> Logged:
        return Logged(inner["elem"], names)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        names = next(a.names for a in args if isinstance(a, Logged))
        out = func(*tree_map_only(Logged, lambda x: x.elem, args),
                   **tree_map_only(Logged, lambda x: x.elem, kwargs or {}))
        op = func.overloadpacket.__name__
        return tree_map(lambda t: Logged(t, Names([*names.ops, op])) if isinstance(t, torch.Tensor) else t,
                        out)


def test_a_wrapper_made_inside_as_a_leaf_that_requires_grad() -> None:
    check_twice(lambda w: (Logged(w, Names([]), requires_grad=True) * 2).sum(),
           lambda: (torch.randn(3, requires_grad=True),))


def test_a_wrapper_computed_from_a_leaf_made_inside_without_inputs_requiring_grad_runs_eagerly() -> None:
    """No input requires grad: the flat computation would rebuild the output as a leaf (grad_fn None)
    where eager's has a SumBackward0 node (Note [Subclass values that require grad]): it runs eagerly."""
    def f(w):
        return (Logged(w, Names([]), requires_grad=True) * 2).sum()

    jitted = jitcore.jit(f)
    for _ in range(2):
        w = torch.randn(3)
        expected, actual = f(w), jitted(w)
        assert_same_values(actual, expected)
        assert (actual.is_leaf, type(actual.grad_fn)) == (expected.is_leaf, type(expected.grad_fn))
    assert "JC-J002" in str(jitted.fallback_reason)


# --- torch.*_like of a subclass ------------------------------------------------------------------
@pytest.mark.parametrize("factory", [
    torch.ones_like, torch.zeros_like, torch.rand_like, torch.randn_like, lambda x: torch.full_like(x, 2.0),
], ids=["ones_like", "zeros_like", "rand_like", "randn_like", "full_like"])
def test_like_factories_send_no_detach(factory: Callable[..., Any]) -> None:
    check_twice(lambda x: factory(x) * 1, lambda: (Logged(torch.randn(3, 4), Names(["input"])),))


def test_like_factory_under_grad_sends_no_detach() -> None:
    # the gradient is taken with autograd.grad: accumulating it into ``.grad`` steals or clones it by
    # CPython reference counts, which differ between 3.11 and 3.13 eagerly (a ``detach`` or a
    # ``new_empty_strided`` in the log), not by what this test checks
    check_twice(lambda x, w: (torch.ones_like(x) * w).sum(),
           lambda: (Logged(torch.randn(3), Names(["input"])), torch.randn(3, requires_grad=True)),
           lambda out, args: torch.autograd.grad(out, args[1])[0])


# --- an optimizer step inside the function on subclass parameters ---------------------------------
class Scaled(nn.Module):
    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w).sum()


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = model(x)
    loss.backward()
    opt.step()
    return loss.detach()


@pytest.mark.parametrize(("optimizer", "options"), [
    ("Adam", {}), ("AdamW", {}), ("Adam", {"foreach": True}), ("SGD", {"momentum": 0.9, "foreach": True}),
], ids=["Adam", "AdamW", "Adam-foreach", "SGD-foreach"])
def test_an_optimizer_step_on_subclass_parameters(optimizer: str, options: dict) -> None:
    """Adam reads ``state["step"].item()`` after ``loss.backward()``; a foreach step groups the
    caller's parameters with their gradients by device (a torch C function)."""

    def make() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = Scaled(TwoTensor(torch.randn(3), torch.randn(3)))
        return model, getattr(torch.optim, optimizer)(model.parameters(), lr=0.1, **options)

    (eager_model, eager_opt), (jit_model, jit_opt) = make(), make()
    step = jitcore.jit(_train_step)
    for _ in range(3):
        x = torch.randn(3)
        assert_same_values(step(jit_model, jit_opt, x), _train_step(eager_model, eager_opt, x))
        assert_same_values(jit_model.w.detach(), eager_model.w.detach())
    assert step.fallback_reason is None


# --- methods named like jitcore's own machinery ---------------------------------------------------
class Described(torch.Tensor):
    """Methods and a property with names jitcore's proxies use for themselves."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, label: str) -> Any:
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem: torch.Tensor, label: str) -> None:
        self.elem = elem
        self.label = label

    def __repr__(self) -> str:
        return f"Described({self.elem!r}, {self.label!r})"

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return ["elem"], self.label

    @staticmethod
    def __tensor_unflatten__(inner: dict, label: str, size: Any, stride: Any) -> Described:
        return Described(inner["elem"], label)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        label = next(a.label for a in args if isinstance(a, Described))
        out = func(*tree_map_only(Described, lambda x: x.elem, args),
                   **tree_map_only(Described, lambda x: x.elem, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: Described(t, label + "'"), out)

    def describe(self) -> str:
        return f"{type(self).__name__} {self.label}"

    def hold(self) -> str:
        return self.label * 2

    def inner_tensors(self) -> list[torch.Tensor]:
        return [self.elem]

    @property
    def shadow(self) -> torch.Tensor:
        return self.elem * 0


@pytest.mark.parametrize("program", [
    lambda x: (x.describe(), (x + 1).describe(), x.hold()),
    lambda x: (x.inner_tensors()[0] * 2, x.shadow),
    lambda x: Described(x.elem * 3, "inside").describe(),
    lambda x: getattr(x + 1, "describe".lower())(),  # the getattr builtin
], ids=["describe-hold", "inner_tensors-shadow", "made-inside", "getattr"])
def test_methods_named_like_jitcores_own_are_the_users(program: Callable[..., Any]) -> None:
    check_twice(program, lambda: (Described(torch.randn(3), "x"),))


def test_outer_product_of_a_subclass() -> None:
    """``x.outer(y)`` is torch's outer product (a proxy's own ``outer`` shadowed it: TypeError)."""
    check_twice(lambda x, y: x.outer(y) * 2,
                lambda: (TwoTensor(torch.randn(3), torch.randn(3)), torch.randn(2)))
