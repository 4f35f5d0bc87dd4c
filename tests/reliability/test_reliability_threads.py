"""One jitted function called from many threads at once gives each thread eager's answer.

Threads differ in input shape and in grad mode (which torch keeps per thread: the prologue reads it in
the calling thread), start together on a barrier so that first calls trace concurrently, and keep
calling while other threads add cache entries.
"""

from __future__ import annotations

import threading

import torch
from reliability_helpers import outcome, same_outcome

import jitcore

THREADS = 8
CALLS = 30


def f(x, n):
    y = (x * n).sin() + x.sum()
    return y if y.dim() == 1 else y.T


def _worker(jf, index: int, barrier: threading.Barrier, failures: list) -> None:
    no_grad = index % 2 == 1
    shape = (index % 4 + 1,) if index < 4 else (2, index % 3 + 1)
    try:
        barrier.wait()
        for call in range(CALLS):
            x = torch.linspace(-1, 1, torch.Size(shape).numel()).reshape(shape)
            x.requires_grad_(call % 3 == 0)
            n = (call % 2) + 1
            with torch.set_grad_enabled(not no_grad):
                same_outcome(outcome(jf, x, n), outcome(f, x, n), f"thread {index} call {call}")
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        failures.append(exc)


def test_many_threads_one_function() -> None:
    jf = jitcore.jit(f)
    barrier = threading.Barrier(THREADS)
    failures: list = []
    threads = [threading.Thread(target=_worker, args=(jf, i, barrier, failures)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not failures, failures[0]
    # Every distinct call was traced at most once (a miss re-checks the cache under the lock).
    assert len(jf.entries) == jitcore.cache_misses(jf) <= 8 * 2 * 2 * 2


def test_grad_mode_is_read_in_the_calling_thread() -> None:
    jf = jitcore.jit(lambda x: x * 2)
    x = torch.ones(3, requires_grad=True)
    assert jf(x).requires_grad
    results = {}

    def in_thread() -> None:
        with torch.no_grad():
            results["no_grad"] = jf(x).requires_grad
        results["grad"] = jf(x).requires_grad

    with torch.no_grad():  # the main thread's mode must not leak into the other thread's answer
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
    assert results == {"no_grad": False, "grad": True}
