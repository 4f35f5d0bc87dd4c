"""Forward + backward through jitcore against eager, for one OpInfo entry (helpers; no tests here).

A sample's floating tensors that require grad become the arguments of a small function calling
``op.op``; everything else in the sample is a closure constant. The function runs eagerly and
jitted on clones of the same tensors; outputs are compared, then ``torch.autograd.grad`` of the
floating outputs with the same random ``grad_outputs`` is compared input by input (float32 by default,
complex64 in COMPLEX_GRAD_OPS; CPU).
Run as a script to print every differentiable entry's outcome (to refresh the known-failures list).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optree
import torch
from torch.testing._internal.common_methods_invocations import op_db

import jitcore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))
from opinfo_harness import random_by_name  # noqa: E402

SAMPLES = 2


@contextlib.contextmanager
def seeded_without_freezing() -> Iterator[None]:
    """OpInfo's random entries reseed through ``wrapper_set_seed``, inside ``freeze_rng_state``, which
    reads and restores the generator's state: a call doing that inside a jitted function runs eagerly
    (Note [The state of torch's default generator], jitcore/langctx/generators.py). The harnesses compare
    the op's traced forward and backward, so, eagerly and jitted alike, the state is not frozen around
    their calls here (each run seeds first)."""
    utils = torch.testing._utils  # noqa: SLF001
    frozen = utils.freeze_rng_state
    utils.freeze_rng_state = contextlib.nullcontext
    try:
        yield
    finally:
        utils.freeze_rng_state = frozen

# Entries that draw random numbers although their names do not say so (see random_by_name).
ALSO_RANDOM = ("nn.functional.fractional_max_pool", "nn.functional.multi_head_attention")


def entry_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


GRAD_OPS: dict[str, Any] = {
    entry_name(op): op
    for op in op_db
    if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu")
}


# Entries differentiable in complex64 on CPU (``istft`` takes complex inputs only): test_grad_opinfo.py
# runs their first samples in it.
COMPLEX_GRAD_OPS: dict[str, Any] = {
    entry_name(op): op
    for op in op_db
    if op.supports_autograd and torch.complex64 in op.supported_backward_dtypes("cpu")
}


@dataclass(frozen=True)
class Outcome:
    status: str  # "pass" or "fail"
    detail: str = ""


def _clone(tree: Any) -> Any:
    def clone(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            return c.requires_grad_(v.requires_grad)
        return v

    return optree.tree_map(clone, tree, none_is_leaf=True)


def _function(op: Any, sample: Any) -> tuple[Any, list[torch.Tensor]]:
    """``f(*grad_tensors)`` calling the op on the sample, and the sample's tensors that require grad."""
    leaves, spec = optree.tree_flatten((sample.input, sample.args, sample.kwargs), none_is_leaf=True)
    positions = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor) and v.requires_grad]
    constants = [None if i in positions else v for i, v in enumerate(leaves)]
    call = op.op

    def f(*tensors: torch.Tensor) -> Any:
        values = list(constants)
        for position, tensor in zip(positions, tensors):
            values[position] = tensor
        inp, args, kwargs = optree.tree_unflatten(spec, values)
        return call(inp, *args, **kwargs)

    return f, [leaves[i] for i in positions]


def _differentiable(out: Any) -> list[torch.Tensor]:
    return [
        t for t in optree.tree_leaves(out, none_is_leaf=True)
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def _run(f: Any, tensors: list[torch.Tensor], seed: int, grad_seed: int) -> tuple[Any, tuple]:
    torch.manual_seed(seed)
    out = f(*tensors)
    outs = _differentiable(out)
    if not outs:
        return out, ()
    gen = torch.Generator().manual_seed(grad_seed)
    grad_outputs = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, tensors, grad_outputs, allow_unused=True)
    return out, grads


def _compare(name: str, expected: Any, got: Any, random: bool) -> None:
    e_leaves = optree.tree_leaves(expected, none_is_leaf=True)
    g_leaves = optree.tree_leaves(got, none_is_leaf=True)
    if len(e_leaves) != len(g_leaves):
        raise AssertionError(f"{name}: {len(e_leaves)} leaves eagerly, {len(g_leaves)} jitted")
    for i, (e, g) in enumerate(zip(e_leaves, g_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(g, torch.Tensor), f"{name}[{i}]: a tensor eagerly, {type(g).__name__} jitted"
            if e.shape != g.shape or e.dtype != g.dtype:
                raise AssertionError(
                    f"{name}[{i}]: {e.dtype}{list(e.shape)} eagerly, {g.dtype}{list(g.shape)} jitted"
                )
            if not random:
                torch.testing.assert_close(g.detach(), e.detach(), atol=1e-4, rtol=1e-4, equal_nan=True,
                                           msg=lambda m, n=name, i=i: f"{n}[{i}]: {m.splitlines()[0]}")
        elif (e is None) != (g is None):
            raise AssertionError(f"{name}[{i}]: {e!r} eagerly, {g!r} jitted")


def check_sample(op: Any, sample: Any, random: bool, **jit_options: Any) -> bool:
    """Compare one sample; False when there was nothing to compare (no tensor requires grad, or
    eager rejects the sample: that says nothing about jitcore)."""
    f, tensors = _function(op, sample)
    if not tensors:
        return False
    with seeded_without_freezing():
        try:
            expected_out, expected_grads = _run(f, _clone(tensors), 0, 1)
        except Exception:  # noqa: BLE001 - a sample eager rejects is not compared
            return False
        jf = jitcore.jit(f, **jit_options)  # e.g. executors= (tests/executors/executors_opinfo.py)
        got_out, got_grads = _run(jf, _clone(tensors), 0, 1)
    _compare("output", expected_out, got_out, random)
    _compare("grad", expected_grads, got_grads, random)
    if expected_grads and not jitcore.last_backward_traces(jf):
        raise AssertionError("no backward trace was recorded")
    return True


def check_entry(op: Any, dtype: torch.dtype = torch.float32) -> Outcome:
    """Forward values and gradients of up to ``SAMPLES`` samples of ``dtype`` against eager; an entry
    none of whose samples could be compared fails (it would otherwise pass with nothing checked)."""
    random = random_by_name(entry_name(op)) or entry_name(op).startswith(ALSO_RANDOM)
    try:
        samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=True), SAMPLES))
    except Exception as exc:  # noqa: BLE001
        return Outcome("fail", f"no samples: {type(exc).__name__}: {exc}")
    compared = 0
    for sample in samples:
        try:
            compared += check_sample(op, sample, random)
        except Exception as exc:  # noqa: BLE001 - the outcome carries it
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return Outcome("fail", f"{type(exc).__name__}: {first}"[:300])
    if not compared:
        return Outcome(
            "fail", f"no sample was compared: eager rejected all {len(samples)} (or none requires grad)"
        )
    return Outcome("pass")


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(GRAD_OPS)
    for name in names:
        outcome = check_entry(GRAD_OPS[name])
        print(f"{name}\t{outcome.status}\t{outcome.detail}", flush=True)
