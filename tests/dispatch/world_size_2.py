"""Two processes on 127.0.0.1 (gloo), each running the same job on a world-size-2 DTensor mesh.

Invariant: the processes are always ended (killed after ``timeout`` seconds); a job's failures, and a
process that did not exit cleanly, reach the test as the list ``run_at_world_size_2`` returns.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

Job = Callable[[DeviceMesh, Callable[[str], None]], None]


def run_at_world_size_2(job: Job, timeout: float = 400) -> list[str]:
    """Run ``job(mesh, report)`` on ranks 0 and 1 (``job`` a module-level function: it is pickled into
    spawned processes); the failures they ``report`` (prefixed with the rank), and any rank's exit code
    other than 0."""
    context = mp.get_context("spawn")
    failures = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_rank, args=(rank, port, job, failures)) for rank in range(2)]
    for p in processes:
        p.start()
    try:
        for p in processes:
            p.join(timeout=timeout)
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join()
    found = []
    while not failures.empty():
        found.append(failures.get())
    return found + [f"rank {r} exited with {p.exitcode}" for r, p in enumerate(processes) if p.exitcode != 0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, job: Job, failures: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        job(init_device_mesh("cpu", (2,)), lambda failure: failures.put(f"rank {rank} {failure}"))
    finally:
        dist.destroy_process_group()
    # The checks are done and reported. On CPython 3.13 the interpreter's teardown of torch's C++ state
    # in a spawned gloo rank aborts now and then ("terminate called without an active exception", exit
    # code -6; seen on main before this session's changes too, with no Python thread left but the main
    # one), so the rank flushes its reports and leaves without that teardown.
    failures.close()
    failures.join_thread()
    os._exit(0)
