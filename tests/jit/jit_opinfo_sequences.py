"""OpInfo entries through ONE jitted function called on many samples in sequence, as users call it.

tests/jit/jit_opinfo.py jits each sample separately and calls it twice on that sample; real programs
call one jitted function with inputs of many shapes, dtypes, strides and keyword values. Here each
variant of an entry (function, method, in-place) is jitted once, as ``lambda *a, **k: op(*a, **k)``,
and called on every chosen sample of several dtypes, interleaved, then on all of them again (so cache
hits, guarded misses and symbolic-shape entries mix), plus non-contiguous copies of the samples and
the entry's error inputs. Each call is compared with eager on clones of the same sample: values,
dtypes, shapes, strides of outputs that are views of an input (the only strides eager promises),
output types, inputs after the call, aliasing, and exceptions (a sample eager rejects must raise
eager's exception type). ``check_grad_sequence`` does the same for ``torch.autograd.grad`` of the
outputs wrt the float inputs (the backward of each cached call).

Invariant: every call is compared; the first disagreement is raised as ``Mismatch`` naming the
variant, the call's index and its sample, and nothing is skipped silently (an entry without samples
is a failure too).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))

import optree  # noqa: E402
import torch  # noqa: E402
from opinfo_harness import (  # noqa: E402
    Mismatch,
    clone_tree,
    compare,
    compare_call,
    is_random,
    sample_call,
    seed,
    tensors_of,
    values_comparable,
    variants,
)

import jitcore  # noqa: E402

SEQUENCE_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64, torch.bfloat16)
GRAD_SEQUENCE_DTYPES = (torch.float32, torch.float64, torch.complex64)


@dataclass
class Call:
    """One call of the sequence: the sample, a label saying where it came from, and (for an error
    input) the exception type OpInfo says eager raises."""

    label: str
    sample: Any
    error_type: type[BaseException] | None = None


def _unique(tensors: list[Any]) -> list[Any]:
    seen: set[int] = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]


def _samples(op: Any, dtype: torch.dtype, most: int | None, requires_grad: bool) -> list[Any]:
    seed(0)
    return list(itertools.islice(op.sample_inputs_func(op, "cpu", dtype, requires_grad), most))


def _interleaved(groups: list[list[Call]]) -> list[Call]:
    return [c for batch in itertools.zip_longest(*groups) for c in batch if c is not None]


def sequence(
    op: Any,
    dtypes: tuple[torch.dtype, ...] = SEQUENCE_DTYPES,
    most: int | None = 6,
    requires_grad: bool = False,
) -> list[Call]:
    """The calls of one sequence: the first ``most`` samples of each supported dtype, interleaved by
    dtype, then non-contiguous copies of them, then the entry's error inputs (forward only)."""
    supported = op.supported_backward_dtypes("cpu") if requires_grad else op.supported_dtypes("cpu")
    groups = []
    for dtype in (d for d in dtypes if d in supported):
        name = str(dtype).removeprefix("torch.")
        batch = _samples(op, dtype, most, requires_grad)
        groups.append([Call(f"{name}#{i}", s) for i, s in enumerate(batch)])
    calls = _interleaved(groups)
    strided = []
    for call in calls:
        try:
            strided.append(Call(f"{call.label}/noncontiguous", call.sample.noncontiguous()))
        except Exception:  # noqa: BLE001, S112 - a sample OpInfo cannot make non-contiguous
            continue
    calls += strided
    if not requires_grad and op.error_inputs_func is not None:
        try:
            errors = list(itertools.islice(op.error_inputs(torch.device("cpu")), most))
        except Exception:  # noqa: BLE001 - torch's generator
            errors = []
        calls += [Call(f"error#{i}", e.sample_input, e.error_type) for i, e in enumerate(errors)]
    return calls


