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
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        _same(list(got.values()), list(expected.values()))
    elif isinstance(expected, type):
        assert got is expected
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


# --- tensor-like classes: no tensor, a __torch_function__ ---------------------------------------------------
# Note [Tensor-like values] (jitcore/dispatch/resolver.py): torch offers a call to the __torch_function__ of
# any argument whose class defines one. Left to the symbol's meta, that __torch_function__ ran natively and
# handed the caller's real tensor it holds to a torch function on fake tensors (an AssertionError, where
# eager computes); one defined as a plain method (torch's docs' MetadataTensor) lost its ``self``.


class _Holder:
    """torch's dynamo tests' WrapperSubclass: unwraps its argument and calls the function."""

    log: list[str] = []

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.log.append(func.__name__)
        args = pytree.tree_map_only(_Holder, lambda h: h.tensor, args)
        kwargs = pytree.tree_map_only(_Holder, lambda h: h.tensor, kwargs or {})
        return func(*args, **kwargs)


class _Described:
    """torch's docs' MetadataTensor: ``__torch_function__`` a plain method, results keep the metadata."""

    def __init__(self, data: Any, metadata: Any = None) -> None:
        self._t = torch.as_tensor(data)
        self._metadata = metadata

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        metadatas = tuple(a._metadata for a in args if hasattr(a, "_metadata"))
        assert len(metadatas) > 0
        ret = func(*[getattr(a, "_t", a) for a in args], **(kwargs or {}))
        return _Described(ret, metadata=metadatas[0])


class _Declines:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        return NotImplemented


def _logged(program: Callable[..., Any]) -> Callable[..., Any]:
    def logged(*args: Any) -> Any:
        _Holder.log.clear()
        return program(*args), list(_Holder.log)

    return logged


def _backward_through_holder(h: _Holder) -> torch.Tensor:
    torch.sin(h).sum().backward()
    return h.tensor.grad


_holder = lambda *shape: lambda: (_Holder(torch.randn(*shape)),)  # noqa: E731
TENSOR_LIKE: dict[str, tuple[Callable[..., Any], Callable[[], tuple]]] = {
    "holder_sin": (_logged(torch.sin), _holder(3)),
    "holder_with_a_tensor": (_logged(lambda h, y: torch.mul(h, y) + 1), lambda: (_Holder(torch.randn(3)),
                                                                              torch.randn(3))),
    "holder_keyword": (_logged(lambda h: torch.add(h, 1.0, alpha=2.0)), _holder(2, 2)),
    "holder_reduction_dim": (_logged(lambda h: torch.sum(h, dim=0)), _holder(3, 2)),
    "holder_a_method_argument": (_logged(lambda h, y: y.mul(h)), lambda: (_Holder(torch.randn(3)),
                                                                       torch.randn(3))),
    "holder_in_a_list": (_logged(lambda h: torch.cat([h.tensor, torch.stack([h, h]).sum(0)])), _holder(3)),
    "holder_functional": (_logged(lambda h, w: torch.nn.functional.linear(h, w)),
                          lambda: (_Holder(torch.randn(3, 4)), torch.randn(2, 4))),
    "holder_made_inside": (_logged(lambda x: torch.exp(_Holder(x * 2))), lambda: (torch.randn(3),)),
    "holder_under_grad": (lambda h: torch.sin(h).sum(),
                          lambda: (_Holder(torch.randn(3, requires_grad=True)),)),
    "holder_backward_inside": (_backward_through_holder,
                               lambda: (_Holder(torch.randn(3, requires_grad=True)),)),
    "described_with_a_tensor": (lambda d, t: torch.add(t, d), lambda: (_Described(torch.randn(2, 2), "m"),
                                                                       torch.randn(2, 2))),
    "described_made_inside": (lambda t: torch.sin(_Described(t * 2, metadata=[1, 2])),
                              lambda: (torch.randn(3),)),
    "a_tensor_method_of_it": (lambda h: torch.Tensor.add(h, 1), _holder(3)),
    "declined": (lambda d: torch.sin(d), lambda: (_Declines(torch.randn(3)),)),
    "declined_functional": (lambda d: torch.nn.functional.dropout(d),
                            lambda: (_Declines(torch.randn(3)),)),
}


