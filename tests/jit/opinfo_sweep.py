"""The wide OpInfo sweep through jitcore.jit: every op_db entry, every sample, more dtypes, forward and
forward + backward, tabulated by cause (a tool, not a test; tests/jit/test_jit_opinfo.py is the test).

Forward: each sample of each dtype in ``FORWARD_DTYPES`` the entry supports on CPU, every variant
(function, method, in-place, out=), through ``jit_opinfo.check_jit_sample`` (two calls, the second from
the cache, compared with eager). Backward: each sample of each dtype in ``GRAD_DTYPES`` the entry
differentiates on CPU, through ``test_grad_opinfo_harness.check_sample`` (values and
``torch.autograd.grad`` against eager).

Invariant: every (entry, dtype, sample, variant) that was generated gets exactly one record, and a
record that is not ``pass`` says why; samples not run because the entry's time budget ran out are
counted as ``not-run``, never as passes. The task list is shuffled with ``Random(0)``, so it is the same
on every run: ``--start``/``--stop`` run the slice ``[start, stop)`` of it, and runs of disjoint slices
together cover the whole list once. Each task's first record carries its index (``task``) and the list's
length (``of``), so ``report`` says which tasks a file covers.

Usage (at most 2 workers on the shared 2-core machine)::

    python tests/jit/opinfo_sweep.py run --workers 2 --out /tmp/sweep.jsonl [--grad] [--only add,mul]
    python tests/jit/opinfo_sweep.py run --workers 2 --grad --start 1798 --out /tmp/rest.jsonl
    python tests/jit/opinfo_sweep.py report /tmp/sweep.jsonl
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import multiprocessing
import random
import re
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transforms"))

from jit_opinfo import check_jit_sample  # noqa: E402
from opinfo_harness import OPS, Mismatch, entry_name, seed, variants, with_out  # noqa: E402

from jitcore.jit.api import JittedFunction  # noqa: E402
from jitcore.jit.outputs import escaped  # noqa: E402

FORWARD_DTYPES = (
    torch.float32, torch.float64, torch.complex64, torch.int64, torch.bool, torch.bfloat16,
)
GRAD_DTYPES = (torch.float32, torch.float64, torch.complex64)


# The reason the last jitted call that ran eagerly gave (an eager entry), reset per check.
_SEEN: dict[str, Any] = {"eager": None}


@contextlib.contextmanager
def _watching_jitted_calls() -> Iterator[None]:
    """Every jitted call records into ``_SEEN`` whether it ran eagerly, and fails when a proxy escapes
    (as the suite's conftest checks)."""
    call = JittedFunction.__call__

    def checked(self: JittedFunction, /, *args: Any, **kwargs: Any) -> Any:
        result = call(self, *args, **kwargs)
        if self.fallback_reason is not None:
            _SEEN["eager"] = self.fallback_reason
        leaked = escaped((result, args, kwargs, self.fn))
        if leaked is not None:
            raise Mismatch(f"a traced value escaped: {leaked!r}")
        return result

    JittedFunction.__call__ = checked  # type: ignore[method-assign]
    try:
        yield
    finally:
        JittedFunction.__call__ = call  # type: ignore[method-assign]


def classify(detail: str) -> str:
    """The cause class of a failed check's message (see check_jit_sample's Mismatch texts)."""
    if "inputs after call" in detail:
        return "wrong-mutation"
    if "values differ" in detail or re.search(r"output \(call \d\)\[\d+\]: .* != ", detail):
        return "wrong-value"
    if "structure" in detail or "type " in detail or "dtype" in detail:
        return "wrong-metadata"
    if "is input" in detail and "eagerly but not" in detail:
        return "wrong-aliasing"
    if "did not hit the cache" in detail:
        return "cache-miss"
    if "escaped" in detail:
        return "escape"
    if "; jit did not" in detail:
        return "no-error"
    if "eager raised" in detail:
        return "other-error"
    return "crash"


def _all_samples(op: Any, dtype: torch.dtype, requires_grad: bool) -> Iterator[Any]:
    seed(0)
    return iter(op.sample_inputs_func(op, "cpu", dtype, requires_grad))


def _forward(op: Any, dtype: torch.dtype, budget: float, most: int | None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    start = time.monotonic()
    try:
        batch = list(itertools.islice(_all_samples(op, dtype, False), most))
    except Exception as err:  # noqa: BLE001 - torch's sample generator
        return [{"status": "no-samples", "detail": f"{type(err).__name__}: {err}"[:300]}]
    for i, sample in enumerate(batch):
        if time.monotonic() - start > budget:
            records.append({"sample": i, "status": "not-run", "count": len(batch) - i})
            break
        calls = [(kind, fn, sample) for kind, fn in variants(op)]
        out_sample = with_out(op, sample)
        if out_sample is not None:
            calls.append(("out=", op.op, out_sample))
        for kind, fn, sample_ in calls:
            _SEEN["eager"] = None
            try:
                outcome = check_jit_sample(op, fn, sample_)
                status, detail = ("eager", repr(_SEEN["eager"])[:300]) if _SEEN["eager"] else (
                    outcome.status, outcome.detail)
            except Mismatch as err:
                status, detail = classify(str(err)), str(err)[:400]
            except Exception as err:  # noqa: BLE001 - a check that crashes is reported
                status, detail = "harness-crash", f"{type(err).__name__}: {err}"[:400]
            records.append({"sample": i, "variant": kind, "status": status, "detail": detail})
    return records


def _backward(op: Any, dtype: torch.dtype, budget: float, most: int | None) -> list[dict[str, Any]]:
    from opinfo_harness import random_by_name
    from test_grad_opinfo_harness import ALSO_RANDOM, check_sample

    drawn = random_by_name(entry_name(op)) or entry_name(op).startswith(ALSO_RANDOM)
    records: list[dict[str, Any]] = []
    start = time.monotonic()
    try:
        batch = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=True), most))
    except Exception as err:  # noqa: BLE001
        return [{"status": "no-samples", "detail": f"{type(err).__name__}: {err}"[:300]}]
    for i, sample in enumerate(batch):
        if time.monotonic() - start > budget:
            records.append({"sample": i, "status": "not-run", "count": len(batch) - i})
            break
        _SEEN["eager"] = None
        try:
            compared = check_sample(op, sample, drawn)
            status, detail = ("pass" if compared else "nothing-compared"), ""
            if _SEEN["eager"]:
                status, detail = "eager", repr(_SEEN["eager"])[:300]
        except Exception as err:  # noqa: BLE001
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            status = "grad-wrong-value" if "Tensor-likes are not close" in first else "grad-fail"
            detail = f"{type(err).__name__}: {first}"[:400]
            if _SEEN["eager"]:  # e.g. no backward trace: the call ran eagerly, and this is why
                status, detail = "eager", repr(_SEEN["eager"])[:300]
        records.append({"sample": i, "variant": "grad", "status": status, "detail": detail})
    return records


