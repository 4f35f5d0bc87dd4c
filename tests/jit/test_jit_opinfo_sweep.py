"""The wide OpInfo sweep tool (tests/jit/opinfo_sweep.py) records one outcome per check, failures with
their cause, and counts what its time budget left out as not run."""

from __future__ import annotations

import json

import opinfo_sweep
import pytest
from opinfo_sweep import _task, classify, report, tasks


def test_every_variant_of_every_sample_gets_a_record() -> None:
    records = _task(("add", "float64", "forward", 120.0, 2))
    assert {(r["sample"], r["variant"]) for r in records} >= {(0, "function"), (0, "method"), (1, "inplace")}
    assert all(r["status"] == "pass" and r["entry"] == "add" and r["dtype"] == "float64" for r in records)
    assert "seconds" in records[0]


def test_a_failure_is_recorded_with_its_cause() -> None:
    """ctc_loss's backward runs under torch's own autograd (test_grad_known_failures.py), and a
    sparse CSR input runs eagerly: each check says so."""
    records = _task(("nn.functional.ctc_loss", "float32", "backward", 120.0, 2))
    assert [(r["sample"], r["variant"], r["status"]) for r in records] == [(0, "grad", "grad-fail"),
                                                                          (1, "grad", "grad-fail")], records
    assert "no backward trace" in records[0]["detail"]
    records = _task(("sparse.sampled_addmm", "float32", "forward", 120.0, 1))
    assert {(r["variant"], r["status"]) for r in records} == {("function", "eager"), ("out=", "eager")}
    assert "sparse_csr" in records[0]["detail"]


def test_samples_past_the_budget_are_counted_not_run() -> None:
    records = _task(("add", "float32", "forward", 0.0, None))
    assert len(records) == 1 and records[0]["status"] == "not-run" and records[0]["count"] > 10, records


def test_backward_records_and_the_report(tmp_path, capsys) -> None:
    records = _task(("linalg.svd", "complex64", "backward", 120.0, 1))
    assert [(r["variant"], r["status"]) for r in records] == [("grad", "pass")], records
    path = tmp_path / "sweep.jsonl"
    records += _task(("nn.functional.ctc_loss", "float32", "backward", 120.0, 1))
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    report(str(path))
    printed = capsys.readouterr().out
    assert "== backward: 2 checks: grad-fail 1, pass 1" in printed
    assert "grad-fail: AssertionError: no backward trace" in printed
    assert "nn.functional.ctc_loss/float32" in printed


def test_causes_and_tasks() -> None:
    assert classify("function: output (call 1)[0]: values differ: not close") == "wrong-value"
    assert classify("inplace: inputs after call[0]: values differ: ...") == "wrong-mutation"
    assert classify("function: eager raised ValueError: bad; jit did not") == "no-error"
    assert classify("function: jit raised TypeError: oops") == "crash"
    todo = tasks(["add", "logical_not"], grad=True, forward=True, budget=1.0, most=3)
    assert ("add", "complex64", "backward", 1.0, 3) in todo
    assert ("logical_not", "bool", "forward", 1.0, 3) in todo
    assert {d for _, d, _, _, _ in todo} <= {str(t)[6:] for t in opinfo_sweep.FORWARD_DTYPES}


def test_task_slices_cover_the_shuffled_list_once_and_the_report_says_which() -> None:
    """``--start``/``--stop`` run a slice of the (always equally) shuffled task list: slices that meet
    cover every task exactly once, each task's first record names its index, and ``report`` tells the
    covered indices (a run stopped before its end can be resumed where it stopped)."""
    todo = tasks(["add", "mul", "logical_not"], grad=True, forward=True, budget=1.0, most=1)
    parts = [opinfo_sweep.selected(todo, 0, 4), opinfo_sweep.selected(todo, 4, 9),
             opinfo_sweep.selected(todo, 9, None)]
    assert [i for part in parts for i, _ in part] == list(range(len(todo)))
    assert [t for part in parts for _, t in part] == todo
    assert opinfo_sweep.selected(todo, len(todo) + 5, None) == []
    with pytest.raises(ValueError, match="bad task slice"):
        opinfo_sweep.selected(todo, 5, 3)
    records = opinfo_sweep._indexed_task((7, 30, ("add", "float64", "forward", 120.0, 1)))
    assert records[0]["task"] == 7 and records[0]["of"] == 30 and "seconds" in records[0]
    assert all("task" not in r for r in records[1:]) and len(records) > 1
    more = [{**records[0], "task": i} for i in (8, 9, 12)]
    assert opinfo_sweep.coverage(records + more) == "4 tasks, 4 indexed of 30: 7-9, 12-12"
    unindexed = {k: v for k, v in records[0].items() if k not in ("task", "of")}
    assert opinfo_sweep.coverage([unindexed]) == "1 tasks"
