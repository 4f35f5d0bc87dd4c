"""PyTorch's nested-jagged OpInfo entries (``njt_op_db``, ``supports_njt``) through jitcore.jit, forward
and backward, against eager (issue 15; the harness is tests/dispatch/njt_opinfo.py). Each entry's first
sample, jitted and called twice (the second call on a fresh sample of the same ragged structure, from
the cache). Entries that do not pass are listed with their reason in ``njt_opinfo_known_failures``; a
listed entry must still fail.

Note [The NJT OpInfo selection the CI runs]
Forward, every entry (about 25 s single-process); backward, one autograd entry in four and every
listed one (about 15 s): all of them take about 45 s more than the CI has. ``JITCORE_NJT_OPINFO=all``
checks every entry's gradients; ``check_entry(op, count=None)`` checks every sample of an entry."""

from __future__ import annotations

import os

import pytest
from njt_opinfo import OPS, check_entry
from njt_opinfo_known_failures import BACKWARD, FORWARD

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SAMPLES = 1
_AUTOGRAD = sorted(name for name, op in OPS.items() if op.supports_autograd)
_EVERY = os.environ.get("JITCORE_NJT_OPINFO") == "all"
_GRAD_SELECTION = _AUTOGRAD if _EVERY else sorted(set(_AUTOGRAD[::4]) | set(BACKWARD))


def test_the_known_failures_name_entries() -> None:
    assert len(OPS) == 251, len(OPS)  # torch 2.13's supports_njt entries
    assert set(FORWARD) <= set(OPS), sorted(set(FORWARD) - set(OPS))
    assert set(BACKWARD) <= set(_AUTOGRAD), sorted(set(BACKWARD) - set(_AUTOGRAD))


def _check(name: str, known: dict[str, str], backward: bool) -> None:
    outcome = check_entry(OPS[name], backward=backward, count=SAMPLES)
    if name in known:
        assert outcome.status != "pass", f"{name} passes now: remove it from njt_opinfo_known_failures"
    else:
        assert outcome.status == "pass", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_an_njt_op_matches_eager(name: str) -> None:
    _check(name, FORWARD, backward=False)


@pytest.mark.parametrize("name", _GRAD_SELECTION)
def test_an_njt_ops_gradients_match_eager(name: str) -> None:
    _check(name, BACKWARD, backward=True)