Task = tuple[str, str, str, float, int | None]


def _task(args: Task) -> list[dict[str, Any]]:
    """One (entry, dtype, kind) of the sweep: its records, the first carrying the seconds it took."""
    name, dtype_name, kind, budget, most = args
    op, dtype = OPS[name], getattr(torch, dtype_name)
    with warnings.catch_warnings(), _watching_jitted_calls():
        warnings.simplefilter("ignore")
        started = time.monotonic()
        records = (_forward if kind == "forward" else _backward)(op, dtype, budget, most)
    for record in records:
        record.update(entry=name, dtype=dtype_name, kind=kind)
    if records:
        records[0]["seconds"] = round(time.monotonic() - started, 2)
    return records


def tasks(
    names: list[str],
    grad: bool,
    forward: bool,
    budget: float,
    most: int | None = None,
    forward_dtypes: tuple[torch.dtype, ...] = FORWARD_DTYPES,
    grad_dtypes: tuple[torch.dtype, ...] = GRAD_DTYPES,
) -> list[tuple[str, str, str, float, int | None]]:
    """One task per entry, kind and dtype the entry supports on CPU (its first ``most`` samples, or all)."""
    todo = []
    for name in names:
        op = OPS[name]
        if forward:
            supported = op.supported_dtypes("cpu")
            todo += [(name, str(d).removeprefix("torch."), "forward", budget, most)
                     for d in forward_dtypes if d in supported]
        if grad and op.supports_autograd:
            supported = op.supported_backward_dtypes("cpu")
            todo += [(name, str(d).removeprefix("torch."), "backward", budget, most)
                     for d in grad_dtypes if d in supported]
    return todo


def selected(todo: list[Task], start: int, stop: int | None) -> list[tuple[int, Task]]:
    """The slice ``[start, stop)`` of the shuffled task list, each task with its index in the whole list
    (so that disjoint slices, run separately, cover every task exactly once)."""
    if start < 0 or (stop is not None and stop < start):
        raise ValueError(f"bad task slice [{start}, {stop})")
    return list(enumerate(todo))[start:stop]