@pytest.mark.parametrize("name", list(TENSOR_LIKE))
def test_a_tensor_like_class_is_offered_the_call_as_eagerly(name: str) -> None:
    program, make = TENSOR_LIKE[name]
    _compare(program, make, _grads)


# --- jitcore's own reads of a wrapper's shadow -----------------------------------------------------------
# Note [jitcore's reads of a shadow] (jitcore/transforms/jit_hook.py): building the trace read
# ``shadow.requires_grad``/``shadow.grad_fn`` natively (a subclass output, a backward inside), so a class
# with a ``__torch_function__`` of its own was handed ``requires_grad.__get__``/``grad_fn.__get__`` calls
# eager never makes.


class _Scaled(torch.Tensor):
    """A float8-style weight: a payload and a scale, ``F.linear`` answered by dequantizing (torchao's
    ``implements`` tables), ``detach`` by its dispatch."""

    log: list[str] = []

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor) -> _Scaled:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=scale.dtype, device=data.device)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        self._data, self._scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["_data", "_scale"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict, ctx: Any, size: Any, stride: Any) -> _Scaled:
        return cls(inner["_data"], inner["_scale"])

    @classmethod
    def __torch_function__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.log.append(getattr(func, "__name__", str(func)))
        if func is torch.nn.functional.linear:
            return torch.nn.functional.linear(args[0], args[1]._data.float() * args[1]._scale, *args[2:])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple, kwargs: Any = None) -> Any:
        if func is torch.ops.aten.detach.default:
            return cls(args[0]._data.detach(), args[0]._scale)
        raise NotImplementedError(func)


def _scaled_weight() -> _Scaled:
    w = torch.randn(4, 8)
    scale = w.abs().amax() / 100
    return _Scaled((w / scale).round().to(torch.int8), scale)


def _returns_the_weight(w: _Scaled, x: torch.Tensor) -> tuple[_Scaled, torch.Tensor]:
    return w.detach(), x + 1


def _backward_through_the_weight(w: _Scaled, x: torch.Tensor) -> torch.Tensor:
    torch.nn.functional.linear(x, w).sum().backward()
    return x.grad


@pytest.mark.parametrize(("program", "requires_grad"), [
    (_returns_the_weight, False), (_returns_the_weight, True), (_backward_through_the_weight, True)])
def test_a_class_is_handed_no_read_of_jitcores_own(program: Callable[..., Any], requires_grad: bool) -> None:
    jitted = jitcore.jit(program)
    for seed in range(3):
        made, outs, logs = [], [], []
        for _ in range(2):
            torch.manual_seed(seed)
            made.append((_scaled_weight(), torch.randn(3, 8, requires_grad=requires_grad)))
        for run, args in ((program, made[0]), (jitted, made[1])):
            _Scaled.log.clear()
            outs.append(run(*args))
            logs.append(list(_Scaled.log))
        _same(outs[1], outs[0])
        _same(made[1][1].grad, made[0][1].grad)
        # under grad, a cached call replays none of the class's Python effects (left for later: Pass.
        # _untracked_subclass_code, jit/interpretation.py): the call that traces is compared there
        if not requires_grad or seed == 0:
            assert logs[1] == logs[0], seed


# --- a torch.Size returned beside the caller's class ---------------------------------------------------
# Note [Returning the caller's objects] (jitcore/jit/effects.py): an output holding one of the caller's
# objects (here the input's class, reached through the argument) is taken apart and put together again
# with torch's pytree, which gives a torch.Size back as a plain tuple.

SIZES: dict[str, Callable[..., Any]] = {
    "tuple": lambda x: (x * 2, x.shape, type(x)),
    "dict": lambda x: {"out": x + 1, "shape": x.shape, "cls": type(x)},
    "size_call": lambda x: [x.size(), type(x), x.sum()],
}


@pytest.mark.parametrize("name", list(SIZES))
def test_a_size_returned_beside_the_callers_class_stays_a_size(name: str) -> None:
    _compare(SIZES[name], lambda: (torch.randn(2, 3).as_subclass(_Passing),), lambda args: [])
