"""The prologue's read of the default device (Note [Reading the default device],
jitcore/prologue/default_device.py) answers what ``torch.get_default_device()`` answers in every state
of the thread, and a jitted function that makes tensors follows the default device as eager does."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode, _pop_mode_temporarily

import jitcore
from jitcore.prologue.default_device import default_device


class _Passing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _set_default(device: str) -> Iterator[None]:
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


@contextlib.contextmanager
def _popped_after_set_default() -> Iterator[None]:
    """set_default_device's context taken off the mode stack: only the thread's global context is left."""
    with _set_default("meta"), _pop_mode_temporarily():
        yield


@contextlib.contextmanager
def _set_in_another_thread() -> Iterator[None]:
    done, release = threading.Event(), threading.Event()

    def other() -> None:
        with _set_default("meta"):
            done.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    done.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join()


STATES: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "nothing": contextlib.nullcontext,
    "with_device": lambda: torch.device("meta"),
    "set_default_device": lambda: _set_default("meta"),
    "set_default_device_cpu": lambda: _set_default("cpu"),
    "other_mode": _Passing,
    "device_inside_other_mode": lambda: _nested(_Passing(), torch.device("meta")),
    "other_mode_inside_device": lambda: _nested(torch.device("meta"), _Passing()),
    "popped_after_set_default": _popped_after_set_default,
    "set_in_another_thread": _set_in_another_thread,
}


@contextlib.contextmanager
def _nested(*managers: contextlib.AbstractContextManager) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for manager in managers:
            stack.enter_context(manager)
        yield


@pytest.mark.parametrize("state", list(STATES))
def test_default_device_is_torchs(state: str) -> None:
    with STATES[state]():
        assert default_device() == torch.get_default_device()
        assert type(default_device()) is torch.device
    assert default_device() == torch.get_default_device() == torch.device("cpu")


@pytest.mark.parametrize("state", ["with_device", "set_default_device", "popped_after_set_default"])
def test_a_function_making_tensors_follows_the_default_device(state: str) -> None:
    def f(x):
        return torch.arange(3) * 2, x + 1

    jf = jitcore.jit(f)
    x = torch.ones(3)
    for _ in range(2):
        assert torch.equal(jf(x)[0], f(x)[0])
    with STATES[state]():
        expected, got = f(x)[0], jf(x)[0]
        assert got.device == expected.device == torch.get_default_device()
        assert got.shape == expected.shape and got.dtype == expected.dtype
        other = expected.device != torch.device("cpu")
    assert torch.equal(jf(x)[0], f(x)[0])
    assert jitcore.cache_misses(jf) == 1 + other  # another default device is another entry