def _indexed_task(args: tuple[int, int, Task]) -> list[dict[str, Any]]:
    """``_task``, its first record carrying the task's index and the whole list's length."""
    index, total, task = args
    records = _task(task)
    if records:
        records[0].update(task=index, of=total)
    return records


def _dtypes(text: str, default: tuple[torch.dtype, ...]) -> tuple[torch.dtype, ...]:
    return tuple(getattr(torch, d) for d in text.split(",")) if text else default


def run(args: argparse.Namespace) -> None:
    names = sorted(OPS) if not args.only else args.only.split(",")
    todo = tasks(
        names, args.grad or args.grad_only, not args.grad_only, args.budget, args.most,
        _dtypes(args.dtypes, FORWARD_DTYPES), _dtypes(args.grad_dtypes, GRAD_DTYPES),
    )
    random.Random(0).shuffle(todo)  # a partial run is a sample of the whole
    chosen = [(i, len(todo), task) for i, task in selected(todo, args.start, args.stop)]
    print(f"tasks [{args.start}, {args.start + len(chosen)}) of {len(todo)}", flush=True)
    done = 0
    with open(args.out, "a") as out, multiprocessing.get_context("spawn").Pool(
        args.workers, maxtasksperchild=50
    ) as pool:
        for records in pool.imap_unordered(_indexed_task, chosen):
            for record in records:
                out.write(json.dumps(record) + "\n")
            out.flush()
            done += 1
            if done % 50 == 0:
                print(f"{done}/{len(chosen)} tasks", flush=True)


def _cause(detail: str) -> str:
    """A failure message with its numbers and tensors' sizes blanked, to group alike failures."""
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", detail)
    return re.sub(r"\[[N, ]*\]", "[..]", text)[:160]


def coverage(records: list[dict[str, Any]]) -> str:
    """Which tasks of the shuffled list the records cover: their count, and the list's length, for
    records written with ``--start``/``--stop`` (those with a ``task`` index)."""
    indexed = [r for r in records if "task" in r]
    firsts = sum(1 for r in records if "seconds" in r)
    if not indexed:
        return f"{firsts} tasks"
    done = sorted({r["task"] for r in indexed})
    runs, begin = [], done[0]
    for prev, cur in itertools.pairwise(done):
        if cur != prev + 1:
            runs.append(f"{begin}-{prev}")
            begin = cur
    runs.append(f"{begin}-{done[-1]}")
    return f"{firsts} tasks, {len(done)} indexed of {indexed[0]['of']}: {', '.join(runs)}"


def report(path: str) -> None:
    records = [json.loads(line) for line in open(path)]
    print(f"== covers {coverage(records)}")
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    causes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    entries: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for r in records:
        n = r.get("count", 1)
        counts[(r["kind"], r["status"])] += n
        if r["status"] not in ("pass", "not-run", "data-dependent", "nothing-compared"):
            key = f"{r['status']}: {_cause(r.get('detail', ''))}"
            causes[r["kind"]][key] += n
            entries[(r["kind"], key)].add(f"{r['entry']}/{r['dtype']}")
    for kind in ("forward", "backward"):
        row = {s: c for (k, s), c in counts.items() if k == kind}
        if not row:
            continue
        tally = ", ".join(f"{s} {c}" for s, c in sorted(row.items()))
        print(f"== {kind}: {sum(row.values())} checks: {tally}")
        bad = {r["entry"] for r in records if r["kind"] == kind and r["status"] not in
               ("pass", "not-run", "data-dependent", "nothing-compared")}
        print(f"   entries with a failure: {len(bad)}")
        for key, c in causes[kind].most_common():
            shown = sorted(entries[(kind, key)])
            print(f"{c:6d}  {key}\n        {len(shown)} entry/dtype: {', '.join(itertools.islice(shown, 8))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--out", required=True)
    r.add_argument("--only", default="")
    r.add_argument("--grad", action="store_true", help="also forward + backward")
    r.add_argument("--grad-only", action="store_true")
    r.add_argument("--budget", type=float, default=30.0, help="seconds per entry and dtype")
    r.add_argument("--dtypes", default="", help="forward dtypes: float16,complex128 (default FORWARD_DTYPES)")
    r.add_argument("--most", type=int, default=None, help="samples per entry and dtype (default: all)")
    r.add_argument("--grad-dtypes", default="", help="backward dtypes (default: GRAD_DTYPES)")
    r.add_argument("--start", type=int, default=0, help="first task of the shuffled list to run")
    r.add_argument("--stop", type=int, default=None, help="task to stop before (default: the end)")
    p = sub.add_parser("report")
    p.add_argument("path")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    else:
        report(args.path)


if __name__ == "__main__":
    main()
