"""Differential helpers: run a program eagerly and under jitcore, compare everything."""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import io
import sys
import warnings
from collections.abc import Callable
from typing import Any

import optree
import torch

import jitcore


def clone_tree(tree: Any) -> Any:
    """A deep copy in which tensors are cloned (keeping requires_grad)."""

    def clone(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            return c.requires_grad_(v.requires_grad) if v.is_leaf else c
        return copy.deepcopy(v)

    return optree.tree_map(clone, tree, none_is_leaf=True)


def assert_same(actual: Any, expected: Any) -> None:
    """Values, dtypes, devices, output types and structure all equal (NaNs equal)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor) and expected.is_nested and expected.layout == torch.strided:
        assert actual.is_nested and actual.layout == expected.layout  # its sizes are not one shape
        assert_same(list(actual.unbind()), list(expected.unbind()))
        return
    if isinstance(expected, torch.Tensor):
        assert (
            actual.dtype == expected.dtype
            and actual.shape == expected.shape
            and actual.device == expected.device
        )
        assert actual.requires_grad == expected.requires_grad
        if expected.layout == torch._mkldnn or expected.is_quantized:  # noqa: SLF001 - compared dense
            assert actual.layout == expected.layout and actual.is_quantized == expected.is_quantized
            actual, expected = actual.to_dense(), expected.to_dense()
            if expected.is_quantized:
                actual, expected = actual.dequantize(), expected.dequantize()
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-5, atol=1e-6)
        return
    if isinstance(expected, (list, tuple, collections.deque)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
        return
    if isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_same(actual[k], expected[k])
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for f in dataclasses.fields(expected):
            assert_same(getattr(actual, f.name), getattr(expected, f.name))
        return
    if isinstance(expected, float) and expected != expected:
        assert actual != actual
        return
    assert actual == expected, (actual, expected)


def assert_same_state(a: Any, b: Any) -> None:
    """Python state after a call, eager's ``a`` against jitcore's ``b``: tensors by ``assert_same``,
    lists, tuples, dicts (in key order) and objects' ``__dict__`` item by item, anything else by ``==``."""
    if isinstance(a, torch.Tensor):
        assert_same(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_state(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same_state(a[k], b[k])
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert_same_state(vars(a), vars(b))
    else:
        assert a == b, (a, b)


def check(fn: Callable[..., Any], *args: Any, jfn: Any = None, **kwargs: Any) -> Any:
    """Call ``fn`` eagerly and jitted on copies of the same inputs; compare outputs and mutated inputs."""
    jfn = jfn if jfn is not None else jitcore.jit(fn)
    eager_args, eager_kwargs = clone_tree((args, kwargs))
    jit_args, jit_kwargs = clone_tree((args, kwargs))
    try:
        expected = fn(*eager_args, **eager_kwargs)
    except Exception as exc:  # noqa: BLE001 - the jitted call must raise the same
        try:
            jfn(*jit_args, **jit_kwargs)
        except Exception as jexc:  # noqa: BLE001
            assert type(jexc) is type(exc), (jexc, exc)
            assert str(exc) in str(jexc), (str(jexc), str(exc))
            return jfn
        raise AssertionError(f"eager raised {exc!r}, jitcore did not") from exc
    actual = jfn(*jit_args, **jit_kwargs)
    assert_same(actual, expected)
    assert_same((jit_args, jit_kwargs), (eager_args, eager_kwargs))
    return jfn


def check_calls_around_a_change(read: Callable[[], Any], change: Callable[[], None], *,
                                make_x: Callable[[], torch.Tensor] = lambda: torch.randn(3)) -> None:
    """Four calls of ``x * read()``, eagerly and jitted, the caller's state changed by ``change()`` before
    the third: every answer equal to eager's, no call run eagerly (no jitcore warning), and at least two
    answered from the cache."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * read()

    jf = jitcore.jit(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(4):
            if step == 2:
                change()
            x = make_x()
            assert_same(jf(x), f(x))
    assert not [w for w in caught if "jitcore" in str(w.message)]
    assert jitcore.cache_hits(jf) >= 2


def six_calls(source: str, namespace: dict, change: str | None, jit: bool) -> tuple[list, Any]:
    """Six calls ``f(torch.full((2,), step))`` of the program ``source`` (defining ``f`` and its global
    state, executed in ``namespace``), jitted where ``jit``, ``change`` executed there before the fourth
    call: the results and the callable."""
    exec(source, namespace)  # noqa: S102
    fn = jitcore.jit(namespace["f"]) if jit else namespace["f"]
    results = []
    for step in range(6):
        if step == 3 and change:
            exec(change, namespace)  # noqa: S102
        results.append(fn(torch.full((2,), float(step))))
    return results, fn


def check_eager_entry(fn: Callable[..., Any], *args: Any, error: type[BaseException], match: str) -> Any:
    """A call jitcore cannot trace runs eagerly (Note [Eager entries], jitcore/jit/api.py): equal to
    eager with one warning, the second call answered by the eager entry without interpreting. With
    ``fullgraph=True`` an unrecordable call (JC-T001) raises ``error`` instead; a value jitcore runs
    eagerly (JC-J002) runs eagerly there too."""
    import re

    import pytest

    jfn = jitcore.jit(fn)
    with pytest.warns(UserWarning, match="runs eagerly for this call"):
        check(fn, *args, jfn=jfn)
    check(fn, *args, jfn=jfn)
    assert isinstance(jfn.fallback_reason, error), jfn.fallback_reason
    assert re.search(match, str(jfn.fallback_reason)), str(jfn.fallback_reason)
    assert (jitcore.cache_misses(jfn), jitcore.cache_hits(jfn)) == (1, 1)
    if issubclass(error, jitcore.errors.EagerOnlyValue):
        check(fn, *args, jfn=jitcore.jit(fn, fullgraph=True))
    else:
        with pytest.raises(error, match=match):
            jitcore.jit(fn, fullgraph=True)(*clone_tree(args))
    return jfn


def training_step(loss_of: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The training step users write, ``loss_of(model, *inputs)`` as its loss: zero the gradients,
    backward, optimizer step, return the detached loss (the program jitted whole in the tests)."""

    def step(model: torch.nn.Module, opt: torch.optim.Optimizer, *inputs: Any) -> torch.Tensor:
        opt.zero_grad()
        loss = loss_of(model, *inputs)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def run_printing(fn: Callable[..., Any], calls: list[tuple],
                 before: Callable[[], None] | None = None) -> list[tuple]:
    """(stdout, stderr, result or (exception type, message)) of each call."""
    seen = []
    for args in calls:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            if before is not None:
                before()  # where the call's streams are in place (a log handler takes ``sys.stderr``)
            try:
                result: Any = fn(*args)
            except Exception as exc:  # noqa: BLE001 - compared with eager's
                result = (type(exc), str(exc))
        seen.append((out.getvalue(), err.getvalue(), result))
    return seen


def assert_same_prints(fn: Callable[..., Any], calls: list[tuple], *, misses: int = 1,
                       before: Callable[[], None] | None = None, reset: Callable[[], None] | None = None,
                       **options: Any) -> Any:
    """Eager and jitted runs of ``calls`` print (stdout and stderr), warn and return the same, call by
    call; the jitted function traces ``misses`` times. ``before`` runs before each call, ``reset``
    before each of the two runs."""
    if reset is not None:
        reset()
    expected = run_printing(fn, calls, before)
    if reset is not None:
        reset()
    jfn = jitcore.jit(fn, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "runs only while tracing", no eager entry
        got = run_printing(jfn, calls, before)
    for (out, err, result), (e_out, e_err, e_result) in zip(got, expected):
        assert (out, err) == (e_out, e_err)
        assert_same(result, e_result)
    assert jitcore.cache_misses(jfn) == misses
    assert jitcore.cache_hits(jfn) == len(calls) - misses
    return jfn


def calls_entered(fn: Callable[[], Any]) -> list[tuple[str, str]]:
    """The Python frames (file, function) and C functions (``"C"``, name) that ``fn()`` enters, in
    order: the work of a cached call, counted by the per-call overhead tests."""
    seen: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append((frame.f_code.co_filename.replace("\\", "/"), frame.f_code.co_name))
        elif event == "c_call":
            seen.append(("C", getattr(arg, "__qualname__", repr(arg))))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def exception_chain(error: BaseException | None) -> list[tuple[str, str, bool, str]]:
    """The exception and those it was raised while handling: type, message, suppressed, cause's type."""
    out = []
    while error is not None and len(out) < 5:
        cause = type(error.__cause__).__name__
        out.append((type(error).__name__, str(error), error.__suppress_context__, cause))
        error = error.__context__
    return out
