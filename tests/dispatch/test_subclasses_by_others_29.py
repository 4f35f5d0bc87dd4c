"""Tensor subclasses written by others (issue 15, ao52), eager against ``jitcore.jit`` over several calls
(values, output types, inner tensors, gradients, the subclass code a warm call runs): a wrapper whose
``__torch_dispatch__`` computes on its inner tensors inside ``torch._C._DisableTorchDispatch()`` (torch's
``no_dispatch()``, subclass_zoo's style; Note [Shadows inside no_dispatch], jitcore/langctx/shadows.py); an
``autograd.Function`` without grad whose forward computes through TwoTensor values (Note [A Function without
grad runs its recorded forward], jitcore/transforms/autograd_function.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from subclass_checks import OneInner, assert_same_flattened, frames_over_sizes
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._mode_utils import no_dispatch
from torch.utils._pytree import tree_map_only

import jitcore


class _Undispatched(OneInner):
    """A wrapper computing each op on its inner tensor with Python dispatch off (``no_dispatch()``)."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        args, kwargs = tree_map_only(_Undispatched, lambda x: x.t, (args, kwargs or {}))
        with no_dispatch():
            out = func(*args, **kwargs)
            if func is torch.ops.aten.mul.Tensor:  # a tensor made inside the block
                out = out + torch.zeros_like(out)
        return tree_map_only(torch.Tensor, _Undispatched, out)


