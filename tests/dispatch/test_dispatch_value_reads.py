"""Value reads inside a tensor subclass's ``__torch_dispatch__`` (Note [Reads inside a subclass's code],
jitcore/jit/value_reads.py), differentially against eager, where they used to make the call an eager
entry: under grad (the grad transform answers them again: jitcore/transforms/replayed_reads.py), after
a write to a subclass value (the probe copies its inner tensors first), after a random draw in the same
call, and with ``fullgraph=True``. Each program is traced: two calls with the same values (the second
a hit that runs no ``__torch_dispatch__``), then one with other values the read depends on (another
entry, eager's answer); values, types, inner tensors and gradients are eager's.

Each test here failed before (the calls were eager entries, JC-J002, or fullgraph refused them)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import jitcore


class Checked(torch.Tensor):
    """A wrapper over ``a`` whose dispatch reads its arguments' values before each op: when one has a
    negative entry (``bool((a < 0).any())``), the op's outputs are made non-negative (``abs``)."""

    @staticmethod
    def __new__(cls, a: torch.Tensor) -> Checked:
        return torch.Tensor._make_wrapper_subclass(cls, a.shape, dtype=a.dtype, device=a.device,
                                                   requires_grad=a.requires_grad)

    def __init__(self, a: torch.Tensor) -> None:
        self.a = a

    def __repr__(self) -> str:
        return f"Checked({self.a!r})"

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["a"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Checked:
        return Checked(inner["a"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inner = tree_map(lambda t: t.a if isinstance(t, Checked) else t, (args, kwargs))
        negative = any(bool((t < 0).any()) for t in tree_leaves(inner[0])
                       if isinstance(t, torch.Tensor) and t.is_floating_point())
        out = func(*inner[0], **inner[1])
        if func._schema.is_mutable:  # in place: the inner tensor was written, the wrapper is the result
            return args[0]
        return tree_map(lambda t: cls(t.abs() if negative else t) if isinstance(t, torch.Tensor) else t, out)


class Noisy(Checked):
    """Draws noise in its dispatch and reads it: the outputs get the noise only where it is all below 0.9."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        inner = tree_map(lambda t: t.a if isinstance(t, Checked) else t, (args, kwargs or {}))
        out = func(*inner[0], **inner[1])
        noise = torch.rand(out.shape)
        return Noisy(out + noise if bool((noise < 0.9).all()) else out)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Noisy:
        return Noisy(inner["a"])


@contextlib.contextmanager
def _counted(cls: type) -> Iterator[list[str]]:
    """The operators ``cls.__torch_dispatch__`` is called with inside the block."""
    calls: list[str] = []
    original = cls.__dict__["__torch_dispatch__"]

    def counting(klass: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        calls.append(str(func))
        return original.__func__(klass, func, types, args, kwargs)

    cls.__torch_dispatch__ = classmethod(counting)
    try:
        yield calls
    finally:
        cls.__torch_dispatch__ = original


def _same(actual: Any, expected: Any) -> None:
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, Checked):
        torch.testing.assert_close(actual.a, expected.a)
    else:
        torch.testing.assert_close(actual, expected)


def _no_eager_entry(jitted: jitcore.JittedFunction) -> None:
    assert jitted.entries and all(entry.eager_reason is None for entry in jitted.entries)


def test_a_read_in_dispatch_under_grad_is_traced() -> None:
    """An input requires grad: pass 1 reads, the grad transform's replay answers the same read with its
    value and checks it in the forward; the gradients are eager's."""
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).a.sin() * w

    jitted = jitcore.jit(f)
    for i, data in enumerate(([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, -2.0, 3.0], [-1.0, 2.0, 3.0])):
        x = Checked(torch.tensor(data))
        w, w2 = torch.tensor([0.5, -1.5, 2.0], requires_grad=True), torch.tensor([0.5, -1.5, 2.0],
                                                                                 requires_grad=True)
        with _counted(Checked) as calls:
            out = jitted(x, w)
        expected = f(x, w2)
        _same(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(w.grad, w2.grad)
        if i in (1, 3):  # hits: the read is checked by the computation, no dispatch runs
            assert calls == []
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 2)
    _no_eager_entry(jitted)
    forward = str(jitcore.last_traces(jitted)[-1])
    assert "forward (grad transform)" in forward and "check_read" in forward


def test_a_read_in_dispatch_after_a_write_to_the_subclass_value() -> None:
    """``x.add_(...)`` on the caller's subclass value, then a call whose dispatch reads ``x``: the probe
    writes private copies of its inner tensors (Note [Writes to subclass values in the probe]), so the
    caller's value is written once, as eagerly."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(y)
        return x * 2

    jitted = jitcore.jit(f)
    calls_args = (([1.0, 2.0], [1.0, 1.0]), ([1.0, 2.0], [1.0, 1.0]), ([1.0, 2.0], [-3.0, 1.0]))
    for i, (data, y) in enumerate(calls_args):
        x, x2 = Checked(torch.tensor(data)), Checked(torch.tensor(data))
        with _counted(Checked) as calls:
            out = jitted(x, torch.tensor(y))
        _same(out, f(x2, torch.tensor(y)))
        torch.testing.assert_close(x.a, x2.a)  # written once
        if i == 1:
            assert calls == []
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)
    _no_eager_entry(jitted)


def test_a_read_in_dispatch_after_a_random_draw_in_the_same_call() -> None:
    """The noise is drawn and read inside one ``__torch_dispatch__``: the probe draws it from the stream
    the computation will draw from; a failed check puts the RNG state back before the next entry."""
    f = lambda x: (x + 1) * 3  # noqa: E731
    jitted = jitcore.jit(f)
    x = Noisy(torch.zeros(3))
    other = next(s for s in range(1, 100) if _reads(s) != _reads(0))  # the reads see other values
    for i, seed in enumerate((0, 0, other)):
        torch.manual_seed(seed)
        with _counted(Noisy) as calls:
            out = jitted(x)
        after = torch.rand(2)  # the RNG state the call left
        torch.manual_seed(seed)
        expected = f(x)
        _same(out, expected)
        torch.testing.assert_close(after, torch.rand(2))
        if i == 1:
            assert calls == []
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)
    _no_eager_entry(jitted)


def _reads(seed: int) -> tuple[bool, bool]:
    """What the two reads of ``Noisy``'s dispatch (``+`` then ``*``) see for ``seed``."""
    torch.manual_seed(seed)
    return bool((torch.rand(3) < 0.9).all()), bool((torch.rand(3) < 0.9).all())


def test_fullgraph_traces_a_read_in_dispatch() -> None:
    """Note [Reads inside a subclass's code under fullgraph]: the subclass's read is not the program's,
    so ``fullgraph=True`` traces and checks it; a read of the program's own is still refused."""
    f = lambda x: (x * 2).a + 1  # noqa: E731
    jitted = jitcore.jit(f, fullgraph=True)
    for data in ([1.0, 2.0], [1.0, 2.0], [-1.0, 2.0]):
        x = Checked(torch.tensor(data))
        _same(jitted(x), f(x))
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)
    with pytest.raises(jitcore.DataDependentError):
        jitcore.jit(lambda x: x.a * 2 if bool(x.a.sum() > 0) else x.a, fullgraph=True)(Checked(torch.ones(2)))


class Counting(Checked):
    """Counts its dispatch calls in a class attribute (a program's side effect, replayed per call)."""

    count = 0

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        cls.count += 1
        return super().__torch_dispatch__(func, types, args, kwargs)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Counting:
        return Counting(inner["a"])


def test_a_counter_in_dispatch_that_reads_counts_as_eagerly() -> None:
    """Note [The probe runs a subclass call's operations]: the probe ran a recorded subclass call
    natively for a later read, so its ``cls.count += 1`` ran again on the number being traced, and the
    computation returned a name it never computed (NameError); now the count is eager's on every call."""
    f = lambda x: (x * 2) + 1  # noqa: E731
    jitted = jitcore.jit(f)
    for data in ([1.0, 2.0], [1.0, 2.0], [-1.0, 2.0]):
        x = Counting(torch.tensor(data))
        before = Counting.count
        out = jitted(x)
        assert Counting.count == before + 2
        _same(out, f(x))
        assert Counting.count == before + 4
    assert (jitcore.cache_misses(jitted), jitcore.cache_hits(jitted)) == (2, 1)


# --- a number the dispatch reads of a plain tensor it holds (Note [A number a subclass's code reads]) ---
class Scaled(torch.Tensor):
    """A quantized-style wrapper: ``data`` times the number its dispatch reads of ``scale``
    (``scale.item()``). ``how`` picks what the dispatch does with it: ``"scale"`` multiplies;
    ``"amax"`` also reads ``data``'s largest magnitude and rescales by ``448 / max(amax, eps)``
    (float8-style); ``"branch"`` multiplies above 1 and subtracts otherwise."""

    how = "scale"

    @staticmethod
    def __new__(cls, data: torch.Tensor, scale: torch.Tensor) -> Scaled:
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

    def __init__(self, data: torch.Tensor, scale: torch.Tensor) -> None:
        self.data_, self.scale = data, scale

    def __tensor_flatten__(self) -> tuple[list[str], None]:
        return ["data_", "scale"], None

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, size: Any, stride: Any) -> Scaled:
        return Scaled(inner["data_"], inner["scale"])

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: tuple, args: tuple = (), kwargs: Any = None) -> Any:
        def plain(t: Any) -> Any:
            if not isinstance(t, Scaled):
                return t
            s = t.scale.item()
            if cls.how == "amax":
                amax = t.data_.abs().max().item()
                return t.data_ * (448.0 / max(amax, 1e-12)) * s
            if cls.how == "branch":
                return t.data_ * s if s > 1.0 else t.data_ - s
            return t.data_ * s
        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))


