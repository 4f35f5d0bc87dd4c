"""Tensor subclasses written by others (issue 15, zoo54), eager against ``jitcore.jit`` over three calls
(outputs and arguments by ``assert_same_flattened``; one entry; no ``__torch_dispatch__`` frame on a warm
call): hooks and ``retain_grad()`` the program registers on subclass values it computes, run by a backward
inside it (gradient logging, an activation's gradient kept for attribution), as they are on plain tensors.
Before, each such call ran eagerly (JC-T001, "on a tensor-subclass value") and its dispatch ran on every
call. A hook that replaces a computed tensor's gradient, and a hooked value the call returns, still run
eagerly, with eager's answer, as for plain tensors (Note [Hooks registered inside the program]).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from subclass_checks import assert_same_flattened, frames_over_sizes, protocol_calls
from torch.testing._internal.two_tensor import TwoTensor

import jitcore

aten = torch.ops.aten


class _Table(torch.Tensor):
    """A wrapper whose classmethod ``__torch_dispatch__`` looks ``func`` up in a table of overrides and
    otherwise unwraps, computes and rewraps with ``tree_map`` (keeping the first argument's tag)."""

    HANDLED: dict[Any, Callable[..., Any]] = {}

    @staticmethod
    def __new__(cls, elem: torch.Tensor, tag: str = "t") -> _Table:
        r = torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                device=elem.device, requires_grad=elem.requires_grad)
        r.elem = elem
        r.tag = tag
        return r

    def __tensor_flatten__(self) -> tuple[list[str], dict]:
        return ["elem"], {"tag": self.tag}

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: dict, size: Any, stride: Any) -> _Table:
        return _Table(inner["elem"], ctx["tag"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in cls.HANDLED:
            return cls.HANDLED[func](func, types, args, kwargs)
        tag = next(a.tag for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, _Table))
        unwrap = lambda t: t.elem if isinstance(t, _Table) else t  # noqa: E731
        out = func(*pytree.tree_map(unwrap, args), **pytree.tree_map(unwrap, kwargs))
        return pytree.tree_map_only(torch.Tensor, lambda t: _Table(t, tag), out)


def _implements(op: Any) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        _Table.HANDLED[op] = fn
        return fn
    return register


@_implements(aten.mul.Tensor)
def _table_mul(func: Any, types: tuple, args: tuple, kwargs: dict) -> _Table:
    a, b = args
    first = a if isinstance(a, _Table) else b
    unwrap = lambda t: t.elem if isinstance(t, _Table) else t  # noqa: E731
    return _Table(unwrap(a) * unwrap(b), first.tag + "*")


def _two(*shape: int, requires_grad: bool = False) -> TwoTensor:
    t = TwoTensor(torch.randn(*shape), torch.randn(*shape))
    return t.requires_grad_() if requires_grad else t


def _three_calls(fn: Callable[..., Any], make: Callable[[], tuple], classes: tuple[type, ...]) -> tuple:
    """``fn`` eagerly and jitted on equal fresh arguments (seeded ``make()``), three times: outputs and
    arguments compared. Returns (entries, protocol frames of ``classes`` on cached calls, the jitted
    function)."""
    jitted = jitcore.jit(fn)
    warm: list[str] = []
    for i in range(3):
        torch.manual_seed(i)
        eager_args = make()
        torch.manual_seed(i)
        jit_args = make()
        expected = fn(*eager_args)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(*classes) as frames:
            actual = jitted(*jit_args)
        if i and jitcore.cache_misses(jitted) == misses:
            warm += frames
        assert_same_flattened(actual, expected, f"call {i} output")
        tensors = lambda args: [a for a in args if isinstance(a, torch.Tensor)]  # noqa: E731
        assert_same_flattened(tensors(jit_args), tensors(eager_args), f"call {i} arguments")
    return jitcore.cache_misses(jitted), warm, jitted


def _captured(x: torch.Tensor) -> tuple:
    y = (x * 2).sin()
    grads: list[torch.Tensor] = []
    y.register_hook(grads.append)
    (y * y).sum().backward()
    return grads, x.grad


def _logged_norms(x: torch.Tensor) -> tuple:
    y = x * 3
    seen: list[Any] = []
    first = y.register_hook(lambda g: seen.append("removed"))
    y.register_hook(lambda g: seen.append(g.b * 1))
    first.remove()
    y.exp().sum().backward()
    return seen, x.grad


def _retained(x: torch.Tensor) -> tuple:
    y = x * 2
    y.retain_grad()
    y.sum().backward(retain_graph=True)
    (y * y).sum().backward()
    return y.grad, y.retains_grad, x.grad


def _plain_hooked_subclass_grad(p: torch.Tensor, t: torch.Tensor) -> tuple:
    y = p * 2  # plain, its gradient a TwoTensor (t's)
    grads: list[torch.Tensor] = []
    y.register_hook(grads.append)
    (y * t).sum().backward()
    return grads, p.grad


_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple], tuple[type, ...]]] = {
    "captured": (_captured, lambda: (_two(3, requires_grad=True),), (TwoTensor,)),
    "logged_after_remove": (_logged_norms, lambda: (_two(2, 3, requires_grad=True),), (TwoTensor,)),
    "retained_two_backwards": (_retained, lambda: (_two(3, requires_grad=True),), (TwoTensor,)),
    "nested": (_captured, lambda: (TwoTensor(_two(3), _two(3)).requires_grad_(),), (TwoTensor,)),
    "table": (_captured, lambda: (_Table(torch.randn(4, requires_grad=True), "w"),), (_Table,)),
    "plain_hooked_subclass_grad": (
        _plain_hooked_subclass_grad, lambda: (torch.randn(3, requires_grad=True), _two(3)), (TwoTensor,)),
}


