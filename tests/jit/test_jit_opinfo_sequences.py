"""OpInfo entries through ONE jitted function per variant, called on a sequence of samples
(tests/jit/jit_opinfo_sequences.py): several dtypes interleaved, their non-contiguous copies and the
entry's error inputs, twice over, each call compared with eager (values, dtypes, shapes, a view's
strides, output types, inputs after the call, aliasing, exception types). Forward, forward +
``torch.autograd.grad``, and the inductor executor on a smaller subset.

The CI runs the fixed subsets below (chosen for variety: Python scalars and keyword values that
change between calls, reductions over changing dims, views, indexing, in-place and error inputs;
71 tests: 65 s in one process, 47 s of CPU, on 2026-12-05's shared machine with inductor's disk
cache warm; a cold cache adds about 15 s); every op_db entry is run by the sweep tool
``tests/jit/opinfo_sequence_sweep.py``. Entries that do not pass are listed with their reason in
``SEQUENCE_KNOWN_FAILURES``, and a listed entry must still fail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jit_opinfo_sequences import GRAD_SEQUENCE_DTYPES, check_grad_sequence, check_sequence, sequence
from opinfo_harness import OPS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FORWARD = (
    "add", "sub", "mul", "div.floor_rounding", "clamp", "pow", "where", "lerp", "addcmul",
    "sum", "mean", "amax", "var", "cumsum", "softmax", "topk", "sort",
    "transpose", "narrow", "index_select", "gather", "scatter_add", "masked_fill", "index_put",
    "reshape", "expand", "flip", "roll", "cat", "stack", "nn.functional.pad.constant", "full", "arange",
    "to", "matmul", "nn.functional.linear", "nn.functional.leaky_relu", "isclose", "nonzero",
    "linalg.vector_norm", "max.reduction_with_dim", "nn.functional.embedding", "diagonal", "chunk",
    "index_add", "logsumexp", "fmod", "div.trunc_rounding", "kthvalue", "linspace",
    "nn.functional.layer_norm", "nn.functional.cross_entropy", "new_full", "bincount", "bucketize",
)
GRAD = ("add", "mul", "div.no_rounding_mode", "sum", "amax", "softmax", "index_select", "gather",
        "matmul", "narrow", "where", "pow",
        "index_fill", "istft")  # both crashed once on a first call: unwrap_if_dead(None)
INDUCTOR = ("add", "sum", "softmax")

# Entries of the subsets above that do not pass, with the reason (none at present).
SEQUENCE_KNOWN_FAILURES: dict[str, str] = {}


def _check(outcome: Exception | None, name: str) -> None:
    reason = SEQUENCE_KNOWN_FAILURES.get(name)
    if reason is None and outcome is not None:
        raise outcome
    if reason is not None:
        assert outcome is not None, f"{name} passes now: remove it from SEQUENCE_KNOWN_FAILURES"


def test_the_subsets_name_entries_of_op_db() -> None:
    assert set(FORWARD + GRAD + INDUCTOR + tuple(SEQUENCE_KNOWN_FAILURES)) <= set(OPS)


@pytest.mark.parametrize("name", FORWARD)
def test_one_jitted_function_over_a_sequence_of_samples(name: str) -> None:
    op = OPS[name]
    try:
        check_sequence(op, sequence(op, most=3))
    except AssertionError as err:
        return _check(err, name)
    _check(None, name)


@pytest.mark.parametrize("name", GRAD)
def test_one_jitted_function_over_a_sequence_of_samples_with_grad(name: str) -> None:
    op = OPS[name]
    try:
        assert check_grad_sequence(op, sequence(op, GRAD_SEQUENCE_DTYPES, most=2, requires_grad=True)) > 0
    except AssertionError as err:
        return _check(err, name)
    _check(None, name)


@pytest.mark.parametrize("name", INDUCTOR)
def test_one_jitted_function_over_a_sequence_of_samples_through_inductor(name: str) -> None:
    """Fewer samples: each new shape is a compile of a second or two on CPU (docs/executors.md). The
    executor fuses regions of one op too (the default leaves a lone op to the torch executor)."""
    import torch

    from jitcore.executors import InductorExecutor

    op = OPS[name]
    calls = sequence(op, (torch.float32,), most=3)
    fusing = InductorExecutor("inductor_sequences", min_region=1)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executors"))
    from executor_helpers import executor_log

    with executor_log() as log:
        try:
            check_sequence(op, calls[:4], rounds=2, executors=(fusing, "torch"))
        except AssertionError as err:
            return _check(err, name)
    _check(None, name)
    assert any("fused by inductor_sequences" in m for m in log), log[:3]


def test_the_sweep_tool_records_a_pass_and_a_failure() -> None:
    """tests/jit/opinfo_sequence_sweep.py: one record per entry; an entry without samples on the CPU
    is a failure, never a pass."""
    from opinfo_sequence_sweep import one_entry

    record = one_entry(("abs", False, 1, ""))
    assert record["status"] == "pass" and record["entry"] == "abs" and set(record["misses"]) >= {"function"}
    record = one_entry(("nn.functional.batch_norm.without_cudnn", False, 1, ""))
    assert record["status"] == "fail" and "no samples" in record["detail"], record
