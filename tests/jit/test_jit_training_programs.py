"""Training loops as users write them, the whole step jitted: eager and ``jitcore.jit`` run the same
steps on twin states; losses, parameters, gradients, optimizer state and the Python state the step
writes are compared after every step, and the number of traces is checked where it is the point.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812 - as users import it
from jit_helpers import assert_same

import jitcore


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return torch.randn(5, 4, generator=g), torch.randint(0, 3, (5,), generator=g)


def _assert_same_state(actual: dict, expected: dict) -> None:
    for p, q in zip(actual["model"].parameters(), expected["model"].parameters()):
        assert_same(p.detach(), q.detach())
        assert_same(p.grad, q.grad)
    for a, e in zip(actual["opt"].state.values(), expected["opt"].state.values()):
        assert_same(dict(a), dict(e))
    assert [g["lr"] for g in actual["opt"].param_groups] == [g["lr"] for g in expected["opt"].param_groups]
    assert_same(actual.get("log"), expected.get("log"))


def _run(make, step, steps: int = 5) -> jitcore.JittedFunction:
    eager, state = make(), make()
    jitted = jitcore.jit(step)
    for i in range(steps):
        x, y = _batch(i)
        assert_same(jitted(state, x, y), step(eager, x, y))
        _assert_same_state(state, eager)
    assert jitted.fallback_reason is None, jitted.fallback_reason
    return jitted


def _adamw_state() -> dict:
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return {"model": model, "opt": opt, "sched": torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8),
            "log": []}


def test_a_state_dict_with_a_loss_log_traces_twice():
    """``s["log"].append(loss.item())`` in a step whose state dict also holds the model and optimizer:
    the log's length was guarded (the dict bound whole), so every step traced again (5 in 5)."""
    def step(s, x, y):
        s["opt"].zero_grad()
        loss = F.cross_entropy(s["model"](x), y, label_smoothing=0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(s["model"].parameters(), 0.5)
        s["opt"].step()
        s["sched"].step()
        s["log"].append(loss.item())
        return loss.detach()

    jitted = _run(_adamw_state, step)
    assert jitcore.cache_misses(jitted) == 2  # no gradient and optimizer state yet, then every step


def test_a_log_the_step_also_reads_is_still_guarded():
    """A key whose list the step both appends to and reads (``len``) keeps its guard: eager's answer."""
    def step(s, x, y):
        s["opt"].zero_grad()
        loss = F.mse_loss(s["model"](x), F.one_hot(y, 3).float(), reduction="sum")
        loss.backward()
        s["opt"].step()
        s["log"].append(float(len(s["log"])))
        return loss.detach() * len(s["log"])

    _run(_adamw_state, step, steps=3)


def test_accumulation_every_second_step_under_autocast():
    def make():
        model = _mlp()
        return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "log": []}

    def step(s, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = s["model"](x)
            loss = F.cross_entropy(out, y) / 2
        loss.backward()
        if len(s["log"]) % 2 == 1:
            s["opt"].step()
            s["opt"].zero_grad()
        s["log"].append(loss.detach())
        return loss.detach(), out.dtype

    _run(make, step, steps=4)
