"""PyTorch's nested-jagged OpInfo database (``njt_op_db``, its ``supports_njt`` entries) run through
``jitcore.jit`` and compared with eager (issue 15): ``op.op(sample.input, *sample.args, **sample.kwargs)``
jitted, called on a sample and then, from the cache, on a fresh sample of the same ragged structure
(new values, new offsets tensors), each against eager on equal tensors. Compared: output types (a
nested jagged tensor or a plain one), dtypes, the ragged structure (batch size, dimensions, ragged
dimension, offsets and lengths, whether an output shares its offsets with an input), every
component's values, and the exception where eager raises. Backward: ``torch.autograd.grad`` of a sum
over the outputs' values w.r.t. every input that requires grad, eager's against the jitted call's.

Invariant: a check returns an ``Outcome`` whose status says what happened (``pass``, ``wrong`` for a
wrong answer, ``jit-error`` where eager succeeds, ``other-error`` where both raise differently,
``eager-entry`` where jitcore ran the call eagerly, ``miss`` where the second call did not hit the
cache, ``warm-dispatch`` where a cached call without grad ran ``NestedTensor.__torch_dispatch__``: the
executed trace must hold plain tensors and ops only); it never hides a failure.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optree
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "langctx"))

from opinfo_harness import entry_name, seed  # noqa: E402
from subclass_checks import nested_dispatch_calls  # noqa: E402
from torch.testing._internal.opinfo.definitions.nested import njt_op_db  # noqa: E402

import jitcore  # noqa: E402
from jitcore.jit.raising_entries import RaisedWhenTraced  # noqa: E402

OPS: dict[str, Any] = {entry_name(op): op for op in njt_op_db if op.supports_njt}
_TOLERANCE = {"atol": 1e-5, "rtol": 1e-4, "equal_nan": True, "check_stride": False}


@dataclass(frozen=True)
class Outcome:
    """The result of one entry (or sample): ``status`` as in the module docstring, and why."""

    status: str
    detail: str = ""


PASS = Outcome("pass")


class _Differs(AssertionError):
    """The jitted call's result is not eager's."""


def njt_samples(op: Any, *, requires_grad: bool, count: int | None, seed_value: int) -> list[Any]:
    """The entry's first ``count`` float32 samples (all when None; float32 as PyTorch's own
    TestNestedTensorOpInfo, where an entry eager rejects for it compares exceptions), made after
    seeding: equal seeds give equal
    values (and the same ragged structure) in new tensors, so eager and jit never share a tensor."""
    seed(seed_value)
    made = op.sample_inputs_func(op, "cpu", torch.float32, requires_grad)
    return list(itertools.islice(made, count))


def _call(op: Any) -> Callable[..., Any]:
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        return op.op(x, *args, **kwargs)

    return call


# --- comparison -------------------------------------------------------------------------------------------
def _inputs_of(sample: Any) -> list[torch.Tensor]:
    tree = (sample.input, sample.args, sample.kwargs)
    return [x for x in optree.tree_leaves(tree, none_is_leaf=True) if isinstance(x, torch.Tensor)]


def _shares_offsets(t: torch.Tensor, inputs: list[torch.Tensor]) -> tuple[bool, ...]:
    return tuple(i.is_nested and t._offsets is i._offsets for i in inputs)  # noqa: SLF001


def _compare_nested(e: torch.Tensor, a: torch.Tensor, what: str) -> None:
    e_struct = (e.dtype, e.dim(), e.shape[0], e._ragged_idx, e.requires_grad)  # noqa: SLF001
    a_struct = (a.dtype, a.dim(), a.shape[0], a._ragged_idx, a.requires_grad)  # noqa: SLF001
    if e_struct != a_struct:
        raise _Differs(f"{what}: (dtype, dim, batch, ragged_idx, requires_grad) {a_struct} != {e_struct}")
    if not torch.equal(e.offsets(), a.offsets()):
        raise _Differs(f"{what}: offsets {a.offsets().tolist()} != {e.offsets().tolist()}")
    e_len, a_len = e.lengths(), a.lengths()
    if (e_len is None) != (a_len is None) or (e_len is not None and not torch.equal(e_len, a_len)):
        raise _Differs(f"{what}: lengths {a_len} != {e_len}")
    for k, (ec, ac) in enumerate(zip(e.unbind(), a.unbind(), strict=True)):
        _compare_dense(ec, ac, f"{what} component {k}")


def _compare_dense(e: torch.Tensor, a: torch.Tensor, what: str) -> None:
    if e.dtype != a.dtype or e.shape != a.shape:
        raise _Differs(f"{what}: {a.dtype}{list(a.shape)} != {e.dtype}{list(e.shape)}")
    try:
        torch.testing.assert_close(a.detach(), e.detach(), **_TOLERANCE)
    except AssertionError as err:
        raise _Differs(f"{what}: values differ: {str(err).splitlines()[0]}") from None


def compare(expected: Any, actual: Any, e_inputs: list[torch.Tensor], a_inputs: list[torch.Tensor],
            what: str) -> None:
    """``actual`` is ``expected``: structure, types, ragged structure, offsets shared with the inputs
    as eagerly, values. Raises ``_Differs``."""
    e_leaves, e_spec = optree.tree_flatten(expected, none_is_leaf=True)
    a_leaves, a_spec = optree.tree_flatten(actual, none_is_leaf=True)
    if e_spec != a_spec:
        raise _Differs(f"{what}: structure {a_spec} != {e_spec}")
    for i, (e, a) in enumerate(zip(e_leaves, a_leaves)):
        where = f"{what}[{i}]"
        if type(e) is not type(a):
            raise _Differs(f"{where}: type {type(a).__name__} != {type(e).__name__}")
        if isinstance(e, torch.Tensor) and e.is_nested:
            _compare_nested(e, a, where)
            if _shares_offsets(e, e_inputs) != _shares_offsets(a, a_inputs):
                raise _Differs(f"{where}: shares offsets with inputs {_shares_offsets(a, a_inputs)}, "
                               f"eagerly {_shares_offsets(e, e_inputs)}")
        elif isinstance(e, torch.Tensor):
            _compare_dense(e, a, where)
        elif e != a and not (e != e and a != a):  # NaN equals NaN here
            raise _Differs(f"{where}: {a!r} != {e!r}")


# --- backward ---------------------------------------------------------------------------------------------
def _loss(out: Any) -> torch.Tensor | None:
    """The sum over the floating-point outputs' values (an NJT's ``values()``), None when none needs grad."""
    parts = [t.values().sum() if t.is_nested else t.sum()
             for t in optree.tree_leaves(out, none_is_leaf=True)
             if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    return torch.stack(parts).sum() if parts else None


def _grads(out: Any, sample: Any) -> tuple[Any, ...] | None:
    wrt = [t for t in _inputs_of(sample) if t.requires_grad]
    loss = _loss(out)
    if loss is None or not wrt:
        return None
    return torch.autograd.grad(loss, wrt, allow_unused=True)


# --- one call ---------------------------------------------------------------------------------------------
@dataclass
class _Result:
    value: Any = None
    error: BaseException | None = None


def _run(fn: Callable[..., Any], sample: Any, backward: bool) -> _Result:
    try:
        out = fn(sample.input, *sample.args, **sample.kwargs)
        return _Result((out, _grads(out, sample) if backward else None))
    except Exception as err:  # noqa: BLE001 - compared with the other side's
        return _Result(error=err)


def _eager_entry(jitted: jitcore.JittedFunction, caught: list[warnings.WarningMessage]) -> str | None:
    said = [str(w.message) for w in caught]
    said = [text for text in said if text.startswith("jitcore:") and "eager" in text]
    if said:
        return said[0][:300]
    reasons = [jitted.eager_reason, jitted.fallback_reason, *(e.eager_reason for e in jitted.entries)]
    # a raising entry (jit/raising_entries.py) runs eagerly only calls like one whose trace raised the
    # program's own error: where eager raises too, the errors are compared below
    reason = next((r for r in reasons if r is not None and not isinstance(r, RaisedWhenTraced)), None)
    return None if reason is None else f"{type(reason).__name__}: {str(reason)[:300]}"


def check_call(fn: Callable[..., Any], jitted: jitcore.JittedFunction, e_sample: Any, j_sample: Any, *,
               backward: bool, what: str) -> tuple[Outcome, bool]:
    """One call of ``jitted`` on ``j_sample`` against ``fn`` on ``e_sample`` (equal tensors), and whether
    eager raised."""
    outcome = _check_call(fn, jitted, e_sample, j_sample, backward=backward, what=what)
    return outcome, outcome.status == "pass" and outcome.detail == "raised"


def _check_call(fn: Callable[..., Any], jitted: jitcore.JittedFunction, e_sample: Any, j_sample: Any, *,
                backward: bool, what: str) -> Outcome:
    expected = _run(fn, e_sample, backward)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        actual = _run(jitted, j_sample, backward)
    if (eager := _eager_entry(jitted, caught)) is not None:
        return Outcome("eager-entry", f"{what}: {eager}")
    if expected.error is not None:
        if actual.error is None:
            return Outcome("wrong", f"{what}: eager raised {type(expected.error).__name__}: "
                                    f"{str(expected.error)[:200]}; jit did not")
        if not isinstance(actual.error, type(expected.error)):
            return Outcome("other-error", f"{what}: eager raised {type(expected.error).__name__}, jit raised "
                                          f"{type(actual.error).__name__}: {str(actual.error)[:300]}")
        return Outcome("pass", "raised")
    if actual.error is not None:
        return Outcome("jit-error", f"{what}: {type(actual.error).__name__}: {str(actual.error)[:300]}")
    try:
        compare(expected.value, actual.value, _inputs_of(e_sample), _inputs_of(j_sample), what)
    except _Differs as err:
        return Outcome("wrong", str(err))
    return PASS


def _warm_dispatches(jitted: jitcore.JittedFunction, sample: Any) -> Outcome:
    """One more cached call on ``sample``, which must run no ``NestedTensor.__torch_dispatch__``."""
    hits = jitcore.cache_hits(jitted)
    with nested_dispatch_calls() as calls:
        jitted(sample.input, *sample.args, **sample.kwargs)
    if jitcore.cache_hits(jitted) == hits + 1 and calls:
        return Outcome("warm-dispatch", f"a cached call ran NestedTensor.__torch_dispatch__ for {calls[:6]}")
    return PASS


def _rescaled(sample: Any) -> Any:
    """``sample`` with its floating-point values scaled in place: another call of the same ragged
    structure (Note [A fresh sample of the same structure])."""
    with torch.no_grad():
        for t in _inputs_of(sample):
            if t.is_floating_point():
                (t._values if t.is_nested else t).mul_(0.75)  # noqa: SLF001
    return sample


# Note [A fresh sample of the same structure]
# An entry's sample generator draws the ragged lengths at random, so a sample made after another seed has
# another structure, which misses the cache as it should (tests/dispatch/test_nested_jagged.py). The
# second call's sample is made after the same seed (new tensors, new offsets, so a new nested int) and
# has its values rescaled: only a cache hit answers it.
def _pairs(op: Any, requires_grad: bool, count: int | None, second: bool) -> Iterator[tuple[Any, Any]]:
    e, j = (njt_samples(op, requires_grad=requires_grad, count=count, seed_value=0) for _ in range(2))
    if second:
        e, j = [_rescaled(s) for s in e], [_rescaled(s) for s in j]
    return zip(e, j, strict=True)


def check_entry(op: Any, *, backward: bool = False, count: int | None = 2) -> Outcome:
    """The entry's first ``count`` samples (with ``requires_grad`` and gradients when ``backward``), each
    jitted afresh and called twice: on the sample, then from the cache on a fresh one of the same
    structure."""
    fn = _call(op)
    try:
        first, second = (list(_pairs(op, backward, count, s)) for s in (False, True))
    except Exception as err:  # noqa: BLE001 - the sample generator is torch's; a failure is reported
        return Outcome("samples", f"sample_inputs raised {type(err).__name__}: {err}")
    for i, ((e1, j1), (e2, j2)) in enumerate(zip(first, second, strict=True)):
        jitted = jitcore.jit(fn)
        raised = False
        for call, (e, j) in enumerate(((e1, j1), (e2, j2)), start=1):
            outcome, raised = check_call(fn, jitted, e, j, backward=backward,
                                         what=f"sample {i} ({e.name}) call {call}")
            if outcome.status != "pass":
                return outcome
        if not raised and jitcore.cache_misses(jitted) > 1:  # a raising program is traced again
            return Outcome("miss", f"sample {i}: the second call missed: {jitcore.miss_reasons(jitted)[-1]}")
        if not raised and not backward and (warm := _warm_dispatches(jitted, j2)).status != "pass":
            return Outcome(warm.status, f"sample {i}: {warm.detail}")
    return PASS
