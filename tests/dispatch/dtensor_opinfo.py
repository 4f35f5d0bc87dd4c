"""The OpInfo differential check on DTensors (issue 15), as torch's test_dtensor_ops.py runs it: an op_db
entry's sample tensors become DTensors on a world-size-1 mesh (``Replicate()``, and ``Shard(0)`` for
tensors of one dimension or more), the entry's function runs eagerly and through ``jitcore.jit`` (twice,
the second call from the cache), and the two are compared: output types, placements, full tensors
(values, dtypes, shapes), the inputs after the call, and when eager raises, the type of its exception.

Invariant: a check returns an ``Outcome`` (tests/langctx/opinfo_harness.py); it never hides a failure.
A call run eagerly because its tracing raised (a jitcore warning) passes only where eager raises the
same exception: that is the documented rule for DTensor programs jitcore cannot trace (Note [DTensor
programs jitcore cannot trace], jitcore/dispatch/dtensor.py); anywhere else it is a failure.

At world size 2 (``run_at_world_size_2``: two spawned gloo ranks on 127.0.0.1, each running the same
checks) the placements are also ``Shard(1)`` and a mixed pair (``ALL_PLACEMENTS``), shards are uneven
where a sample's size is odd, each rank's local shapes are compared too, the second call gets fresh
values (floating inputs scaled), and ``check_backward`` compares the gradients of an output's sum.
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
    OPS,
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
from torch.distributed.tensor.placement_types import Placement  # noqa: E402

import jitcore  # noqa: E402

PLACEMENTS = ("replicate", "shard")
ALL_PLACEMENTS = (*PLACEMENTS, "shard1", "mixed")
# The entries checked at world size 2 (test_dtensor.py's spawned ranks): one or two per family, those
# that found bugs first (kron: a _StridedShard output, Note [A strided shard's order],
# jitcore/proxies/dtensor_unflatten.py), all placements, backward with Shard(0).
WORLD_SIZE_2 = ("kron", "add", "sum", "mm", "cat", "nn.functional.layer_norm")
FRESH = 0.75  # the second call's floating inputs: the first's scaled by it (signs and ranges kept)


def distributed(tree: Any, mesh: DeviceMesh, placement: str, *, scale: float = 1.0,
                grad: bool = False) -> Any:
    """``tree`` with a fresh DTensor for each tensor (one per distinct tensor, so aliasing is kept), its
    floating values scaled by ``scale``, placed by ``placement``: ``replicate``, ``shard`` (``Shard(0)``),
    ``shard1`` (``Shard(1)``; ``Shard(0)`` for one dimension), ``mixed`` (``Shard(0)`` and ``Replicate()``
    in turn); a tensor without dimensions is replicated. ``grad``: floating ones require grad."""
    memo: dict[int, DTensor] = {}

    def convert(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or isinstance(value, DTensor):
            return value
        if id(value) not in memo:
            local = value.detach().clone()
            if scale != 1.0 and local.is_floating_point():
                local = local * scale
            made = distribute_tensor(local, mesh, _placements(placement, local, len(memo)))
            wants = value.requires_grad or (grad and made.is_floating_point())
            memo[id(value)] = made.requires_grad_(True) if wants else made
        return memo[id(value)]

    return optree.tree_map(convert, tree, none_is_leaf=True)


def _placements(placement: str, local: torch.Tensor, index: int) -> list[Placement]:
    if placement == "replicate" or local.dim() == 0 or (placement == "mixed" and index % 2):
        return [Replicate()]
    return [Shard(1)] if placement == "shard1" and local.dim() >= 2 else [Shard(0)]


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
            if e.to_local().shape != a.to_local().shape:
                raise Mismatch(f"{what}[{i}]: local shape {list(e.to_local().shape)} != "
                               f"{list(a.to_local().shape)} on rank {e.device_mesh.get_rank()}")
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


def _prepared(op: Any, sample: Any) -> tuple[tuple, dict, bool, Any]:
    """``sample``'s arguments, whether ``op``'s values are compared, and a fresh jitted ``op``."""
    args, kwargs = sample_call(sample)
    return args, kwargs, not is_random(op) and values_comparable(op), jitcore.jit(op.op)


def check_sample(op: Any, sample: Any, mesh: DeviceMesh, placement: str) -> Outcome:
    """One sample of ``op`` on DTensors, eagerly and jitted (two calls, the second with fresh values).

    Raises:
        Mismatch: the first difference."""
    args, kwargs, values, jitted = _prepared(op, sample)
    for attempt, scale in ((1, 1.0), (2, FRESH)):
        e_args, e_kwargs = distributed((args, kwargs), mesh, placement, scale=scale)
        expected, eager_error, _ = _call(op.op, e_args, e_kwargs)
        j_args, j_kwargs = distributed((args, kwargs), mesh, placement, scale=scale)
        actual, error, warned = _call(jitted, j_args, j_kwargs)
        if eager_error is not None:
            if error is None:
                raise Mismatch(f"eager raised {type(eager_error).__name__}: {eager_error}; jit did not")
            if not isinstance(error, type(eager_error)):
                raise Mismatch(f"eager raised {type(eager_error).__name__}, jit {type(error).__name__}: "
                               f"{str(error)[:300]}")
            return PASS
        _check_traced(jitted, error, warned)
        compare(expected, actual, values=values, what=f"output (call {attempt})")
        compare((e_args, e_kwargs), (j_args, j_kwargs), values=values, what="inputs after the call")
    if jitcore.cache_hits(jitted) != 1:
        raise Mismatch(f"the second call did not hit the cache: {jitcore.miss_reasons(jitted)[-1]}")
    return PASS


def _check_traced(jitted: Any, error: Exception | None, warned: list[str]) -> None:
    if warned or jitted.fallback_reason is not None:
        raise Mismatch(f"ran eagerly: {(warned or [str(jitted.fallback_reason)])[0][:400]}")
    if error is not None:
        raise Mismatch(f"jit raised {type(error).__name__}: {str(error)[:400]}")


def check_backward(op: Any, sample: Any, mesh: DeviceMesh, placement: str) -> Outcome:
    """The gradients of the sum of ``op``'s floating DTensor outputs (their full tensors) with respect to
    its floating inputs, eagerly and through the jitted ``op`` (two calls, the second with fresh
    values): placements and full tensors. A sample whose eager forward or backward raises is skipped
    (``Outcome("skip")``): the forward check compares those errors.

    Raises:
        Mismatch: the first difference."""
    args, kwargs, values, jitted = _prepared(op, sample)
    for attempt, scale in ((1, 1.0), (2, FRESH)):
        e_inputs = distributed((args, kwargs), mesh, placement, scale=scale, grad=True)
        expected, eager_error, _ = _call(op.op, *e_inputs)
        loss = None if eager_error is not None else _summed(expected)
        if loss is None:
            return Outcome("skip", "no differentiable output")
        try:
            loss.backward()
        except RuntimeError as err:
            return Outcome("skip", f"eager backward raised {err}")
        j_inputs = distributed((args, kwargs), mesh, placement, scale=scale, grad=True)
        actual, error, warned = _call(jitted, *j_inputs)
        _check_traced(jitted, error, warned)
        summed = _summed(actual)
        if summed is None:
            raise Mismatch("the jitted output does not require grad")
        summed.backward()
        compare(_gradients(e_inputs), _gradients(j_inputs), values=values, what=f"gradients (call {attempt})")
    return PASS


def _summed(output: Any) -> torch.Tensor | None:
    leaves = [x for x in optree.tree_leaves(output, none_is_leaf=True)
              if isinstance(x, DTensor) and x.requires_grad and x.is_floating_point()]
    return sum((x.full_tensor().sum() for x in leaves), torch.zeros(())) if leaves else None


def _gradients(inputs: Any) -> list[Any]:
    return [x.grad for x in optree.tree_leaves(inputs, none_is_leaf=True)
            if isinstance(x, DTensor) and x.requires_grad]


def check_dtensor_entry(op: Any, mesh: DeviceMesh, count: int = 1, placements: tuple[str, ...] = PLACEMENTS,
                        backward: tuple[str, ...] = ()) -> Outcome:
    """The first ``count`` float32 samples of ``op``, each with every placement of ``placements``, and
    the backward check with each of ``backward`` for an entry that supports autograd: the first failure,
    as an Outcome (``fail``) naming the sample and placement."""
    for index, sample in enumerate(samples(op, torch.float32, slice(0, count))):
        checks = [(check_sample, p) for p in placements]
        checks += [(check_backward, p) for p in backward if op.supports_autograd]
        for check, placement in checks:
            try:
                check(op, sample, mesh, placement)
            except Mismatch as err:
                what = "backward, " if check is check_backward else ""
                return Outcome("fail", f"sample {index}, {what}{placement}: {err}")
    return PASS


def world_size_2_failures(mesh: DeviceMesh) -> list[str]:
    """``WORLD_SIZE_2``'s entries with ``ALL_PLACEMENTS`` and the backward check: each failure."""
    outcomes = {name: check_dtensor_entry(OPS[name], mesh, placements=ALL_PLACEMENTS, backward=("shard",))
                for name in WORLD_SIZE_2}
    return [f"{name}: {o.detail}" for name, o in outcomes.items() if o.status != "pass"]
