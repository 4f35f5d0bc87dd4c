"""The OpInfo differential check on DTensors (issue 15), as torch's test_dtensor_ops.py runs it: an op_db
entry's sample tensors become DTensors on a world-size-1 mesh (``Replicate()``, and ``Shard(0)`` for
tensors of one dimension or more), the entry's function runs eagerly and through ``jitcore.jit`` (twice,
the second call from the cache), and the two are compared: output types, placements, full tensors
(values, dtypes, shapes), the inputs after the call, and when eager raises, the type of its exception.

Invariant: a check returns an ``Outcome`` (tests/langctx/opinfo_harness.py); it never hides a failure.
A call run eagerly because its tracing raised (a jitcore warning) passes only where eager raises the
same exception: that is the documented rule for DTensor programs jitcore cannot trace (Note [DTensor
programs jitcore cannot trace], jitcore/dispatch/dtensor.py); anywhere else it is a failure.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))

import optree  # noqa: E402
import torch  # noqa: E402
from opinfo_harness import (  # noqa: E402
    PASS,
    Mismatch,
    Outcome,
    is_random,
    sample_call,
    samples,
    seed,
    values_comparable,
)
from opinfo_harness import compare as compare_plain  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor  # noqa: E402

import jitcore  # noqa: E402

PLACEMENTS = ("replicate", "shard")


def distributed(tree: Any, mesh: DeviceMesh, placement: str) -> Any:
    """``tree`` with a fresh DTensor for each tensor (one per distinct tensor, so aliasing is kept):
    ``Replicate()``, or ``Shard(0)`` where ``placement`` is ``"shard"`` and the tensor has a dimension."""
    memo: dict[int, DTensor] = {}

    def convert(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or isinstance(value, DTensor):
            return value
        if id(value) not in memo:
            local = value.detach().clone()
            shard = placement == "shard" and local.dim() >= 1
            made = distribute_tensor(local, mesh, [Shard(0)] if shard else [Replicate()])
            memo[id(value)] = made.requires_grad_(True) if value.requires_grad else made
        return memo[id(value)]

    return optree.tree_map(convert, tree, none_is_leaf=True)


def compare(expected: Any, actual: Any, *, values: bool, what: str) -> None:
    """``opinfo_harness.compare`` after each DTensor leaf is checked against the other side's (a DTensor too,
    with the same placements and mesh) and replaced by its full tensor."""
    e_leaves = optree.tree_leaves(expected, none_is_leaf=True)
    a_leaves = optree.tree_leaves(actual, none_is_leaf=True)
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        if isinstance(e, DTensor) or isinstance(a, DTensor):
            if type(e) is not type(a):
                raise Mismatch(f"{what}[{i}]: type {type(e).__name__} != {type(a).__name__}")
            if e.placements != a.placements or e.device_mesh != a.device_mesh:
                raise Mismatch(f"{what}[{i}]: placements {e.placements} != {a.placements}")
    compare_plain(_full_tensors(expected), _full_tensors(actual), values=values, what=what)


def _full_tensors(tree: Any) -> Any:
    def full(value: Any) -> Any:
        return value.full_tensor() if isinstance(value, DTensor) else value

    return optree.tree_map(full, tree, none_is_leaf=True)


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[Any, Exception | None, list[str]]:
    """``fn(*args, **kwargs)`` seeded: its result or exception, and the jitcore warnings it gave."""
    seed(1234)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return fn(*args, **kwargs), None, _jitcore_warnings(caught)
        except Exception as err:  # noqa: BLE001 - compared with the other side's
            return None, err, _jitcore_warnings(caught)


def _jitcore_warnings(caught: list[Any]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("jitcore")]


def check_sample(op: Any, sample: Any, mesh: DeviceMesh, placement: str) -> Outcome:
    """One sample of ``op`` on DTensors, eagerly and jitted (two calls).

    Raises:
        Mismatch: the first difference."""
    args, kwargs = sample_call(sample)
    values = not is_random(op) and values_comparable(op)
    e_args, e_kwargs = distributed((args, kwargs), mesh, placement)
    expected, eager_error, _ = _call(op.op, e_args, e_kwargs)
    jitted = jitcore.jit(op.op)
    for attempt in (1, 2):
        j_args, j_kwargs = distributed((args, kwargs), mesh, placement)
        actual, error, warned = _call(jitted, j_args, j_kwargs)
        if eager_error is not None:
            if error is None:
                raise Mismatch(f"eager raised {type(eager_error).__name__}: {eager_error}; jit did not")
            if not isinstance(error, type(eager_error)):
                raise Mismatch(f"eager raised {type(eager_error).__name__}, jit {type(error).__name__}: "
                               f"{str(error)[:300]}")
            return PASS
        if warned or jitted.fallback_reason is not None:
            raise Mismatch(f"ran eagerly: {(warned or [str(jitted.fallback_reason)])[0][:400]}")
        if error is not None:
            raise Mismatch(f"jit raised {type(error).__name__}: {str(error)[:400]}")
        compare(expected, actual, values=values, what=f"output (call {attempt})")
        compare((e_args, e_kwargs), (j_args, j_kwargs), values=values, what="inputs after the call")
    if jitcore.cache_hits(jitted) != 1:
        raise Mismatch(f"the second call did not hit the cache: {jitcore.miss_reasons(jitted)[-1]}")
    return PASS


def check_dtensor_entry(op: Any, mesh: DeviceMesh, count: int = 1) -> Outcome:
    """The first ``count`` float32 samples of ``op``, each with every placement of ``PLACEMENTS``: the
    first failure, as an Outcome (``fail``) naming the sample and placement."""
    for index, sample in enumerate(samples(op, torch.float32, slice(0, count))):
        for placement in PLACEMENTS:
            try:
                check_sample(op, sample, mesh, placement)
            except Mismatch as err:
                return Outcome("fail", f"sample {index}, {placement}: {err}")
    return PASS