def _eager(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    seed(1234)
    try:
        return fn(*args, **kwargs), None
    except Exception as err:  # noqa: BLE001 - the jitted call must raise the same
        return None, err


def _compare_view_strides(expected: Any, e_inputs: list[Any], actual: Any, what: str) -> None:
    """An output that is a view of an input eagerly has eager's strides and storage offset: those are
    the view's meaning (the values through it are compared elsewhere)."""
    bases = {t.untyped_storage().data_ptr() for t in e_inputs if t.numel() and t.layout == torch.strided}
    for i, (e, a) in enumerate(zip(optree.tree_leaves(expected, none_is_leaf=True),
                                   optree.tree_leaves(actual, none_is_leaf=True))):
        if not (isinstance(e, torch.Tensor) and isinstance(a, torch.Tensor)) or e.numel() <= 1:
            continue
        if e.layout != torch.strided or a.layout != torch.strided:
            continue
        if e.untyped_storage().data_ptr() in bases:
            if (e.stride(), e.storage_offset()) != (a.stride(), a.storage_offset()):
                raise Mismatch(f"{what}[{i}]: a view with strides {e.stride()}+{e.storage_offset()} "
                               f"eagerly, {a.stride()}+{a.storage_offset()} jitted")


def check_call(op: Any, fn: Callable[..., Any], jfn: Callable[..., Any], call: Call) -> None:
    """One call of ``jfn`` against ``fn`` eagerly, on clones of ``call``'s sample."""
    args, kwargs = sample_call(call.sample)
    e_args, e_kwargs = clone_tree((args, kwargs))
    e_inputs = _unique(tensors_of((e_args, e_kwargs)))
    expected, eager_error = _eager(fn, e_args, e_kwargs)
    j_args, j_kwargs = clone_tree((args, kwargs))
    j_inputs = _unique(tensors_of((j_args, j_kwargs)))
    seed(1234)
    try:
        actual = jfn(*j_args, **j_kwargs)
    except Exception as err:  # noqa: BLE001
        if eager_error is not None and isinstance(err, type(eager_error)):
            return
        detail = f"eager raised {type(eager_error).__name__}, " if eager_error is not None else ""
        raise Mismatch(f"{detail}jit raised {type(err).__name__}: {str(err)[:300]}") from None
    if eager_error is not None:
        raise Mismatch(f"eager raised {type(eager_error).__name__}: {str(eager_error)[:200]}; jit did not")
    compare_call(op, expected, actual, e_inputs, j_inputs)
    _compare_view_strides(expected, e_inputs, actual, "output")


def _forwarding(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *a, **k: fn(*a, **k)


def check_sequence(op: Any, calls: list[Call], rounds: int = 2, **jit_options: Any) -> dict[str, int]:
    """Each variant of ``op`` jitted once and called on ``calls`` ``rounds`` times over.

    Returns:
        Per variant, the number of cache misses the sequence made.
    Raises:
        Mismatch: at the first call that disagrees with eager, naming the variant, round and sample.
    """
    if not calls:
        raise Mismatch("no samples")
    misses = {}
    for kind, fn in variants(op):
        jfn = jitcore.jit(_forwarding(fn), **jit_options)
        for r, call in itertools.product(range(rounds), calls):
            try:
                check_call(op, fn, jfn, call)
            except Mismatch as err:
                raise Mismatch(f"{kind}, round {r}, {call.label}: {err}") from None
        misses[kind] = jitcore.cache_misses(jfn)
    return misses


# --- backward -------------------------------------------------------------------------------------------
def _grad_inputs(tree: Any) -> list[torch.Tensor]:
    return [t for t in _unique(tensors_of(tree)) if t.requires_grad]


def _differentiable(out: Any) -> list[torch.Tensor]:
    return [t for t in optree.tree_leaves(out, none_is_leaf=True)
            if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())]


def _grad_run(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, tuple]:
    seed(1234)
    out = fn(*args, **kwargs)
    outs, inputs = _differentiable(out), _grad_inputs((args, kwargs))
    if not outs or not inputs:
        return out, ()
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    return out, torch.autograd.grad(outs, inputs, weights, allow_unused=True)


def _grads_equal(expected: tuple, actual: tuple, random: bool) -> None:
    if len(expected) != len(actual):
        raise Mismatch(f"grad: {len(expected)} gradients eagerly, {len(actual)} jitted")
    for i, (e, a) in enumerate(zip(expected, actual)):
        if (e is None) != (a is None):
            raise Mismatch(f"grad[{i}]: {e is None and 'None' or 'a tensor'} eagerly, {a!r:.60} jitted")
        if e is not None:
            if e.shape != a.shape or e.dtype != a.dtype:
                raise Mismatch(f"grad[{i}]: {e.dtype}{list(e.shape)} != {a.dtype}{list(a.shape)}")
            if not random:
                try:
                    torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4, equal_nan=True)
                except AssertionError as err:
                    raise Mismatch(f"grad[{i}]: values differ: {str(err).splitlines()[0]}") from None


def check_grad_call(op: Any, jfn: Callable[..., Any], call: Call) -> bool:
    """Forward values and gradients of one call against eager; False when eager rejects the sample or
    nothing is differentiable (nothing to compare)."""
    args, kwargs = sample_call(call.sample)
    try:
        expected, e_grads = _grad_run(op.op, *clone_tree((args, kwargs)))
    except Exception:  # noqa: BLE001 - a sample eager rejects says nothing about the backward
        return False
    if not e_grads:
        return False
    try:
        actual, a_grads = _grad_run(jfn, *clone_tree((args, kwargs)))
    except Exception as err:  # noqa: BLE001
        raise Mismatch(f"jit raised {type(err).__name__}: {str(err)[:300]}") from None
    random = is_random(op) or not values_comparable(op)
    try:
        compare(expected, actual, values=not random, what="output")
    except Mismatch:
        if not random:
            raise
    _grads_equal(e_grads, a_grads, random)
    return True


def check_grad_sequence(op: Any, calls: list[Call], rounds: int = 2, **jit_options: Any) -> int:
    """``op.op`` jitted once; forward and gradients of every call, ``rounds`` times over.

    Returns:
        The number of calls compared (those eager accepts that have something to differentiate).
    """
    jfn = jitcore.jit(_forwarding(op.op), **jit_options)
    compared = 0
    for r, call in itertools.product(range(rounds), calls):
        try:
            compared += check_grad_call(op, jfn, call)
        except Mismatch as err:
            raise Mismatch(f"grad, round {r}, {call.label}: {err}") from None
    return compared


def describe(call: Call) -> str:
    """A sample in words, for a failure's reproduction."""
    def leaf(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}:{str(x.dtype)[6:]}{'' if x.is_contiguous() else ':nc'}{x.stride()}"
        return repr(x)[:40]
    args, kwargs = sample_call(call.sample)
    return str(optree.tree_map(leaf, (args, kwargs), none_is_leaf=True))


def iter_entries(names: list[str]) -> Iterator[tuple[str, Any]]:
    from opinfo_harness import OPS
    for name in names:
        yield name, OPS[name]
