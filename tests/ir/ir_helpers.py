"""Helpers shared by the IR tests: tracing a function into a Trace, running printed traces."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

import jitcore.langctx as L
from jitcore.ir import SourceFrame, Trace, print_trace, tracing


def trace_fn(
    fn: Callable[..., Any],
    *inputs: torch.Tensor,
    names: Sequence[str] | None = None,
    header: Sequence[str] = (),
    source_provider: Callable[[], tuple[SourceFrame, ...] | None] | None = None,
) -> Trace:
    """Trace ``fn`` on proxies of ``inputs`` (named ``names``, default x, y, z, ...)."""
    trace = Trace(imports={"torch": torch}, header=list(header))
    context = L.new_context(trace, source_provider=source_provider)
    names = names or ["x", "y", "z", "w"][: len(inputs)]
    trace.args = [context.values.input_proxy(t, n) for t, n in zip(inputs, names)]
    with tracing(context):
        trace.output = fn(*trace.args)
    return trace


def exec_printed(trace: Trace, *, source: str | None = "innermost") -> Callable[..., Any]:
    """Exec the printed source of ``trace`` with its constants and imports as globals."""
    printed = print_trace(trace, source=source)
    namespace: dict[str, Any] = {**trace.imports, **printed.constants}
    exec(compile(printed.source, "<printed-trace>", "exec"), namespace)  # noqa: S102 - what is tested
    return namespace[trace.name]


def clone_all(values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [v.clone() for v in values]


def assert_same(actual: Any, expected: Any) -> None:
    """Equal values, dtypes, shapes, strides and Python types, recursively (NaNs equal)."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, torch.Tensor):
        assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    elif isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e)
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual)
    else:
        assert actual == expected
