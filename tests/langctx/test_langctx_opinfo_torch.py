"""The torch level against eager, over the whole OpInfo database.

For every entry: float32, an integer and a low-precision dtype (where supported), up to
``SAMPLES_PER_DTYPE`` samples each, and the function, method and in-place variants, traced natively
on proxies, compiled and run on clones of the sample tensors (see ``opinfo_harness``). Entries that
do not pass are listed, with the reason, in ``opinfo_known_failures.TORCH``; a listed entry must
still fail, so the list cannot rot, and the list stays under 10% of the database.
"""

from __future__ import annotations

import pytest
from opinfo_harness import OPS, check_torch_entry
from opinfo_known_failures import DATA_DEPENDENT, TORCH, check_listed

PASS_RATE = 0.90
# Samples exercise edge cases (degrees of freedom <= 0, deprecated resizes) that torch warns about.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_known_failures_are_under_ten_percent() -> None:
    assert set(TORCH) <= set(OPS), sorted(set(TORCH) - set(OPS))
    assert (len(OPS) - len(TORCH)) / len(OPS) >= PASS_RATE, f"{len(TORCH)} of {len(OPS)} entries fail"


@pytest.mark.parametrize("name", sorted(OPS))
def test_torch_level_matches_eager(name: str) -> None:
    outcome = check_torch_entry(OPS[name])
    check_listed(name, outcome, TORCH.get(name))


def test_data_dependent_entries_are_listed_as_such() -> None:
    for name, reason in TORCH.items():
        assert (reason == DATA_DEPENDENT) == reason.startswith("data-dependent"), name
