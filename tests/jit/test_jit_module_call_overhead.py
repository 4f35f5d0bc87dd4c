"""The per-call work of a cached call of a jitted module: the module's grouped state checks run
inside the entry's own generated prologue (Note [Grouped checks inlined in the fast path],
jitcore/prologue/prologue.py), the wrapper calls the jitted function directly (Note [One call to the
forward], jitcore/jit/module.py), the autograd wrapper does nothing around the apply that the program
does not need (Note [A call with nothing around the apply], jitcore/transforms/autograd.py), and
distinct inputs are identity tests (Note [Distinct inputs as identity tests], prologue/guards.py).
Frames are counted with ``sys.setprofile``; every change the checks guard still misses and gives
eager's answer."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from jit_helpers import assert_same, calls_entered
from torch import nn

import jitcore


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))


def test_a_cached_module_call_runs_its_state_checks_in_one_prologue():
    model = _mlp()
    jitted = jitcore.jit(copy.deepcopy(model), executor="torch")
    x = torch.randn(4, 8)
    for _ in range(2):
        assert_same(jitted(x), model(x))
    frames = calls_entered(lambda: jitted(x))
    grouped = [f for f in frames if f[0].endswith("jitcore/jit/module_guards.py")]
    assert len(grouped) == 1, frames  # SubmoduleHooks's loop: no ModuleState.__call__
    prologues = [f for f in frames if f[1] == "cached_call"]
    assert len(prologues) == 1, frames  # the entry's: not the grouped checks' own as well
    wrappers = [f for f in frames if f[0].endswith("jitcore/jit/module.py") and f[1] == "__call__"]
    assert len(wrappers) == 1, frames  # JittedModule.__call__, not ForwardJit.__call__ as well
    assert jitcore.cache_hits(jitted) == 2
    text = str(jitcore.last_prologue_traces(jitted)[0])
    assert "__state_of_Sequential()" in text, text  # printed and explained as one check still


def test_inlined_state_checks_still_miss_on_every_change():
    model = _mlp()
    jitted = jitcore.jit(copy.deepcopy(model), executor="torch")
    x = torch.randn(4, 8)

    def same() -> None:
        assert_same(jitted(x), model(x))

    same()
    same()
    changes = [  # each: a change to the module's state, and what the miss says
        (lambda m: setattr(m[1], "inplace", True), "inplace"),
        (lambda m: m[0].register_forward_hook(lambda mod, a, out: out * 2), "has forward hooks"),
        (lambda m: setattr(m[2], "weight", nn.Parameter(m[2].weight.detach().t().contiguous().t())),
         "stride"),
        (lambda m: m[2].bias.requires_grad_(False), "requires_grad"),
        (lambda m: m.append(nn.Tanh()), ""),
    ]
    for count, (change, why) in enumerate(changes, start=1):
        for m in (model, jitted):
            change(m)
        same()
        same()
        assert jitcore.cache_misses(jitted) == 1 + count, (count, jitcore.miss_reasons(jitted))
        reasons = " | ".join(str(r) for r in jitcore.miss_reasons(jitted)[-1])
        assert why in reasons, (why, reasons)


def test_a_cached_module_call_enters_the_autograd_function_and_nothing_around_it():
    model = _mlp()
    jitted = jitcore.jit(copy.deepcopy(model), executor="torch")
    x = torch.randn(4, 8)
    for _ in range(2):
        jitted(x)
    frames = calls_entered(lambda: jitted(x))
    assert not [f for f in frames if f[0].endswith("torch/autograd/function.py")], frames
    wrapper = [f[1] for f in frames if f[0].endswith("jitcore/transforms/autograd.py")]
    assert wrapper == ["__call__", "forward"], frames  # GradComputation.__call__, JitcoreFunction.forward
    # Note [A settled choice] (executors/plan.py): the pair is settled, no select or tracking frame
    choosing = [f for f in frames if f[0].endswith(("saved_values.py", "executors/plan.py", "trial.py"))]
    assert not choosing, frames
    for _ in range(3):  # gradients and outputs as eager's, through the cached entry
        out, expected = jitted(x), model(x)
        assert_same(out, expected)
        out.square().sum().backward()
        expected.square().sum().backward()
        for got, want in zip(jitted.parameters(), model.parameters()):
            torch.testing.assert_close(got.grad, want.grad)
            assert got.grad.dtype == want.grad.dtype
    assert jitcore.cache_misses(jitted) == 1


def _sum_of(*xs):
    out = xs[0] * 1
    for i, x in enumerate(xs[1:], start=2):
        out = out + x * i
    return out


def test_distinct_inputs_are_checked_by_identity_and_any_alias_misses():
    from jitcore.prologue import MISS

    for n in (2, 5, 6, 7, 9):  # pairwise identity tests up to 6 inputs, the set of ids past that
        jitted = jitcore.jit(_sum_of)
        xs = [torch.randn(3) for _ in range(n)]
        for _ in range(2):
            assert_same(jitted(*xs), _sum_of(*xs))
        text = str(jitcore.last_prologue_traces(jitted)[0])
        assert ("is v" in text) == (n <= 6) and ("len({id(" in text) == (n > 6), text
        entry = jitted.entries[0]
        for i in range(n):
            for j in range(i + 1, n):
                aliased = list(xs)
                aliased[j] = aliased[i]
                assert entry.cached_call(tuple(aliased), {}) is MISS, (n, i, j)
        assert entry.cached_call(tuple(xs), {}) is not MISS
        aliased = [xs[0]] * n
        assert_same(jitted(*aliased), _sum_of(*aliased))
        assert jitcore.cache_misses(jitted) == 2


class _Sub(torch.Tensor):
    pass


def test_tensor_checks_in_one_c_call_accept_exactly_what_the_prologue_accepts():
    # Note [Tensor checks in one C call] (jitcore/prologue/tensor_checks.py): the fast path's C check
    # is a shortcut; every tensor the printed prologue accepts is accepted, every other one missed.
    import linecache

    from jitcore.prologue import MISS

    def f(x, w):
        return x * x.stride(0) + x.storage_offset() + w.sum()  # strides and offset guarded

    jf = jitcore.jit(f, executor="torch")
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    assert_same(jf(x, w), f(x, w))
    entry = jf.entries[0]
    source = "".join(linecache.getlines(entry.cached_call.__code__.co_filename))
    assert "(not __check" in source and "storage_offset() != 0" in source, source  # the C check first
    with torch.inference_mode():
        inference = torch.randn(4, 8)
    variants = {
        "same": torch.randn(4, 8), "other strides": torch.randn(8, 4).t().contiguous().t()[:4].t(),
        "transposed": torch.randn(8, 4).t(), "offset": torch.randn(40)[8:].view(4, 8),
        "float64": torch.randn(4, 8, dtype=torch.float64),
        "requires grad": torch.randn(4, 8, requires_grad=True),
        "parameter": nn.Parameter(torch.randn(4, 8), requires_grad=False), "subclass": x.as_subclass(_Sub),
        "inference tensor": inference, "negative view": torch.randn(4, 8)._neg_view(),
        "shape": torch.randn(8, 4),
        "3-d": torch.randn(4, 8, 1), "0-d": torch.tensor(1.0), "None": None, "int": 3, "list": [1.0],
    }
    accepted = []
    for name, value in variants.items():
        expected = entry.prologue.explain((value, w), {}) is None
        got = entry.cached_call((value, w), {}) is not MISS
        assert got == expected, (name, got, expected)
        accepted.append(name) if got else None
    assert {"same", "inference tensor"} <= set(accepted), accepted
    assert "float64" not in accepted and "shape" not in accepted and "subclass" not in accepted
    assert "negative view" not in accepted  # Note [The conjugate and negative bits] (prologue/guards.py)
    with torch.inference_mode():  # the C check refuses under inference mode; the state guard decides
        assert entry.cached_call((x, w), {}) is MISS
        assert entry.prologue.explain((x, w), {}) is not None


_SUBMODULE_HOOKS = {  # each: how a nested submodule gains it (the output changes where it can)
    "forward_pre": lambda sub: sub.register_forward_pre_hook(lambda mod, args: (args[0] * 3,)),
    "forward": lambda sub: sub.register_forward_hook(lambda mod, args, out: out * 2),
    "backward_pre": lambda sub: sub.register_full_backward_pre_hook(lambda mod, grad: None),
    "backward": lambda sub: sub.register_full_backward_hook(lambda mod, gin, gout: None),
    "compiled_call": lambda sub: setattr(sub, "_compiled_call_impl",
                                         lambda *a, **k: sub._call_impl(*a, **k) + 1),
}


@pytest.mark.parametrize("hook", list(_SUBMODULE_HOOKS))
@pytest.mark.parametrize("where", ["first", "last"])
def test_a_hook_a_submodule_gains_after_tracing_misses(hook, where):
    """The grouped check of the submodules' hooks (SubmoduleHooks, jit/module_guards.py) misses on each
    kind of hook, and on a compiled call, that a submodule gains after tracing, first or nested; the
    call then equals eager's."""
    model = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), nn.Linear(8, 4)), nn.Tanh())
    jitted = jitcore.jit(copy.deepcopy(model), executor="torch")
    x = torch.randn(4, 8)
    for _ in range(2):
        assert_same(jitted(x), model(x))
    for m in (model, jitted):
        sub = m[0] if where == "first" else m[1][1]
        _SUBMODULE_HOOKS[hook](sub)
    for _ in range(2):
        assert_same(jitted(x), model(x))
    assert jitcore.cache_misses(jitted) == 2, jitcore.miss_reasons(jitted)
    reasons = " | ".join(str(r) for r in jitcore.miss_reasons(jitted)[-1])
    assert ("compiled call" if hook == "compiled_call" else hook.replace("_", " ")) in reasons, reasons


