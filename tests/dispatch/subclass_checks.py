"""Comparing tensor-subclass programs run eagerly and under jitcore (shared by the dispatch tests), and
the modes several of them enter."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

import jitcore


class CountingFunctionMode(TorchFunctionMode):
    """Counts the callables it is offered."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def protocol_calls(*classes: type, inherited: bool = False) -> Iterator[list[str]]:
    """The ops the classes' ``__torch_dispatch__``/``__torch_function__`` really ran with in the block
    (Python frames of their code: a side effect inside them, replayed by jitcore, is no call). Their
    own methods, or with ``inherited`` the ones they inherit too."""
    methods = [getattr(cls, name, None) if inherited else vars(cls).get(name)
               for cls in classes for name in ("__torch_dispatch__", "__torch_function__")]
    codes = {code for m in methods if (code := getattr(getattr(m, "__func__", m), "__code__", None))}
    seen: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes:
            seen.append(str(frame.f_locals.get("func")))

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def inner_values(t: torch.Tensor) -> dict[str, Any]:
    """What a value holds: its flatten protocol's inner tensors and ctx, the tensor a wrapper without
    one wraps, or its data."""
    if type(t) is torch.Tensor:
        return {"data": t}
    if hasattr(type(t), "__tensor_flatten__"):
        names, ctx = t.__tensor_flatten__()
        return {"ctx": ctx, **{n: getattr(t, n) for n in names}}
    for name in ("t", "diag", "values", "indices"):
        if isinstance(vars(t).get(name), torch.Tensor):
            return {name: vars(t)[name]}
    with torch._C.DisableTorchFunctionSubclass():
        return {"data": t.as_subclass(torch.Tensor)}