@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_a_hook_on_a_subclass_value_the_function_computes_is_traced(name: str) -> None:
    fn, make, classes = _PROGRAMS[name]
    entries, warm, jitted = _three_calls(fn, make, classes)
    assert jitted.fallback_reason is None
    assert (entries, warm) == (1, [])


def _activation_gradients(m: nn.Sequential, x: torch.Tensor) -> tuple:
    m.zero_grad()
    h = m[0](x)
    norms: list[torch.Tensor] = []
    h.register_hook(lambda g: norms.append(g.norm()))
    m[1](h.relu()).sum().backward()
    return norms, [p.grad for p in m.parameters()]


def test_activation_gradients_logged_in_a_training_step_over_twotensor_weights() -> None:
    torch.manual_seed(0)
    eager_model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    for layer in eager_model:
        w = layer.weight.detach()
        layer.weight = nn.Parameter(TwoTensor(w.clone(), w * 2))
    jit_model = copy.deepcopy(eager_model)
    step = jitcore.jit(_activation_gradients)
    warm: list[str] = []
    for i in range(4):
        x = torch.randn(3, 4)
        expected = _activation_gradients(eager_model, x)
        misses = jitcore.cache_misses(step)
        with protocol_calls(TwoTensor) as frames:
            actual = step(jit_model, x)
        warm += frames if jitcore.cache_misses(step) == misses else []
        assert_same_flattened(actual, expected, f"call {i}")
        assert_same_flattened(list(jit_model.parameters()), list(eager_model.parameters()), f"call {i}")
    # two entries, as for plain weights: zero_grad() finds no .grad on the first call, one on the next
    entries = (jitcore.cache_misses(step), jitcore.cache_hits(step))
    assert (entries, step.fallback_reason, warm) == ((2, 2), None, [])