@pytest.mark.parametrize(("how", "misses"), [("scale", 1), ("amax", 1), ("branch", 2)])
@pytest.mark.parametrize("grad", [False, True], ids=["values", "grad"])
def test_a_scale_the_dispatch_reads_is_a_number_of_the_computation(how: str, misses: int,
                                                                   grad: bool) -> None:
    """Eight calls with eight scales (0.5 to 1.9) and new data: outputs (and gradients) are eager's.
    Without grad, a scale only multiplied is a number of the computation (one entry), and a branch on
    it checks its outcome (two entries). Before: one entry per scale (8 misses in 8 calls). Under grad
    the number stays a checked read (the grad transform's replay answers reads with constants): values
    and gradients are compared only."""
    def f(x: torch.Tensor, w: Scaled) -> torch.Tensor:
        return torch.mm(x, w) + 1

    Scaled.how = how
    jitted = jitcore.jit(f)
    try:
        for i in range(8):
            torch.manual_seed(i)
            w = Scaled(torch.randn(3, 2), torch.tensor(0.5 + 0.2 * i))
            x = torch.randn(4, 3, requires_grad=grad)
            got, expected = jitted(x, w), f(x, w)
            torch.testing.assert_close(got, expected)
            if grad:
                torch.testing.assert_close(torch.autograd.grad(got.sum(), x),
                                           torch.autograd.grad(expected.sum(), x))
    finally:
        Scaled.how = "scale"
    if not grad:
        assert jitcore.cache_misses(jitted) == misses
        _no_eager_entry(jitted)
