"""Suite-wide checks.

Nothing traced ever escapes (issue 13): every call of a jitted function anywhere in the suite is
checked, after it returns, for a proxy (or any other jitcore tracing object) reachable from its
result, from the arguments it may have mutated, or from the jitted function itself (its closure
cells, a bound method's object: the state a program mutates, such as an optimizer's). A leak fails
the test that made the call.

Test ids are the same in every process: an id holding an object's address (a lambda's default repr)
makes pytest-xdist's workers collect different tests, which stops the whole ``-n 2`` run.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from jitcore.executors import wait_for_compiles
from jitcore.interpreter import current_run
from jitcore.jit.api import JittedFunction
from jitcore.jit.outputs import escaped

_CALL = JittedFunction.__call__


def _checked_call(self: JittedFunction, /, *args: Any, **kwargs: Any) -> Any:
    if current_run() is not None:  # part of a trace: Note [A jitted function inside a traced program]
        return _CALL(self, *args, **kwargs)
    result = _CALL(self, *args, **kwargs)
    with torch._C.DisableTorchFunction():  # noqa: SLF001 - not offered to a caller's mode around the call
        leaked = escaped((result, args, kwargs, self.fn))
    if leaked is not None:
        pytest.fail(f"a traced value escaped from a call of {self!r}: {leaked!r}", pytrace=False)
    return result


@pytest.fixture(autouse=True, scope="session")
def _no_proxy_escapes() -> Any:
    JittedFunction.__call__ = _checked_call  # type: ignore[method-assign]
    yield
    JittedFunction.__call__ = _CALL  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _no_compile_left_running() -> Any:
    """A lowering an earlier test made hot runs on the background compile thread (Note [Compiling in
    the background]); waiting for it before each test keeps its imports' warnings, its log lines and
    its CPU out of the next test (a test recording every warning its program issues failed when the
    thread's first import of inductor warned meanwhile)."""
    wait_for_compiles()
    yield

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unstable = [item.nodeid for item in items if _ADDRESS.search(item.nodeid)]
    if unstable:
        raise pytest.UsageError(f"test ids holding an address (give parametrize ids=): {unstable[:3]}")
