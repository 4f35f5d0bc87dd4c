"""The OpInfo differential check rerun through ``jitcore.jit``: the function, method and in-place
forms of every op_db entry are jitted and called (twice: the second call must hit the cache), on
clones of the same sample tensors as eager, and compared (values, dtypes, types, mutated inputs,
aliasing). Reuses the sample selection and comparison of tests/langctx/opinfo_harness.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))

import torch  # noqa: E402
from opinfo_harness import (  # noqa: E402
    DEVICE,
    PASS,
    SAMPLES_PER_DTYPE,
    Mismatch,
    Outcome,
    Selection,
    check_entry,
    clone_tree,
    compare_call,
    first_samples,
    sample_call,
    seed,
    tensors_of,
    variants,
    with_out,
)

import jitcore  # noqa: E402
from jitcore.errors import DataDependentError  # noqa: E402


def _unique(tensors: list[Any]) -> list[Any]:
    seen: set[int] = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]


def check_jit_sample(op: Any, fn: Callable[..., Any], sample: Any, **jit_options: Any) -> Outcome:
    args, kwargs = sample_call(sample)
    e_args, e_kwargs = clone_tree((args, kwargs))
    e_inputs = _unique(tensors_of((e_args, e_kwargs)))
    seed(1234)
    try:
        expected, eager_error = fn(*e_args, **e_kwargs), None
    except Exception as err:  # noqa: BLE001 - the jitted call must raise the same
        expected, eager_error = None, err
    jfn = jitcore.jit(fn, **jit_options)  # e.g. executors= (tests/executors/executors_opinfo.py)
    for attempt in range(2):  # the second call runs from the cache
        j_args, j_kwargs = clone_tree((args, kwargs))
        j_inputs = _unique(tensors_of((j_args, j_kwargs)))
        seed(1234)
        try:
            actual = jfn(*j_args, **j_kwargs)
        except DataDependentError as err:
            if eager_error is None:
                return Outcome("data-dependent", str(err).splitlines()[0])
            raise Mismatch(
                f"eager raised {type(eager_error).__name__}, jit raised DataDependentError"
            ) from None
        except Exception as err:  # noqa: BLE001
            if eager_error is not None and isinstance(err, type(eager_error)):
                return PASS
            detail = f"eager raised {type(eager_error).__name__}, " if eager_error is not None else ""
            raise Mismatch(f"{detail}jit raised {type(err).__name__}: {str(err)[:300]}") from None
        if eager_error is not None:
            raise Mismatch(f"eager raised {type(eager_error).__name__}: {eager_error}; jit did not")
        compare_call(op, expected, actual, e_inputs, j_inputs, what=f"output (call {attempt + 1})")
    if jitcore.cache_hits(jfn) != 1:
        raise Mismatch(f"the second call did not hit the cache: {jitcore.miss_reasons(jfn)[-1]}")
    return PASS


# The wider selection (tests/jit/test_jit_opinfo.py's second test): float32's samples after the first
# SAMPLES_PER_DTYPE up to MORE_FLOAT32_SAMPLES, and the first samples of dtypes the first selection
# does not take. Sized to the CI's time (docs/user-guide.md, "Operator coverage"); tests/jit/opinfo_sweep.py
# runs every sample of more dtypes.
MORE_FLOAT32_SAMPLES = 8
MORE_DTYPES = (torch.float64, torch.complex64, torch.bool)


def more_samples(op: Any) -> list[tuple[torch.dtype, slice]]:
    """The samples ``first_samples`` leaves out that the CI still runs, per dtype."""
    supported, first = op.supported_dtypes(DEVICE), {dtype for dtype, _ in first_samples(op)}
    chosen = []
    if torch.float32 in first:
        chosen.append((torch.float32, slice(SAMPLES_PER_DTYPE, MORE_FLOAT32_SAMPLES)))
    others = [dtype for dtype in MORE_DTYPES if dtype in supported and dtype not in first]
    return chosen + [(dtype, slice(0, SAMPLES_PER_DTYPE)) for dtype in others]


def check_jit_entry(op: Any, selection: Selection = first_samples) -> Outcome:
    """Every variant (function, method, in-place, out=) of one entry through jitcore.jit, on the samples
    ``selection`` chooses."""

    def check(op: Any, sample: Any) -> Outcome:
        result = PASS
        calls = [(kind, fn, sample) for kind, fn in variants(op)]
        out_sample = with_out(op, sample)
        if out_sample is not None:
            calls.append(("out=", op.op, out_sample))
        for kind, fn, sample_ in calls:
            try:
                outcome = check_jit_sample(op, fn, sample_)
            except Mismatch as err:
                raise Mismatch(f"{kind}: {err}") from None
            if outcome.status != "pass":
                result = outcome
        return result

    return check_entry(op, check, selection)