class _RawDisabled(_Undispatched):
    """The same with ``torch._C._DisableTorchDispatch()`` spelled out, unwrapping tuples of results."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        args, kwargs = tree_map_only(_RawDisabled, lambda x: x.t, (args, kwargs or {}))
        with torch._C._DisableTorchDispatch():  # noqa: SLF001
            out = func(*args, **kwargs)
        return tree_map_only(torch.Tensor, lambda o: _RawDisabled(o), out)


_PROGRAMS: dict[str, Callable[..., Any]] = {
    "pointwise": lambda x, w: (x * 2).exp() + 1,
    "matmul": lambda x, w: x @ w,
    "tuple_out": lambda x, w: x.split(2, dim=1),
    "in_place": lambda x, w: x.mul_(2).add_(w.sum()),
    "beside_plain": lambda x, w: (x.sin(), w.cos()),
}


@pytest.mark.parametrize("cls", [_Undispatched, _RawDisabled], ids=["no_dispatch", "DisableTorchDispatch"])
@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_a_dispatch_inside_no_dispatch_computes_as_eagerly(cls: type, name: str) -> None:
    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return cls(torch.randn(3, 4)), torch.randn(4, n)

    # before: the first call died with a segmentation fault (fake tensors computed without the Python key)
    entries, warm_frames = frames_over_sizes(_PROGRAMS[name], make, (2, 2, 2), (cls,))
    assert entries == 1
    assert warm_frames == []


def test_a_dispatch_inside_no_dispatch_gives_eagers_gradients() -> None:
    def program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (_Undispatched(x) * 2).t @ w

    f = jitcore.jit(program)
    for _ in range(2):
        x, w = torch.randn(3, 4), torch.randn(4, 2, requires_grad=True)
        wj = w.detach().clone().requires_grad_()
        expected, got = program(x, w), f(x, wj)
        torch.testing.assert_close(got, expected)
        expected.square().sum().backward()
        got.square().sum().backward()
        torch.testing.assert_close(wj.grad, w.grad)
    assert jitcore.cache_misses(f) == 1


# --- a Function without grad whose forward computes through subclass values ---------------------------------
# Note [A Function without grad runs its recorded forward] (jitcore/transforms/autograd_function.py): such a
# Function's forward records take its place in the computation. They were put there after the trace was
# flattened, so the records computing with the forward's TwoTensor values ran as torch-level calls on a
# subclass value no record made: UnboundLocalError on every call of the entry (from the first call without
# grad; with a dynamic number, from the second), where eager computes.


class _PairsInside(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, s: float) -> torch.Tensor:
        ctx.s = s
        x = x.detach()
        pair = TwoTensor(x / s, x - s) * 2
        return (pair.a + pair.b).clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        pair = TwoTensor(g * ctx.s, g) * 3
        return pair.a + pair.b, None


_INLINED: dict[str, tuple[Callable[..., Any], bool]] = {
    "no_grad_inputs": (lambda x, s: _PairsInside.apply(x, s) * x, False),
    "a_detached_input": (lambda x, s: _PairsInside.apply(x.detach(), s) * x, True),
    "beside_a_subclass": (lambda x, s: TwoTensor(_PairsInside.apply(x, s), x) + 1, False),
}


@pytest.mark.parametrize("name", sorted(_INLINED))
def test_a_function_without_grad_computing_through_pairs_computes_as_eagerly(name: str) -> None:
    program, requires_grad = _INLINED[name]
    f = jitcore.jit(program)
    for i, s in enumerate((1.5, 2.5, 3.5, 0.5)):
        torch.manual_seed(i)
        x = torch.randn(4, 6, requires_grad=requires_grad)
        xj = x.detach().clone().requires_grad_(requires_grad)
        expected, got = program(x, s), f(xj, s)
        assert_same_flattened(got, expected, f"call {i}")
        if requires_grad:
            expected.square().sum().backward()
            got.square().sum().backward()
            torch.testing.assert_close(xj.grad, x.grad)
    assert jitcore.cache_misses(f) == 2  # the first scale, then the scale a number of the computation


# --- print, str and format of a subclass whose class writes its own __repr__ --------------------------------
# Note [A subclass's own text in print and str] (jitcore/langctx/tensor_text.py): repr(w) ran the class's
# __repr__, but print(w), str(w), f"{w}" and format(w) refused as a tensor's text (JC-T001): every call ran
# eagerly, the class's dispatch with it.


class _ShownInt8(torch.Tensor):
    """A scale-carrying int8 weight that shows its shape and dtype (torchao's style of text)."""

    @staticmethod
    def __new__(cls, q: torch.Tensor, scale: torch.Tensor) -> _ShownInt8:
        return torch.Tensor._make_wrapper_subclass(cls, q.shape, dtype=scale.dtype)

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        self.q, self.scale = q, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["q", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], ctx: None, size: Any, stride: Any) -> Any:
        return _ShownInt8(inner["q"], inner["scale"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.t.default:
            return _ShownInt8(args[0].q.t(), args[0].scale.t())
        args, kwargs = tree_map_only(_ShownInt8, lambda w: w.q.float() * w.scale, (args, kwargs or {}))
        return func(*args, **kwargs)


class _ShownPlain(torch.Tensor):
    """A plain subclass (no dispatch) showing its shape."""

    def __repr__(self) -> str:
        return f"Plain{tuple(self.shape)}"


def _weight() -> _ShownInt8:
    w = torch.randn(6, 4)
    scale = w.abs().amax(1, keepdim=True) / 127
    return _ShownInt8(torch.round(w / scale).to(torch.int8), scale)


_TEXTS: dict[str, Callable[..., Any]] = {
    "print": lambda w, x: (print("weight", w, sep=": "), x @ w.t())[1],
    "str": lambda w, x: (str(w), x @ w.t()),
    "f_string": lambda w, x: (f"{w} {w.t()}", x @ w.t()),
    "format": lambda w, x: ("{}".format(w) + format(w), x @ w.t()),  # noqa: UP032
}


@pytest.mark.parametrize("name", sorted(_TEXTS))
def test_the_text_of_a_subclass_with_its_own_repr_is_traced(name: str, capsys: pytest.CaptureFixture) -> None:
    program = _TEXTS[name]

    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _weight(), torch.randn(n, 4)

    entries, warm_frames = frames_over_sizes(program, make, (3, 3, 3), (_ShownInt8,))
    printed = capsys.readouterr().out.splitlines()
    shown = "weight: _ShownInt8(shape=(6, 4), dtype=torch.float32)"
    assert printed == ([shown] * 6 if name == "print" else [])  # eager's and the jitted calls' prints
    assert (entries, warm_frames) == (1, [])  # before: every call ran eagerly, the dispatch with it


def test_the_text_of_a_plain_subclass_with_its_own_repr_is_traced(capsys: pytest.CaptureFixture) -> None:
    def program(x: torch.Tensor) -> tuple[str, torch.Tensor]:
        print(x)
        return f"{x}|{str(x * 2)}", x + 1

    f = jitcore.jit(program)
    for _ in range(2):
        x = torch.randn(3).as_subclass(_ShownPlain)
        expected, got = program(x), f(x)
        assert got[0] == expected[0] == "Plain(3,)|Plain(3,)"
        assert_same_flattened(got[1], expected[1], "output")
    assert capsys.readouterr().out == "Plain(3,)\n" * 4
    assert (jitcore.cache_misses(f), f.fallback_reason) == (1, None)