_PARAMETER_CHANGES = {  # each: how a parameter of the module is replaced or changed between calls
    "same values, new tensor": lambda p: nn.Parameter(p.detach().clone()),
    "float64": lambda p: nn.Parameter(p.detach().double()),
    "shape": lambda p: nn.Parameter(torch.randn(*p.shape[:-1], p.shape[-1] + 1)),
    "no grad": lambda p: nn.Parameter(p.detach().clone(), requires_grad=False),
    "plain tensor": lambda p: p.detach().clone(),
    "transposed": lambda p: nn.Parameter(p.detach().clone().t().contiguous().t()) if p.dim() == 2 else None,
    "offset": lambda p: nn.Parameter(torch.randn(p.numel() + 3)[3:].view(p.shape)),
    "negative view": lambda p: nn.Parameter(p.detach().clone()._neg_view()),
    "subclass": lambda p: nn.Parameter(p.detach().clone().as_subclass(_Sub)),
}


def test_a_run_of_tensor_checks_is_one_c_call_and_accepts_exactly_what_the_prologue_accepts():
    # Note [A run of tensor checks in one C call] (jitcore/prologue/tensor_checks.py): a module's parameters
    # are checked by one TensorGuards call; a change to any one of them, first, middle or last of the run,
    # misses exactly where the printed prologue's checks miss, and the call gives eager's answer.
    import linecache

    from jitcore.prologue import MISS

    def f(x, m):
        return m(x) + x.storage_offset()  # the input's layout guarded too

    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 6), nn.Linear(6, 2))
    x = torch.randn(3, 4)
    jf = jitcore.jit(f, executor="torch")
    assert_same(jf(x, model), f(x, model))
    entry = jf.entries[0]
    source = "".join(linecache.getlines(entry.cached_call.__code__.co_filename))
    runs = [re.search(r"not (__check\w*)\(([^)]*)\)", line) for line in source.splitlines()]
    runs = [found.group(2).split(", ") for found in runs if found is not None]
    assert [len(run) for run in runs] == [7], source  # the input and six parameters: one call
    for which in ("0", "2", "3"):
        for attr in ("weight", "bias"):
            for name, change in _PARAMETER_CHANGES.items():
                layer = model[int(which)]
                old = getattr(layer, attr)
                new = change(old)
                if new is None:
                    continue
                layer._parameters[attr] = new
                try:
                    expected = entry.prologue.explain((x, model), {}) is None
                    got = entry.cached_call((x, model), {})
                    assert (got is not MISS) == expected, (which, attr, name)
                    if got is not MISS:
                        assert_same(got, f(x, model))
                    assert expected == (name == "same values, new tensor"), (which, attr, name)
                finally:
                    layer._parameters[attr] = old
    with torch.inference_mode():
        inference = torch.randn(3, 4)
    fast = entry.prologue.compile(lambda *inputs: "hit")  # (a computation saving it for backward raises)
    assert fast((inference, model), {}) == "hit"  # the C check refuses it; the Python checks decide
    assert entry.prologue.explain((inference, model), {}) is None
    assert_same(jf(x, model), f(x, model))
