"""OpInfo entries through the inductor executor (executors_opinfo.py): a fixed sample of op_db (every
12th entry by name; forward, one sample each, fused regions of single ops included) and of its
differentiable entries (every 24th; values and gradients, forward and backward traces lowered),
compared with eager. Entries that do not pass are listed with their reason in
executors_opinfo_known_failures.py; a listed entry must still fail.

Why a sample: docs/executors.md, "Cost of the OpInfo sweep" (each entry is a C++ compile; the whole
database would not fit the CI's time on 2 cores). ``JITCORE_INDUCTOR_SWEEP=1`` selects every entry,
``=N`` every N-th (forward; every 2N-th for gradients when N > 1)."""

from __future__ import annotations

import os

import pytest
from executors_opinfo import check_inductor_entry, check_inductor_grad_entry
from executors_opinfo_known_failures import INDUCTOR, INDUCTOR_GRAD, INDUCTOR_SYMBOLIC
from opinfo_harness import OPS, Outcome
from test_grad_opinfo_harness import GRAD_OPS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

STEP = int(os.environ.get("JITCORE_INDUCTOR_SWEEP", "12"))
SAMPLE = sorted(OPS)[::STEP]
GRAD_SAMPLE = sorted(GRAD_OPS)[:: 2 * STEP if STEP > 1 else 1]


def _check_against_known(name: str, outcome: Outcome, known: dict[str, str]) -> None:
    if name not in known:
        assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.detail}"
    else:
        assert outcome.status != "pass", f"{name} passes now: remove it from executors_opinfo_known_failures"


def test_known_failures_are_entries() -> None:
    assert set(INDUCTOR) <= set(OPS) and set(INDUCTOR_GRAD) <= set(GRAD_OPS)
    assert set(INDUCTOR_SYMBOLIC) <= set(OPS)


@pytest.mark.parametrize("name", SAMPLE)
def test_op_through_inductor_matches_eager(name: str) -> None:
    _check_against_known(name, check_inductor_entry(OPS[name])[0], INDUCTOR)


@pytest.mark.parametrize("name", GRAD_SAMPLE)
def test_op_gradients_through_inductor_match_eager(name: str) -> None:
    _check_against_known(name, check_inductor_grad_entry(GRAD_OPS[name])[0], INDUCTOR_GRAD)


@pytest.mark.parametrize("name", sorted(OPS)[5::2 * STEP])
def test_op_with_symbolic_sizes_through_inductor_matches_eager(name: str) -> None:
    """``dynamic=True``: every size symbolic from the first call (regions compiled symbolically,
    or the entry traced static where the symbolic path cannot hold it)."""
    _check_against_known(name, check_inductor_entry(OPS[name], dynamic=True)[0], INDUCTOR_SYMBOLIC)


@pytest.mark.parametrize("name", ["add", "softmax", "sum", "where", "nn.functional.gelu"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_common_ops_are_fused(name: str, dynamic: bool) -> None:
    outcome, fused = check_inductor_entry(OPS[name], dynamic=dynamic)
    assert outcome.status == "pass" and fused, (outcome, fused)


@pytest.mark.parametrize("name", ["mul", "nn.functional.gelu"])
def test_common_ops_fuse_forward_and_backward(name: str) -> None:
    outcome, fused = check_inductor_grad_entry(GRAD_OPS[name])
    assert outcome.status == "pass" and fused, (outcome, fused)