def assert_same_values(actual: Any, expected: Any) -> None:
    """Types, shapes, dtypes, ``requires_grad``, inner tensors (recursively) and flatten contexts equal;
    other values equal."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_values(a, e)
    elif isinstance(expected, torch.Tensor):
        assert (actual.shape, actual.dtype, actual.requires_grad) == (
            expected.shape, expected.dtype, expected.requires_grad)
        got, want = inner_values(actual), inner_values(expected)
        assert got.keys() == want.keys()
        for key, value in want.items():
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                assert_same_values(got[key], value)
            elif isinstance(value, torch.Tensor):
                torch.testing.assert_close(got[key].detach(), value.detach())
            else:
                assert got[key] == value
    else:
        assert actual == expected


def typed_ctx(tree: Any) -> Any:
    """A flatten ctx with the type of each container and leaf (a torch.Size is no list)."""
    if isinstance(tree, dict):
        return dict, {k: typed_ctx(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree), [typed_ctx(v) for v in tree]
    return type(tree), tree


def assert_same_flattened(actual: Any, expected: Any, what: str) -> None:
    """Types, sizes, strides, dtypes, ``requires_grad`` and values; a subclass value's flatten ctx (with
    its containers' types) and inner tensors one by one (by ``__tensor_flatten__``, or its tensor
    attributes). ``what`` names the value in a failure."""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_flattened(a, e, f"{what}[{i}]")
        return
    assert type(actual) is type(expected), (what, type(actual), type(expected))
    if not isinstance(expected, torch.Tensor):
        assert actual == expected, (what, actual, expected)
        return
    assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), (what, actual, expected)
    assert actual.stride() == expected.stride(), (what, actual.stride(), expected.stride())
    assert actual.requires_grad == expected.requires_grad, what
    if type(expected) in (torch.Tensor, torch.nn.Parameter):
        torch.testing.assert_close(actual, expected, msg=what)
        return
    if hasattr(expected, "__tensor_flatten__"):
        names, ctx = expected.__tensor_flatten__()
        actual_names, actual_ctx = actual.__tensor_flatten__()
        assert actual_names == names and typed_ctx(actual_ctx) == typed_ctx(ctx), (what, actual_ctx, ctx)
    else:
        names = sorted(n for n, v in vars(expected).items() if isinstance(v, torch.Tensor))
    for n in names:
        assert_same_flattened(getattr(actual, n), getattr(expected, n), f"{what}.{n}")


def compare_over_sizes(fn: Callable[..., Any], make: Callable[[int], tuple], sizes: tuple[int, ...]) -> int:
    """``fn`` eagerly and jitted on equal fresh arguments (``make(n)``, seeded) of each size: outputs and
    arguments afterwards compared by ``assert_same_flattened``. Returns the entries traced."""
    jitted = jitcore.jit(fn)
    for i, n in enumerate(sizes):
        torch.manual_seed(i)
        eager_args = make(n)
        torch.manual_seed(i)
        jit_args = make(n)
        assert_same_flattened(jitted(*jit_args), fn(*eager_args), f"call {i} (size {n}) output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} (size {n}) arguments")
    return jitcore.cache_misses(jitted)


def frames_over_sizes(fn: Callable[..., Any], make: Callable[[int], tuple], sizes: tuple[int, ...],
                      classes: tuple[type, ...] = (), jitted: Any = None) -> tuple[int, list[str]]:
    """``fn`` eagerly, then jitted (``jitted``, else ``jitcore.jit(fn)``), on equal fresh arguments
    (``make(n)``, seeded) of each size, outputs and arguments afterwards compared by
    ``assert_same_flattened``. Returns the entries traced and the protocol frames of ``classes``
    (``protocol_calls``) that the calls the cache served ran."""
    jitted = jitcore.jit(fn) if jitted is None else jitted
    hit_frames: list[str] = []
    for i, n in enumerate(sizes):
        torch.manual_seed(i)
        eager_args = make(n)
        torch.manual_seed(i)
        jit_args = make(n)
        expected = fn(*eager_args)
        misses = jitcore.cache_misses(jitted)
        with protocol_calls(*classes) as frames:
            actual = jitted(*jit_args)
        if jitcore.cache_misses(jitted) == misses:
            hit_frames += frames
        assert_same_flattened(actual, expected, f"call {i} output")
        assert_same_flattened(list(jit_args), list(eager_args), f"call {i} arguments")
    return jitcore.cache_misses(jitted), hit_frames


def check_twice(fn: Callable[..., Any], make: Callable[[], tuple],
                after: Callable[[Any, tuple], Any] | None = None) -> Any:
    """``fn`` eagerly and jitted on equal fresh arguments (``make()``, seeded), twice: the outputs, and
    what ``after(output, args)`` gives (a backward's gradients); the second call must be a cache hit and
    no call may run eagerly. Returns the jitted function."""
    jitted = jitcore.jit(fn)
    for _ in range(2):
        torch.manual_seed(0)
        eager_args = make()
        expected = fn(*eager_args)
        torch.manual_seed(0)
        jit_args = make()
        actual = jitted(*jit_args)
        assert_same_values(actual, expected)
        if after is not None:
            assert_same_values(after(actual, jit_args), after(expected, eager_args))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (1, 1)
    assert jitted.fallback_reason is None
    return jitted


def nested_jagged(lengths: tuple[int, ...] = (2, 5, 3), dim: int = 8,
                  requires_grad: bool = False) -> torch.Tensor:
    """A nested jagged tensor of ``len(lengths)`` components of ``(length, dim)`` random values."""
    return torch.nested.nested_tensor([torch.randn(n, dim) for n in lengths], layout=torch.jagged,
                                      requires_grad=requires_grad)


def assert_same_nested(actual: Any, expected: Any) -> None:
    """``actual`` as ``expected``: types, lengths, ``requires_grad``, and for nested jagged tensors the
    batch size, the number of dimensions and every component's values."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_nested(a, e)
    elif isinstance(expected, torch.Tensor):
        assert actual.requires_grad == expected.requires_grad
        if expected.is_nested:
            assert actual.shape[0] == expected.shape[0] and actual.dim() == expected.dim()
            for a, e in zip(actual.unbind(), expected.unbind(), strict=True):
                torch.testing.assert_close(a, e)
        else:
            torch.testing.assert_close(actual, expected)
    else:
        assert actual == expected


class OneInner(torch.Tensor):
    """A wrapper over one inner tensor ``t`` (its size, dtype and ``requires_grad``), flattened as ``["t"]``;
    a subclass gives its own ``__torch_dispatch__``."""

    @staticmethod
    def __new__(cls, t: torch.Tensor) -> OneInner:
        return torch.Tensor._make_wrapper_subclass(cls, t.shape, dtype=t.dtype, requires_grad=t.requires_grad)

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["t"], None

    @classmethod
    def __tensor_unflatten__(cls, inner: dict[str, torch.Tensor], ctx: None, size: Any, stride: Any) -> Any:
        return cls(inner["t"])


class Scaled(torch.Tensor):
    """A wrapper whose dispatch scales each result by ``k`` and keeps ``k`` on it; its flatten protocol leaves
    ``k`` out (Note [An attribute the flatten protocol does not report], jitcore/jit/tensor_binding.py)."""

    @staticmethod
    def __new__(cls, a: torch.Tensor, k: float = 1.0) -> Scaled:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, strides=a.stride(), dtype=a.dtype)

    def __init__(self, a: torch.Tensor, k: float = 1.0) -> None:
        self.a, self.k = a, k

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: None, size: Any, stride: Any) -> Scaled:
        return Scaled(inner["a"])

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: dict | None = None) -> Any:
        k = next(a.k for a in args if isinstance(a, Scaled))
        inner = tree_map_only(Scaled, lambda t: t.a, (args, kwargs or {}))
        return tree_map_only(torch.Tensor, lambda t: Scaled(t * k, k), func(*inner[0], **inner[1]))


@contextlib.contextmanager
def nested_dispatch_calls() -> Iterator[list[str]]:
    """The operators ``NestedTensor.__torch_dispatch__`` is called with inside the block."""
    from torch.nested._internal.nested_tensor import NestedTensor

    calls: list[str] = []
    original = NestedTensor.__dict__["__torch_dispatch__"]

    def counting(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        calls.append(str(func))
        return original.__func__(cls, func, types, args, kwargs)

    NestedTensor.__torch_dispatch__ = classmethod(counting)
    try:
        yield calls
    finally:
        NestedTensor.__torch_dispatch__ = original
