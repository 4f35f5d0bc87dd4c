"""The OpInfo differential check through the inductor executor: each op_db entry's function form on
its first float32 sample (or its first dtype's), jitted with ``executors=(SWEEP, "torch")`` where
SWEEP fuses regions of one op too, called twice (the second from the cache) and compared with
eager by tests/jit/jit_opinfo.py's check. Also reports whether the op was fused at all.

Why one sample of one dtype: every distinct (op, dtype, shape) is a C++ compile of 1-2 s on CPU
(docs/executors.md, "Cost of the OpInfo sweep"); the full jit sweep's 3 dtypes x 3 samples x 4
variants would be hours on the CI's 2 cores."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jit"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transforms"))

import torch  # noqa: E402
from executor_helpers import executor_log  # noqa: E402
from jit_opinfo import check_jit_sample  # noqa: E402
from opinfo_harness import PASS, Mismatch, Outcome, seed  # noqa: E402
from test_grad_opinfo_harness import ALSO_RANDOM, check_sample, entry_name, random_by_name  # noqa: E402

from jitcore.executors import InductorExecutor  # noqa: E402

SWEEP = InductorExecutor("inductor_sweep", min_region=1)

__all__ = ["SWEEP", "check_inductor_entry", "check_inductor_grad_entry", "first_sample"]


def first_sample(op: Any) -> tuple[torch.dtype, Any] | None:
    """float32 where the op supports it on CPU, else its first supported dtype; its first sample."""
    supported = op.supported_dtypes("cpu")
    if not supported:
        return None
    dtype = torch.float32 if torch.float32 in supported else min(supported, key=str)
    seed(0)
    sample = next(iter(itertools.islice(op.sample_inputs_func(op, "cpu", dtype, False), 1)), None)
    return None if sample is None else (dtype, sample)


def check_inductor_entry(op: Any, **jit_options: Any) -> tuple[Outcome, bool]:
    """(outcome, fused): the differential outcome and whether a region was lowered by inductor;
    ``jit_options`` go to ``jitcore.jit`` too (``dynamic=True``: every size symbolic)."""
    chosen = first_sample(op)
    if chosen is None:
        return Outcome("fail", "no sample"), False
    dtype, sample = chosen
    with executor_log() as log:
        try:
            outcome = check_jit_sample(op, op.op, sample, executors=(SWEEP, "torch"), **jit_options)
        except Mismatch as err:
            return Outcome("fail", f"{dtype}: {err}"), False
        except Exception as err:  # noqa: BLE001 - a crash is a failure, reported
            return Outcome("fail", f"{dtype}: {type(err).__name__}: {str(err)[:300]}"), False
    lowered = any("fused by inductor_sweep" in m for m in log)
    return outcome if outcome.status != "pass" else PASS, lowered


def check_inductor_grad_entry(op: Any) -> tuple[Outcome, bool]:
    """(outcome, fused) of forward values and gradients on the first float32 sample that eager
    accepts, through the inductor executor (tests/transforms/test_grad_opinfo_harness.py's check):
    the grad transform's forward and backward traces are each lowered."""
    random = random_by_name(entry_name(op)) or entry_name(op).startswith(ALSO_RANDOM)
    try:
        samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=True), 2))
    except Exception as err:  # noqa: BLE001 - the sample generator itself is torch's business
        return Outcome("fail", f"no samples: {type(err).__name__}: {err}"), False
    with executor_log() as log:
        for sample in samples:
            try:
                if check_sample(op, sample, random, executors=(SWEEP, "torch")):
                    return PASS, any("fused by inductor_sweep" in m for m in log)
            except Exception as err:  # noqa: BLE001 - a mismatch or crash is a failure, reported
                return Outcome("fail", f"{type(err).__name__}: {str(err)[:300]}"), False
    return Outcome("fail", "no sample was compared"), False
