"""Outputs that are views, under autograd (Note [Views an autograd call returns], view_outputs.py):
eager vs ``jitcore.jit`` over three calls, for each: the values, which object each output's ``_base``
is, ``_is_view()``, the ``grad_fn`` before and after the caller's in-place op on an output (or the
error eager raises for it), the input's gradient after backward, and one trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import jitcore
from jitcore.debug.explain import explain_text


def _twice(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sin()


def _base_and_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z, z.view(-1)


def _two_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z[0], z[1]


def _view_made_under_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = x + 1
    with torch.no_grad():
        v = z.view(-1)
    return z, v


_RUNNING = torch.zeros(8)  # a buffer the program writes in place, as BatchNorm's running mean


def _view_beside_in_place_writes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 3
    y.relu_()  # an intermediate the view does not share storage with
    _RUNNING.mul_(0.9).add_(x.detach().mean(0) * 0.1)
    z = _twice(x)
    return y + z, z.view(-1)


def _base_written_after_the_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z.view(-1)
    z.mul_(2)  # eagerly v's node is made again: AsStridedBackward0 (Note [A view whose base is written])
    return z, v


def _view_written_by_the_program(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z[1:]
    v.add_(1)
    return z, v


def _base_written_before_the_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    z.mul_(2)
    return z, z.view(-1)[::2]


def _base_written_between_the_view_calls(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    u = z.view(-1)
    z.mul_(2)  # eagerly ``u[::2]`` makes u's node again first: AsStridedBackward0 under its SliceBackward0
    return z, u[::2]


def _base_written_in_a_program_with_no_grad(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z.view(-1)
    z.mul_(2)
    with torch.no_grad():
        w = x * 3
    return z, v, w


def _view_beside_a_seed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)  # a call made for its effect, which no view call reads
    z = _twice(x) + torch.rand(8)
    return z, z.view(-1)


def _view_beside_autocast(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.autocast("cpu", dtype=torch.bfloat16):  # Note [Calls made for their effect beside views]
        z = _twice(x) @ x.t()
    return z, z.view(-1)


def _view_beside_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        w = torch.ones(3) * 2
    z = _twice(x) * w.sum()
    return z, z.view(-1)


def _view_made_under_inference_mode(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    with torch.inference_mode():  # eagerly a view of inference mode: the caller's in-place op raises
        v = z.view(-1)
    return z, v


def _view_beside_set_default_dtype(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    torch.set_default_dtype(torch.float32)
    z = _twice(x)
    return z, z[1:]


def _broadcast_tensors(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    _a, b = torch.broadcast_tensors(z, x.sum(0) + 1)  # b: a view of the intermediate, made by expand
    return z, b


def _meshgrid(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    a, _b = torch.meshgrid(z[0], z[1], indexing="ij")
    return z, a


def _view_beside_an_assembled_subclass(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return TwoTensor(x * 2, x * 3), z, z.view(-1)


def _unsqueeze_of_a_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z.view(4, 8)
    v.unsqueeze_(0)  # Note [A view's metadata changed in place]: eagerly UnsqueezeBackward1
    return z, v


def _t_of_a_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z[1:]
    v.t_()
    return z, v


def _as_strided_of_a_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z[1:]
    v.as_strided_((2, 2), (1, 2), 1)
    return z, v


def _transpose_in_a_chain(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    u = z.view(2, 2, 8)
    u.transpose_(0, 2)
    return z, u[1]


def _t_of_the_base_after_the_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z[0]
    z.t_()
    return z, v


def _unsqueeze_then_base_written(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    v = z.view(4, 8)
    v.unsqueeze_(0)
    z.mul_(2)
    return z, v


def _input_and_its_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x, x.view(-1), x * 2


# name -> (function, which output the caller writes in place, the input: "leaf" or "non-leaf")
CASES: dict[str, tuple[Callable[..., Any], int, str]] = {
    "single view of an intermediate": (lambda x: (x * 2).view(-1), 0, "leaf"),
    "base and view": (_base_and_view, 1, "leaf"),
    "base and view, base written": (_base_and_view, 0, "leaf"),
    "two views of one base": (_two_views, 1, "leaf"),
    "view of a non-leaf input": (lambda x: x[0], 0, "non-leaf"),
    "view of a leaf input": (lambda x: x[0], 0, "leaf"),
    "input and its view": (_input_and_its_view, 1, "non-leaf"),
    "view chain": (lambda x: _twice(x).view(-1)[::2], 0, "leaf"),
    "transpose": (lambda x: (x + 1).t(), 0, "leaf"),
    "unsqueeze": (lambda x: (x + 1).unsqueeze(0), 0, "leaf"),
    "expand": (lambda x: (x.sum(0) + 1).expand(3, 8), 0, "leaf"),
    "split": (lambda x: (x + 1).split(2), 1, "leaf"),
    "chunk": (lambda x: (x + 1).chunk(2), 0, "leaf"),
    "unbind": (lambda x: (x + 1).unbind(), 2, "leaf"),
    "one split output": (lambda x: ((x + 1).split(2)[1], x.sum()), 0, "leaf"),
    "view made under no_grad": (_view_made_under_no_grad, 1, "leaf"),  # eager raises its no_grad error
    "view beside in-place writes elsewhere": (_view_beside_in_place_writes, 1, "leaf"),
    "base written after the view": (_base_written_after_the_view, 1, "leaf"),
    "base written after the view, base written again": (_base_written_after_the_view, 0, "leaf"),
    "view written by the program": (_view_written_by_the_program, 1, "leaf"),
    "base written before the view": (_base_written_before_the_view, 1, "leaf"),
    "base written between the view calls": (_base_written_between_the_view_calls, 1, "leaf"),
    "base written between the view calls, base written again":
        (_base_written_between_the_view_calls, 0, "leaf"),
    "base written after the view, no_grad block": (_base_written_in_a_program_with_no_grad, 1, "leaf"),
    # Note [A view call with a second tensor] (view_outputs.py): made with the other tensor's sizes
    "view_as of a leaf input": (lambda x: x.view_as(x), 0, "leaf"),  # eager raises its leaf error
    "view_as of a non-leaf input": (lambda x: (x.view_as(x), x.exp()), 0, "non-leaf"),
    "view_as of an intermediate": (lambda x: _twice(x).view_as(x.t()), 0, "leaf"),
    "expand_as": (lambda x: (x.sum(0) + 1).expand_as(x), 0, "leaf"),
    "reshape_as": (lambda x: (x * 2).reshape_as(x.view(32)), 0, "leaf"),
    "view beside a seed": (_view_beside_a_seed, 1, "leaf"),
    "view beside autocast": (_view_beside_autocast, 1, "leaf"),
    "view beside inference mode": (_view_beside_inference_mode, 1, "leaf"),
    "view made under inference mode": (_view_made_under_inference_mode, 1, "leaf"),
    "view beside set_default_dtype": (_view_beside_set_default_dtype, 1, "leaf"),
    # Note [A view left to the Function]: pass 1 runs under torch's autograd
    "broadcast_tensors": (_broadcast_tensors, 0, "leaf"),
    "meshgrid": (_meshgrid, 0, "leaf"),
    "view beside an assembled subclass output": (_view_beside_an_assembled_subclass, 2, "leaf"),
    # Note [A view's metadata changed in place]
    "unsqueeze_ of a view": (_unsqueeze_of_a_view, 1, "leaf"),
    "t_ of a view": (_t_of_a_view, 1, "leaf"),
    "as_strided_ of a view": (_as_strided_of_a_view, 1, "leaf"),
    "transpose_ in a chain": (_transpose_in_a_chain, 1, "leaf"),
    "t_ of the base after the view": (_t_of_the_base_after_the_view, 1, "leaf"),
    "unsqueeze_ of a view, then its base written": (_unsqueeze_then_base_written, 1, "leaf"),
    "view among other outputs": (lambda x: (x.sum(), _twice(x).view(2, 16), x.exp()), 1, "leaf"),
    # ``to`` of the dtype it has returns its argument, the view itself (before: the search for the view's
    # chain of calls looped forever on that call, which seemed to make its own argument)
    "view returned by to() of its own dtype": (lambda x: (x * 2).t().to(torch.float32), 0, "leaf"),
    "view returned by contiguous() of a contiguous view": (lambda x: (x * 2)[1:].contiguous(), 0, "leaf"),
}


def _input(kind: str, seed: int, subclass: bool = False, rows: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """(the tensor whose gradient is compared, the function's argument)."""
    g = torch.Generator().manual_seed(seed)
    leaf = torch.randn(rows, 8, generator=g)
    if subclass:
        leaf = TwoTensor(leaf, torch.randn(rows, 8, generator=g))
    leaf.requires_grad_()
    return leaf, (leaf if kind == "leaf" else leaf * 1)


def _describe(fn: Callable[..., Any], written: int, kind: str, seed: int, subclass: bool = False,
              rows: int = 4) -> list[Any]:
    """What a caller sees of one call (see the module docstring), or the error eager raises."""
    leaf, x = _input(kind, seed, subclass, rows)
    out = fn(x)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    bases: list[Any] = []

    def which(t: torch.Tensor | None) -> Any:
        if t is None:
            return None
        if t is x:
            return "input"
        for k, o in enumerate(outs):
            if t is o:
                return f"output {k}"
        if not any(t is b for b in bases):
            bases.append(t)
        return f"intermediate {next(k for k, b in enumerate(bases) if b is t)}: {type(t).__name__}"

    # the node of an output that is no view is the call's own (JitcoreFunctionBackward): not compared
    seen: list[Any] = []
    for o in outs:
        seen.append((type(o).__name__, o.detach().clone(), o._is_view(), which(o._base),
                     type(o.grad_fn).__name__ if o._is_view() else None,
                     tuple(o.shape), o.stride(), o.storage_offset()))
    versions = [o._version for o in outs]
    try:
        outs[written].mul_(3)
    except RuntimeError as error:
        return [*seen, ("raised", str(error))]
    seen.append([(type(o.grad_fn).__name__ if o._is_view() or o._version != v else None, o.detach().clone())
                 for o, v in zip(outs, versions)])
    try:
        sum(o.sum() for o in outs).backward()
    except RuntimeError as error:
        return [*seen, ("backward raised", str(error))]
    seen.append(leaf.grad)
    return seen


def _assert_same(got: Any, expected: Any, where: str = "") -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: {got!r} where eager has a tensor"
        torch.testing.assert_close(got, expected, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, (tuple, list)):
        assert isinstance(got, type(expected)), f"{where}: {got!r} != {expected!r}"
        assert len(got) == len(expected), f"{where}: {got!r} != {expected!r}"
        for k, (g, e) in enumerate(zip(got, expected)):
            _assert_same(g, e, f"{where}[{k}]")
    else:
        assert got == expected, f"{where}: {got!r} != eager's {expected!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_view_outputs_match_eager(name: str) -> None:
    fn, written, kind = CASES[name]
    jfn = jitcore.jit(fn)
    for seed in range(3):
        expected = _describe(fn, written, kind, seed)
        got = _describe(jfn, written, kind, seed)
        _assert_same(got, expected, f"call {seed}")
    assert jitcore.cache_misses(jfn) == 1


@pytest.mark.parametrize("name", [
    "base and view", "base and view, base written", "single view of an intermediate", "two views of one base",
    "view chain", "base written after the view", "base written between the view calls",
    "view written by the program", "view_as of an intermediate", "expand_as", "view beside a seed",
    "view beside autocast", "view beside inference mode", "view beside set_default_dtype",
    "broadcast_tensors", "meshgrid",  # (a TwoTensor view made under inference mode raises eagerly)
    "unsqueeze_ of a view", "t_ of a view", "as_strided_ of a view", "transpose_ in a chain",
    "t_ of the base after the view", "unsqueeze_ of a view, then its base written",
])
def test_two_tensor_views(name: str) -> None:
    fn, written, kind = CASES[name]
    jfn = jitcore.jit(fn)
    for seed in range(3):
        expected = _describe(fn, written, kind, seed, subclass=True)
        got = _describe(jfn, written, kind, seed, subclass=True)
        _assert_same(got, expected, f"call {seed}")
    assert jitcore.cache_misses(jfn) == 1


def _rows_view(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z, z.view(z.shape[0] * 2, -1)


def _first_half(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z, z[: x.shape[0] // 2]


def _narrowed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z, z.narrow(0, 1, x.shape[0] // 2)


def _view_as_a_sized_tensor(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    return z, z.view_as(x.t())  # the sizes of ``x.t()``, symbolic: Note [A view call with a second tensor]


@pytest.mark.parametrize("fn", [_rows_view, _first_half, _narrowed, _view_as_a_sized_tensor])
def test_two_tensor_views_of_symbolic_sizes(fn: Callable[..., Any]) -> None:
    """Note [View calls of symbolic sizes] (view_outputs.py): the entry of symbolic sizes (the second)
    makes each call's view with that call's sizes. Before, the view stayed the Function's output, a new
    TwoTensor: the caller's in-place op on it did not write the base (values and gradients wrong)."""
    jfn = jitcore.jit(fn)
    for rows in (4, 6, 10):  # (not 8, the column count: sizes equal there are another entry's)
        expected = _describe(fn, 1, "leaf", rows, subclass=True, rows=rows)
        got = _describe(jfn, 1, "leaf", rows, subclass=True, rows=rows)
        _assert_same(got, expected, f"{rows} rows")
    assert jitcore.cache_misses(jfn) == 2
    assert all(entry.computation.views is not None for entry in jfn.entries)


def _plain_view_of_a_written_base(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(y)
    v = z.view(-1)
    z.mul_(2)  # eagerly v's node is made again: AsStridedBackward0
    return z, v, x * 2  # x a TwoTensor: the sizes of the second entry are symbolic


def test_a_plain_view_of_a_written_base_of_symbolic_sizes() -> None:
    """Note [A view whose base is written] (view_outputs.py): a plain view whose pivot has no static
    layout (the entry of symbolic sizes) is not made by replaying its view calls. Before, it was (as a
    subclass view is): ``grad_fn`` read ``ViewBackward0`` where eager's reads ``AsStridedBackward0``."""
    jfn = jitcore.jit(_plain_view_of_a_written_base)
    for rows in (4, 6, 10):
        seen = []
        for fn in (_plain_view_of_a_written_base, jfn):
            g = torch.Generator().manual_seed(rows)
            y = torch.randn(rows, 8, generator=g, requires_grad=True)
            a, b = torch.randn(rows, 8, generator=g), torch.randn(rows, 8, generator=g)
            z, v, _w = fn(TwoTensor(a, b).requires_grad_(), y)
            info: list[Any] = [type(v.grad_fn).__name__, v._is_view(), v._base is z, tuple(v.shape)]
            v.mul_(3)
            (z.sum() + v.sum()).backward()
            info += [type(v.grad_fn).__name__, round(float(y.grad.sum()), 4)]
            seen.append(info)
        assert seen[1] == seen[0], f"{rows} rows"
    assert jitcore.cache_misses(jfn) == 2


def test_a_view_left_to_the_function_is_explained() -> None:
    """Note [A view left to the Function] (view_outputs.py): the entry runs pass 1 under torch's
    autograd, and ``jitcore.explain`` says why."""
    jfn = jitcore.jit(_meshgrid)
    jfn(torch.randn(4, 8, requires_grad=True))
    reason = jfn.entries[0].autograd_reason
    assert reason is not None and "output 1 of the function is a view" in reason
    assert f"pass 1 runs under torch's autograd, because {reason}" in explain_text(jfn)


def test_the_outputs_of_broadcast_tensors_are_made_after_the_function() -> None:
    """Note [The outputs of broadcast_tensors] (view_outputs.py): made by ``expand``, not by pass 1
    under torch's autograd."""
    jfn = jitcore.jit(_broadcast_tensors)
    jfn(torch.randn(4, 8, requires_grad=True))
    assert jfn.entries[0].autograd_reason is None
    assert getattr(jfn.entries[0].computation, "views", None) is not None


def test_views_under_no_grad_are_unchanged() -> None:
    jfn = jitcore.jit(_base_and_view)
    x = torch.randn(4, 8, requires_grad=True)
    with torch.no_grad():
        z, v = jfn(x)
        expected_z, expected_v = _base_and_view(x)
    assert v._base is z and expected_v._base is expected_z
    torch.testing.assert_close((z, v), (expected_z, expected_v))


def test_only_calls_with_a_view_output_leave_the_plain_apply() -> None:
    """Note [A call with nothing around the apply]: a call returning one tensor that is no view."""
    plain, viewed = jitcore.jit(lambda x: (x * 2).sin()), jitcore.jit(lambda x: (x * 2).view(-1))
    x = torch.randn(4, 8, requires_grad=True)
    plain(x), viewed(x)
    assert plain.entries[0].computation.only_output is not None
    assert viewed.entries[0].computation.only_output is None
    assert viewed.entries[0].computation.views is not None


def test_a_view_of_an_intermediate_beside_a_number() -> None:
    """The hidden base comes after the output's tensors and before its numbers (Note [Numbers a grad
    entry returns], grad.py: a subclass input keeps the read under the grad transform)."""
    def f(x):
        z = _twice(x)
        return z.view(-1), z.sum().item(), x.exp()

    jfn = jitcore.jit(f)
    for seed in range(3):
        results = []
        for fn in (f, jfn):
            leaf, x = _input("leaf", seed, subclass=True)
            v, n, e = fn(x)
            seen = [type(n), type(v), type(v.grad_fn).__name__, v._base.shape]
            v.mul_(3)
            (v.sum() + e.sum()).backward()
            results.append((seen, n, leaf.grad))
        assert results[1][0] == results[0][0]
        torch.testing.assert_close(results[1][1:], results[0][1:])
    computation = jfn.entries[0].computation
    assert computation.views is not None and computation.n_numbers == 1


def _split_output_of_a_written_base(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    a, _b = z.split(2)
    z.mul_(2)
    return z, a


def _unbind_output_of_a_written_base(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    a = z.unbind()[1]
    z.mul_(2)
    return z, a


def _no_grad_view_of_a_written_base(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    z = _twice(x)
    with torch.no_grad():
        v = z[1:]
    z.mul_(2)
    return z, v


_CREATION_META = torch._C._autograd._get_creation_meta


@pytest.mark.parametrize("fn", [
    _split_output_of_a_written_base, _unbind_output_of_a_written_base, _no_grad_view_of_a_written_base,
])
def test_views_autograd_does_not_make_again(fn: Callable[..., Any]) -> None:
    """A ``split``/``unbind`` output, or a view made under ``no_grad``, whose base the program writes
    after it: eagerly autograd refuses to make its node again (reading it raises), and an in-place op
    on it raises. Before, the jitted call itself raised while it was traced. Compared: values, the
    view's ``_base``, creation kind and layout, the in-place error, the error of reading its
    ``grad_fn`` and of a backward through it (before: ``AsStridedBackward0`` and a gradient), the
    gradient through the base."""
    jfn = jitcore.jit(fn)
    for seed in range(3):
        results = []
        for f in (fn, jfn):
            leaf, x = _input("leaf", seed)
            z, v = f(x)
            seen: list[Any] = [v.detach().clone(), v._is_view(), v._base is z, _CREATION_META(v),
                               v.shape, v.stride(), v.storage_offset()]
            with pytest.raises(RuntimeError) as error:
                v.mul_(3)
            seen.append(str(error.value).split(" is a view ", 1)[-1])  # eager names the view's op there
            with pytest.raises(RuntimeError) as error:  # Note [The version of a written base]
                _ = v.grad_fn
            seen.append(str(error.value).split(" is a view ", 1)[-1])
            with pytest.raises(RuntimeError) as error:
                torch.autograd.grad(v.sum(), leaf, retain_graph=True)
            seen.append(str(error.value).split(" is a view ", 1)[-1])
            z.sum().backward()
            seen.append(leaf.grad)
            results.append(seen)
        _assert_same(results[1], results[0], f"call {seed}")
    assert jitcore.cache_misses(jfn) == 1
