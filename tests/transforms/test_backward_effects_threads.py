"""Two threads deriving backwards at once each record their own hooks' writes (backward_effects.py,
backward_reads.py). Before, ``Counter.__missing__`` was swapped and put back by each recording, so two
overlapping ones left the first one's stand-in installed for good, and the numbers one recording pinned
(a compared counter, which refuses its replay) were in one list per process that the other cleared."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

import pytest

from jitcore.errors import EagerOnlyValue
from jitcore.transforms.backward_effects import BackwardWatch


def _overlapping(first: Callable[[threading.Barrier], None], second: Callable[[], None]) -> list:
    """Runs ``first`` on one thread, which waits twice at the barrier while ``second`` runs on another;
    returns what each raised (None where nothing)."""
    barrier, raised = threading.Barrier(2), [None, None]

    def run(i: int, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised[i] = exc

    def later() -> None:
        barrier.wait()
        try:
            second()
        finally:
            barrier.wait()

    threads = [threading.Thread(target=run, args=(0, lambda: first(barrier))),
               threading.Thread(target=run, args=(1, later))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return raised


def test_overlapping_recordings_put_counters_default_back() -> None:
    """The first recording ends while the second still records: before, the second then put back the
    first one's stand-in, installed for good."""
    own = vars(collections.Counter)["__missing__"]
    a, b = collections.Counter(), collections.Counter()
    entered, ended = threading.Event(), threading.Event()

    def first(barrier: threading.Barrier) -> None:
        with BackwardWatch([a]).recording():
            a["x"] += 1
            barrier.wait()
            entered.wait(30)
        ended.set()
        barrier.wait()

    def second() -> None:
        with BackwardWatch([b]).recording():
            entered.set()
            ended.wait(30)
            b["y"] += 1
            assert type(b["z"]).__name__ == "_Int"  # still handed out as a read of its key

    assert _overlapping(first, second) == [None, None]
    assert vars(collections.Counter)["__missing__"] is own
    other = collections.Counter()
    assert other["z"] == 0 and type(other["z"]) is int


def test_a_number_one_recording_compares_is_refused_while_another_records() -> None:
    state, other = {"n": 1}, {"m": 1}

    def first(barrier: threading.Barrier) -> None:
        with BackwardWatch([state]).recording():
            n = state["n"]
            if n % 2:  # compared: no formula holds the write below
                n = n + 1
            barrier.wait()
            barrier.wait()
            state["n"] = n

    def second() -> None:
        with BackwardWatch([other]).recording():
            other["m"] += 1

    raised = _overlapping(first, second)
    assert raised[1] is None
    assert isinstance(raised[0], EagerOnlyValue) and "compares" in str(raised[0])
    assert state == {"n": 1}  # put back as the recording found it


@pytest.mark.parametrize("kind", ["set", "deque"])
def test_a_set_or_deque_written_by_a_recording_is_put_back_and_replayed(kind: str) -> None:
    target = set() if kind == "set" else collections.deque(maxlen=2)
    watch = BackwardWatch([target])
    with watch.recording():
        (target.add if kind == "set" else target.append)("a")
    assert len(target) == 0
    watch.effects.replay()
    watch.effects.replay()
    assert list(target) == (["a"] if kind == "set" else ["a", "a"])
