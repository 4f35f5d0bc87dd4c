"""Backwards that torch's autograd engine runs on another thread (Note [Autograd's device threads],
jitcore/dispatch/resolver.py). On CUDA the engine runs every CUDA node on the device's worker thread,
carrying torch's thread state (dispatch modes, grad mode, the torch-function state) there but not
Python's; a jitted backward on an H200 raised RecursionError for every program. No GPU is needed to
check it: ``torch.autograd.grad`` is run on a second thread that carries exactly torch's state, as the
device threads do, and each program's gradients are compared with eager's."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import jitcore

_GRAD = torch.autograd.grad


def _grad_on_a_device_thread(*args, **kwargs):
    """``torch.autograd.grad`` on a new thread holding the caller's dispatch modes, grad mode and
    torch-function state, and none of its Python state (ContextVars, threading.local)."""
    modes = _get_current_dispatch_mode_stack()
    grad_enabled, torch_function = torch.is_grad_enabled(), torch._C._is_torch_function_enabled()
    outcome: dict = {}

    def work() -> None:
        for mode in modes:
            torch._C._push_on_torch_dispatch_stack(mode)
        try:
            with torch.set_grad_enabled(grad_enabled):
                if torch_function:
                    outcome["grads"] = _GRAD(*args, **kwargs)
                else:
                    with torch._C.DisableTorchFunction():
                        outcome["grads"] = _GRAD(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = error
        finally:
            for _ in modes:
                torch._C._pop_torch_dispatch_stack(None)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["grads"]


@pytest.fixture
def device_threads(monkeypatch):
    """jitcore derives its backwards as autograd's device threads run them (the eager reference
    runs with plain ``torch.autograd.grad``)."""
    import jitcore.transforms.grad as grad_transform

    monkeypatch.setattr(grad_transform.torch.autograd, "grad", _grad_on_a_device_thread)


def loss(x, w):
    return F.gelu(x @ w).sin().sum()


def test_backward_of_a_jitted_loss(device_threads):
    x = torch.randn(8, 16)
    w = torch.randn(16, 4, requires_grad=True)
    jfn = jitcore.jit(loss)
    jfn(x, w).backward()
    got = w.grad
    w.grad = None
    loss(x, w).backward()
    torch.testing.assert_close(got, w.grad, rtol=0, atol=0)


def training_step(model, opt, x, y):
    out = F.cross_entropy(model(x), y)
    out.backward()
    opt.step()
    opt.zero_grad()
    return out


def test_training_step_with_backward_inside(device_threads):
    torch.manual_seed(0)
    eager_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    jit_model = copy.deepcopy(eager_model)
    eager_opt = torch.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    jit_opt = torch.optim.SGD(jit_model.parameters(), lr=0.1, momentum=0.9)
    jstep = jitcore.jit(training_step)
    for _ in range(3):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        got = jstep(jit_model, jit_opt, x, y)
        torch.testing.assert_close(got, training_step(eager_model, eager_opt, x, y), rtol=0, atol=0)
    for got, want in zip(jit_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_backward_through_a_subclass(device_threads):
    # TwoTensor's __torch_dispatch__ runs for the backward's ops too: on the worker thread it is
    # interpreted as on the calling thread
    x = TwoTensor(torch.randn(4, 4), torch.randn(4, 4))
    w = TwoTensor(torch.randn(4, 4), torch.randn(4, 4)).requires_grad_()
    jfn = jitcore.jit(lambda x, w: (x @ w).sin().sum())
    jfn(x, w).backward()
    got = w.grad
    w.grad = None
    (x @ w).sin().sum().backward()
    assert type(got) is TwoTensor
    torch.testing.assert_close(got.a, w.grad.a, rtol=0, atol=0)
    torch.testing.assert_close(got.b, w.grad.b, rtol=0, atol=0)
