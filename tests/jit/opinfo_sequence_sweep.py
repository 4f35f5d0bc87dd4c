"""The sequence sweep over every op_db entry (a tool, not a test; tests/jit/test_jit_opinfo_sequences.py
runs a fixed subset in the CI): each variant of each entry jitted once and called on its samples of
several dtypes, their non-contiguous copies and its error inputs, twice over, every call compared with
eager (tests/jit/jit_opinfo_sequences.py). One JSON record per entry: ``pass`` (with the cache misses
per variant), ``fail`` (the first disagreement: variant, round, sample) or ``crash``.

Invariant: every entry asked for gets exactly one record; nothing is counted as a pass that was not
compared (an entry without samples is a failure).

Usage (at most 2 workers on the shared 2-core machine)::

    python tests/jit/opinfo_sequence_sweep.py run --workers 2 --out /tmp/seq.jsonl [--grad] [--only add,mul]
    python tests/jit/opinfo_sequence_sweep.py run --executors inductor,torch --most 2 --out /tmp/ind.jsonl
    python tests/jit/opinfo_sequence_sweep.py report /tmp/seq.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jit_opinfo_sequences import (  # noqa: E402
    GRAD_SEQUENCE_DTYPES,
    check_grad_sequence,
    check_sequence,
    sequence,
)
from opinfo_harness import OPS, Mismatch  # noqa: E402

Task = tuple[str, bool, int, str]


def one_entry(task: Task) -> dict[str, Any]:
    """The record of one entry: forward (or forward + gradients with ``grad``) over its sequence."""
    name, grad, most, executors = task
    op, started = OPS[name], time.monotonic()
    options = {"executors": tuple(executors.split(","))} if executors else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if grad and not op.supports_autograd:
                record: dict[str, Any] = {"status": "not-differentiable"}
            elif grad:
                calls = sequence(op, GRAD_SEQUENCE_DTYPES, most, requires_grad=True)
                record = {"status": "pass", "compared": check_grad_sequence(op, calls, **options)}
            else:
                record = {"status": "pass", "misses": check_sequence(op, sequence(op, most=most), **options)}
        except Mismatch as err:
            record = {"status": "fail", "detail": str(err)[:600]}
        except Exception as err:  # noqa: BLE001 - a crash of the check is reported, not hidden
            record = {"status": "crash", "detail": f"{type(err).__name__}: {err}"[:600]}
    seconds = round(time.monotonic() - started, 1)
    record.update(entry=name, kind="grad" if grad else "forward", seconds=seconds)
    return record


def run(args: argparse.Namespace) -> None:
    names = args.only.split(",") if args.only else sorted(OPS)[args.start:args.stop]
    todo = [(name, args.grad, args.most, args.executors) for name in names]
    with open(args.out, "a") as out, multiprocessing.get_context("spawn").Pool(
        args.workers, maxtasksperchild=20
    ) as pool:
        for record in pool.imap_unordered(one_entry, todo):
            out.write(json.dumps(record) + "\n")
            out.flush()
            if record["status"] not in ("pass", "not-differentiable"):
                print(f"{record['entry']}: {record['status']}: {record.get('detail', '')[:300]}", flush=True)


def report(path: str) -> None:
    records = [json.loads(line) for line in open(path)]
    for kind in ("forward", "grad"):
        mine = [r for r in records if r.get("kind", "forward") == kind]
        if not mine:
            continue
        counts = collections.Counter(r["status"] for r in mine)
        print(f"== {kind}: {len(mine)} entries: {', '.join(f'{s} {c}' for s, c in sorted(counts.items()))}, "
              f"{sum(r['seconds'] for r in mine):.0f} s")
        for r in sorted(mine, key=lambda r: r["entry"]):
            if r["status"] in ("fail", "crash"):
                print(f"  {r['entry']}: {r['status']}: {r['detail'][:300]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--out", required=True)
    r.add_argument("--only", default="", help="entries, comma-separated (default: all, sorted)")
    r.add_argument("--start", type=int, default=0, help="first entry of the sorted list")
    r.add_argument("--stop", type=int, default=None)
    r.add_argument("--grad", action="store_true", help="forward + torch.autograd.grad instead of forward")
    r.add_argument("--most", type=int, default=3, help="samples per dtype")
    r.add_argument("--executors", default="", help="e.g. inductor,torch (default: jitcore's)")
    p = sub.add_parser("report")
    p.add_argument("path")
    args = parser.parse_args()
    run(args) if args.command == "run" else report(args.path)


if __name__ == "__main__":
    main()
