"""Forward + backward through jitcore against eager, over every differentiable OpInfo entry.

For each entry (``op.supports_autograd``, float32 on CPU): up to two samples, each run eagerly and
jitted; outputs and ``torch.autograd.grad`` of the floating outputs (same random grad_outputs) must
match, and the jitted call must have recorded a backward trace (see test_grad_opinfo_harness.py).
Entries that do not pass are listed with their reason in test_grad_known_failures.py; a listed entry
must still fail, and the list stays under 15% of the differentiable entries. The entries differentiable
in complex64 run their first samples in it too, failures listed in ``COMPLEX_KNOWN_FAILURES``.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from test_grad_known_failures import COMPLEX_KNOWN_FAILURES, KNOWN_FAILURES
from test_grad_opinfo_harness import COMPLEX_GRAD_OPS, GRAD_OPS, check_entry

PASS_RATE = 0.85


def test_known_failures_are_under_fifteen_percent() -> None:
    assert set(KNOWN_FAILURES) <= set(GRAD_OPS), sorted(set(KNOWN_FAILURES) - set(GRAD_OPS))
    passing = len(GRAD_OPS) - len(KNOWN_FAILURES)
    assert passing / len(GRAD_OPS) >= PASS_RATE, f"{len(KNOWN_FAILURES)} of {len(GRAD_OPS)} entries fail"
    unknown = set(COMPLEX_KNOWN_FAILURES) - set(COMPLEX_GRAD_OPS)
    assert not unknown, sorted(unknown)
    passing = len(COMPLEX_GRAD_OPS) - len(COMPLEX_KNOWN_FAILURES)
    assert passing / len(COMPLEX_GRAD_OPS) >= PASS_RATE, f"{len(COMPLEX_KNOWN_FAILURES)} complex entries fail"


@pytest.mark.parametrize("name", sorted(GRAD_OPS))
def test_forward_and_backward_match_eager(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation warnings of the ops themselves
        outcome = check_entry(GRAD_OPS[name])
    reason = KNOWN_FAILURES.get(name)
    if reason is None:
        assert outcome.status == "pass", outcome.detail
    else:
        assert outcome.status == "fail", f"{name} passes now: remove it from KNOWN_FAILURES ({reason})"


@pytest.mark.parametrize("name", sorted(COMPLEX_GRAD_OPS))
def test_forward_and_backward_match_eager_in_complex64(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = check_entry(COMPLEX_GRAD_OPS[name], torch.complex64)
    reason = COMPLEX_KNOWN_FAILURES.get(name)
    if reason is None:
        assert outcome.status == "pass", outcome.detail
    else:
        assert outcome.status == "fail", f"{name} passes now: remove it from COMPLEX_KNOWN_FAILURES"


def test_an_entry_with_no_sample_compared_fails() -> None:
    """Eager raising for every sample leaves nothing compared: that is a failure, not a pass."""
    from test_grad_opinfo_harness import check_entry
    from torch.testing._internal.opinfo.core import SampleInput

    class RejectedEverywhere:
        name, variant_test_name = "rejected_everywhere", ""

        @staticmethod
        def op(x):
            raise RuntimeError("eager rejects every sample")

        def sample_inputs(self, device, dtype, requires_grad):
            yield SampleInput(torch.rand(3, requires_grad=requires_grad))

    outcome = check_entry(RejectedEverywhere())
    assert outcome.status == "fail" and "no sample was compared" in outcome.detail, outcome