def _hook_escapes(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.register_hook(lambda g: None)
    return y


def _hook_replaces(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.sum().backward()
    return x.grad


@pytest.mark.parametrize("fn", [_hook_escapes, _hook_replaces], ids=["returned", "replacing"])
def test_a_hook_on_a_subclass_value_runs_eagerly_where_a_plain_ones_does(fn: Callable[..., Any]) -> None:
    jitted = jitcore.jit(fn)
    for i in range(2):
        torch.manual_seed(i)
        x = _two(3, requires_grad=True)
        torch.manual_seed(i)
        y = _two(3, requires_grad=True)
        with pytest.warns(UserWarning) if i == 0 else contextlib.nullcontext():
            actual = jitted(x)
        assert_same_flattened(actual, fn(y), f"call {i}")
    assert "JC-T001" in str(jitted.fallback_reason)


# --- numbers read with item() returned beside a subclass output that requires grad ----------------------
# (Note [Numbers a grad entry returns], jitcore/transforms/grad.py): before, the grad entry's forward
# returned only tensors, and the first call raised IndexError (a jitcore bug) where eager returns.


def _loss_and_number(m: nn.Linear, x: torch.Tensor, y: torch.Tensor) -> list:
    out = m(x)
    loss = torch.nn.functional.mse_loss(out, y)
    return [out, loss, loss.item()]


def _assembled_and_number(a: torch.Tensor, b: torch.Tensor) -> list:
    return [TwoTensor(a * 2, b * 3), a.sum().item() + 1]


def _twotensor_linear() -> nn.Linear:
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    w = m.weight.detach()
    m.weight = nn.Parameter(TwoTensor(w.clone(), w * 2))
    return m


_NUMBER_PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple], tuple[type, ...]]] = {
    "inner_item": (lambda x: [(x * 2).sin(), x.a.sum().item()], lambda: (_two(3, requires_grad=True),),
                   (TwoTensor,)),
    "outer_item": (lambda x: [(x * 2).sin(), (x * 2).sum().item()], lambda: (_two(3, requires_grad=True),),
                   (TwoTensor,)),
    "numbers_around_tensors": (
        lambda x, z: [z.sum().item(), (x * 2).sin(), z.max().item(), x * 3, z.sum().item()],
        lambda: (_two(2, 3, requires_grad=True), torch.randn(3)), (TwoTensor,)),
    "assembled": (_assembled_and_number,
                  lambda: (torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)),
                  (TwoTensor,)),
    "table": (lambda x: [x * x, (x * 2).elem.sum().item()],
              lambda: (_Table(torch.randn(3, requires_grad=True)),), (_Table,)),
}


@pytest.mark.parametrize("name", sorted(_NUMBER_PROGRAMS))
def test_a_number_read_beside_a_subclass_output_that_requires_grad(name: str) -> None:
    fn, make, classes = _NUMBER_PROGRAMS[name]
    entries, warm, jitted = _three_calls(fn, make, classes)
    assert (entries, warm, jitted.fallback_reason) == (1, [], None)


def test_a_model_over_twotensor_weights_returning_its_loss_and_the_loss_item() -> None:
    eager_model, jit_model = _twotensor_linear(), _twotensor_linear()
    jitted = jitcore.jit(_loss_and_number)
    warm: list[str] = []
    for i in range(3):
        x, y = torch.randn(3, 4), torch.randn(3, 2)
        expected = _loss_and_number(eager_model, x, y)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(TwoTensor) as frames:
            actual = jitted(jit_model, x, y)
        warm += frames if jitcore.cache_misses(jitted) == misses else []
        assert_same_flattened(actual, expected, f"call {i}")
        expected[1].backward()
        actual[1].backward()
        assert_same_flattened(jit_model.weight.grad, eager_model.weight.grad, f"call {i} weight.grad")
    assert (jitcore.cache_misses(jitted), warm) == (1, [])


# --- sizes returned beside a subclass output that requires grad, over changing sizes ---------------------
# (Note [Sizes a grad entry returns], jitcore/transforms/grad.py): before, the symbolic entry returned
# the replay's SymInts (``torch.Size([s0, 3])``, ``2*s0 + 1``) to every call.


def _sizes_beside(x: torch.Tensor) -> list:
    return [(x * 2).sin(), x.shape, x.shape[0] * 2 + 1, x.size(1), x.numel()]


def _read_and_size(x: torch.Tensor) -> list:
    y = (x * 2).sin()
    return [y, y.a.sum().item(), x.shape[0]]


@pytest.mark.parametrize("fn", [_sizes_beside, _read_and_size], ids=["sizes", "read_and_size"])
def test_sizes_returned_beside_a_twotensor_requiring_grad_are_each_calls(fn: Callable[..., Any]) -> None:
    entries, warm = frames_over_sizes(fn, lambda n: (_two(n, 3, requires_grad=True),), (2, 3, 4, 5, 6),
                                      (TwoTensor,))
    assert (entries, warm) == (2, [])


def test_a_number_beside_a_twotensor_assembled_over_changing_sizes() -> None:
    entries, warm = frames_over_sizes(_assembled_and_number, lambda n: (
        torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)), (2, 3, 4, 5), (TwoTensor,))
    assert (entries, warm) == (2, [])


