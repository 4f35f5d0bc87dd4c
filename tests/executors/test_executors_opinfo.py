"""OpInfo entries through the inductor executor (executors_opinfo.py): a fixed sample of op_db, every
sixth entry by name, forward, one sample each, fused regions of single ops included, compared with
eager. Entries that do not pass are listed with their reason in
``executors_opinfo_known_failures.INDUCTOR``; a listed entry must still fail.

Why a sample: docs/executors.md, "Cost of the OpInfo sweep" (each entry is a C++ compile; the whole
database would not fit the CI's time on 2 cores). ``JITCORE_INDUCTOR_SWEEP=all`` selects every entry,
``=N`` every N-th."""

from __future__ import annotations

import os

import pytest
from executors_opinfo import check_inductor_entry
from executors_opinfo_known_failures import INDUCTOR
from opinfo_harness import OPS

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_EVERY = os.environ.get("JITCORE_INDUCTOR_SWEEP", "6")
STEP = 1 if _EVERY == "all" else int(_EVERY)
SAMPLE = sorted(OPS)[::STEP]


def test_known_failures_are_entries_of_the_sample() -> None:
    assert set(INDUCTOR) <= set(sorted(OPS)[::6]), sorted(set(INDUCTOR) - set(sorted(OPS)[::6]))


@pytest.mark.parametrize("name", SAMPLE)
def test_op_through_inductor_matches_eager(name: str) -> None:
    outcome, _fused = check_inductor_entry(OPS[name])
    reason = INDUCTOR.get(name)
    if reason is None:
        assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.detail}"
    else:
        assert outcome.status != "pass", f"{name} passes now: remove it from executors_opinfo_known_failures"


@pytest.mark.parametrize("name", ["add", "softmax", "sum", "where", "nn.functional.gelu"])
def test_common_ops_are_fused(name: str) -> None:
    outcome, fused = check_inductor_entry(OPS[name])
    assert outcome.status == "pass" and fused, (outcome, fused)