# --- a backward inside over a TwoTensor leaf of changing sizes -------------------------------------------
# (Note [The gradient of a wrapper leaf with symbolic sizes], jitcore/jit/autograd_calls.py): before, the
# ``.grad`` setter's size check pinned the symbolic size, and every batch size traced an entry of its own.


def _backward_inside(x: torch.Tensor) -> torch.Tensor:
    y = (x * 2).sin()
    (y * y).sum().backward()
    return x.grad


def _logged_backward_inside(x: torch.Tensor) -> tuple:
    y = (x * 2).sin()
    grads: list[torch.Tensor] = []
    y.register_hook(grads.append)
    (y * y).sum().backward()
    return grads, x.grad


@pytest.mark.parametrize("fn", [_backward_inside, _logged_backward_inside], ids=["grad", "hooked"])
def test_a_backward_inside_over_a_twotensor_leaf_of_changing_sizes_keeps_one_symbolic_entry(
        fn: Callable[..., Any]) -> None:
    entries, warm = frames_over_sizes(fn, lambda n: (_two(n, 3, requires_grad=True),), (2, 3, 4, 5, 6),
                                      (TwoTensor,))
    assert (entries, warm) == (2, [])


# --- a wrapper's item() in a pass with symbolic sizes ------------------------------------------------------
# (Note [A wrapper's item in a symbolic pass], jitcore/jit/value_reads.py): before, the
# ``aten._local_scalar_dense`` a TwoTensor's dispatch runs on its inner tensor was refused in a symbolic
# pass, which traced static sizes again: ``loss.item()`` took an entry per batch size.


def _loss_item(w: torch.Tensor, x: torch.Tensor) -> list:
    out = x @ w
    return [out, out.pow(2).mean().item()]


def _scaled_by_item(x: torch.Tensor) -> list:
    s = x.mean().item()
    return [x * s + 1, s * 2, x / max(x.abs().max().item(), 1e-6)]


_ITEM_OVER_SIZES: dict[str, tuple[Callable[..., Any], Callable[[int], tuple]]] = {
    "loss_item": (_loss_item, lambda n: (_two(3, 2), torch.randn(n, 3))),
    "loss_item_grad": (_loss_item, lambda n: (_two(3, 2, requires_grad=True), torch.randn(n, 3))),
    "sum_item_grad": (lambda x: [x * 2, x.sum().item()], lambda n: (_two(n, 3, requires_grad=True),)),
    "scaled_by_item": (_scaled_by_item, lambda n: (_two(n, 3),)),
    "float": (lambda x: [x * 2, float(x.mean())], lambda n: (_two(n, 3),)),
}


@pytest.mark.parametrize("name", sorted(_ITEM_OVER_SIZES))
def test_a_wrappers_item_over_changing_sizes_keeps_one_symbolic_entry(name: str) -> None:
    fn, make = _ITEM_OVER_SIZES[name]
    entries, warm = frames_over_sizes(fn, make, (2, 3, 4, 5, 6), (TwoTensor,))
    assert (entries, warm) == (2, [])


class _ItemScaled(torch.Tensor):
    """An int8 weight whose dispatch reads its scale with ``self.scale.item()`` and branches on it."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor) -> _ItemScaled:
        return torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=torch.float32, device=q.device)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.q, self.scale = q, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["q", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> _ItemScaled:
        return _ItemScaled(inner["q"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is aten.t.default:
            return _ItemScaled(args[0].q.t(), args[0].scale)

        def dequantized(t: Any) -> Any:
            if not isinstance(t, _ItemScaled):
                return t
            s = t.scale.item()
            return t.q.float() * (s if s > 0.5 else max(s, 0.01))

        return func(*pytree.tree_map(dequantized, args), **pytree.tree_map(dequantized, kwargs or {}))


def test_a_dispatch_reading_its_scale_over_activations_of_changing_sizes() -> None:
    def make(n: int) -> tuple:
        q = torch.randint(-5, 5, (4, 8), dtype=torch.int8)
        return torch.randn(n, 8), _ItemScaled(q, torch.tensor(0.2 + (n % 2) * 0.5))

    entries, warm = frames_over_sizes(lambda x, w: torch.nn.functional.linear(x, w).relu(), make,
                                      (2, 3, 4, 5, 6, 7), (_ItemScaled,))
    assert (entries, warm) == (3, [])  # the static first call, then one symbolic entry per branch
